"""The CPU engine as one server for the session (per test worker): its models take seconds to
load, and every module that reads pages with it shares it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from llm_ocr.testing import CpuServer


@pytest.fixture(scope="session")
def cpu_engine() -> Iterator[CpuServer]:
    """The CPU engine (one worker thread, offline: a download attempt would fail)."""
    pytest.importorskip("rapidocr")
    with CpuServer("--threads", "1", offline=True) as server:
        yield server
