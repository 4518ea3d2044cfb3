"""notebooks/quickstart.ipynb, executed headlessly as a user would run it top to bottom."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.installed import skip_module_unless_installed

skip_module_unless_installed("nbformat", "nbclient")

REPO = Path(__file__).resolve().parents[3]
NOTEBOOK = REPO / "notebooks" / "quickstart.ipynb"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def _copy_of_the_repository(root: Path) -> Path:
    """What the notebook reads, and the repository's .gitignore, committed in a git repository
    of their own: the notebook writes where it would in a clone, without touching this one."""
    for name in ("samples", "examples", "notebooks"):
        shutil.copytree(REPO / name, root / name)
    shutil.copy(REPO / ".gitignore", root / ".gitignore")
    _git(root.parent, "init", "-q", str(root))
    _git(root, "add", "-A")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "copy")
    return root


def test_quickstart_notebook_runs_the_pipeline_and_shows_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = _copy_of_the_repository(tmp_path / "repo")
    out = repo / "out" / "quickstart"  # where the notebook writes by default
    # The kernel inherits this environment: the notebook's repository is the copy.
    monkeypatch.delenv("LLM_OCR_NOTEBOOK_OUT", raising=False)
    monkeypatch.setenv("LLM_OCR_REPO", str(repo))
    import nbclient
    import nbformat

    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(repo / "notebooks")}}
    )
    client.execute()  # raises CellExecutionError, with the cell and traceback, if a cell fails
    # Everything it wrote is under a folder the repository's .gitignore covers.
    assert _git(repo, "status", "--porcelain", "--untracked-files=all") == ""
    assert (out / "assemble").is_dir()

    # What the notebook ran really produced the three stages and the human exports.
    documents = pq.read_table(sorted((out / "assemble").glob("*.parquet"))).to_pylist()
    assert sorted(d["doc_id"] for d in documents) == sorted(p.name for p in (REPO / "samples").iterdir())
    assert all(d["status"] == "ok" for d in documents)
    captioned = [f for d in documents for f in d["figures"] if f["description"]]
    assert captioned, "the sample PDF has figures; Describe should have captioned them"
    # Described by the CPU engine from what it read on the page, not a simulator's placeholder text.
    assert any(f["description"].startswith("Caption: Figure 1") for f in captioned), captioned
    assert (out / "report.html").stat().st_size > 10_000
    assert list((out / "markdown").glob("*.md"))

    # The display helpers' output is what the cells show: HTML with the page image inlined.
    html_outputs = [
        o["data"]["text/html"]
        for cell in notebook.cells
        if cell.cell_type == "code"
        for o in cell.get("outputs", [])
        if "text/html" in o.get("data", {})
    ]
    assert len(html_outputs) >= 4  # summary, show_document, show_page, show_fields
    # The fields table: every sample has a row, and the invoices' values are those printed on them.
    import json

    fields = {r["doc_id"]: r for r in pq.read_table(sorted((out / "fields").glob("*.parquet"))).to_pylist()}
    assert sorted(fields) == sorted(p.name for p in (REPO / "samples").iterdir())
    truth = json.loads((REPO / "examples" / "fields-truth.json").read_text())
    for doc_id, expected in truth.items():
        assert (fields[doc_id]["class"], json.loads(fields[doc_id]["fields"])) == (expected["class"], expected["fields"])
    assert {fields[d]["class"] for d in ("report.pdf", "notes.png")} == {"other"}
    assert any("check failed: line items sum to the subtotal" in h for h in html_outputs)  # show_fields of the misprint
    assert any("data:image/" in h for h in html_outputs)
    assert not any(o.get("output_type") == "error" for c in notebook.cells for o in c.get("outputs", []))

    # The notebook runs the pipeline through the Python API in its own kernel, not the CLI in a
    # subprocess; the run shows a progress bar, not log lines.
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert not any("subprocess" in cell.source or "llm_ocr.cli" in cell.source for cell in code)
    run_cell = next(cell for cell in code if "llm_ocr.run(" in cell.source)
    shown = "".join(o.get("text", "") for o in run_cell.get("outputs", []) if o.get("output_type") == "stream")
    assert "page" in shown and "100%" in shown, shown  # the bar, complete
    assert "pages seen" not in shown and "INFO" not in shown, shown

    # The cascade (section 7): the born-digital PDFs read from their text layer, the scan and the
    # image by the weak model, the garbled scan page read again by the strong one.
    cascade = out.parent / "quickstart-cascade"
    parts = sorted((cascade / "escalate").glob("*.parquet"))
    rows = {(r["doc_id"], r["page"]): r for r in pq.read_table(parts).to_pylist()}
    pdfs = [p.name for p in (REPO / "samples").glob("*.pdf")]
    assert {rows[key]["route"] for key in rows if key[0] in pdfs} == {"text-layer"}
    assert rows[("report-scan.pdf", 2)]["route"] == "escalated"
    assert rows[("report-scan.pdf", 2)]["model"] == "allenai/olmOCR-2-7B-1025"
    assert rows[("report-scan.pdf", 1)]["route"] == "model"  # read well the first time: not escalated
    assembled = {d["doc_id"]: d for d in pq.read_table(sorted((cascade / "assemble").glob("*.parquet"))).to_pylist()}
    assert "cheapest page is often on the smallest GPU" in assembled["report-scan.pdf"]["markdown"]
