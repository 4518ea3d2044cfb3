"""``llm-ocr jobs status`` splits a launch's pages and GPU time by route and model (docs/routes.md)."""

from __future__ import annotations

from llm_ocr.launchers.core.spec import launch_markers
from llm_ocr.launchers.core.table import LaunchStatus, shard_status

WEAK, STRONG = "lightonai/LightOnOCR-2-1B", "allenai/olmOCR-2-7B-1025"


def _markers(shard: int) -> dict[str, dict]:
    extract = {"stage": "extract", "shard": shard, "num_shards": 2, "wall_time_s": 100.0,
               "pages": {"ok": 10, "truncated": 0, "error": 0},
               "routes": {"text-layer": 6, "model": 4},
               "models": {WEAK: {"pages": 4, "used": 4, "busy_s": 360.0}}}
    escalate = {"stage": "escalate", "shard": shard, "num_shards": 2, "wall_time_s": 50.0,
                "pages": {"ok": 10, "truncated": 0, "error": 0},
                "routes": {"text-layer": 6, "model": 3, "escalated": 1},
                "models": {STRONG: {"pages": 1, "used": 1, "busy_s": 180.0}}}
    return {"extract": extract, "escalate": escalate, "describe": {"stage": "describe"}, "assemble": {"stage": "assemble"}}


def test_the_totals_split_pages_by_route_and_gpu_time_by_model() -> None:
    needed = launch_markers("run", ["--escalate-to", STRONG])
    assert needed == ("extract", "escalate", "describe", "assemble")  # done only once escalated too
    rows = [shard_status(i, "run", _markers(i), None, None, gpus=1, price_per_hour=None, needed=needed) for i in (0, 1)]
    assert [row.state for row in rows] == ["done", "done"]
    table = LaunchStatus(output="s3://b/out", stage="run", num_shards=2, shards=rows)
    (line,) = [line for line in table.totals_lines() if line.startswith("routes:")]
    assert line == (f"routes: escalated 2, model 6, text-layer 12 | {STRONG}: 2 pages read, 0.100 GPU-h busy; "
                    f"{WEAK}: 8 pages read, 0.200 GPU-h busy")
    # A launch without routes or escalation shows no such line.
    plain = {"extract": {"stage": "extract", "pages": {"ok": 3}, "routes": {"model": 3}}, "describe": {}, "assemble": {}}
    row = shard_status(0, "run", plain, None, None, gpus=1, price_per_hour=None)
    assert not [line for line in LaunchStatus("o", "run", 1, [row]).totals_lines() if line.startswith("routes:")]
