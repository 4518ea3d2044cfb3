"""The Python API: ``llm_ocr.run`` and friends in this process, in a script and inside a running
event loop (Jupyter's), interrupted and resumed; its options checked before any work."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from PIL import Image

import llm_ocr
from llm_ocr.testing import SimulatedServer
from tests.conftest import REPO, read_stage
from tests.docs import make_corpus
from tests.waiting import HANG_GUARD_S, hold_request, wait_until, wait_until_held

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


# -- interrupted inside Jupyter, resumed -----------------------------------------------------------


def test_interrupting_a_run_in_a_notebook_stops_it_cleanly_and_running_it_again_resumes(tmp_path: Path) -> None:
    """A real Jupyter kernel runs ``llm_ocr.run`` in a cell (its event loop is running), with
    a server the run launches itself; the kernel is interrupted mid-run, as the stop button does.
    The cell ends with KeyboardInterrupt once the parts are written and the server is stopped;
    running the cell again finishes the rest, and every page is in each stage exactly once."""
    jupyter_client = pytest.importorskip("jupyter_client")
    pytest.importorskip("ipykernel")
    corpus, out = tmp_path / "docs", tmp_path / "out"
    make_corpus(corpus, documents=4, pages=4)
    expected = sorted((f"doc{d:03d}.pdf", p) for d in range(4) for p in range(1, 5))
    # A slow simulated server (launched by the run: --engine sim), one request at a time: the
    # run takes a minute, and is interrupted after its first pages.
    options = dict(engine="sim", server_args="--prefill-ms 1000 --slots 1", workers=0, max_in_flight=1,
                   flush_interval=0.2, part_rows=1, grace_period=30)
    cell = f"import llm_ocr\nresult = llm_ocr.run({str(corpus)!r}, output={str(out)!r}, **{options!r})\nresult.exit_code"
    km, kc = jupyter_client.manager.start_new_kernel(kernel_name="python3", cwd=str(REPO))
    try:
        kernel = psutil.Process(km.provisioner.process.pid)
        first = kc.execute(cell)
        deadline = time.monotonic() + 240
        while not list((out / "extract").glob("*.parquet")):  # some pages are stored: mid-run
            assert time.monotonic() < deadline, "the run stored nothing"
            time.sleep(0.1)
        assert _servers(kernel), "the run's simulated server should be running"
        km.interrupt_kernel()
        reply = _reply(kc, first, timeout=120)
        assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt", reply["content"]
        assert not _servers(kernel), "the server outlived the interrupted run"
        interrupted = pages_of(out, "extract")
        assert interrupted and len(interrupted) < len(expected)  # stopped part-way, what was done is kept
        assert len(set(interrupted)) == len(interrupted)

        second = kc.execute(cell)
        reply = _reply(kc, second, timeout=300)
        assert reply["content"]["status"] == "ok", reply["content"]
        assert _last_result(kc, second) == "0"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    for stage in ("extract", "describe"):
        assert pages_of(out, stage) == expected, stage  # every page exactly once
    assert sorted(d["doc_id"] for d in read_stage(out, "assemble")) == [f"doc{d:03d}.pdf" for d in range(4)]


def _servers(kernel: psutil.Process) -> list[psutil.Process]:
    found = []
    for child in kernel.children(recursive=True):
        try:
            if "llm_ocr.engines.sim" in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.Error:
            continue
    return found


def _reply(kc, msg_id: str, timeout: float) -> dict:  # type: ignore[no-untyped-def]
    """The shell reply to request ``msg_id`` (earlier replies, e.g. to kernel_info, are skipped)."""
    deadline = time.monotonic() + timeout
    while True:
        reply = kc.get_shell_msg(timeout=max(1.0, deadline - time.monotonic()))
        if reply["parent_header"].get("msg_id") == msg_id:
            return reply


def _last_result(kc, msg_id: str) -> str:  # type: ignore[no-untyped-def]
    """The cell's value (its last expression), from the kernel's output messages."""
    while True:
        msg = kc.get_iopub_msg(timeout=30)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "execute_result":
            return str(msg["content"]["data"]["text/plain"])
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return ""


def test_a_script_interrupted_with_ctrl_c_stops_cleanly_and_resumes(corpus: Path, tmp_path: Path) -> None:
    """Ctrl-C in a script (no event loop) stops intake, finishes the pages in flight, writes
    the parts and raises KeyboardInterrupt; running it again resumes to every page once."""
    out = tmp_path / "out"
    # The server holds the run's second request until its client lets go, so the run cannot
    # finish before the Ctrl-C however slow the machine: the interrupt lands mid-run for certain.
    # The held page is in flight when Ctrl-C comes; the grace period lets it go after 2 s.
    with SimulatedServer("--instant", corpus=corpus) as held:
        script = textwrap.dedent(f"""
            import json, llm_ocr
            try:
                result = llm_ocr.run({str(corpus)!r}, output={str(out)!r}, endpoint={held.base_url!r},
                                     workers=0, max_in_flight=2, flush_interval=0.2, part_rows=1, grace_period=2)
            except KeyboardInterrupt:
                print("interrupted", flush=True)
            else:
                print(json.dumps(result.pages), flush=True)
        """)
        held_at = hold_request(held, after=1)
        process = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        try:
            wait_until_held(held, held_at, process)
            wait_until(lambda: list((out / "extract").glob("*.parquet")), "a part was stored", process=process)
            process.send_signal(signal.SIGINT)  # as Ctrl-C
            stdout, stderr = process.communicate(timeout=HANG_GUARD_S)
        finally:
            if process.poll() is None:
                process.kill()
        assert process.returncode == 0 and stdout.strip() == "interrupted", stderr[-3000:]
        assert "Traceback" not in stderr
        interrupted = pages_of(out, "extract")
        assert 0 < len(interrupted) < len(EXPECTED) and len(set(interrupted)) == len(interrupted)
        again = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True,
                               timeout=HANG_GUARD_S)
    counts = json.loads(again.stdout.strip().splitlines()[-1])
    assert counts["skipped"] > 0 and counts["skipped"] + counts["ok"] == len(EXPECTED), again.stderr[-3000:]
    for stage in ("extract", "describe"):
        assert pages_of(out, stage) == EXPECTED, stage
