"""Helpers of the stage tests: the CLI against a simulated server, and row views."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
from pathlib import Path
from typing import Any

from llm_ocr.testing import SimulatedServer
from tests.conftest import run_cli

DESCRIBE_PROMPT = "Describe this image in detail."
#: Options that keep the subprocess quick: no worker processes to spawn (only where they render).
FAST = {"extract": ("--workers", "0", "--progress", "off"), "run": ("--workers", "0", "--progress", "off"),
        "describe": ("--progress", "off"), "assemble": (), "fields": ("--progress", "off")}


def run_in_process(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``llm-ocr ARGV`` in this process (saves the ~1.3 s of imports a subprocess pays); the
    ``llm_ocr`` log and stdout are captured into the result like a subprocess's streams."""
    from llm_ocr.cli import build_parser
    from llm_ocr.config import OptionError

    log_text, stdout = io.StringIO(), io.StringIO()
    handler = logging.StreamHandler(log_text)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("llm_ocr")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        with contextlib.redirect_stdout(stdout):
            args = build_parser().parse_args(list(argv))
            try:
                code = args.handler(args)
            except OptionError as exc:
                logger.error("%s", exc)
                code = 2
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return subprocess.CompletedProcess(list(argv), code, stdout.getvalue(), log_text.getvalue())


def stage(
    command: str,
    out: Path,
    server: SimulatedServer | None,
    *extra: str,
    env: dict[str, str] | None = None,
    subprocess_: bool = False,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """``llm-ocr COMMAND --output OUT [--endpoint URL] ...`` (in process unless ``subprocess_``)."""
    endpoint = ("--endpoint", server.base_url) if server is not None else ()
    argv = (command, *extra, "--output", str(out), *endpoint, *FAST[command])
    result = run_cli(*argv, timeout=timeout, env=env) if subprocess_ else run_in_process(*argv, env=env)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def bodies(server: SimulatedServer, since: float | None = None) -> list[dict[str, Any]]:
    """The logged request bodies (``since``: of the requests that arrived then or later)."""
    return [entry.get("body", entry) for entry in server.requests(since)]


def prompt_of(body: dict[str, Any]) -> str:
    """The text part of a logged request."""
    return body["messages"][0]["content"][1]["text"]


def page_keys(rows: list[dict[str, Any]]) -> list[tuple[str, int]]:
    """(doc_id, page) of rows, sorted."""
    return sorted((r["doc_id"], r["page"]) for r in rows)


def documents_view(rows: list[dict[str, Any]]) -> dict[str, tuple]:
    """What must agree between two Assemble outputs, by doc_id (images compared as bytes)."""
    view = {}
    for r in rows:
        figures = tuple(
            (f["id"], f["page"], tuple(f["bbox"]), (f["image"] or {}).get("bytes"), f["description"], f["error"])
            for f in r["figures"]
        )
        view[r["doc_id"]] = (r["num_pages"], r["markdown"], figures, r["status"], tuple(r["failed_pages"]), r["error"])
    return view
