"""The end-to-end tier: tests that run the ``llm-ocr`` command as a subprocess, launch jobs on a
platform (real or fake), start a cluster, or execute a notebook. Every test under this folder is
marked ``e2e`` (docs/testing.md#tiers): ``./scripts/test`` runs them with the rest, and
``-m "not e2e"`` leaves them out for the inner loop."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test collected from this folder ``e2e``."""
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.e2e)
