"""The plan's arithmetic and where its rates come from, on cases worked out by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_ocr.costs import HF_JOBS_HARDWARE
from llm_ocr.planning.estimate import DEFAULT_PLATFORMS, STARTUP_S, Plan, PlanRow, estimate_row, plan_rows
from llm_ocr.planning.rates import Rate, rate_for, read_measurements, record_measurement, run_estimate
from llm_ocr.sources.counting import PageCount

DEEPSEEK_A100_40 = 200_000 / 86_400  # "200k+ pages per day on one A100-40G": 2.3148 pages/s


def test_wall_time_gpu_hours_and_cost_of_shards_on_a_four_gpu_machine() -> None:
    # 10,000 pages on 4 shards of l4x4 (4 GPUs, $0.80 each: $3.20/h), 2 pages/s a GPU:
    # a shard reads 2,500 pages at 8 pages/s = 312.5 s, after 1,200 s of start-up: 1,512.5 s;
    # billed: 4 machines x 4 GPUs x 1,512.5 s = 6.7222 GPU-hours; 4 x 1,512.5 s x $3.20/h = $5.3778.
    machine = HF_JOBS_HARDWARE["l4x4"]
    assert (machine.gpus, machine.price_per_hour, STARTUP_S) == (4, 3.2, 1200)
    row = PlanRow("hf-jobs", machine.name, machine.accelerator, machine.gpus, Rate(2.0, "given", "by hand"),
                  price_per_hour=machine.price_per_hour)
    estimate_row(row, pages=10_000, num_shards=4)
    assert row.wall_s == pytest.approx(1512.5)
    assert row.gpu_hours == pytest.approx(6.72222, rel=1e-4)
    assert row.cost_usd == pytest.approx(5.37778, rel=1e-4)
    # No rate, no figures (nothing is invented); no price, no cost.
    blank = estimate_row(PlanRow("slurm", "x", "", 1, None), pages=10_000, num_shards=4)
    assert (blank.wall_s, blank.gpu_hours, blank.cost_usd) == (None, None, None)
    unpriced = estimate_row(PlanRow("slurm", "x", "", 1, Rate(2.0, "given", "")), pages=10_000, num_shards=4)
    assert unpriced.wall_s == pytest.approx(1200 + 2500 / 2) and unpriced.cost_usd is None


def test_a_published_figure_on_its_gpu_and_scaled_by_memory_bandwidth_elsewhere() -> None:
    own = rate_for("deepseek-ocr", "a100-40gb")
    assert own is not None and own.kind == "published" and own.pages_per_s == pytest.approx(DEEPSEEK_A100_40)
    assert "200k+ pages per day on one A100-40G" in own.label and "arXiv 2510.18234" in own.label
    l4 = rate_for("deepseek-ocr", "l4-24gb")
    assert l4 is not None and l4.kind == "scaled"
    assert l4.pages_per_s == pytest.approx(DEEPSEEK_A100_40 * 300 / 1555)  # 0.4466
    assert "300 / 1,555 GB/s" in l4.label and "rough guide" in l4.label
    # No figure for olmOCR anywhere, nor for a GPU without a known bandwidth: none is made up.
    assert rate_for("olmocr", "h100-80gb") is None and rate_for("deepseek-ocr", None) is None


def test_your_measurement_beats_the_published_figure_and_is_carried_to_other_gpus(tmp_path: Path) -> None:
    path = tmp_path / "rates.jsonl"
    record_measurement("deepseek-ocr", "deepseek-ai/DeepSeek-OCR", "a100-40gb", 1.5, 400, 64, path)
    record_measurement("olmocr", "allenai/olmOCR-2-7B-1025-FP8", "h100-80gb", 3.0, 300, 128, path)
    measured = read_measurements(path)
    mine = rate_for("deepseek-ocr", "a100-40gb", measured)
    assert mine is not None and (mine.kind, mine.pages_per_s) == ("measured", 1.5)
    assert "400 pages at concurrency 64" in mine.label
    olmocr = rate_for("olmocr", "l40s-48gb", measured)
    assert olmocr is not None and olmocr.kind == "scaled" and olmocr.pages_per_s == pytest.approx(3.0 * 864 / 3350)
    rows = {r.hardware: r for r in plan_rows("olmocr", 6000, 2, platforms=["hf-jobs"], rates_file=path)}
    # h200: 3.0 x 4,800 / 3,350 pages/s; 3,000 pages a shard.
    assert rows["h200"].rate is not None and rows["h200"].wall_s == pytest.approx(1200 + 3000 / (3.0 * 4800 / 3350))
    assert rows["t4-small"].rate is None and "no figure for the T4 16GB" in rows["t4-small"].note


def test_a_runs_marker_gets_the_estimate_of_its_gpus(tmp_path: Path) -> None:
    none = tmp_path / "no-measurements.jsonl"
    four = run_estimate("deepseek-ocr", "a100-40gb-x4", none)
    assert (four["gpus"], four["kind"]) == (4, "published")
    assert four["pages_per_s"] == pytest.approx(4 * DEEPSEEK_A100_40, abs=1e-3)
    assert run_estimate("deepseek-ocr", None, none)["pages_per_s"] is None
    assert "no published figure for olmocr" in run_estimate("olmocr", "l4-24gb", none)["label"]


def test_aws_batch_gpu_types_are_planned_on_demand_and_on_spot_with_each_price_labelled() -> None:
    # 10,000 pages on 4 shards at 2 pages/s a GPU (given): a shard reads 2,500 pages in 1,250 s after
    # 1,200 s of start-up, 2,450 s; 4 x 2,450 s x $1.861/h on-demand = $5.0660, x $0.787/h Spot = $2.1424.
    rows = {r.hardware: r for r in plan_rows("deepseek-ocr", 10_000, 4, platforms=["aws-batch"], pages_per_s=2.0)}
    families = {name.split(".")[0] for name in rows}
    assert families == {"g6e", "g6", "g5", "p4d", "p5"} and all(r.platform == "aws-batch" for r in rows.values())
    assert all(f"{name} Spot" in rows for name in rows if not name.endswith(" Spot"))
    assert rows["g6e.xlarge"].cost_usd == pytest.approx(5.06597, rel=1e-4)
    assert rows["g6e.xlarge Spot"].cost_usd == pytest.approx(2.14244, rel=1e-4)
    # Each price says where it comes from and when; a Spot price none was found for says so, not a guess.
    assert "on-demand" in rows["g6e.xlarge"].price_note and "read 2026-11-26" in rows["g6e.xlarge"].price_note
    assert "Spot" in rows["g6.xlarge Spot"].price_note and "one observation" in rows["g6.xlarge Spot"].price_note
    assert rows["p5.48xlarge Spot"].price_per_hour is None and "unverified" in rows["p5.48xlarge Spot"].price_note
    text = str(Plan(PageCount(pages=10_000, given=True), "m", "deepseek-ocr", 4, list(rows.values())))
    line = next(line for line in text.splitlines() if "g6e.xlarge Spot" in line)
    assert "$0.787 [b]" in line and "$2.14" in line
    assert "[b] price: Spot" in text and "[d] price: Spot: unverified" in text
    # llm-ocr plan lists them by default.
    assert "aws-batch" in DEFAULT_PLATFORMS
