"""Prometheus text exposition with vLLM's metric names (parsed by :mod:`llm_ocr.serving.vllm.prometheus`).

The names and labels follow vLLM's ``/metrics`` (see docs/facts.md#vllms-openai-compatible-server):
gauges ``vllm:num_requests_running``, ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc`` (a
0..1 fraction despite its name), counters ``vllm:generation_tokens_total``,
``vllm:prompt_tokens_total`` and ``vllm:request_success_total{finished_reason=...}``, all labelled
``model_name`` and ``engine``.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class MetricValues:
    """The numbers behind one ``/metrics`` scrape."""

    running: int = 0
    waiting: int = 0
    kv_cache_usage: float = 0.0
    generation_tokens: int = 0
    prompt_tokens: int = 0
    success: dict[str, int] = field(default_factory=lambda: {"stop": 0, "length": 0})


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_metrics(values: MetricValues, model_name: str, engine: str = "0") -> str:
    """Prometheus text format (version 0.0.4) of ``values``, vLLM-style."""
    base = f'engine="{engine}",model_name="{_escape(model_name)}"'
    lines = []

    def metric(name: str, kind: str, help_: str, samples: list[tuple[str, float]]) -> None:
        # prometheus_client (which vLLM uses) names a counter's TYPE line without "_total".
        type_name = name[: -len("_total")] if kind == "counter" and name.endswith("_total") else name
        lines.append(f"# HELP {type_name} {help_}")
        lines.append(f"# TYPE {type_name} {kind}")
        for extra, value in samples:
            labels = f"{extra},{base}" if extra else base
            lines.append(f"{name}{{{labels}}} {float(value)!r}")

    metric("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
           [("", values.running)])
    metric("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
           [("", values.waiting)])
    metric("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
           [("", values.kv_cache_usage)])
    metric("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
           [("", values.prompt_tokens)])
    metric("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
           [("", values.generation_tokens)])
    metric("vllm:request_success_total", "counter", "Count of successfully processed requests.",
           [(f'finished_reason="{reason}"', n) for reason, n in sorted(values.success.items())])
    return "\n".join(lines) + "\n"
