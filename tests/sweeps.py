"""Every-family sweeps in one process: one simulated server playing several families at once,
read through the Python API (docs/testing.md#tiers).

What a sweep tests is each family's recipe (its request, its rendering, its parser), not the
command's start-up: a process per family cost two interpreter starts and a server start for a
few pages' work. The server answers to one served name per family and plays, for each name, the
family ``--recipe NAME=FAMILY`` gives it (two recipes of one model, Qianfan-OCR's, under two
names); ``llm_ocr.extract`` reads in the test's process. Tests that share a server run one after
the other in a process (pytest-xdist gives each worker its own), so a test reads what its own run
did from the counters' change (:class:`Counters`) and from the log entries of its served name.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

import llm_ocr
from llm_ocr.testing import SimulatedServer
from llm_ocr.vlm.families import Family, family_for

#: The served name of a family that names no model of its own (the generic recipe).
GENERIC_NAME = "acme/some-vlm"


def served_names(families: Iterable[Family]) -> dict[str, str]:
    """A served name per family: its first model's, or ``MODEL@FAMILY`` when that name is
    another family's (a second recipe of one model: Qianfan-OCR's Layout-as-Thought)."""
    names: dict[str, str] = {}
    for family in families:
        name = family.models[0] if family.models else GENERIC_NAME
        names[family.name] = name if family_for(name) is family else f"{name}@{family.name}"
    return names


def shape(family: Family) -> tuple[str, str, bool, bool, bool]:
    """What decides how a family's pieces are cut, sized and sent: how it reads a dense page
    (tiles, bands, blocks), its image format, and whether its rendering fixes the longer side,
    rounds each side to a multiple, or caps the pixels or the longer side."""
    r = family.rendering
    return (family.dense, r.image_format, r.long_side is not None, r.multiple is not None,
            r.max_pixels is not None or r.max_long_side is not None)


def by_shape(families: Iterable[Family]) -> list[Any]:
    """``families`` as pytest parameters (ids: their names): the first family of each
    :func:`shape` as it is, every other one marked ``sweep``. ``./scripts/test --fast`` leaves the
    marked ones out (``-m "not e2e and not sweep"``): the inner loop still reads one family of each
    shape, and the full command reads them all."""
    seen: set[tuple[str, str, bool, bool, bool]] = set()
    params = []
    for family in families:
        key = shape(family)
        params.append(pytest.param(family, id=family.name, marks=() if key not in seen else (pytest.mark.sweep,)))
        seen.add(key)
    return params


def families_server(families: Iterable[Family], *args: str,
                    corpus: str | os.PathLike[str] | list[str | os.PathLike[str]] | None = None,
                    ) -> tuple[SimulatedServer, dict[str, str]]:
    """A simulated server (not started) playing every family of ``families`` under its served
    name, with ``args`` (``--instant``, ``--max-model-len`` ...); and the names by family."""
    listed = list(families)
    names = served_names(listed)
    recipes = [arg for family in listed for arg in ("--recipe", f"{names[family.name]}={family.name}")]
    server = SimulatedServer(*args, "--served-model-name", *names.values(), *recipes, corpus=corpus)
    return server, names


def extract(inputs: str | os.PathLike[str] | list[str], out: Path, server: SimulatedServer, model: str,
            recipe: str | None = None, **options: Any) -> llm_ocr.Result:
    """``llm_ocr.extract`` of ``inputs`` into ``out`` against ``server`` as ``model`` (and
    ``recipe``), in this process: a render thread (``workers=0``), no progress display."""
    given: dict[str, Any] = {"workers": 0, "progress": "off", **options}
    if recipe is not None:
        given["recipe"] = recipe
    listed = [os.fspath(i) for i in inputs] if isinstance(inputs, list) else os.fspath(inputs)
    return llm_ocr.extract(listed, output=str(out), endpoint=server.base_url, model=model, **given)


class Counters:
    """What a shared server counted from now on: ``counters.since()`` is the change of every
    number in ``GET /sim/stats`` (nested counts too, e.g. ``families``) since this was made."""

    def __init__(self, server: SimulatedServer) -> None:
        self.server = server
        self.before = server.stats()
        self.log_length = len(server.requests())

    def since(self) -> dict[str, Any]:
        """The counters' change since this was made (zero where nothing happened)."""
        return _change(self.server.stats(), self.before)

    def requests(self, model: str | None = None) -> list[dict[str, Any]]:
        """The log entries of the chat requests since this was made (only ``model``'s, if given)."""
        entries = self.server.requests()[self.log_length:]
        return [e for e in entries if model is None or (e.get("body") or {}).get("model") == model]


def _change(now: Mapping[str, Any], before: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in now.items():
        old = before.get(key)
        if isinstance(value, Mapping):
            changed = _change(value, old if isinstance(old, Mapping) else {})
            out[key] = {k: v for k, v in changed.items() if v}
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = value - (old if isinstance(old, (int, float)) else 0)
    return out
