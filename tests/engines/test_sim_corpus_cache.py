"""The simulated servers' shared corpus index (llm_ocr/engines/sim/corpus_cache.py): a PDF loaded
from the cache is the PDF indexed afresh, and a changed PDF is indexed again."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llm_ocr.engines.sim import corpus
from llm_ocr.engines.sim.corpus_cache import CACHE_ENV
from tests.docs import make_pdf


def _same(a: corpus.KnownPage, b: corpus.KnownPage) -> None:
    assert (a.source, a.index, a.aspect, a.size_pt, a.rotation) == (b.source, b.index, b.aspect, b.size_pt, b.rotation)
    assert a.blocks == b.blocks  # labels, boxes, text and each line's box and text, as tuples
    assert a.fingerprint.dtype == b.fingerprint.dtype and np.array_equal(a.fingerprint, b.fingerprint)
    assert a.grey.dtype == b.grey.dtype and np.array_equal(a.grey, b.grey)


def test_a_cached_index_is_the_fresh_one_and_a_changed_pdf_is_indexed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pdf = tmp_path / "docs" / "report.pdf"
    pdf.parent.mkdir()
    make_pdf(pdf, pages=2, seed=3)  # text paragraphs and a chart on each page
    monkeypatch.delenv(CACHE_ENV, raising=False)
    fresh = corpus.build_corpus([pdf.parent]).pages
    assert len(fresh) == 2 and any(b.lines for b in fresh[0].blocks) and any(b.label == "image" for b in fresh[0].blocks)

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    first = corpus.build_corpus([pdf.parent]).pages  # indexes it, and keeps the index
    assert len(list((tmp_path / "cache").glob("*.npz"))) == 1

    def no_indexing(path: Path) -> list[corpus.KnownPage]:
        raise AssertionError(f"{path} was indexed again")

    with monkeypatch.context() as patched:
        patched.setattr(corpus, "_index_pdf", no_indexing)
        loaded = corpus.build_corpus([pdf.parent]).pages
    for a, b, c in zip(fresh, first, loaded, strict=True):
        _same(a, b)
        _same(a, c)

    # The same bytes under another name are found (their source is the new name) ...
    copy = tmp_path / "elsewhere" / "copy.pdf"
    copy.parent.mkdir()
    copy.write_bytes(pdf.read_bytes())
    with monkeypatch.context() as patched:
        patched.setattr(corpus, "_index_pdf", no_indexing)
        assert [p.source for p in corpus.build_corpus([copy]).pages] == [str(copy)] * 2
    # ... and other bytes under the old name are not.
    make_pdf(pdf, pages=1, seed=4)
    again = corpus.build_corpus([pdf.parent]).pages
    assert len(again) == 1 and again[0].blocks != fresh[0].blocks
    assert len(list((tmp_path / "cache").glob("*.npz"))) == 2
