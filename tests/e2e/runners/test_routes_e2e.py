"""The text-layer route end to end (docs/routes.md): ``llm-ocr extract --route text-layer`` against
the simulated model and the CPU engine that lays text-layer pages out, as users run it.

A born-digital page whose text layer is sound gets its row from that layer and sends the model
nothing; a scan, a page whose layer is Caesar-shifted and an image go to the model, each with
the reason in ``route_note``. Without the ``cpu`` extra the route stops before any request.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pypdfium2
import pytest

from llm_ocr.testing import OFFLINE_ENV, CpuServer, SimulatedServer
from tests.conftest import REPO, read_stage, run_cli
from tests.docs import make_pdf, make_shifted_pdf, paragraph

FAST = ("--workers", "0", "--progress", "log")


@pytest.fixture(scope="module")
def layout_engine() -> Iterator[CpuServer]:
    pytest.importorskip("rapidocr")
    with CpuServer("--threads", "1", "--max-model-len", "262144", offline=True, startup_timeout=300) as server:
        yield server


def _scan(original: Path, target: Path) -> None:
    """An image-only PDF of ``original``'s first page (no text layer)."""
    pdf = pypdfium2.PdfDocument(str(original))
    image = pdf[0].render(scale=2).to_pil().convert("L")
    pdf.close()
    image.save(target, "PDF", resolution=144)


def _words(text: str) -> set[str]:
    return {w.lower() for w in re.findall(r"\w+", text)}


@pytest.fixture
def mixed(tmp_path: Path) -> tuple[Path, dict[str, list[list[str]]]]:
    """A born-digital PDF (2 pages, a chart on page 1), its scan, a PDF whose layer is shifted."""
    docs = tmp_path / "docs"
    docs.mkdir()
    truth = {"born.pdf": make_pdf(docs / "born.pdf", pages=2, seed=4)}
    make_pdf(tmp_path / "original.pdf", pages=1, seed=5)
    _scan(tmp_path / "original.pdf", docs / "scan.pdf")
    import random

    rng = random.Random(6)
    make_shifted_pdf(docs / "shifted.pdf", [[paragraph(rng, 10) for _ in range(8)]])
    return docs, truth


def test_a_sound_born_digital_page_is_read_from_its_text_layer_and_sends_no_request(
    mixed: tuple[Path, dict[str, list[list[str]]]], layout_engine: CpuServer, tmp_path: Path
) -> None:
    docs, truth = mixed
    out = tmp_path / "out"
    with SimulatedServer(corpus=docs, request_log=True) as model:
        result = run_cli("extract", str(docs), "--output", str(out), "--endpoint", model.base_url, "--route",
                         "text-layer", "--route-endpoint", layout_engine.base_url, *FAST, timeout=300)
        sent = [r for r in model.requests() if r.get("status") == 200]
    assert result.returncode == 0, result.stderr
    rows = {(r["doc_id"], r["page"]): r for r in read_stage(out, "extract")}
    assert sorted(rows) == [("born.pdf", 1), ("born.pdf", 2), ("scan.pdf", 1), ("shifted.pdf", 1)]
    for page in (1, 2):
        row = rows[("born.pdf", page)]
        assert row["route"] == "text-layer" and row["model"] is None and row["status"] == "ok", row["route_note"]
        assert row["prompt_tokens"] is None and "laid out by the CPU engine" in row["route_note"]
        expected = {w.lower() for line in truth["born.pdf"][page - 1] for w in re.findall(r"\w+", line)}
        assert expected <= _words(row["markdown"])  # every word of the page, from its own text layer
        assert row["markdown"].startswith(f"# Section 4.{page}")  # laid out: the heading is one
        assert row["text_estimate"] and row["text_estimate"] > 200
    # The model was sent the scan and the page with a shifted layer, never a born-digital page.
    assert len(sent) == 2
    assert not [r for r in sent if "born.pdf" in str((r.get("known_page") or {}).get("source"))]
    assert rows[("scan.pdf", 1)]["route"] == "model"
    assert "no PDF text layer" in rows[("scan.pdf", 1)]["route_note"]
    assert rows[("shifted.pdf", 1)]["route"] == "model"
    assert "dictionary words" in rows[("shifted.pdf", 1)]["route_note"]
    # The completion marker counts the pages by route; llm-ocr status shows them.
    status = run_cli("status", str(out))
    assert "routes (finished shards): model 2, text-layer 2" in status.stdout, status.stdout


def test_without_the_cpu_extra_the_route_stops_before_any_request(
    mixed: tuple[Path, dict[str, list[list[str]]]], tmp_path: Path
) -> None:
    docs, _ = mixed
    out = tmp_path / "out"
    # The cpu extra absent: `import rapidocr` fails, as in an install without it.
    hide = "import sys; sys.modules['rapidocr'] = None; from llm_ocr.cli import main; sys.exit(main())"
    with SimulatedServer(corpus=docs, request_log=True) as model:
        result = subprocess.run(
            [sys.executable, "-c", hide, "extract", str(docs), "--output", str(out), "--endpoint", model.base_url,
             "--route", "text-layer", *FAST],
            capture_output=True, text=True, timeout=120, cwd=str(REPO), env={**OFFLINE_ENV, **_path_env()},
        )  # fmt: skip
        assert model.requests() == []
    assert result.returncode == 2, result.stderr
    assert "pip install 'llm-ocr[cpu]'" in result.stderr and "--route-endpoint" in result.stderr
    assert not list((out / "extract").glob("*.parquet"))


def _path_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "PYTHONPATH", "VIRTUAL_ENV", "TMPDIR")}
