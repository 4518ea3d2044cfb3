"""A folder of Markdown files another tool wrote, read as readings of a bench's pages.

``llm-ocr bench-quality OUT --bench DIR --markdown MD`` scores these instead of a run's rows.
A file's path under ``MD`` names its page; ``P`` is a bench PDF's path under ``pdfs/`` without
``.pdf``, subfolders included (``headers_footers/ff0f_pg2`` for ``pdfs/headers_footers/ff0f_pg2.pdf``):

- ``P_pg{N}_repeat{M}.md``: olmOCR's layout (allenai/olmocr ``olmocr/bench/benchmark.py``):
  reading ``M`` of page ``N``; several ``M`` of one page are repeated readings of it;
- ``P.md`` or ``P.pdf.md``: one file per document, read as page 1 of a one-page PDF (a file
  for a PDF of several pages is refused: the tests are per page);
- ``P_pg{N}.md``: one file per page.

The first layout that names a PDF of the bench wins, in that order, so ``x_pg1.md`` is the
document file of ``x_pg1.pdf`` when the bench has that PDF, else page 1 of ``x.pdf``. Files
that name no page of the bench are listed with the names that were expected.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llm_ocr.quality.bench import Bench, BenchError

_REPEAT = re.compile(r"(?P<base>.+)_pg(?P<page>\d+)_repeat(?P<repeat>\d+)\.md")
_PAGE = re.compile(r"(?P<base>.+)_pg(?P<page>\d+)\.md")


@dataclass(frozen=True)
class MarkdownFile:
    """One file and the page it reads: ``repeat`` is olmOCR's reading number (None otherwise)."""

    name: str  # its path under the folder, posix
    pdf: str
    page: int
    repeat: int | None
    layout: str  # "olmocr", "document" or "page"


@dataclass
class MarkdownReadings:
    """What a folder holds: each page's readings (rows as the scorer reads them), in reading
    order, and the files that name no page of the bench, each with why."""

    folder: Path
    pages: dict[tuple[str, int], list[dict[str, Any]]] = field(default_factory=dict)
    files: list[MarkdownFile] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)


def expected_names(example: str | None = None) -> str:
    """The file names this folder may hold, for an error message (with a bench PDF as example)."""
    p = example[:-4] if example and example.endswith(".pdf") else (example or "P")
    return (
        f"for a bench PDF pdfs/{p}.pdf: {p}_pg{{N}}_repeat{{M}}.md (olmOCR's layout, M-th reading of page N), "
        f"{p}.md or {p}.pdf.md (one file per document, one-page PDFs) or {p}_pg{{N}}.md (one file per page), "
        "with the PDF's subfolders under pdfs/ kept"
    )


def _page_count(bench: Bench, pdf: str) -> int:
    """Pages of a bench PDF: its own count, or the last page its tests name if the file is absent."""
    path = bench.pdf_dir / pdf
    if path.is_file():
        import pypdfium2 as pdfium

        try:
            document = pdfium.PdfDocument(str(path))
        except pdfium.PdfiumError:
            pass
        else:
            try:
                return len(document)
            finally:
                document.close()
    return max((t.page for t in bench.tests if t.pdf == pdf), default=1)


def name_page(name: str, pdfs: set[str], bench: Bench) -> MarkdownFile | str:
    """The page a file named ``name`` (posix path under the folder) reads, or why it reads none."""
    if (found := _REPEAT.fullmatch(name)) and found["base"] + ".pdf" in pdfs:
        return MarkdownFile(name, found["base"] + ".pdf", int(found["page"]), int(found["repeat"]), "olmocr")
    stem = name[: -len(".md")]
    document = stem if stem.endswith(".pdf") else stem + ".pdf"
    if document in pdfs:
        pages = _page_count(bench, document)
        if pages > 1:
            return (
                f"{name}: one file for the {pages}-page {document}, but the tests are per page: "
                f"name one file per page, {document[:-4]}_pg{{N}}.md"
            )
        return MarkdownFile(name, document, 1, None, "document")
    if (found := _PAGE.fullmatch(name)) and found["base"] + ".pdf" in pdfs:
        return MarkdownFile(name, found["base"] + ".pdf", int(found["page"]), None, "page")
    return f"{name}: names no PDF of the bench"


def _names(folder: Path) -> Iterable[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.md") if p.is_file())


def read_markdown_dir(folder: str | Path, bench: Bench) -> MarkdownReadings:
    """Every Markdown file under ``folder`` as a reading of a page of ``bench``.

    A file that cannot be read or is not UTF-8 is a reading that fails every test of its page
    (``unreadable``), as olmOCR counts it. Raises :class:`BenchError` when the folder holds no
    file that names a page of the bench, saying which names were expected.
    """
    root = Path(folder)
    if not root.is_dir():
        raise BenchError(f"--markdown folder {root} does not exist")
    pdfs = {t.pdf for t in bench.tests} | set(bench.pdfs)
    found = MarkdownReadings(folder=root)
    for name in _names(root):
        named = name_page(name, pdfs, bench)
        if isinstance(named, str):
            found.unmatched.append(named)
            continue
        found.files.append(named)
        row: dict[str, Any] = {"doc_id": named.pdf, "page": named.page, "source": name, "status": "ok"}
        try:
            row["markdown"] = (root / name).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            row.update(markdown="", unreadable=f"could not read {name}: {exc}")
        found.pages.setdefault((named.pdf, named.page), []).append(row)
    if not found.files:
        example = sorted(pdfs)[0] if pdfs else None
        seen = f"{len(found.unmatched)} .md file(s), e.g. {found.unmatched[0]}" if found.unmatched else "no .md file"
        expected = expected_names(example)
        raise BenchError(f"no Markdown file in {root} names a page of the bench ({seen}); expected, {expected}")
    order = {f.name: (f.repeat if f.repeat is not None else 0, f.name) for f in found.files}
    for readings in found.pages.values():
        readings.sort(key=lambda row: order[row["source"]])
    return found
