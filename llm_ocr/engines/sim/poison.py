"""Poison pages: corpus pages that crash the simulated server whenever they are sent.

Real DeepSeek-OCR deployments meet images that crash vLLM (a CUDA illegal memory access) on
every attempt. ``--crash-on-page FILE:PAGE`` makes the simulator do the same for a page of its
``--corpus``: the process exits with code 1 the moment it recognises that page, whatever else
is in flight, in every incarnation a supervisor starts. ``--crash-times N`` limits it to N
crashes per page across restarts (an independent, one-off failure), counted in the file given
with ``--crash-ledger``, which gets one line ``FILE:PAGE`` per crash.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def parse_page_spec(spec: str) -> tuple[str, int]:
    """``"doc.pdf:3"`` → ``("doc.pdf", 3)``; the page is 1-based."""
    name, sep, page = spec.rpartition(":")
    if not sep or not name or not page.isdigit() or int(page) < 1:
        raise ValueError(f"expected FILE:PAGE with a page number from 1, got {spec!r}")
    return name, int(page)


@dataclass
class PoisonPages:
    """Which corpus pages crash the server, and how often."""

    pages: list[tuple[str, int]]
    times: int = 0  # 0: every time
    ledger: str | None = None

    def __post_init__(self) -> None:
        if self.times and not self.ledger:
            raise ValueError("--crash-times needs --crash-ledger (the count must survive the restarts)")

    def should_crash(self, source: str, page: int) -> str | None:
        """The ledger line of a crash due on ``page`` (1-based) of corpus file ``source``, else None."""
        for name, number in self.pages:
            if number == page and (source == name or Path(source).name == name):
                spec = f"{name}:{number}"
                if self.times and self._crashes(spec) >= self.times:
                    return None
                return spec
        return None

    def record(self, spec: str) -> None:
        """Append ``spec`` to the ledger (synced: the process exits right after)."""
        if not self.ledger:
            return
        with open(self.ledger, "a", encoding="utf-8") as ledger:
            ledger.write(spec + "\n")
            ledger.flush()
            os.fsync(ledger.fileno())

    def _crashes(self, spec: str) -> int:
        try:
            lines = Path(self.ledger or "").read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return 0
        return lines.count(spec)
