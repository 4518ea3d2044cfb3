"""The CPU engine as one server for the session (per test worker), shared by every module here
that reads pages with it (tests/cpu_engine_pages.py)."""

from tests.cpu_engine_pages import cpu_engine  # noqa: F401 - a fixture, found by pytest here
