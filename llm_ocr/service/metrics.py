"""``GET /metrics``: the service's state in Prometheus's text exposition format (version 0.0.4).

Written out here rather than with ``prometheus_client`` (not a dependency of llm-ocr): every
value is read from the queue's database when scraped, so the numbers are the same whichever
gateway is asked and survive restarts; there is no in-process counter to keep.
"""

from __future__ import annotations

import bisect

from llm_ocr.service.queue import DocumentQueue

#: The histograms' bucket bounds, seconds: a one-page document on a free GPU to an hour-long queue.
BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
#: The stages of a document's life the histograms time, from its row's times.
STAGES = {
    "queued": lambda created, started, finished: started - created,  # waiting for a worker
    "read": lambda created, started, finished: finished - started,  # first taken to its end (redeliveries in)
    "total": lambda created, started, finished: finished - created,  # submission to end: what a client waits
}


def _family(name: str, kind: str, text: str, samples: list[tuple[str, float]]) -> list[str]:
    lines = [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
    lines += [f"{name}{labels} {value:g}" for labels, value in samples]
    return lines


def _histogram(name: str, text: str, series: dict[str, list[float]]) -> list[str]:
    """A histogram family with one series per ``stage`` label (cumulative buckets, sum, count)."""
    lines = [f"# HELP {name} {text}", f"# TYPE {name} histogram"]
    for stage, values in series.items():
        ordered = sorted(values)
        for bound in BUCKETS:
            lines.append(f'{name}_bucket{{stage="{stage}",le="{bound:g}"}} {bisect.bisect_right(ordered, bound)}')
        lines.append(f'{name}_bucket{{stage="{stage}",le="+Inf"}} {len(ordered)}')
        lines.append(f'{name}_sum{{stage="{stage}"}} {sum(ordered):g}')
        lines.append(f'{name}_count{{stage="{stage}"}} {len(ordered)}')
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
    timings = queue.timings()
    lines += _histogram("llm_ocr_service_stage_seconds",
                        "Seconds documents that ended spent queued, being read, and in all, by stage.",
                        {stage: [max(0.0, span(*times)) for times in timings] for stage, span in STAGES.items()})
    return "\n".join(lines) + "\n"
