"""``llm-ocr bench-reads`` on a generated dataset it serves itself: its numbers add up."""

from __future__ import annotations

import json

from tests.conftest import run_cli


def test_bench_reads_reports_reads_the_server_confirms_and_a_plan_that_covers_every_row() -> None:
    result = run_cli(
        "bench-reads", "--files", "5", "--rows", "4", "9", "--image-side", "30", "60", "--num-shards", "1", "4",
        "--shard-index", "0", "3", "--plan", "4", "16", "--json", timeout=180,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr  # shard 3 of 1 does not exist
    assert "--shard-index 3 is out of range for --num-shards 1" in result.stderr
    result = run_cli(
        "bench-reads", "--files", "5", "--rows", "4", "9", "--image-side", "30", "60", "--num-shards", "4",
        "--shard-index", "0", "3", "--plan", "4", "16", "--json", timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    plan4, plan16 = report["plans"]
    rows = sum(plan4["shard_rows"])
    assert rows == sum(plan16["shard_rows"]) and plan16["files"] == 5
    for shard in report["shards"]:
        # The reader's own count is what the HTTP server sent (its folder page aside: < 2 KB).
        assert 0 <= shard["served_bytes"] - shard["read_bytes"] < 2048, shard
        assert shard["documents"] == plan4["shard_rows"][shard["shard"]]
        assert shard["data_over_share"] <= 1.5 and shard["first_page_s"] <= shard["all_s"]
