"""The Python API: ``llm_ocr.run`` and friends in this process, in a script and inside a running
event loop; its options checked before any work. Interrupted and resumed in a Jupyter kernel and
in a script (processes of their own): tests/e2e/api/test_api_interrupts.py."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

import llm_ocr
from llm_ocr.testing import SimulatedServer
from tests.conftest import REPO, read_stage
from tests.docs import make_corpus

FAST = {"workers": 0, "progress": "off"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 PDFs x 3 pages, a chart on pages 1 and 3."""
    folder = tmp_path_factory.mktemp("api") / "docs"
    make_corpus(folder, documents=2, pages=3)
    return folder


@pytest.fixture(scope="module")
def server(corpus: Path) -> SimulatedServer:
    with SimulatedServer("--instant", corpus=corpus) as sim:
        yield sim


def pages_of(out: Path, stage: str) -> list[tuple[str, int]]:
    return sorted((r["doc_id"], r["page"]) for r in read_stage(out, stage))


EXPECTED = sorted((f"doc{d:03d}.pdf", p) for d in range(2) for p in range(1, 4))


def test_importing_the_package_imports_nothing_else() -> None:
    code = "import sys, llm_ocr; print(sorted(m for m in sys.modules if m.startswith(('llm_ocr', 'pydantic', 'pyarrow', 'datasets'))))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True).stdout
    assert loaded.strip() == "['llm_ocr']"


def test_run_in_a_script_and_inside_a_running_loop_then_load(corpus: Path, server: SimulatedServer, tmp_path: Path) -> None:
    result = llm_ocr.run(corpus, output=tmp_path / "a", endpoint=server.base_url, **FAST)
    assert result.exit_code == 0 and result.ok
    assert result.pages["ok"] == 6 and result.pages["skipped"] == 0
    assert result.documents == {"ok": 2, "partial": 0, "error": 0, "skipped": 0}
    assert pages_of(tmp_path / "a", "extract") == pages_of(tmp_path / "a", "describe") == EXPECTED

    async def notebook_cell() -> llm_ocr.Result:
        # What a notebook does: a plain (synchronous) call while the kernel's loop is running.
        return llm_ocr.run(str(corpus), output=str(tmp_path / "b"), endpoint=server.base_url, **FAST)

    inside = asyncio.run(notebook_cell())
    assert inside.exit_code == 0 and pages_of(tmp_path / "b", "describe") == EXPECTED
    sent = len(server.requests())
    again = asyncio.run(llm_ocr.arun(corpus, tmp_path / "b", endpoint=server.base_url, **FAST))
    # A finished output: nothing is sent again, and the counts are those its markers hold.
    assert again.exit_code == 0 and again.pages["ok"] == 6 and len(server.requests()) == sent
    assert pages_of(tmp_path / "b", "describe") == EXPECTED

    pages = llm_ocr.load(tmp_path / "a", "describe")
    assert sorted(zip(pages["doc_id"], pages["page"])) == EXPECTED
    figures = [f for row in pages for f in row["figures"]]
    assert len(figures) == 4 and all(isinstance(f["image"], Image.Image) and f["description"] for f in figures)
    documents = llm_ocr.load(tmp_path / "a")
    assert sorted(documents["doc_id"]) == ["doc000.pdf", "doc001.pdf"]


def test_the_stages_one_at_a_time(corpus: Path, server: SimulatedServer, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert llm_ocr.extract([corpus], out, endpoint=server.base_url, **FAST).pages["ok"] == 6
    described = llm_ocr.describe(out, endpoint=server.base_url, progress="off")
    assert described.exit_code == 0 and described.stats["figures"]["described"] == 4
    assembled = llm_ocr.assemble(out, export_markdown=True)
    assert assembled.documents["ok"] == 2 and len(list((out / "markdown").glob("*.md"))) == 2
    # The exit code is an int that names its meaning, as the command line's exit status.
    assert assembled.exit_code == 0 and assembled.exit_code.name == "OK" and json.dumps(assembled.exit_code) == "0"
    assert assembled.meaning == "every page ok or truncated" and "exit code 0 (every page ok" in str(assembled)


def test_a_misspelt_or_bad_option_fails_before_any_work(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(llm_ocr.OptionError, match="did you mean 'max_in_flight'"):
        llm_ocr.run(corpus, output=out, max_inflight=8)
    with pytest.raises(llm_ocr.OptionError, match="max_in_flight"):
        llm_ocr.run(corpus, output=out, max_in_flight=0)
    with pytest.raises(llm_ocr.OptionError, match="image_format"):
        llm_ocr.extract(corpus, out, image_format="gif")
    with pytest.raises(llm_ocr.OptionError, match="has no option 'dpi'"):
        llm_ocr.assemble(out, dpi=300)  # an option of another stage
    assert not out.exists()  # nothing ran, nothing was written


def test_a_run_that_cannot_run_raises_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(llm_ocr.RunError, match=r"input not found: .*missing"):
        llm_ocr.run(tmp_path / "missing", output=tmp_path / "out", endpoint="http://127.0.0.1:9/v1", **FAST)
    assert not (tmp_path / "out").exists()  # the INPUT is checked before anything is written


def test_the_keyword_types_are_those_the_generator_writes_now() -> None:
    """llm_ocr/keywords.py is generated from the stage table and the option models: running the
    generator, as a maintainer does, must write exactly the file the package ships."""
    done = subprocess.run([sys.executable, "scripts/keyword_types.py"], capture_output=True, text=True, cwd=REPO,
                          timeout=120, check=True)
    written = (REPO / "llm_ocr" / "keywords.py").read_text(encoding="utf-8")
    assert written == done.stdout, "llm_ocr/keywords.py is stale: python scripts/keyword_types.py > llm_ocr/keywords.py"
