"""Longest first within the look-ahead, seen by a held server (``llm-ocr extract`` as a user runs it).

Ten one-page PDFs whose text grows with their place in the input (the last is the longest). The
run keeps one request in flight; the server holds the first one until the test has seen, in the
run's progress file, that the other pages wait rendered in the look-ahead, then lets it go. What
the server receives next shows the order: every waiting page, longest text first, when the
look-ahead holds them all; with a look-ahead of 3 pages and the PDFs not read ahead
(``--estimate-ahead 0``), a page is never sent before it could have entered it, so the longest
page goes out late (read ahead, it is rendered first: ``test_render_order.py``). No timing: the test waits for the progress
file and for the held request, never for a stretch of time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from reportlab.lib.pagesizes import letter
from reportlab.pdfgen import canvas

from llm_ocr.testing import SimulatedServer
from tests.conftest import REPO, read_stage
from tests.docs import paragraph
from tests.waiting import HANG_GUARD_S, hold_request, wait_until, wait_until_held

DOCUMENTS = 10


def text_pdf(path: Path, lines: int, mark: int) -> None:
    """One Letter page of ``lines`` lines of body text (a text layer of ~90 characters each),
    with a black bar at a place of its own, so the simulator tells the pages apart."""
    import random

    rng = random.Random(mark)
    pdf = canvas.Canvas(str(path), pagesize=letter)
    pdf.rect(72 + 45 * mark, 740, 30, 30, fill=1)
    pdf.setFont("Helvetica", 9)
    for i in range(lines):
        pdf.drawString(72, 720 - i * 12, paragraph(rng, words=15)[:95])
    pdf.showPage()
    pdf.save()


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("look-ahead-docs")
    for i in range(DOCUMENTS):
        text_pdf(folder / f"doc{i:02d}.pdf", lines=6 + 5 * i, mark=i)  # 6 .. 51 lines: doc09 is the longest
    return folder


def start_extract(docs: Path, out: Path, server: SimulatedServer, *extra: str) -> subprocess.Popen[str]:
    args = [
        sys.executable, "-m", "llm_ocr.cli", "extract", str(docs), "--output", str(out), "--endpoint", server.base_url,
        "--workers", "0", "--progress", "off", "--progress-interval", "0.1", "--max-in-flight", "1", *extra,
    ]  # fmt: skip
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)


def progress(out: Path) -> dict[str, Any]:
    path = out / "_state/progress/extract-00000-of-00001.json"
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def waiting(out: Path) -> int:
    return int(progress(out).get("look_ahead", {}).get("waiting", 0))


def sent_order(server: SimulatedServer) -> list[int]:
    """The documents' numbers in the order their pages reached the server."""
    return [int(Path(r["known_page"]["source"]).stem[3:]) for r in server.requests() if r.get("known_page")]


def finish(process: subprocess.Popen[str], out: Path) -> dict[str, Any]:
    _, stderr = process.communicate(timeout=HANG_GUARD_S)
    assert process.returncode == 0, stderr[-3000:]
    rows = read_stage(out, "extract")
    assert sorted(r["doc_id"] for r in rows) == [f"doc{i:02d}.pdf" for i in range(DOCUMENTS)]
    assert all(r["status"] == "ok" for r in rows)
    marker = json.loads((out / "_state/extract/done-00000-of-00001.json").read_text())
    return dict(marker["look_ahead"])


def test_the_pages_waiting_for_a_slot_go_out_longest_first(tmp_path: Path, docs: Path) -> None:
    out = tmp_path / "out"
    with SimulatedServer("--prefill-ms", "0", corpus=docs) as server:
        held_at = hold_request(server, after=0)
        process = start_extract(docs, out, server, "--look-ahead", "16")
        wait_until_held(server, held_at, process)
        # Every other page rendered and waiting for the one slot.
        wait_until(lambda: waiting(out) == DOCUMENTS - 1, "the other nine pages wait in the look-ahead",
                   process=process)
        server.release()
        look_ahead = finish(process, out)
        order = sent_order(server)
    first, rest = order[0], order[1:]
    # The text grows with the document's number: longest first is the numbers going down.
    assert rest == sorted(set(range(DOCUMENTS)) - {first}, reverse=True), order
    assert look_ahead["pages"] == 16 and look_ahead["peak_pages"] == DOCUMENTS - 1 and look_ahead["waiting"] == 0


def test_a_page_beyond_the_look_ahead_waits_its_turn(tmp_path: Path, docs: Path) -> None:
    out = tmp_path / "out"
    window = 3
    with SimulatedServer("--prefill-ms", "0", corpus=docs) as server:
        held_at = hold_request(server, after=0)
        # The PDFs not read ahead (--estimate-ahead 0): what is measured is the look-ahead's own reach.
        process = start_extract(docs, out, server, "--look-ahead", str(window), "--estimate-ahead", "0")
        wait_until_held(server, held_at, process)
        wait_until(lambda: waiting(out) == window, "the look-ahead filled", process=process)
        server.release()
        look_ahead = finish(process, out)
        order = sent_order(server)
    assert sorted(order) == list(range(DOCUMENTS))
    # At most `window` pages wait (one-page documents: a chunk is one page), so the k-th request
    # is at most the (k + window - 1)-th page of the input: the longest, last, goes out late.
    assert look_ahead["peak_pages"] == window
    assert all(doc <= k + window - 1 for k, doc in enumerate(order)), order
    assert order.index(DOCUMENTS - 1) >= DOCUMENTS - window
    # Within the window the longest still goes first: the page sent right after the held one is
    # the longest of those waiting then, never the shortest.
    assert order[1] > min(set(range(window + 1)) - {order[0]}), order


def test_the_look_ahead_stops_taking_pages_at_its_size_in_megabytes(tmp_path: Path, docs: Path) -> None:
    out = tmp_path / "out"
    # A 144 DPI JPEG of these pages is 100-400 KB: 0.4 MiB holds one to three of them.
    with SimulatedServer("--prefill-ms", "0", corpus=docs) as server:
        held_at = hold_request(server, after=0)
        process = start_extract(docs, out, server, "--look-ahead", "100", "--look-ahead-mb", "0.4")
        wait_until_held(server, held_at, process)
        wait_until(lambda: progress(out).get("look_ahead", {}).get("peak_mb", 0) >= 0.4,
                   "the look-ahead reached its size", process=process)
        held = progress(out)["look_ahead"]
        server.release()
        look_ahead = finish(process, out)
        sizes = [r["body"]["messages"][0]["content"][0]["image_url"]["url"]["bytes"] for r in server.requests()]
    biggest = max(sizes) / 2**20
    # Pages are taken in while less than 0.4 MiB waits: at most one page more than that.
    assert held["waiting"] < DOCUMENTS - 1 and look_ahead["mb"] == 0.4
    assert 0.4 <= look_ahead["peak_mb"] < 0.4 + biggest + 0.01, (look_ahead, biggest)
    assert look_ahead["peak_pages"] < DOCUMENTS - 1
