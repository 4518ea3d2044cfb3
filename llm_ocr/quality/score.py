"""The Python entry points: score a run against a bench, check any run without ground truth."""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from llm_ocr.quality import results as saved
from llm_ocr.quality.bench import BenchError, load_bench, load_run_pages, score_bench
from llm_ocr.quality.katex import EquationRenderer
from llm_ocr.quality.markdown_dir import expected_names, read_markdown_dir
from llm_ocr.quality.pages import has_pages, iter_pages, page_stage, run_stats
from llm_ocr.quality.signals import PageSignals, page_signals, summarise_signals
from llm_ocr.storage import Storage

log = logging.getLogger("llm_ocr.quality")


def _pdf_location(row: Mapping[str, Any]) -> str | None:
    source = str(row.get("source") or "")
    return source if source.lower().endswith(".pdf") else None


class _LocalCopy:
    """The PDF being read, as a local path: a remote one is copied once, not once per page."""

    def __init__(self, storage_options: Mapping[str, Any]) -> None:
        self.storage_options = dict(storage_options)
        self.source: str | None = None
        self.path: str | None = None
        self._tmp: str | None = None

    def __call__(self, source: str) -> str:
        if source != self.source:
            self.close()
            self.source = self.path = source
            store = Storage(source, self.storage_options)
            if not store.is_local:
                handle, self._tmp = tempfile.mkstemp(prefix="llm-ocr-quality-", suffix=".pdf")
                os.close(handle)
                try:
                    store.fs.get_file(store.root, self._tmp)
                    self.path = self._tmp
                except OSError as exc:  # unreadable: the text layer is rejected with the reason
                    log.debug("could not copy %s: %s", source, exc)
        return self.path or source

    def close(self) -> None:
        if self._tmp is not None:
            os.unlink(self._tmp)
            self._tmp = None


def _signals(out: Storage, text_layer: bool, samples: int, storage_options: Mapping[str, Any]) -> Iterator[PageSignals]:
    from llm_ocr.sources.text_layer import read_text_layer

    local = _LocalCopy(storage_options)
    try:
        for row in iter_pages(out):
            layer = note = None
            location = _pdf_location(row)
            if text_layer and location and int(row.get("page") or 0) > 0:
                verdict = read_text_layer(local(location), int(row["page"]), dict(storage_options))
                layer, note = verdict.text, verdict.note
            yield page_signals(row, layer, note, samples)
    finally:
        local.close()


def check_output(
    out: str,
    *,
    text_layer: bool = True,
    samples: int = 8,
    worst: int = 10,
    storage_options: Mapping[str, Any] | None = None,
    write: bool = True,
) -> dict[str, Any]:
    """The no-ground-truth signals of every page of run ``out`` (:mod:`llm_ocr.quality.signals`),
    with the run's stats; saved as ``OUT/quality/checks.json`` unless ``write`` is false."""
    so = dict(storage_options or {})
    storage = Storage(out, so)
    started = time.monotonic()
    stage, _ = page_stage(storage)
    result = summarise_signals(_signals(storage, text_layer, samples, so), worst=worst)
    result.update(out=out, stage=stage, run=run_stats(storage).to_json(), seconds=round(time.monotonic() - started, 2))
    if write:
        result["saved_to"] = saved.save(storage, saved.CHECKS, result)
    return result


def score_output(
    out: str,
    bench: str | Path,
    *,
    katex: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    write: bool = True,
    markdown: str | Path | None = None,
) -> dict[str, Any]:
    """Score run ``out`` against the olmOCR-bench-format tests in folder ``bench``
    (:mod:`llm_ocr.quality.bench`); saved as ``OUT/quality/bench.json`` unless ``write`` is false.

    With ``markdown``, the Markdown files in that folder are scored instead of a run's rows
    (:mod:`llm_ocr.quality.markdown_dir`: olmOCR's ``{pdf}_pg{N}_repeat{M}.md``, one file per page
    or per document) and ``out`` only receives the results; it must hold no run of its own.
    """
    storage = Storage(out, dict(storage_options or {}))
    tests = load_bench(bench)
    unmatched: list[str] = []
    if markdown is not None:
        if has_pages(storage):
            raise BenchError(
                f"{out} holds a run's pages, and --markdown scores other Markdown: give a folder of its own "
                "for the results (OUT only receives quality/bench.json)"
            )
        found = read_markdown_dir(markdown, tests)
        pages, unmatched = found.pages, found.unmatched
        source = f"{len(found.files)} Markdown file(s) in {markdown}"
    else:
        pages = load_run_pages(iter_pages(storage), tests)
        source = out
    log.info("bench %s: %d tests on %d PDFs; %d of its pages are in %s", tests.root, len(tests.tests),
             len({t.pdf for t in tests.tests}), len(pages), source)  # fmt: skip
    for line in unmatched[:10]:
        log.warning("not scored: %s", line)
    renderer = EquationRenderer(katex) if any(t.type == "math" for t in tests.tests) else None
    if renderer is not None and not renderer.available:
        log.warning("math tests will not be scored: %s", renderer.unavailable_reason)
    result = score_bench(tests, pages, renderer, progress=lambda done,
                         total: log.info("scored %d of %d tests", done, total))
    models = {str(r.get("model")) for rows in pages.values() for r in rows if r.get("model")}
    result.update(out=out, run=run_stats(storage).to_json(), models=sorted(models))
    result["katex"] = renderer.version if renderer is not None else None
    # What laid the formulas out: glyph comparisons depend on the browser and the fonts too.
    result["math_renderer"] = renderer.describe() if renderer is not None else None
    if markdown is not None:
        result.update(markdown=str(markdown), markdown_files=len(found.files), unmatched_files=unmatched)
        if unmatched:
            result["expected_names"] = expected_names(next(iter(sorted(tests.pdfs)), None))
    if write:
        result["saved_to"] = saved.save(storage, saved.BENCH, result)
    return result


def score(out: str, bench: str | Path | None = None, **options: Any) -> dict[str, Any]:
    """Quality of run ``out``: olmOCR-bench scores when ``bench`` is given, else the checks
    that need no ground truth. Options are those of :func:`score_output` / :func:`check_output`."""
    if bench is not None:
        return score_output(out, bench, **options)
    return check_output(out, **options)
