"""Under CI (``CI=true``) a skipped test fails the run unless this allow-list expects it.

The same holds in the real-vLLM tier (scripts/test-vllm) even outside CI: its tests skip only
when its venv has lost vLLM.

A skip is a test that did not run while the run stays green: a Chromium, Slurm or PostgreSQL
that failed to install (scripts/test installs them on Debian; their tests skip without them, so
under CI the run fails: none is on the allow-list), an extra that went missing, a tier whose venv
broke. Locally that is often fine (``-rs`` lists
them); in CI it hides a gap. The hooks in ``tests/conftest.py`` feed every skip (test set-up,
call, and module-level skips at collection, also from pytest-xdist workers, whose reports
reach the controller) to :class:`SkipPolicy`, which fails the session at its end.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

#: Set by scripts/test-vllm: this run is the real-vLLM tier.
TIER_VARIABLE = "LLM_OCR_IN_VLLM_TIER"
#: Set by scripts/test-packaging: this run is the packaging tier (tests/packaging/conftest.py).
PACKAGING_TIER_VARIABLE = "LLM_OCR_IN_PACKAGING_TIER"


@dataclass(frozen=True)
class AllowedSkip:
    """A skip CI accepts: tests whose node id starts with ``where`` skipped for ``reason``."""

    where: str
    reason: str  # a substring of the skip message
    why: str
    #: Not allowed while this environment variable is set (e.g. in the tier that must run it).
    unless_env: str | None = None

    def matches(self, nodeid: str, message: str) -> bool:
        if self.unless_env and os.environ.get(self.unless_env):
            return False
        return nodeid.startswith(self.where) and self.reason in message


#: Keep this short: every entry is a test CI never runs.
ALLOWED_SKIPS = (
    AllowedSkip(
        "tests/storage/test_hub_real.py", "set HF_TOKEN and LLM_OCR_TEST_HUB_REPO",
        why="writes to the real Hugging Face Hub: needs a write token, which CI does not have",
    ),
    AllowedSkip(
        "tests/packaging/", "run in the packaging tier",
        why="installs from the package index; scripts/test-packaging runs these (scripts/test runs it beside the suite)",
        unless_env=PACKAGING_TIER_VARIABLE,
    ),
    AllowedSkip(
        "tests/vllm_real/", "vLLM is not installed",
        why="the default venv has no vLLM; scripts/test-vllm runs these in the tier's own venv",
        unless_env=TIER_VARIABLE,  # in the tier vLLM must be importable
    ),
)  # fmt: skip


def enforced() -> str | None:
    """Why unexpected skips fail this run, or None: in CI (``CI`` set to a true value, as CI
    services and .ci/run do), and always in the real-vLLM tier, whose only skip is a broken venv."""
    if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
        return "in CI (CI=true)"
    if os.environ.get(TIER_VARIABLE):
        return "in the real-vLLM tier"
    if os.environ.get(PACKAGING_TIER_VARIABLE):
        return "in the packaging tier"
    return None


def skip_message(report: pytest.CollectReport | pytest.TestReport) -> str:
    """The reason a skipped report carries (``longrepr`` is ``(path, line, "Skipped: ...")``)."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


class SkipPolicy:
    """A pytest plugin: collects the session's skips and, when ``enforce`` (the reason, see
    :func:`enforced`) is given, fails the session on any that :data:`ALLOWED_SKIPS` does not
    cover, listing them in the terminal summary.

    Register it on the controller only (under pytest-xdist, workers send their reports there).
    """

    def __init__(self, enforce: str | None, allowed: tuple[AllowedSkip, ...] = ALLOWED_SKIPS) -> None:
        self.enforce = enforce
        self.allowed = allowed
        self.unexpected: dict[str, str] = {}  # node id -> skip message

    def record(self, report: pytest.CollectReport | pytest.TestReport) -> None:
        """Note ``report`` if it is a skip no allow-list entry covers."""
        if not report.skipped or hasattr(report, "wasxfail"):  # an xfail is reported as skipped
            return
        message = skip_message(report)
        if not any(entry.matches(report.nodeid, message) for entry in self.allowed):
            self.unexpected.setdefault(report.nodeid, message)

    # A module-level skip (``pytest.skip(allow_module_level=True)``, ``importorskip`` at import)
    # arrives as a collect report; a ``skipif`` mark or a skip in a test or fixture as a test report.
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self.record(report)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.record(report)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        # pytest exits with session.exitstatus as it stands after this hook. "No tests
        # collected" (every module skipped) becomes a failure that names the skips.
        if self.enforce and self.unexpected and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not (self.enforce and self.unexpected):
            return
        terminalreporter.section(f"skips not allowed {self.enforce}: the run fails", sep="=", red=True, bold=True)
        for nodeid, message in sorted(self.unexpected.items()):
            terminalreporter.line(f"{nodeid}: {message}", red=True)
        terminalreporter.line(
            "Fix the cause (install what the test needs), or, if CI cannot run it, add it to "
            "ALLOWED_SKIPS in tests/skip_policy.py with the reason."
        )


def register(config: pytest.Config, allowed: tuple[AllowedSkip, ...] = ALLOWED_SKIPS) -> None:
    """Register the policy from ``pytest_configure``, on the controller only: pytest-xdist workers
    send their reports (collect reports too) to it."""
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(SkipPolicy(enforced(), allowed), "llm-ocr-skip-policy")
