"""A folder of indexed corpus PDFs, shared by the simulated servers of one test session.

Every simulated server started with ``--corpus`` indexes each page of the corpus PDFs (a render
for its fingerprint, a larger grey render for locating crops, the text layer's lines): 0.3-0.5
CPU-seconds for a dozen pages. A test that launches eight shards, each starting its own server on
one corpus, indexed that corpus eight times (the test suite starts about 300 servers a run). With
``LLM_OCR_SIM_CORPUS_CACHE`` naming a folder, a PDF's index is stored there under a digest of the
PDF's bytes and of the code that indexes it, and a later server loads it instead. The test suite
sets it to a folder of its own session (``tests/conftest.py``); nothing else does.

An entry is a NumPy ``.npz`` file read with ``allow_pickle=False`` (no code runs on load),
written to a temporary name and renamed, so that a server never reads half of one.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

#: The folder of indexed PDFs; unset, every server indexes its corpus itself.
CACHE_ENV = "LLM_OCR_SIM_CORPUS_CACHE"
#: An entry: each page's plain fields (JSON), and its arrays by name.
Entry = tuple[list[dict[str, Any]], dict[str, Any]]


def cache_folder() -> Path | None:
    """The cache folder ``LLM_OCR_SIM_CORPUS_CACHE`` names, or None."""
    folder = os.environ.get(CACHE_ENV)
    return Path(folder) if folder else None


@cache
def _code_digest(code: tuple[str, ...]) -> str:
    digest = hashlib.sha256()
    for name in code:
        digest.update(Path(name).read_bytes())
    return digest.hexdigest()[:16]


def entry_path(folder: Path, pdf: Path, code: Sequence[str]) -> Path | None:
    """Where the index of ``pdf`` (by its bytes) is kept in ``folder``, as made by the source files
    ``code`` (an index is valid for the code that made it); None when ``pdf`` cannot be read."""
    try:
        pdf_digest = hashlib.sha256(pdf.read_bytes()).hexdigest()
    except OSError:  # indexing it reports why
        return None
    return folder / f"{pdf_digest}-{_code_digest(tuple(code))}.npz"


def load(path: Path) -> Entry | None:
    """The entry at ``path``: its pages' fields and arrays; None when there is none or it cannot
    be read."""
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as stored:
            meta = json.loads(str(stored["meta"]))
            return meta, {name: stored[name] for name in stored.files if name != "meta"}
    except (OSError, KeyError, ValueError):  # absent, or not an entry this code wrote
        return None


def store(path: Path, entry: Entry) -> None:
    """Keep ``entry`` at ``path`` (written whole under another name, then renamed)."""
    import numpy as np

    meta, arrays = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f"{path.name}.{uuid.uuid4().hex[:8]}.tmp.npz")
    try:
        np.savez(temporary, meta=np.array(json.dumps(meta)), **arrays)
        os.replace(temporary, path)
    except OSError:  # a cache that cannot be written costs the next server an index, no more
        temporary.unlink(missing_ok=True)
