"""Assemble: the pages of a document, in order → one Markdown document with figures and captions.

Pure functions over rows; :mod:`llm_ocr.runners.assemble` reads the upstream stage in bounded
batches and writes the results. Layout of the Markdown (documented in docs/stages.md, "llm-ocr assemble"):

* pages in order, joined by ``page_separator`` (``{page}`` stands for the next page's number);
* each ``![](figure:ID)`` whose ID is a figure of that page becomes ``![ALT](figure:ID)`` — ALT the
  first sentence of the caption, at most ~100 characters — followed by the whole caption as a
  blockquote ``> **Figure:** ...`` (less any line the page's own text already holds, such as the
  printed caption a description quotes). A blockquote survives any caption text: several lines,
  asterisks, lists; an italic paragraph would break on the first ``*`` or blank line;
* a link to an ID the page does not have (the model can write one) is escaped into plain text;
* a failed or missing page leaves an HTML comment ``<!-- page N: failed (...) -->`` in its place,
  so page positions stay right and a reader sees the gap;
* running headers, footers and page numbers (:mod:`llm_ocr.stages.furniture`) kept, dropped or
  tagged as ``page_furniture`` says, and listed in the row's ``furniture``;
* a table that continues on the next page (:mod:`llm_ocr.stages.tables`) joined into one, listed
  in the row's ``table_spans`` with the pages it spans;
* a failed or truncated page with a usable PDF text layer (``fallback_text``) is followed by a
  visible note and that text in a fenced block (see :mod:`llm_ocr.stages.fallback`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from llm_ocr.options import AssembleOptions
from llm_ocr.records import DOCUMENT_LEVEL_PAGE, DocumentResult, Figure, Furniture, PageResult, TableSpan
from llm_ocr.stages import furniture, tables
from llm_ocr.stages.fallback import append_fallback
from llm_ocr.vlm.grounding import FIGURE_LINK

ALT_TEXT_CHARS = 100
#: Figure links with their alt text (the same shape as grounding.FIGURE_LINK, alt captured).
FIGURE_LINK_ALT = re.compile(r"!\[([^\[\]\n]{0,200})\]\(figure:([^()\s]{1,200})\)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s|\n")
_ALT_ESCAPES = str.maketrans({"\\": "\\\\", "*": "\\*", "_": "\\_", "`": "\\`", "<": "\\<", ">": "\\>", "[": "(",
                              "]": ")"})
_MANY_NEWLINES = re.compile(r"\n{3,}")
_MAX_ERRORS_IN_MESSAGE = 5



def alt_text(caption: str | None, limit: int = ALT_TEXT_CHARS) -> str:
    """Short alt text from a caption: its first sentence, at most ``limit`` characters, made safe
    to sit inside ``![...]`` (brackets become parentheses, Markdown punctuation is escaped)."""
    if not caption:
        return ""
    text = caption.strip()
    first = _SENTENCE_END.split(text, maxsplit=1)[0]
    first = " ".join(first.split())
    if len(first) > limit:
        cut = first[: limit - 1]
        space = cut.rfind(" ")
        first = (cut[:space] if space > limit // 2 else cut).rstrip(" ,;:") + "…"
    return first.translate(_ALT_ESCAPES)


#: A description line's label, as the CPU engine writes them ("Caption: ...", "Text in the figure: ...").
_LABEL = re.compile(r"^[A-Z][A-Za-z ]{0,30}:\s+")


def _words(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def unrepeated(description: str, page_text: str) -> str:
    """``description`` without the lines whose words (after any ``Label:``) the page's own
    text already holds: a description that quotes the figure's printed caption would otherwise
    put it in the document a second time, under the figure and then as the page's caption line."""
    shown = f" {_words(page_text)} "
    kept = []
    for line in description.strip().splitlines():
        words = _words(_LABEL.sub("", line.strip()))
        # A few words (a one-word description) may be on the page by chance: only a line
        # of some length is taken for the page's own.
        if len(words.split()) < 4 or f" {words} " not in shown:
            kept.append(line)
    return "\n".join(kept).strip()


def caption_block(caption: str) -> str:
    """The full caption as a blockquote paragraph."""
    lines = caption.strip().splitlines() or [""]
    quoted = [f"> **Figure:** {lines[0].strip()}"] + [f"> {line}".rstrip() for line in lines[1:]]
    return "\n".join(quoted)


def _comment(text: str, limit: int = 200) -> str:
    # An HTML comment may not contain "--" and ends at the first "-->".
    text = " ".join(text.split()).replace("--", "—").replace(">", "›")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _escape_link(link: str) -> str:
    return link.replace("[", "\\[").replace("]", "\\]")


def render_page(page: PageResult, figure_ids: dict[str, str]) -> str:
    """A page's Markdown with its figure links resolved (``figure_ids``: page id → document id)."""
    by_id = {f.id: f for f in page.figures}

    def replace(match: re.Match[str]) -> str:
        figure = by_id.get(match.group(1))
        if figure is None:
            return _escape_link(match.group(0))
        link = f"![{alt_text(figure.description)}](figure:{figure_ids[figure.id]})"
        quoted = unrepeated(figure.description or "", page.markdown or "")
        if not quoted:
            return link
        # Blank lines on both sides: the caption is its own block even if the link was inline.
        return f"{link}\n\n{caption_block(quoted)}\n\n"

    text = FIGURE_LINK.sub(replace, page.markdown or "")
    return _MANY_NEWLINES.sub("\n\n", text).strip("\n")


def separator(template: str, next_page: int) -> str:
    """The separator placed before page ``next_page``."""
    return template.replace("{page}", str(next_page))


def _pick(pages: Iterable[PageResult]) -> dict[int, PageResult]:
    # Every page should come once; should a page come twice anyway, a finished row wins.
    chosen: dict[int, PageResult] = {}
    for page in pages:
        have = chosen.get(page.page)
        if have is None or (have.status == "error" and page.status != "error"):
            chosen[page.page] = page
    return chosen


def _document_figure_ids(pages: list[PageResult]) -> dict[int, dict[str, str]]:
    # Extract's ids carry the page ("p3-f1"), so they are unique in a document; ids from other
    # producers may not be, and a document-level link must name exactly one figure.
    used: set[str] = set()
    result: dict[int, dict[str, str]] = {}
    for page in pages:
        ids: dict[str, str] = {}
        for figure in page.figures:
            candidate = figure.id if figure.id not in used else f"p{page.page}-{figure.id}"
            n = 2
            while candidate in used:
                candidate = f"p{page.page}-{figure.id}-{n}"
                n += 1
            used.add(candidate)
            ids[figure.id] = candidate
        result[page.page] = ids
    return result


def _figure_row(figure: Figure, doc_figure_id: str, page: int) -> dict[str, Any]:
    row = figure.to_row()
    row["id"] = doc_figure_id
    row["page"] = page
    return row


def assemble_document(rows: Iterable[PageResult | dict[str, Any]],
                      options: AssembleOptions | None = None) -> DocumentResult:
    """One document's row from its page rows (any order, any stage: Extract or Describe)."""
    options = options or AssembleOptions()
    pages = [r if isinstance(r, PageResult) else PageResult.from_row(r) for r in rows]
    if not pages:
        raise ValueError("assemble_document needs at least one row")
    first = pages[0]
    chosen = _pick(p for p in pages if p.page != DOCUMENT_LEVEL_PAGE)
    if not chosen:
        # Only the document-level row: the document could not be opened or split into pages.
        failure = next((p for p in pages if p.page == DOCUMENT_LEVEL_PAGE), first)
        return DocumentResult(
            doc_id=first.doc_id,
            doc_index=first.doc_index,
            source=first.source,
            num_pages=0,
            markdown="",
            figures=[],
            status="error",
            failed_pages=[],
            error=failure.error or "the document produced no pages",
        )
    num_pages = max([p.num_pages or 0 for p in chosen.values()] + list(chosen))
    ordered = [chosen[n] for n in sorted(chosen)]
    figure_ids = _document_figure_ids([p for p in ordered if p.status != "error"])
    pieces = furniture.find(ordered)
    texts: list[str] = []
    figures: list[dict[str, Any]] = []
    failed: list[tuple[int, str]] = []
    for number in range(1, num_pages + 1):
        page = chosen.get(number)
        if page is None:
            failed.append((number, "no row for this page upstream"))
            texts.append(f"<!-- page {number}: missing (no row for this page upstream) -->")
        elif page.status == "error":
            failed.append((number, page.error or "failed"))
            texts.append(append_fallback(f"<!-- page {number}: failed ({_comment(page.error or 'no error message')}) "
                                         "-->", page))
        else:
            ids = figure_ids[number]
            own = [p for p in pieces if p.page == number]
            texts.append(append_fallback(furniture.shown(render_page(page, ids), own, options.page_furniture), page))
            figures.extend(_figure_row(f, ids[f.id], number) for f in page.figures)
    # Tables that continue on the next page, joined into their first page's table.
    broken = {n for n, _ in failed}
    numbers = list(range(1, num_pages + 1))
    joined, spans = tables.join([None if n in broken else t for n, t in zip(numbers, texts)], numbers,
                                {n: [p.text for p in pieces if p.page == n] for n in numbers})
    texts = [j if j is not None else t for j, t in zip(joined, texts)]
    markdown = texts[0]
    page_starts = [0]  # where each page's text begins in the document (Fields splits by page)
    for number, text in enumerate(texts[1:], start=2):
        markdown += separator(options.page_separator, number)
        page_starts.append(len(markdown))
        markdown += text
    if not failed:
        status, error = "ok", None
    else:
        status = "error" if len(failed) == num_pages else "partial"
        shown = "; ".join(f"page {n}: {msg}" for n, msg in failed[:_MAX_ERRORS_IN_MESSAGE])
        more = f"; and {len(failed) - _MAX_ERRORS_IN_MESSAGE} more" if len(failed) > _MAX_ERRORS_IN_MESSAGE else ""
        error = f"{len(failed)} of {num_pages} page(s) failed: {shown}{more}"
    return DocumentResult(
        doc_id=first.doc_id,
        doc_index=first.doc_index,
        source=first.source,
        num_pages=num_pages,
        markdown=markdown,
        figures=figures,
        status=status,  # type: ignore[arg-type]
        failed_pages=[n for n, _ in failed],
        error=error,
        page_starts=page_starts,
        furniture=[Furniture(p.page, p.kind, p.text, p.found, p.block) for p in pieces],
        table_spans=[TableSpan(list(t.pages), t.columns, t.rows) for t in spans],
    )
