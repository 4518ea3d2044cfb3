"""The CPU engine's server for the commands read through it (tests/cpu_engine_pages.py)."""

from tests.cpu_engine_pages import cpu_engine  # noqa: F401 - a fixture, found by pytest here
