"""``GET /metrics``: the service's state in Prometheus's text exposition format (version 0.0.4).

Written out here rather than with ``prometheus_client`` (not a dependency of llm-ocr): every
value is read from the queue's database when scraped, so the numbers are the same whichever
gateway is asked and survive restarts; there is no in-process counter to keep.
"""

from __future__ import annotations

from llm_ocr.service.queue import DocumentQueue


def _family(name: str, kind: str, text: str, samples: list[tuple[str, float]]) -> list[str]:
    lines = [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
    lines += [f"{name}{labels} {value:g}" for labels, value in samples]
    return lines


def exposition(queue: DocumentQueue) -> str:
    """The metrics as Prometheus text."""
    counts = queue.counts()
    causes = queue.failure_causes()
    lines = _family("llm_ocr_service_queue_depth", "gauge", "Documents queued and not yet taken by a worker.",
                    [("", counts["queued"])])
    lines += _family("llm_ocr_service_documents", "gauge", "Documents by status.",
                     [(f'{{status="{status}"}}', n) for status, n in counts.items()])
    lines += _family("llm_ocr_service_pages_done_total", "counter",
                     "Pages read (ok or truncated) in documents that ended.", [("", queue.pages_done())])
    lines += _family("llm_ocr_service_failures_total", "counter", "Failed documents by cause.",
                     [(f'{{cause="{cause}"}}', n) for cause, n in sorted(causes.items())])
    return "\n".join(lines) + "\n"
