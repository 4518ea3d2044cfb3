"""Module-level skips for optional test dependencies, decided without importing them.

``pytest.importorskip`` at a module's top imports the module while the test file is collected,
and every pytest-xdist worker collects every file: nbclient and nbformat cost about 0.25
CPU-seconds a worker, ``google.cloud.run_v2`` about 0.8, for tests that run on one worker only.
``importlib.util.find_spec`` finds the module without running it (for a dotted name it imports
only the parent packages), and the tests import what they use in their bodies.
"""

from __future__ import annotations

import importlib.util

import pytest


def skip_module_unless_installed(*modules: str) -> None:
    """Skip the calling test module, as ``importorskip`` would, unless every module is installed."""
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:  # a parent package is missing
            found = False
        if not found:
            pytest.skip(f"could not import {name!r}: No module named {name!r}", allow_module_level=True)
