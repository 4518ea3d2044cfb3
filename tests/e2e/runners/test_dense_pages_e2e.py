"""Dense pages end to end: a 7-column newspaper page whose text exceeds max_tokens, read by
``llm-ocr extract`` against the simulated server (which answers a tile with the text of its
region): read in tiles at once from its text layer's count, or after one answer that ran out
without repeating itself; every word once, the columns in order; today's policy when tiling is off;
another family with boxes (dots.mocr) tiles too."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from llm_ocr.bench.accuracy import text_layer, word_recall
from llm_ocr.bench.corpus import dense_pdf
from llm_ocr.testing import SimulatedServer
from tests.conftest import read_stage, run_cli
from tests.docs import make_pdf


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[str, list[list[str]]]]]:
    folder = tmp_path_factory.mktemp("dense-docs")
    (parts,) = dense_pdf(folder / "gazette.pdf", seed=7)
    make_pdf(folder / "report.pdf", pages=1)
    return folder, parts


def extract(docs: Path, out: Path, server: SimulatedServer, *extra: str):
    return run_cli(
        "extract", str(docs), "--output", str(out), "--endpoint", server.base_url, "--workers", "0", "--progress", "off",
        *extra, timeout=300,
    )  # fmt: skip


def rows_by_doc(out: Path) -> dict[str, dict]:
    return {r["doc_id"]: r for r in read_stage(out, "extract")}


def gazette_requests(server: SimulatedServer) -> list[dict]:
    return [r for r in server.requests() if (r.get("known_page") or {}).get("source", "").endswith("gazette.pdf")]


def assert_read_whole_in_order(row: dict, docs: Path, parts: list[tuple[str, list[list[str]]]]) -> None:
    assert row["status"] == "ok", row["error"]
    assert word_recall(text_layer(str(docs / "gazette.pdf"), 1), row["markdown"]) >= 0.995
    # Column order kept: every part (masthead, headlines, columns) starts after the last ended.
    spans = [(row["markdown"].find(paragraphs[0][0]), row["markdown"].find(paragraphs[-1][-1])) for _, paragraphs in parts]
    assert all(start >= 0 for start, _ in spans)
    assert all(end < next_start for (_, end), (next_start, _) in itertools.pairwise(spans)), spans


def test_a_dense_page_is_read_in_tiles_at_once_from_its_text_layer(tmp_path: Path, docs: tuple) -> None:
    folder, parts = docs
    with SimulatedServer("--prefill-ms", "0", corpus=folder) as server:
        result = extract(folder, tmp_path / "out", server)
        tiled_requests = gazette_requests(server)
        before = len(server.requests())
        today = extract(folder, tmp_path / "today", server, "--no-tile-dense-pages")
        today_requests = gazette_requests(server)[len(tiled_requests):]
        assert len(server.requests()) > before
    assert result.returncode == 0, result.stderr[-3000:]
    rows = rows_by_doc(tmp_path / "out")
    gazette = rows["gazette.pdf"]
    assert_read_whole_in_order(gazette, folder, parts)
    assert gazette["segments"] == len(tiled_requests) >= 4 and "<--- tile 1/" in gazette["raw"]
    assert "its text layer holds" in gazette["cut_reason"] and "tiles at once" in gazette["cut_reason"]
    # No whole-page answer: every request was a tile, and each fitted in max_tokens.
    assert all("region" in r["known_page"] and r["finish_reason"] == "stop" for r in tiled_requests)
    assert gazette["completion_tokens"] == sum(r["completion_tokens"] for r in tiled_requests)
    assert rows["report.pdf"]["status"] == "ok" and rows["report.pdf"]["segments"] is None
    # Tiling off: read whole, cut at max_tokens, retried hotter, cut again; the end is lost.
    assert today.returncode == 0, today.stderr[-3000:]
    whole = rows_by_doc(tmp_path / "today")["gazette.pdf"]
    assert whole["status"] == "truncated" and whole["segments"] is None
    assert [r["body"]["temperature"] for r in today_requests] == [0.0, 0.2]
    assert word_recall(text_layer(str(folder / "gazette.pdf"), 1), whole["markdown"]) < 0.95


def test_a_page_that_runs_out_without_repeating_itself_is_read_again_in_tiles(tmp_path: Path, docs: tuple) -> None:
    """Its text layer says ~8,900 tokens, under 0.9 of max_tokens 10,000; the model writes more
    tokens per character than that (0.4): the whole answer runs to max_tokens, unrepeated."""
    folder, parts = docs
    with SimulatedServer("--prefill-ms", "0", "--tokens-per-char", "0.4", "--max-model-len", "12288", corpus=folder) as server:
        result = extract(folder, tmp_path / "out", server, "--max-tokens", "10000", "--json")
        requests = gazette_requests(server)
    assert result.returncode == 0, result.stderr[-3000:]
    gazette = rows_by_doc(tmp_path / "out")["gazette.pdf"]
    assert_read_whole_in_order(gazette, folder, parts)
    whole = [r for r in requests if "region" not in r["known_page"]]
    tiles = [r for r in requests if "region" in r["known_page"]]
    # One whole answer, not retried hotter; then the tiles, each fitting.
    assert [(r["body"]["temperature"], r["finish_reason"]) for r in whole] == [(0.0, "length")]
    assert len(tiles) == gazette["segments"] >= 4 and all(r["finish_reason"] == "stop" for r in tiles)
    assert gazette["raw"].startswith("<--- whole page: ran to max_tokens --->")
    assert "ran to max_tokens (10000 tokens) without repeating itself: read again in" in gazette["cut_reason"]
    assert gazette["completion_tokens"] == sum(r["completion_tokens"] for r in requests)
    assert json.loads(result.stdout.strip().splitlines()[-1])["pages"]["ok"] == 2


def test_a_family_without_deepseeks_markup_reads_a_dense_page_in_tiles_too(tmp_path: Path, docs: tuple) -> None:
    """dots.mocr's answers carry every block's box (its recipe says tiles): the dense page, whose
    text layer says it holds more than max_tokens (7,168 here, as DeepSeek-OCR's), is read in
    tiles in dots' own format and joined, every word once, the columns in order."""
    folder, parts = docs
    model = "rednote-hilab/dots.mocr"
    with SimulatedServer("--prefill-ms", "0", "--served-model-name", model, corpus=folder) as server:
        result = extract(folder, tmp_path / "out", server, "--model", model, "--max-tokens", "7168")
        requests = gazette_requests(server)
        stats = server.stats()
    assert result.returncode == 0, result.stderr[-3000:]
    assert stats["recipe_refused"] == 0
    gazette = rows_by_doc(tmp_path / "out")["gazette.pdf"]
    assert_read_whole_in_order(gazette, folder, parts)
    assert "<--- tile 1/" in gazette["raw"] and gazette["segments"] == len(requests) >= 4
    assert all("region" in r["known_page"] and r["finish_reason"] == "stop" for r in requests)
