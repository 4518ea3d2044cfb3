"""How many pages the inputs hold, counted without rendering anything (``llm-ocr plan``).

- **a PDF**: its page tree. pypdfium2 reads the trailer, the cross-reference table and the page
  tree's root, and counts; no page is loaded. A local file is read by PDFium itself; a remote
  one through an fsspec file of small blocks, so only those parts are fetched (about 100 KB of
  a 2,000-page PDF of 600 KB, the cross-reference table being most of it);
- **an image**: its frames (a TIFF's pages), from its header (:func:`.images.page_count`);
- **a Parquet dataset**: its footers, read when the input was resolved: one page a row, or,
  for a column of image lists, the values of the column's leaf (one per image, and one for each
  empty list);
- **a dataset only ``datasets`` can stream**: not counted (it would have to be read whole).

A document that cannot be counted (unreadable, encrypted, not a PDF) is named, not fatal: the
run would give it an error row. Inputs of many documents are counted on an evenly spread
sample and the total extrapolated, and the count says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import fsspec

from llm_ocr.options import DatasetOptions, RenderOptions
from llm_ocr.storage.stores import store_options

from .base import DocumentRef
from .dataset_inputs import ParquetPlan
from .listing import InputPlan, _FilesPlan, plan_inputs
from .manifest import ManifestPlan
from .render import DocumentError, count_pages

#: Documents counted one by one at most; more are sampled (each costs a few small reads).
DEFAULT_SAMPLE = 2000
#: The block size of a remote PDF's file: the page tree and the cross-reference table are small.
REMOTE_BLOCK = 64 * 1024


@dataclass
class PageCount:
    """The pages of some inputs, how they were counted, and what could not be."""

    pages: int = 0
    documents: int = 0
    #: Pages by kind of input: ``pdf``, ``image``, ``dataset``.
    by_kind: dict[str, int] = field(default_factory=dict)
    #: Documents counted one by one (the others extrapolated from them).
    counted: int = 0
    #: What was not counted, and why (a document, a streamed dataset).
    uncounted: list[str] = field(default_factory=list)
    #: True when part of ``pages`` is extrapolated from a sample of the documents.
    estimated: bool = False
    #: True when ``pages`` was given, not counted.
    given: bool = False
    #: Documents (and their pages) whose sha256 is one an earlier document has: not read, not
    #: in ``pages`` (docs/dedup.md). Known only where a manifest gives the hashes.
    duplicate_documents: int = 0
    duplicate_pages: int = 0

    def describe(self) -> str:
        """For a plan: ``12,480 pages in 310 documents (pdf 12,000, image 480)``."""
        if self.given:
            return f"{self.pages:,} pages (given, not counted)"
        kinds = ", ".join(f"{kind} {n:,}" for kind, n in sorted(self.by_kind.items()))
        text = f"{self.pages:,} pages in {self.documents:,} documents" + (f" ({kinds})" if kinds else "")
        if self.duplicate_documents:
            text += (f", distinct by sha256: {self.duplicate_documents:,} duplicate documents "
                     f"({self.duplicate_pages:,} pages) not read and not counted")
        if self.estimated:
            text += f", extrapolated from {self.counted:,} documents counted"
        if self.uncounted:
            more = ", ..." if len(self.uncounted) > 1 else ""
            text += f"; not counted: {len(self.uncounted)} ({self.uncounted[0]}{more})"
        return text


def count_input_pages(
    inputs: list[str],
    *,
    dataset: DatasetOptions | None = None,
    storage_options: dict[str, Any] | None = None,
    sample: int = DEFAULT_SAMPLE,
) -> PageCount:
    """The pages of ``inputs`` (see the module docstring); raises :class:`~.listing.InputError`
    for an unusable input, like a run would before reading anything."""
    plan = plan_inputs(inputs, dataset=dataset, storage_options=storage_options)
    return count_plan(plan, sample=sample)


def count_plan(plan: InputPlan, *, sample: int = DEFAULT_SAMPLE) -> PageCount:
    """The pages of resolved inputs (:func:`~.listing.plan_inputs`)."""
    total = PageCount()
    files: list[tuple[str, str, str]] = []  # (doc_id, url, kind)
    for resolved in plan.plans:
        if isinstance(resolved, _FilesPlan):
            files += [(doc_id, resolved.source(path), kind) for doc_id, (path, kind) in zip(resolved.doc_ids,
                                                                                             resolved.files)]
        elif isinstance(resolved, ParquetPlan):
            pages = dataset_pages(resolved)
            total.pages += pages
            total.documents += resolved.num_rows
            total.counted += resolved.num_rows
            total.by_kind["dataset"] = total.by_kind.get("dataset", 0) + pages
        elif isinstance(resolved, ManifestPlan):
            _count_manifest(resolved, total)
        else:
            total.uncounted.append(f"{resolved.url}: a dataset that can only be streamed, not counted from metadata")
    _count_files(files, plan.storage_options, sample, total)
    return total


def _count_manifest(manifest: ManifestPlan, total: PageCount) -> None:
    """A manifest's pages from its ``pages`` column, each sha256 counted once (a document whose
    hash an earlier row has is read once: docs/dedup.md); rows without ``pages`` are named."""
    seen: set[str] = set()
    unknown = 0
    for row in manifest.all_rows():
        total.documents += 1
        if row.sha256 is not None and row.sha256 in seen:
            total.duplicate_documents += 1
            total.duplicate_pages += row.pages or 0
            continue
        if row.sha256 is not None:
            seen.add(row.sha256)
        if row.url is None or row.error is not None:
            pages = 1  # its one error row
        elif row.pages is None:
            unknown += 1
            continue
        else:
            pages = row.pages
        total.pages += pages
        total.counted += 1
        total.by_kind["manifest"] = total.by_kind.get("manifest", 0) + pages
    if unknown:
        total.uncounted.append(f"{manifest.url}: {unknown:,} of its documents have no pages column, not counted")


def _count_files(files: list[tuple[str, str, str]], so: dict[str, Any], sample: int, total: PageCount) -> None:
    if not files:
        return
    chosen = files if len(files) <= sample else [files[math.floor(i * len(files) / sample)] for i in range(sample)]
    counted: dict[str, int] = {}
    for doc_id, url, kind in chosen:
        try:
            pages = pdf_pages(url, so) if kind == "pdf" else image_pages(url, doc_id)
        except (DocumentError, OSError) as exc:
            total.uncounted.append(f"{url}: {exc}")
            continue
        counted[kind] = counted.get(kind, 0) + pages
        total.counted += 1
    scale = len(files) / len(chosen)
    total.estimated = total.estimated or scale > 1
    total.documents += len(files)
    for kind, pages in counted.items():
        pages = round(pages * scale)
        total.by_kind[kind] = total.by_kind.get(kind, 0) + pages
        total.pages += pages


def pdf_pages(url: str, storage_options: dict[str, Any] | None = None) -> int:
    """The page count of the PDF at ``url`` from its page tree (no page is loaded or rendered)."""
    import pypdfium2 as pdfium

    fs, path = fsspec.core.url_to_fs(url, **store_options(url, storage_options or {}))
    from fsspec.implementations.local import LocalFileSystem

    try:
        if isinstance(fs, LocalFileSystem):
            pdf = pdfium.PdfDocument(path)
            try:
                return len(pdf)
            finally:
                pdf.close()
        with fs.open(path, "rb", block_size=REMOTE_BLOCK) as handle:
            pdf = pdfium.PdfDocument(handle)
            try:
                return len(pdf)
            finally:
                pdf.close()
    except pdfium.PdfiumError as exc:
        raise DocumentError(f"not a readable PDF ({exc})") from exc
    except FileNotFoundError as exc:
        raise DocumentError(f"file not found: {url}") from exc


def image_pages(url: str, doc_id: str = "") -> int:
    """The pages of the image at ``url``: its frames for a TIFF, else 1 (read from its header)."""
    return count_pages(DocumentRef(doc_id or url, 0, url, "image", url), RenderOptions())


def dataset_pages(plan: ParquetPlan) -> int:
    """Pages of a Parquet dataset from its footers: rows, or the image leaf's values for a
    column of image lists (an empty list counts one)."""
    if not plan.is_list:
        return plan.num_rows
    values = 0
    for f in plan.files.files:
        meta = f.metadata
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            leaves = [group.column(j) for j in range(group.num_columns)
                      if group.column(j).path_in_schema.split(".")[0] == plan.column]
            values += leaves[0].num_values if leaves else group.num_rows
    return values
