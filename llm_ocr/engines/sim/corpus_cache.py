"""A folder of indexed corpus PDFs, shared by the simulated servers of one test session.

Every simulated server started with ``--corpus`` indexes each page of the corpus PDFs (a render
for its fingerprint, a larger grey render for locating crops, the text layer's lines): 0.3-0.5
CPU-seconds for a dozen pages. A test that launches eight shards, each starting its own server on
one corpus, indexed that corpus eight times; the test suite did so about 300 times. With
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
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .corpus import KnownPage

#: The folder of indexed PDFs; unset, every server indexes its corpus itself.
CACHE_ENV = "LLM_OCR_SIM_CORPUS_CACHE"


def cache_folder() -> Path | None:
    """The cache folder ``LLM_OCR_SIM_CORPUS_CACHE`` names, or None."""
    folder = os.environ.get(CACHE_ENV)
    return Path(folder) if folder else None


@cache
def _code_digest() -> str:
    # An index is valid for the code that made it: the modules that render, fingerprint and
    # read the layout of a page.
    from llm_ocr import pdf_space

    from . import corpus

    digest = hashlib.sha256()
    for module in (corpus, pdf_space):
        digest.update(Path(module.__file__ or "").read_bytes())
    return digest.hexdigest()[:16]


def entry_path(folder: Path, pdf: Path) -> Path | None:
    """Where the index of ``pdf`` (by its bytes) is kept in ``folder``; None when it cannot be read."""
    try:
        digest = hashlib.sha256(pdf.read_bytes()).hexdigest()
    except OSError:  # indexing it reports why
        return None
    return folder / f"{digest}-{_code_digest()}.npz"


def load(path: Path, source: str) -> list[KnownPage] | None:
    """The pages stored at ``path`` (their ``source`` set to ``source``), or None when there is
    no such entry or it cannot be read."""
    import numpy as np

    from .corpus import KnownPage, LayoutBlock

    try:
        with np.load(path, allow_pickle=False) as stored:
            meta = json.loads(str(stored["meta"]))
            pages = []
            for i, page in enumerate(meta):
                blocks = [LayoutBlock(label, tuple(box), text, tuple((tuple(b), t) for b, t in lines))
                          for label, box, text, lines in page["blocks"]]
                pages.append(KnownPage(
                    source=source, index=page["index"], aspect=page["aspect"],
                    fingerprint=stored[f"fingerprint_{i}"], blocks=blocks, size_pt=tuple(page["size_pt"]),
                    grey=stored[f"grey_{i}"] if page["grey"] else None, rotation=page["rotation"],
                ))  # fmt: skip
            return pages
    except (OSError, KeyError, ValueError):  # absent, or not an entry this code wrote
        return None


def store(path: Path, pages: list[KnownPage]) -> None:
    """Keep ``pages`` at ``path`` (written whole under another name, then renamed)."""
    import numpy as np

    arrays: dict[str, Any] = {}
    meta = []
    for i, page in enumerate(pages):
        arrays[f"fingerprint_{i}"] = page.fingerprint
        if page.grey is not None:
            arrays[f"grey_{i}"] = page.grey
        meta.append({
            "index": page.index, "aspect": page.aspect, "size_pt": list(page.size_pt), "rotation": page.rotation,
            "grey": page.grey is not None,
            "blocks": [[b.label, list(b.box), b.text, [[list(box), text] for box, text in b.lines]]
                       for b in page.blocks],
        })  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f"{path.name}.{uuid.uuid4().hex[:8]}.tmp.npz")
    try:
        np.savez(temporary, meta=np.array(json.dumps(meta)), **arrays)
        os.replace(temporary, path)
    except OSError:  # a cache that cannot be written costs the next server an index, no more
        temporary.unlink(missing_ok=True)
