"""The skip policy (tests/skip_policy.py) in pytest runs of its own, with and without pytest-xdist."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

CONFTEST = """
from tests.skip_policy import AllowedSkip, register

def pytest_configure(config):
    register(config, allowed=(AllowedSkip("test_allowed.py", "needs a token", why="a test of the policy"),))
"""
ALLOWED = """
import pytest
pytestmark = pytest.mark.skipif(True, reason="needs a token")
def test_allowed():
    pass
"""
# A module-level skip (reported at collection) and a skip inside a test (reported by the test).
MISSING_MODULE = """
import pytest
pytest.importorskip("llm_ocr_no_such_module")
def test_never_collected():
    pass
"""
SKIPS_INSIDE = """
import pytest
def test_passes():
    pass
def test_skips():
    pytest.skip("chromium is not on PATH")
"""


def _run(folder: Path, *args: str, ci: bool) -> subprocess.CompletedProcess[str]:
    # Not the outer run's own variables (CI, the tier's, and PYTEST_* such as the outer
    # pytest-xdist worker's PYTEST_XDIST_WORKER): the inner run is a session of its own.
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "LLM_OCR_IN_VLLM_TIER") and not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = str(REPO)
    if ci:
        env["CI"] = "true"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *args],
        cwd=folder, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_allowed.py").write_text(ALLOWED)
    (tmp_path / "test_missing_module.py").write_text(MISSING_MODULE)
    (tmp_path / "test_skips_inside.py").write_text(SKIPS_INSIDE)
    return tmp_path


# One pytest-xdist worker is enough to show that skips reported on a worker reach the controller's
# policy; CI once saw a two-worker inner run hang after its last test (its 120 s ran out).
@pytest.mark.parametrize("workers", ["0", "1"])
def test_under_ci_a_skip_off_the_allow_list_fails_the_run_and_is_named(suite: Path, workers: str) -> None:
    result = _run(suite, "-n", workers, ci=True)
    assert result.returncode == 1, result.stdout
    listed = result.stdout.split("skips not allowed in CI (CI=true): the run fails", 1)[1].split("short test summary")[0]
    assert "test_missing_module.py: Skipped: could not import 'llm_ocr_no_such_module'" in listed
    assert "test_skips_inside.py::test_skips: Skipped: chromium is not on PATH" in listed
    assert "test_allowed.py" not in listed
    assert "1 passed, 3 skipped" in result.stdout


def test_allowed_skips_pass_in_ci_and_any_skip_passes_outside_it(suite: Path) -> None:
    assert _run(suite, "-n", "0", "test_allowed.py", "test_skips_inside.py::test_passes", ci=True).returncode == 0
    outside = _run(suite, "-n", "0", ci=False)
    assert outside.returncode == 0, outside.stdout
    assert "skips not allowed" not in outside.stdout
