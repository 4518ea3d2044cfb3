"""Know before you launch: pages, GPU-hours, wall time and cost of a run, estimated up front.

- :mod:`.rates`    pages/s per model family and GPU: published figures (with their sources),
                   the ones you measured (``llm-ocr bench-accuracy --gpu``), and how a figure for
                   one GPU is carried to another (by memory bandwidth), each labelled
- :mod:`.estimate` the arithmetic: pages (counted by :mod:`llm_ocr.sources.counting`), the rate
                   of each platform's machines, shards -> GPU-hours, wall time, cost
                   (``llm-ocr plan``, ``llm_ocr.plan``, and ``llm-ocr launch --dry-run``)

May import sources, costs, options, vlm's family names and serving's GPU presets; never runners,
stages, launchers, commands or the API (they use it).
"""

from llm_ocr.planning.estimate import Plan, PlanRow, plan
from llm_ocr.planning.rates import Rate, rate_for, record_measurement

__all__ = ["Plan", "PlanRow", "Rate", "plan", "rate_for", "record_measurement"]
