"""Reading a server's ``/metrics``: the one Prometheus text parser.

:func:`parse_prometheus` reads any Prometheus text exposition into a flat dict;
:func:`parse_metrics` picks vLLM's gauges and counters from it under the short names the runners
use (``running``, ``waiting``...). The simulator writes the same names
(:mod:`llm_ocr.engines.frame.metrics`); they follow vLLM's ``/metrics`` (docs/facts.md, "vLLM's OpenAI-compatible
server").
"""

from __future__ import annotations

import re

_SAMPLE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\S+)?$"
)
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

#: vLLM's metric names -> the keys :func:`parse_metrics` returns.
VLLM_METRICS = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_cache_usage",
    "vllm:generation_tokens_total": "generation_tokens_total",
    "vllm:prompt_tokens_total": "prompt_tokens_total",
}


def parse_prometheus(text: str) -> dict[str, float]:
    """Parse Prometheus text exposition into a flat dict.

    Every sample appears twice:

    - under its exact series key, the metric name plus its labels sorted by name, e.g.
      ``'vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"}'``;
    - added into the bare metric name, e.g. ``'vllm:request_success_total'`` is the sum over
      all its label sets (for a single-series gauge that is simply its value).

    Comment lines and unparsable lines are skipped; ``NaN``/``+Inf`` parse as floats.
    """
    out: dict[str, float] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        try:
            value = float(m.group("value"))
        except ValueError:
            continue
        name = m.group("name")
        labels = sorted(_LABEL.findall(m.group("labels") or ""))
        key = name + ("{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}" if labels else "")
        if key != name:
            out[key] = value
        out[name] = out.get(name, 0.0) + value
    return out


def parse_metrics(text: str) -> dict[str, float]:
    """vLLM's ``/metrics`` -> ``running``, ``waiting``, ``kv_cache_usage``,
    ``generation_tokens_total``, ``prompt_tokens_total``, each summed over its label sets (several
    engines, data parallel, export one sample each).

    Metrics the server does not export are missing from the result (never guessed as 0).
    """
    flat = parse_prometheus(text)
    return {key: flat[name] for name, key in VLLM_METRICS.items() if name in flat}
