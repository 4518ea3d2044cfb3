"""Fault injection: server faults, degenerate answers, interruption, hostile input, secrets.

Every page must be accounted for exactly once, whatever happens.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pypdfium2
import pytest
from PIL import Image

from llm_ocr.testing import SimulatedServer
from tests.conftest import REPO, read_stage, run_cli
from tests.docs import make_corpus, make_pdf


def extract(inputs, out: Path, server: SimulatedServer, *extra: str, env=None, timeout: float = 180):
    return run_cli(
        "extract", *[str(i) for i in inputs], "--output", str(out), "--endpoint", server.base_url,
        "--workers", "0", "--progress", "log", "--backoff-base", "0.05", *extra, env=env, timeout=timeout,
    )


def keys(rows):
    return sorted((r["doc_id"], r["page"]) for r in rows)


@pytest.mark.parametrize("kind", ["error", "reset", "hang"])
def test_transient_server_faults_are_retried_and_attempts_recorded(tmp_path: Path, kind: str) -> None:
    make_corpus(tmp_path / "docs", documents=3, pages=1)
    with SimulatedServer(corpus=tmp_path / "docs") as server:
        warm = extract([tmp_path / "docs/doc000.pdf"], tmp_path / "warm", server)  # a success first
        assert warm.returncode == 0
        server.inject(kind, count=2, status=503, seconds=30)
        result = extract([tmp_path / "docs"], tmp_path / "out", server, "--request-timeout", "1.5", "--max-in-flight", "1")
    assert result.returncode == 0, result.stderr
    rows = read_stage(tmp_path / "out", "extract")
    assert [r["status"] for r in rows] == ["ok"] * 3
    # The first page absorbed both faults: three attempts, recorded on its row.
    assert [r["attempts"] for r in rows] == [3, 1, 1]


def test_timeouts_count_from_sending_not_from_queueing(tmp_path: Path) -> None:
    make_corpus(tmp_path / "docs", documents=6, pages=1)
    with SimulatedServer("--prefill-ms", "600", "--slots", "1", corpus=tmp_path / "docs") as server:
        # Six pages of 0.6 s through one slot take 3.6 s, far over the 1.2 s timeout; each page
        # waits in our queue, not on the wire, so none may time out.
        result = extract([tmp_path / "docs"], tmp_path / "out", server, "--request-timeout", "1.2", "--max-in-flight", "1")
    assert result.returncode == 0, result.stderr
    assert {r["attempts"] for r in read_stage(tmp_path / "out", "extract")} == {1}


def test_retries_are_bounded_and_the_page_gets_an_error_row(tmp_path: Path) -> None:
    make_corpus(tmp_path / "docs", documents=2, pages=1)
    with SimulatedServer(corpus=tmp_path / "docs") as server:
        assert extract([tmp_path / "docs/doc000.pdf"], tmp_path / "warm", server).returncode == 0
        server.inject("hang", count=10, seconds=30)
        result = extract([tmp_path / "docs/doc001.pdf"], tmp_path / "out", server, "--request-timeout", "0.5", "--max-attempts", "3")
    assert result.returncode == 1
    (row,) = read_stage(tmp_path / "out", "extract")
    assert row["status"] == "error" and row["attempts"] == 3 and "timed out" in row["error"]


def test_dead_external_endpoint_stops_the_run_instead_of_failing_every_page(tmp_path: Path) -> None:
    make_corpus(tmp_path / "docs", documents=12, pages=2)
    server = SimulatedServer("--prefill-ms", "250", "--slots", "2", corpus=tmp_path / "docs").start()
    args = [
        sys.executable, "-m", "llm_ocr.cli", "extract", str(tmp_path / "docs"), "--output", str(tmp_path / "out"),
        "--endpoint", server.base_url, "--workers", "0", "--progress", "off", "--max-in-flight", "2",
        "--dead-after", "3", "--backoff-base", "0.2", "--backoff-max", "1", "--flush-interval", "0.3",
    ]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not list((tmp_path / "out").glob("extract/*.parquet")):
        time.sleep(0.05)
    server.stop()
    started = time.monotonic()
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 2, stderr
    assert time.monotonic() - started < 20
    assert "answered nothing successfully" in stderr and "rerun to resume" in stderr
    saved = read_stage(tmp_path / "out", "extract")
    assert saved and all(r["status"] == "ok" for r in saved)  # no page was burnt as an error
    with SimulatedServer(corpus=tmp_path / "docs") as again:
        assert extract([tmp_path / "docs"], tmp_path / "out", again).returncode == 0
    rows = read_stage(tmp_path / "out", "extract")
    assert len(rows) == 24 == len(set(keys(rows)))


@pytest.mark.parametrize("kind", ["empty", "untagged", "bad_boxes"])
def test_degenerate_answers_still_give_valid_rows(tmp_path: Path, kind: str) -> None:
    make_pdf(tmp_path / "a.pdf", pages=1)
    with SimulatedServer(corpus=tmp_path / "a.pdf") as server:
        server.inject(kind, count=1)
        result = extract([tmp_path / "a.pdf"], tmp_path / "out", server)
    assert result.returncode == 0, result.stderr
    (row,) = read_stage(tmp_path / "out", "extract")
    assert row["status"] == "ok"
    assert "<|ref|>" not in row["markdown"] and "<|det|>" not in row["markdown"]
    for figure in row["figures"]:
        x1, y1, x2, y2 = figure["bbox"]
        assert 0 <= x1 < x2 <= row["width"] and 0 <= y1 < y2 <= row["height"]
    if kind == "empty":
        assert row["markdown"] == "" and row["error"] == "model returned no text"
    if kind == "untagged":
        assert row["markdown"].strip() and row["blocks"][0]["boxes"] == []
    if kind == "bad_boxes":
        assert "repaired" in (row["error"] or "")


def test_sigterm_flushes_completed_rows_exits_3_and_the_rerun_completes(tmp_path: Path) -> None:
    make_corpus(tmp_path / "docs", documents=8, pages=2)
    with SimulatedServer("--prefill-ms", "300", "--slots", "2", corpus=tmp_path / "docs") as server:
        args = [
            sys.executable, "-m", "llm_ocr.cli", "extract", str(tmp_path / "docs"), "--output", str(tmp_path / "out"),
            "--endpoint", server.base_url, "--workers", "0", "--progress", "off", "--max-in-flight", "2",
            "--grace-period", "10", "--flush-interval", "600",
        ]
        process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
        time.sleep(0.5)
        while server.stats().get("requests", 0) < 3:
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
        assert process.returncode == 3, stderr
        assert "stopping intake" in stderr
        # Nothing was flushed on the timer (600 s): these rows were flushed by the shutdown.
        saved = read_stage(tmp_path / "out", "extract")
        assert 2 <= len(saved) < 16 and {r["status"] for r in saved} == {"ok"}
        assert not (tmp_path / "out/_state/extract/done-00000-of-00001.json").exists()
        assert extract([tmp_path / "docs"], tmp_path / "out", server).returncode == 0
    rows = read_stage(tmp_path / "out", "extract")
    assert len(rows) == 16 == len(set(keys(rows)))


def test_a_cut_off_part_is_detected_removed_and_redone(tmp_path: Path) -> None:
    make_corpus(tmp_path / "docs", documents=3, pages=2)
    with SimulatedServer(corpus=tmp_path / "docs") as server:
        assert extract([tmp_path / "docs"], tmp_path / "out", server, "--part-rows", "2").returncode == 0
        parts = sorted((tmp_path / "out/extract").glob("*.parquet"))
        assert len(parts) == 3
        # As if a store without atomic writes kept half a file, and the shard never finished.
        parts[1].write_bytes(parts[1].read_bytes()[:300])
        (tmp_path / "out/_state/extract/done-00000-of-00001.json").unlink()
        status = run_cli("status", str(tmp_path / "out"))
        assert "unreadable parts: 1" in status.stdout
        result = extract([tmp_path / "docs"], tmp_path / "out", server)
        assert result.returncode == 0, result.stderr
        assert "unreadable part" in result.stderr
        assert len(server.requests()) == 6 + 2
    rows = read_stage(tmp_path / "out", "extract")
    assert len(rows) == 6 == len(set(keys(rows)))


def _hostile_corpus(folder: Path) -> dict[str, str]:
    """Hostile files and the message (or status) each must produce."""
    folder.mkdir(parents=True)
    make_pdf(folder / "good.pdf", pages=1)
    good = (folder / "good.pdf").read_bytes()
    (folder / "truncated.pdf").write_bytes(good[: len(good) // 2])
    (folder / "corrupt.pdf").write_bytes(b"%PDF-1.7\n" + os.urandom(2000))
    (folder / "empty.pdf").write_bytes(b"")
    zero = pypdfium2.PdfDocument.new()
    zero.save(str(folder / "zero-pages.pdf"))
    from reportlab.pdfgen import canvas

    locked = canvas.Canvas(str(folder / "encrypted.pdf"), encrypt="s3cret")
    locked.drawString(72, 720, "hidden")
    locked.save()
    poster = pypdfium2.PdfDocument.new()
    poster.new_page(2384, 3370)  # A0 in points
    poster.save(str(folder / "a0-poster.pdf"))
    Image.new("1", (30000, 30000)).save(folder / "bomb.png", optimize=True)
    Image.new("CMYK", (400, 300), (0, 128, 255, 0)).save(folder / "cmyk.jpg")
    Image.new("I;16", (400, 300), 40000).save(folder / "sixteen-bit.png")
    Image.new("P", (400, 300), 3).save(folder / "palette.png")
    Image.new("RGBA", (400, 300), (10, 20, 30, 0)).save(folder / "alpha.png")
    frames = [Image.new("RGB", (200, 100), c) for c in ("red", "green", "blue")]
    frames[0].save(folder / "animated.gif", save_all=True, append_images=frames[1:], duration=100)
    (folder / "text.png").write_bytes(b"this is plain text, not a PNG at all\n" * 10)
    (folder / "name with spaces.png").write_bytes((REPO / "samples/notes.png").read_bytes())
    (folder / "ünïcødé-文件.png").write_bytes((REPO / "samples/notes.png").read_bytes())
    (folder / "..dots..png").write_bytes((REPO / "samples/notes.png").read_bytes())
    return {
        "good.pdf": "ok",
        "truncated.pdf": "PDF",
        "corrupt.pdf": "PDF",
        "empty.pdf": "empty file",
        "zero-pages.pdf": "no pages",
        "encrypted.pdf": "password",
        "a0-poster.pdf": "ok",
        "bomb.png": "decompression bomb",
        "cmyk.jpg": "ok",
        "sixteen-bit.png": "ok",
        "palette.png": "ok",
        "alpha.png": "ok",
        "animated.gif": "ok",
        "text.png": "not a readable image",
        "name with spaces.png": "ok",
        "ünïcødé-文件.png": "ok",
        "..dots..png": "ok",
    }


def test_hostile_corpus_runs_to_completion_with_specific_errors(tmp_path: Path) -> None:
    expected = _hostile_corpus(tmp_path / "hostile")
    with SimulatedServer() as server:
        result = extract([tmp_path / "hostile"], tmp_path / "out", server)
    assert result.returncode == 1, result.stderr
    rows = {r["doc_id"]: r for r in read_stage(tmp_path / "out", "extract")}
    assert set(rows) == set(expected)
    for name, outcome in expected.items():
        row = rows[name]
        if outcome == "ok":
            assert row["status"] == "ok" and row["page"] == 1, (name, row["error"])
        else:
            assert row["status"] == "error" and row["page"] == 0 and outcome in row["error"], (name, row["error"])
    poster = rows["a0-poster.pdf"]
    assert poster["width"] * poster["height"] <= 12_000_000 and poster["height"] > 3000
    status = run_cli("status", str(tmp_path / "out"), "--json")
    (extract_status,) = json.loads(status.stdout)
    assert extract_status["rows"] == len(expected) and extract_status["duplicates"] == 0


def test_a_five_thousand_page_pdf_completes_with_every_page_once(tmp_path: Path) -> None:
    big = pypdfium2.PdfDocument.new()
    for _ in range(5000):
        big.new_page(612, 792)
    big.save(str(tmp_path / "big.pdf"))
    with SimulatedServer("--instant") as server:
        result = extract([tmp_path / "big.pdf"], tmp_path / "out", server, "--dpi", "9", "--max-in-flight", "64", "--progress-interval", "5", timeout=300)
    assert result.returncode == 0, result.stderr
    rows = read_stage(tmp_path / "out", "extract")
    assert [r["page"] for r in rows] == list(range(1, 5001))
    assert {r["num_pages"] for r in rows} == {5000}


def test_finevision_row_without_images_and_traversal_ids_stay_inside(tmp_path: Path) -> None:
    import datasets

    ds = datasets.Dataset.from_dict(
        {"images": [[], [{"bytes": (REPO / "samples/notes.png").read_bytes(), "path": "../../escape.png"}]]},
        features=datasets.Features({"images": datasets.List(datasets.Image())}),
    )
    ds.to_parquet(str(tmp_path / "rows.parquet"))
    with SimulatedServer() as server:
        result = extract([tmp_path / "rows.parquet"], tmp_path / "out", server)
    assert result.returncode == 1
    rows = read_stage(tmp_path / "out", "extract")
    assert [(r["page"], r["status"]) for r in rows] == [(0, "error"), (1, "ok")]
    assert "no images" in rows[0]["error"]
    written = {p.resolve() for p in tmp_path.rglob("*") if p.is_file()}
    assert all(str(p).startswith(str(tmp_path.resolve())) for p in written)
    assert not (tmp_path.parent / "escape.png").exists()


def test_planted_secrets_never_reach_logs_stats_or_outputs(tmp_path: Path) -> None:
    secret = "sk-PLANTED-secret-0123456789abcdef"
    make_pdf(tmp_path / "a.pdf", pages=1)
    with SimulatedServer(corpus=tmp_path / "a.pdf") as server:
        server.inject("error", count=1, status=503)
        result = extract(
            [tmp_path / "a.pdf"], tmp_path / "out", server, "--progress-interval", "0.2",
            env={"LLM_OCR_API_KEY": secret, "HF_TOKEN": secret, "AWS_SECRET_ACCESS_KEY": secret},
        )
        verbose = run_cli("-v", "extract", str(tmp_path / "a.pdf"), "--output", str(tmp_path / "out2"), "--endpoint", server.base_url,
                          "--workers", "0", env={"LLM_OCR_API_KEY": secret})
    assert result.returncode == 0 and verbose.returncode == 0, result.stderr
    haystacks = [result.stdout, result.stderr, verbose.stdout, verbose.stderr]
    for path in list((tmp_path / "out").rglob("*")) + list((tmp_path / "out2").rglob("*")):
        if path.is_file():
            haystacks.append(path.read_bytes().decode("latin-1"))
    assert not any(secret in text for text in haystacks)
    assert not any("PLANTED" in text for text in haystacks)
