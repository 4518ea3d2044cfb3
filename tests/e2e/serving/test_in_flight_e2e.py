"""The in-flight limit that sizes itself from the server's /metrics, through the command: Extract
and Describe feed an endpoint with more slots than the default to its size. The limit itself is
tested in process in tests/serving/test_in_flight.py."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from llm_ocr.testing import SimulatedServer
from tests.conftest import run_cli
from tests.docs import make_corpus


def test_an_endpoint_with_more_slots_than_the_default_is_fed_to_its_size(tmp_path: Path) -> None:
    """128 slots behind --endpoint and no --max-in-flight: the run grows past 64 in flight, and
    settles at the server's size plus a small queue, not at double it."""
    make_corpus(tmp_path / "docs", documents=9, pages=16)
    # 300 tokens at 100 ms: each page holds a slot ~30 s, so 64 in flight would leave half idle, and
    # 144 pages overfill the 128 slots (the limit then settles). The client has to render the pages
    # faster than the slots free: at 36 DPI (the 640-pixel floor) it does at load 17 on 2 cores
    # (256 reached 6-14 s in, settled at 160). At 144 DPI and ~8 s a page it rendered about 2 pages
    # a second there: never 64 in flight (max running 39-53), or never past 128 (no queue to settle).
    args = ("--slots", "128", "--prefill-ms", "200", "--decode-ms-per-token", "100", "--load-slowdown", "0",
            "--output-tokens-mean", "300")  # fmt: skip
    with SimulatedServer(*args) as server:
        result = run_cli(
            "extract", str(tmp_path / "docs"), "--output", str(tmp_path / "out"), "--endpoint", server.base_url,
            "--workers", "1", "--progress", "off", "--dpi", "36", timeout=300,
        )  # fmt: skip
        stats = server.stats()
    assert result.returncode == 0, result.stderr[-3000:]
    assert stats["max_running"] > 64  # fed past the old fixed default
    (summary,) = re.findall(r"requests in flight adapted to the server: (.*)", result.stderr)
    limits = [int(n) for n in re.findall(r"(\d+) at [\d.]+s", summary)]
    assert limits[0] == 64 and max(limits) >= 128
    assert limits[-1] <= 128 + 32  # settled: the server's size plus a quarter


def write_extract_output(out: Path, pages: int, figures_per_page: int) -> None:
    """An ``OUT/extract`` of ``pages`` ok pages with figures (and its completion marker), written
    directly: Describe needs its rows, not the rendering and OCR that made them."""
    import io

    from PIL import Image

    from llm_ocr.records import Figure, PageResult, page_schema
    from llm_ocr.storage import Storage
    from llm_ocr.storage.parts import PartWriter
    from llm_ocr.storage.state import write_marker

    buffer = io.BytesIO()
    Image.new("RGB", (96, 64), (200, 30, 30)).save(buffer, "PNG")
    crop = buffer.getvalue()

    async def write() -> None:
        storage = Storage(str(out))
        writer = PartWriter(storage.child("extract"), page_schema(), 0, 1)
        for number in range(pages):
            doc, page = divmod(number, 10)
            figures = [Figure(f"{page}-{i}", [0, 0, 96, 64], image=crop) for i in range(figures_per_page)]
            row = PageResult(f"doc{doc:03d}.pdf", doc, page + 1, f"doc{doc:03d}.pdf", 10, markdown="text",
                             figures=figures, status="ok")
            await writer.add(row.to_row())
        await writer.close()
        write_marker(storage, "extract", 0, 1, {"stage": "extract", "shard": 0, "num_shards": 1, "pages": {"error": 0}})

    asyncio.run(write())


def test_describe_feeds_an_endpoint_with_more_slots_than_the_default_to_its_size(tmp_path: Path) -> None:
    """Describe sizes its figure requests in flight from /metrics as Extract does: 256 slots behind
    --endpoint and no --max-in-flight, and the run grows past 64 requests in flight."""
    out = tmp_path / "out"
    write_extract_output(out, pages=200, figures_per_page=2)
    # 300 tokens at 50 ms: each figure holds a slot ~16 s, so 64 in flight would leave most idle; the
    # client must send faster than 64 per 16 s to feed more (at ~8 s a figure, a machine at load 19
    # sent too slowly and never had 64 in flight: max running 56).
    args = ("--slots", "256", "--prefill-ms", "200", "--decode-ms-per-token", "50", "--load-slowdown", "0",
            "--output-tokens-mean", "300", "--output-tokens-sigma", "0.1")  # fmt: skip
    with SimulatedServer(*args) as server:
        result = run_cli("describe", "--output", str(out), "--endpoint", server.base_url, "--progress", "off",
                         timeout=300)
        stats = server.stats()
    assert result.returncode == 0, result.stderr[-3000:]
    assert stats["requests"] == 400
    assert stats["max_running"] > 64  # fed past the old fixed default
    (summary,) = re.findall(r"requests in flight adapted to the server: (.*)", result.stderr)
    limits = [int(n) for n in re.findall(r"(\d+) at [\d.]+s", summary)]
    assert limits[0] == 64 and max(limits) >= 128
