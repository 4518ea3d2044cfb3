"""HTML fragments of the report and the notebook display: a page with its layout boxes, an
assembled document, figures with captions, status badges, and the CSS they share."""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from llm_ocr.page_routes import describe
from llm_ocr.report.fields_panel import FIELDS_CSS, fields_on_page, render_fields
from llm_ocr.report.reader import DocumentEntry, Summary
from llm_ocr.report.safe_html import anchor, data_uri, esc, figure_bytes, markdown_to_html, text_block
from llm_ocr.sources.rerender import PageView, SourcePages

log = logging.getLogger(__name__)

# ============================================================================================
# HTML fragments

#: Box colours by DeepSeek-OCR block label; other labels get a stable colour from the palette.
LABEL_COLOURS: dict[str, str] = {
    "title": "#d62728",
    "sub_title": "#e377c2",
    "text": "#1f77b4",
    "image": "#2ca02c",
    "image_caption": "#9467bd",
    "table": "#ff7f0e",
    "table_caption": "#8c564b",
    "table_footnote": "#8c564b",
    "equation": "#17becf",
    "formula": "#17becf",
}
_PALETTE = ("#bcbd22", "#7f7f7f", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173")


def label_colour(label: str) -> str:
    """The box colour of a block label (stable across runs)."""
    if label in LABEL_COLOURS:
        return LABEL_COLOURS[label]
    return _PALETTE[int(hashlib.sha1(label.encode("utf-8", "surrogatepass"), usedforsecurity=False).hexdigest(),
                        16) % len(_PALETTE)]


CSS = """
.llmocr{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1b1b1b;line-height:1.45}
.llmocr h1{font-size:1.6em;margin:.2em 0 .6em}
.llmocr table.llmocr-summary{border-collapse:collapse;margin:.5em 0 1em}
.llmocr table.llmocr-summary th,.llmocr table.llmocr-summary td{border:1px solid #ccc;padding:.25em .7em;text-align:left}
.llmocr table.llmocr-summary td.n{text-align:right;font-variant-numeric:tabular-nums}
.llmocr .llmocr-doc{border-top:3px solid #444;margin-top:2em;padding-top:.5em}
.llmocr .llmocr-doc>h2{font-size:1.3em;margin:.2em 0;word-break:break-all}
.llmocr .llmocr-meta{color:#555;font-size:.85em;word-break:break-all}
.llmocr .llmocr-page{border-top:1px solid #ccc;margin-top:1em;padding-top:.5em}
.llmocr .llmocr-page>h3{font-size:1.1em;margin:.2em 0}
.llmocr .llmocr-cols{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:1em;align-items:start}
.llmocr .llmocr-view{position:relative;border:1px solid #bbb;background:#fff}
.llmocr .llmocr-view>img{display:block;width:100%;height:auto}
.llmocr .llmocr-view>svg.llmocr-boxes{position:absolute;left:0;top:0;width:100%;height:100%}
.llmocr .llmocr-view>svg.llmocr-canvas{display:block;width:100%;height:auto;background:#f1f1f1}
.llmocr .llmocr-view text{font-family:sans-serif;paint-order:stroke;stroke:#fff;stroke-width:3px}
.llmocr .llmocr-md{overflow-x:auto;border:1px solid #e3e3e3;padding:0 .8em;background:#fcfcfc}
.llmocr .llmocr-md img{max-width:100%}
.llmocr .llmocr-md table,.llmocr .llmocr-table table{border-collapse:collapse;margin:.5em 0}
.llmocr .llmocr-md th,.llmocr .llmocr-md td{border:1px solid #bbb;padding:.2em .45em;vertical-align:top}
.llmocr figure.llmocr-figure{margin:.6em 0;padding:.4em;border:1px solid #ddd;background:#fff;display:inline-block;max-width:100%}
.llmocr figure.llmocr-figure img{display:block;max-width:100%;max-height:420px}
.llmocr figure.llmocr-figure figcaption{font-size:.9em;color:#333;margin-top:.3em}
.llmocr .llmocr-figid{font-family:monospace;color:#666;font-size:.85em}
.llmocr .llmocr-status{display:inline-block;padding:0 .5em;border-radius:.7em;font-size:.8em;font-weight:600;
 vertical-align:middle}
.llmocr .llmocr-status-ok{background:#d8f0d8;color:#185c18}
.llmocr .llmocr-status-truncated,.llmocr .llmocr-status-partial{background:#fdf0c8;color:#6b5000}
.llmocr .llmocr-status-error{background:#f8d4d4;color:#7a1010}
.llmocr .llmocr-error{background:#fff0f0;border-left:4px solid #c62828;padding:.3em .6em;margin:.4em 0;
 white-space:pre-wrap;word-break:break-word}
.llmocr .llmocr-note{background:#fff8e1;border-left:4px solid #f9a825;padding:.3em .6em;margin:.3em 0;font-size:.9em}
.llmocr .llmocr-missing{color:#999;font-style:italic}
.llmocr pre.llmocr-pre{white-space:pre-wrap;word-break:break-word;background:#f6f6f6;padding:.5em;font-size:.8em;
 max-height:30em;overflow:auto}
.llmocr .llmocr-legend span{display:inline-block;margin-right:.8em;font-size:.8em}
.llmocr .llmocr-legend i{display:inline-block;width:.8em;height:.8em;margin-right:.25em;vertical-align:-.05em;border:2px solid}
.llmocr details{margin:.4em 0}
.llmocr summary{cursor:pointer;color:#333}
""".strip() + "\n" + FIELDS_CSS  # noqa: E501 - CSS rules, one a line


def _status_badge(status: str | None) -> str:
    status = status or "unknown"
    css = status if status in ("ok", "truncated", "partial", "error") else "error"
    return f'<span class="llmocr-status llmocr-status-{css}">{esc(status)}</span>'


def _figure_block(figure: Mapping[str, Any], anchor: str | None = None, alt: str = "") -> str:
    """A figure crop with its id, caption, structured caption and error."""
    figure_id = str(figure.get("id") or "")
    id_attr = f' id="{anchor}"' if anchor else ""
    parts = [f'<figure class="llmocr-figure"{id_attr}>']
    data = figure_bytes(figure)
    uri = data_uri(data) if data else None
    if uri:
        parts.append(f'<img src="{uri}" alt="{esc(alt or "figure " + figure_id)}">')
    else:
        parts.append('<span class="llmocr-missing">[no image stored for this figure]</span>')
    caption = [f'<span class="llmocr-figid">{esc(figure_id)}</span>']
    page = figure.get("page")
    if page is not None:
        caption.append(f'<span class="llmocr-figid"> (page {esc(str(page))})</span>')
    if figure.get("description"):
        caption.append(markdown_to_html(str(figure["description"])))
    elif not figure.get("error"):
        caption.append('<div class="llmocr-missing">no description</div>')
    if figure.get("description_json"):
        pretty = text_block(_pretty_json(str(figure["description_json"])))
        caption.append(f"<details><summary>description JSON</summary>{pretty}</details>")
    if figure.get("error"):
        caption.append(f'<div class="llmocr-error">{esc(str(figure["error"]))}</div>')
    parts.append(f"<figcaption>{''.join(caption)}</figcaption></figure>")
    return "".join(parts)


def _pretty_json(text: str) -> str:
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(text)


def _boxes_svg(row: Mapping[str, Any], view: PageView) -> tuple[str, str | None]:
    """The page picture: the image with an SVG overlay of its blocks, or a blank canvas.

    Returns the HTML and a note when the image is missing. Boxes are in pixels of the image
    that was sent (``width`` x ``height``); the re-rendered image may differ in size (another
    DPI, another renderer version), so boxes are scaled by rendered/sent size per axis.
    """
    blocks = row.get("blocks") or []
    sent_w, sent_h = row.get("width"), row.get("height")
    uri = data_uri(view.data, view.mime) if view.data else None
    if uri and view.width and view.height:
        canvas_w, canvas_h = view.width, view.height
        sx = canvas_w / sent_w if sent_w else 1.0
        sy = canvas_h / sent_h if sent_h else 1.0
    elif sent_w and sent_h:
        canvas_w, canvas_h, sx, sy, uri = sent_w, sent_h, 1.0, 1.0, None
    else:
        return "", view.note or "no page image and no page size"
    font = max(10.0, canvas_w / 45)
    stroke = max(2.0, canvas_w / 400)
    shapes = []
    for number, block in enumerate(blocks, 1):
        label = str(block.get("label") or "?")
        colour = label_colour(label)
        tip = esc(f"{number}. {label}: {(block.get('text') or '')[:400]}")
        for box in block.get("boxes") or []:
            if len(box) != 4:
                continue
            x1, y1, x2, y2 = (float(v) for v in box)
            x, y = min(x1, x2) * sx, min(y1, y2) * sy
            w, h = abs(x2 - x1) * sx, abs(y2 - y1) * sy
            shapes.append(
                f'<g><title>{tip}</title>'
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="{colour}" '
                f'fill-opacity="0.07" stroke="{colour}" stroke-width="{stroke:.1f}"/>'
                f'<text x="{x + 2:.1f}" y="{max(y - 3, font):.1f}" font-size="{font:.1f}" fill="{colour}">'
                f"{esc(label)}</text></g>"
            )
    overlay = "".join(shapes)
    viewbox = f'viewBox="0 0 {canvas_w} {canvas_h}"'
    if uri:
        picture = (
            f'<div class="llmocr-view"><img src="{uri}" width="{canvas_w}" height="{canvas_h}" alt="page image">'
            f'<svg class="llmocr-boxes" {viewbox} preserveAspectRatio="none" aria-hidden="true">{overlay}</svg></div>'
        )
        return picture, None
    picture = (
        f'<div class="llmocr-view"><svg class="llmocr-canvas" {viewbox} width="{canvas_w}" height="{canvas_h}" '
        f'role="img" aria-label="layout blocks on a blank page">{overlay}</svg></div>'
    )
    note = f"page image not available: {view.note}" if view.note else "page image not available"
    return picture, note + "; boxes are drawn on a blank page of the size that was sent"


def _legend(blocks: list[Mapping[str, Any]]) -> str:
    counts = Counter(str(b.get("label") or "?") for b in blocks)
    if not counts:
        return ""
    items = "".join(
        f'<span><i style="border-color:{label_colour(label)}"></i>{esc(label)} &times;{n}</span>'
        for label, n in counts.most_common()
    )
    return f'<div class="llmocr-legend">{items}</div>'


def render_page(row: Mapping[str, Any], view: PageView | None = None, *, anchor_prefix: str = "",
                note_html: str = "") -> str:
    """One page row → an HTML fragment (image with boxes, Markdown, figures, status, error).

    ``note_html`` (trusted HTML: the quality checks' findings, the fields found on the page) goes
    under the heading."""
    view = view or PageView(note="the page image was not re-rendered")
    doc_id, page = str(row.get("doc_id") or ""), row.get("page")
    figures = list(row.get("figures") or [])
    by_id = {str(f.get("id")): f for f in figures}
    inline: set[str] = set()

    def figure_html(figure_id: str, alt: str) -> str | None:
        figure = by_id.get(figure_id)
        if figure is None:
            return None
        first = figure_id not in inline
        inline.add(figure_id)
        return _figure_block(figure, anchor(anchor_prefix, doc_id, page, figure_id) if first else None, alt)

    markdown = markdown_to_html(row.get("markdown"), figure_html)
    title = "document" if page == 0 else f"page {esc(str(page))}"
    num_pages = row.get("num_pages")
    parts = [
        f'<section class="llmocr-page" id="{anchor(anchor_prefix, doc_id, page)}">',
        (f"<h3>{title.capitalize()}{f' of {num_pages}' if num_pages and page else ''} "
         f"{_status_badge(row.get('status'))}</h3>"),
    ]
    if row.get("error"):
        parts.append(f'<div class="llmocr-error">{esc(str(row["error"]))}</div>')
    parts.append(note_html)
    blocks = list(row.get("blocks") or [])
    # A document-level row (page 0: the document could not be opened) has no picture.
    picture, note = _boxes_svg(row, view) if page != 0 or blocks else ("", None)
    if note:
        parts.append(f'<div class="llmocr-note">{esc(note)}</div>')
    left = picture + _legend(blocks)
    right = markdown or '<p class="llmocr-missing">no Markdown</p>'
    parts.append(f'<div class="llmocr-cols"><div>{left}</div><div class="llmocr-md">{right}</div></div>')
    others = [f for f in figures if str(f.get("id")) not in inline]
    if others:
        parts.append("<div><strong>Figures</strong><br>")
        parts += [_figure_block(f, anchor(anchor_prefix, doc_id, page, f.get("id"))) for f in others]
        parts.append("</div>")
    meta = [
        f"{name}: {esc(str(row.get(key)))}"
        for name, key in (
            ("finish", "finish_reason"), ("prompt tokens", "prompt_tokens"), ("completion tokens", "completion_tokens"),
            ("latency s", "latency_s"), ("attempts", "attempts"), ("model", "model"),
        )
        if row.get(key) is not None
    ]
    if row.get("width") and row.get("height"):
        meta.append(f"sent image: {esc(str(row['width']))}&times;{esc(str(row['height']))} px")
    if meta:
        parts.append(f'<div class="llmocr-meta">{" &middot; ".join(meta)}</div>')
    if row.get("raw"):
        parts.append(f"<details><summary>Raw model output</summary>{text_block(row.get('raw'))}</details>")
    parts.append("</section>")
    return "".join(parts)


def render_assembled(
    row: Mapping[str, Any],
    *,
    figure_anchors: Mapping[tuple[int, tuple[int, ...]], str] | None = None,
) -> str:
    """The assembled document (an Assemble row) as a collapsible HTML fragment.

    ``figure_anchors`` maps (page, bbox) of the figures shown on the pages below to their
    element ids: those figures link there instead of embedding the crop a second time. They
    are matched by page and box because Assemble may rename a figure to keep ids unique.
    """
    anchors = figure_anchors or {}
    figures = {str(f.get("id")): f for f in row.get("figures") or []}

    def figure_html(figure_id: str, alt: str) -> str | None:
        figure = figures.get(figure_id)
        if figure is None:
            return None
        page = figure.get("page")
        target = anchors.get((int(page or 0), tuple(figure.get("bbox") or ())))
        if target is None:
            return _figure_block(figure, None, alt)
        caption = figure.get("description") or alt or ""
        return (
            f'<a class="llmocr-figid" href="#{target}">[figure {esc(figure_id)}, page {esc(str(page))}]</a>'
            f"{' ' + esc(str(caption)) if caption else ''}"
        )

    failed = row.get("failed_pages") or []
    head = f"Assembled Markdown {_status_badge(row.get('status'))}"
    body = [markdown_to_html(row.get("markdown"), figure_html) or '<p class="llmocr-missing">empty</p>']
    if failed:
        body.insert(0, f'<div class="llmocr-error">failed pages: {esc(", ".join(str(p) for p in failed))}</div>')
    if row.get("error"):
        body.insert(0, f'<div class="llmocr-error">{esc(str(row["error"]))}</div>')
    return f'<details class="llmocr-assembled"><summary>{head}</summary><div class="llmocr-md">{"".join(body)}</div></details>'  # noqa: E501 - not wrapped yet


def render_summary(summary: Summary) -> str:
    """The summary table: documents, pages by status, assembled documents by status."""
    rows = [("Output", esc(summary.out)),
            ("Pages read from", esc(f"{summary.stage}/" if summary.stage else "(no pages)"))]
    numbers = [("Documents", summary.documents)]
    if summary.shown_documents is not None:
        numbers.append(("Documents shown below", summary.shown_documents))
    numbers.append(("Pages", summary.pages))
    order = ["ok", "truncated", "error"]
    for status in order + sorted(set(summary.status_counts) - set(order)):
        if status in summary.status_counts or status in order:
            numbers.append((f"Pages {status}", summary.status_counts.get(status, 0)))
    if summary.document_failures:
        numbers.append(("Documents that could not be opened", summary.document_failures))
    if summary.assembled is not None:
        for status, n in sorted(summary.assembled.items()):
            numbers.append((f"Assembled documents: {status}", n))
    for status, n in sorted((summary.fields or {}).items()):
        numbers.append((f"Fields rows: {status}", n))
    for klass, n in sorted((summary.classes or {}).items()):
        numbers.append((f"Documents of class {klass}", n))
    if any(route != "whole" for route in summary.read_as):
        # Pages read in pieces, and what they cost against reading them whole (docs/gpu-time.md).
        rows.append(("Pages read as", "<br>".join(esc(line) for line in describe(summary.read_as))))
    body = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    body += "".join(f'<tr><th>{esc(k)}</th><td class="n">{n}</td></tr>' for k, n in numbers)
    return f'<table class="llmocr-summary">{body}</table>'


def render_document(
    entry: DocumentEntry,
    rows: Sequence[Mapping[str, Any]],
    *,
    assembled: Mapping[str, Any] | None = None,
    fields: Mapping[str, Any] | None = None,
    pages: SourcePages | None = None,
    anchor_prefix: str = "",
    page_notes: Mapping[int, str] | None = None,
    note_html: str = "",
) -> Iterator[str]:
    """One document as HTML fragments, yielded page by page so a caller can stream them.

    ``fields`` (its ``OUT/fields`` row) adds the fields, each linked to the page it is on;
    ``page_notes`` maps page numbers to trusted HTML shown under each page's heading, and
    ``note_html`` (trusted) goes under the document's heading."""
    shown = {int(r.get("page") or 0) for r in rows}
    total = entry.num_pages
    yield f'<section class="llmocr-doc" id="{anchor(anchor_prefix, "doc", entry.doc_id)}">'
    yield f"<h2>{esc(entry.doc_id)}</h2>{note_html}"
    meta = [f"source: {esc(entry.source or '?')}"]
    if total:
        meta.append(f"{total} page{'s' if total != 1 else ''}")
    counts = Counter(entry.pages.values())
    meta.append(", ".join(f"{esc(s)} {n}" for s, n in sorted(counts.items())))
    real_shown = sorted(p for p in shown if p > 0)
    if total and real_shown and len(real_shown) < total:
        contiguous = real_shown == list(range(real_shown[0], real_shown[-1] + 1))
        meta.append(
            f"showing pages {real_shown[0]}&ndash;{real_shown[-1]}" if contiguous else f"showing {len(real_shown)} "
                                                                                       "pages"
        )
    yield f'<div class="llmocr-meta">{" &middot; ".join(meta)}</div>'
    if total:
        missing = [p for p in range(1, total + 1) if p not in entry.pages]
        if missing and 0 not in entry.pages:
            listed = ", ".join(str(p) for p in missing[:20]) + (", ..." if len(missing) > 20 else "")
            yield f'<div class="llmocr-note">pages with no row in the output (not processed yet?): {listed}</div>'
    if assembled is not None:
        anchors = {
            (int(row.get("page") or 0), tuple(f.get("bbox") or ())):
                anchor(anchor_prefix, entry.doc_id, row.get("page"), f.get("id"))
            for row in rows
            for f in row.get("figures") or []
        }
        yield render_assembled(assembled, figure_anchors=anchors)
    if fields is not None:
        yield render_fields(fields, lambda page: anchor(anchor_prefix, entry.doc_id, page) if page in shown else None)
    for row in rows:
        page = int(row.get("page") or 0)
        view = pages.page(page) if pages is not None and page > 0 else None
        here = fields_on_page(fields, page) if fields is not None and page > 0 else ""
        yield render_page(row, view, anchor_prefix=anchor_prefix, note_html=(page_notes or {}).get(page, "") + here)
    yield "</section>"
