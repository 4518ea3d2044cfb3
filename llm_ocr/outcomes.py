"""How a stage's run ends, as types every layer shares.

:class:`RunError` is the one error that says a run could not run or had to stop: the runners
raise it, the command line logs it and exits 2, and the Python API raises it to the caller.

This module imports nothing of llm-ocr: the runners, the API, the command line and the
launchers all use it.
"""

from __future__ import annotations


class RunError(Exception):
    """The run could not start, or had to stop (exit code 2): the message says why and what to do.
    Completed pages are kept; running it again resumes."""
