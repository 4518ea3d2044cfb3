"""The packaging tier: what pip and uv do with llm-ocr against the real package index (PyPI).

These tests install packages from the index, so they need the network: they run only in the
tier (``scripts/test-packaging``, which ``scripts/test`` runs in the background beside the
default suite) and skip elsewhere; tests/skip_policy.py allows that skip outside the tier only.
"""

from __future__ import annotations

import os

import pytest

from tests.skip_policy import PACKAGING_TIER_VARIABLE as TIER_VARIABLE


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(TIER_VARIABLE):
        return
    skip = pytest.mark.skip(reason="needs the package index: run in the packaging tier (scripts/test-packaging)")
    for item in items:
        if item.nodeid.startswith("tests/packaging/"):
            item.add_marker(skip)
