"""``llm_ocr.run`` run every way people run Python: a script file with and without an
``if __name__ == "__main__":`` guard, a script on standard input, ``python -c``, the REPL and a
Jupyter notebook, and the README's own example as a script file.

Each is a real interpreter in a subprocess (pytest's own main module hides what a user's does:
the render workers once ran a guard-less script again, and a script from stdin not at all). The
user's code appends a line to a file as it runs: exactly one line proves it ran once, in the
user's process only, its render worker included (``workers=1``: one worker process that ran the
user's code again would add a line as surely as two would, for an interpreter start less). The
run must also succeed: exit code 0 and both pages of the PDF in the Parquet output.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO, read_stage

PDF = REPO / "samples" / "report.pdf"  # two pages, a chart on the first
PAGES = [("report.pdf", 1), ("report.pdf", 2)]
TIMEOUT = 240  # for a hang; a run takes seconds


def user_code(tmp_path: Path) -> str:
    """What the user runs: note the run in ``ran.txt``, run (the simulated server, one render
    worker process), print the exit code. No compound statement, so the REPL takes it as it is."""
    shutil.copy(PDF, tmp_path / "report.pdf")
    return textwrap.dedent(f"""\
        import llm_ocr
        open({str(tmp_path / 'ran.txt')!r}, "a").write("ran\\n")
        result = llm_ocr.run({str(tmp_path / 'report.pdf')!r}, output={str(tmp_path / 'out')!r},
                             engine="sim", workers=1, progress="off")
        print("exit code", result.exit_code)
    """)


def assert_ran_once_and_succeeded(tmp_path: Path, shown: str) -> None:
    """The user's code ran once (one line in ``ran.txt``), printed exit code 0, and every page
    of the PDF is in Extract's and Describe's Parquet output."""
    assert (tmp_path / "ran.txt").read_text().splitlines() == ["ran"], shown[-3000:]
    assert re.findall(r"exit code \d+", shown) == ["exit code 0"], shown[-3000:]
    for stage in ("extract", "describe"):
        rows = read_stage(tmp_path / "out", stage)
        assert sorted((r["doc_id"], r["page"]) for r in rows) == PAGES, stage
        assert all(r["status"] == "ok" for r in rows), rows


def python(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """This interpreter, run as a user runs it in ``cwd`` (not the repository)."""
    done = subprocess.run([sys.executable, *args], cwd=cwd, input=stdin, capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_a_script_without_the_main_guard(tmp_path: Path) -> None:
    (tmp_path / "ocr.py").write_text(user_code(tmp_path))
    done = python("ocr.py", cwd=tmp_path)
    assert_ran_once_and_succeeded(tmp_path, done.stdout + done.stderr)


def test_a_script_with_the_main_guard_runs_its_top_level_once_too(tmp_path: Path) -> None:
    # The top level of a guarded script (imports, a model loaded, ...) used to run again in
    # every worker; only the guarded block was safe.
    import_line, note, *run = user_code(tmp_path).splitlines()  # the run and the print: guarded
    guarded = "\n".join([import_line, note, 'if __name__ == "__main__":', *(f"    {line}" for line in run)])
    (tmp_path / "ocr.py").write_text(guarded + "\n")
    done = python("ocr.py", cwd=tmp_path)
    assert_ran_once_and_succeeded(tmp_path, done.stdout + done.stderr)


def test_a_script_on_standard_input(tmp_path: Path) -> None:
    done = python("-", cwd=tmp_path, stdin=user_code(tmp_path))
    assert_ran_once_and_succeeded(tmp_path, done.stdout + done.stderr)


def test_python_dash_c(tmp_path: Path) -> None:
    done = python("-c", user_code(tmp_path), cwd=tmp_path)
    assert_ran_once_and_succeeded(tmp_path, done.stdout + done.stderr)


def test_the_interactive_interpreter(tmp_path: Path) -> None:
    # python -i reads its statements from stdin one at a time, as typed at the >>> prompt.
    done = python("-i", cwd=tmp_path, stdin=user_code(tmp_path))
    assert "Traceback" not in done.stderr, done.stderr[-3000:]  # the REPL carries on after an error
    assert_ran_once_and_succeeded(tmp_path, done.stdout + done.stderr)


def test_a_jupyter_notebook(tmp_path: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(user_code(tmp_path))])
    nbclient.NotebookClient(notebook, timeout=TIMEOUT, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = notebook.cells[0].outputs
    assert not [o for o in outputs if o.output_type == "error"], outputs
    shown = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert_ran_once_and_succeeded(tmp_path, shown)


def readme_example() -> str:
    """The first Python block of the README's "From Python" section, as it is written."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## From Python\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "the README's From Python section has no Python example"
    return match.group(1)


def test_the_readme_example_saved_as_a_script(tmp_path: Path) -> None:
    """The README's example, saved as ocr.py in a copy of the repository's samples and run as
    ``python ocr.py``: real OCR with the CPU engine, as the README says."""
    code = readme_example()
    assert 'engine="cpu"' in code and "__main__" not in code, code  # the plain script that used to crash
    (tmp_path / "samples").mkdir()
    shutil.copy(PDF, tmp_path / "samples" / "report.pdf")
    (tmp_path / "ocr.py").write_text(code)
    done = python("ocr.py", cwd=tmp_path)
    # It prints once: a worker running the script again would print too (to stdout or stderr).
    printed = re.findall(r"^0 \{'ok': 2, .*\}$", done.stdout + "\n" + done.stderr, re.M)
    assert printed == ["0 {'ok': 2, 'truncated': 0, 'error': 0, 'quarantined': 0, 'skipped': 0}"], done.stderr[-3000:]
    for stage in ("extract", "describe"):
        assert sorted((r["doc_id"], r["page"]) for r in read_stage(tmp_path / "out", stage)) == PAGES, stage
