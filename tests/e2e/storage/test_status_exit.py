"""``llm-ocr status`` exits 0 after its report, however late Arrow's threads run.

It used to abort now and then after printing (``terminate called without an active exception``,
exit 134): Arrow read each part through a Python file object, and a thread of Arrow's pools that
dropped the last reference to what it read (a ``PyBuffer`` holding Python's ``bytes``) asked for
the GIL; when that came after the interpreter had begun to shut down, CPython 3.11 ended the
thread with ``pthread_exit``, whose unwinding through ``std::thread`` aborts the process
(python/cpython#87135, apache/arrow#34314). ``storage.parts.parquet_file`` now gives Arrow a copy
it owns: its threads never need the GIL.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import REPO

SHIM = REPO / "tests" / "fixtures" / "slow_gil.c"


def _slow_gil_library(tmp_path: Path) -> Path:
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None or not sys.platform.startswith("linux"):
        pytest.skip("needs Linux and a C compiler (cc) to build tests/fixtures/slow_gil.c")
    library = tmp_path / "slow_gil.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(library), str(SHIM), "-ldl"], check=True,
                   capture_output=True, timeout=120)
    return library


def test_status_exits_0_after_its_report_however_late_arrow_threads_run(tmp_path: Path) -> None:
    """Each run is made as unlucky as a busy machine can make it: the process has one CPU, and
    every GIL request from a thread Python did not start (Arrow's pools) first waits 50 ms, as a
    thread that lost its CPU would (``tests/fixtures/slow_gil.c``, preloaded).

    Before the fix, measured on a 2-core machine at load ~20 (``llm-ocr status`` over one part,
    one process at a time): 16 of 44 runs aborted with exit 134, p ~ 0.36 (without the delay, 0
    of ~500 runs here; the issue saw 3 in 177). 12 runs miss a p = 0.36 failure with probability
    0.64**12 ~ 0.5% (2% even at p = 0.28), for ~12 CPU-seconds. Independently of chance, every
    one of those runs had Arrow's threads ask for the GIL (the cause), which the shim's log
    shows; after the fix none does, so this also fails on the first run of the old code.
    """
    library = _slow_gil_library(tmp_path)
    out = tmp_path / "out"
    (out / "extract").mkdir(parents=True)
    pq.write_table(pa.table({"doc_id": [f"d{i}.pdf" for i in range(50)], "page": [1] * 50, "status": ["ok"] * 50,
                             "quarantined": [False] * 50}), out / "extract" / "part-00000-of-00001-000000.parquet")
    cpu = min(os.sched_getaffinity(0))
    runs = 12
    for run in range(runs):
        log = tmp_path / f"gil-{run}.log"
        result = subprocess.run(
            [sys.executable, "-m", "llm_ocr.cli", "status", str(out)], capture_output=True, text=True, timeout=120,
            env={**os.environ, "LD_PRELOAD": str(library), "SLOW_GIL_LOG": str(log), "SLOW_GIL_US": "50000"},
            preexec_fn=lambda: os.sched_setaffinity(0, {cpu}), cwd=REPO,
        )
        lines = log.read_text().splitlines()
        if lines[:1] != ["interposed"]:
            pytest.skip(f"the shim cannot stand in for this Python's PyGILState_Ensure ({lines[:1]})")
        assert result.returncode == 0, f"run {run + 1} of {runs}: {result.stderr[-500:]}"
        assert "extract: 50 pages = ok 50" in result.stdout
        assert lines[1:] == [], f"run {run + 1}: Arrow's threads asked for the GIL {len(lines) - 1} times"
