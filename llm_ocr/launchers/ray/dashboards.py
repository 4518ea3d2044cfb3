"""The dashboard address each ``ray://`` address resolved to, remembered on this machine.

A ``ray://HEAD:10001`` address names Ray Client's proxy; the Jobs API llm-ocr uses speaks to
the cluster's dashboard over HTTP, so the address is first resolved through a Ray Client
connection (``JobSubmissionClient(address).get_address()``). That connection is dear: the head
node starts a Python server process for each one (ray/util/client/server/proxier.py), seconds of
its CPU, and on a busy head node it can stall or fail (see ``_connect`` in the adapter). Measured
here, at load 15, a launch's resolution took from 25 s to 116 s (a stall and a retry).

So the dashboard a ``ray://`` address resolved to is kept in
``$XDG_CACHE_HOME/llm-ocr/ray-dashboards.json`` (``~/.cache/...``) and tried first next time;
Ray's own job client checks that it answers (``/api/version``) before it is used, and a cluster
that moved or stopped is resolved again through Ray Client (and remembered anew).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

log = logging.getLogger("llm_ocr")

FILE_NAME = "ray-dashboards.json"


def _path() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "llm-ocr" / FILE_NAME


def _read() -> dict[str, str]:
    try:
        known = json.loads(_path().read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in known.items()} if isinstance(known, dict) else {}


def remembered(address: str) -> str | None:
    """The dashboard ``address`` resolved to last time on this machine, or None."""
    return _read().get(address)


def remember(address: str, dashboard: str) -> None:
    """Keep ``dashboard`` as what ``address`` resolves to. A cache: failing to write it only
    costs the next command a Ray Client connection, so errors are logged, not raised."""
    path = _path()
    known = _read()
    if known.get(address) == dashboard:
        return
    known[address] = dashboard
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Written whole then renamed: two commands at once never leave half a file.
        with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=".ray-dashboards-", delete=False) as handle:
            json.dump(known, handle, indent=1, sort_keys=True)
        os.replace(handle.name, path)
    except OSError as exc:
        log.debug("could not remember the Ray dashboard of %s in %s: %s", address, path, exc)


def forget(address: str) -> None:
    """Drop what ``address`` resolved to (it no longer answers)."""
    known = _read()
    if known.pop(address, None) is None:
        return
    try:
        _path().write_text(json.dumps(known, indent=1, sort_keys=True))
    except OSError as exc:
        log.debug("could not forget the Ray dashboard of %s: %s", address, exc)
