"""Shared fixtures: the CLI as a subprocess, and Parquet output readers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parent.parent


def run_cli(*args: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``llm-ocr ARGS`` in a subprocess, as a user would."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "llm_ocr.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=str(REPO),
    )


def read_stage(out: Path, stage: str) -> list[dict[str, Any]]:
    """Every row of a stage folder, in file then row order."""
    rows: list[dict[str, Any]] = []
    for path in sorted((out / stage).glob("*.parquet")):
        rows.extend(pq.read_table(path).to_pylist())
    return rows


@pytest.fixture
def cli():
    """The ``run_cli`` helper as a fixture."""
    return run_cli
