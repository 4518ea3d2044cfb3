"""Results people can look at: one self-contained HTML page per output folder.

``write_report(OUT)`` reads ``OUT/describe`` (else ``OUT/extract``) and, when present,
``OUT/assemble``, and writes a single HTML file: a summary table, then per document and page
the page image with the detected layout blocks drawn over it, the rendered Markdown, the
figures with their captions, the page status and error. Everything is inline (images as
``data:`` URIs, CSS in a ``<style>`` element); the page needs no JavaScript and loads nothing
from the network. The same fragments back the notebook helpers in :mod:`llm_ocr.display`.

Page images are not stored in the output, so they are re-rendered from each row's ``source``
with :mod:`llm_ocr.sources.render` (the same code Extract used; boxes are in pixels of the
image that was sent, ``width`` x ``height``, and are scaled to whatever size the re-render has).
When the source cannot be read the boxes are drawn on a blank canvas and the page says why.

Model output is untrusted: a document can contain text that looks like HTML. Markdown is
rendered by markdown-it-py with raw HTML disabled, links are restricted to harmless schemes,
and the only HTML that survives is DeepSeek-OCR's tables, passed through a small whitelist
sanitizer (see :func:`sanitize_table`). The report also carries a Content-Security-Policy that
forbids scripts and remote loads, as a second line of defence.

Memory stays bounded: a first pass reads only a few small columns of every part (counts and
which parts hold the selected documents); documents are then rendered one at a time, with at
most one part's table and one document's rows and page images in memory.
"""

from __future__ import annotations

import base64
import hashlib
import heapq
import html
import json
import logging
import os
import posixpath
import re
import secrets
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from html.parser import HTMLParser
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from pydantic import BaseModel, Field

from llm_ocr.sources.base import DocumentRef, PageFailure, RenderOptions
from llm_ocr.sources.listing import document_kind
from llm_ocr.storage import Storage, retry_io
from llm_ocr.storage.parts import list_parts

if TYPE_CHECKING:
    import pyarrow as pa
    from markdown_it import MarkdownIt

log = logging.getLogger(__name__)

__all__ = [
    "CSS",
    "DocumentEntry",
    "OutputReader",
    "PageView",
    "ReportError",
    "ReportOptions",
    "ReportResult",
    "Summary",
    "markdown_to_html",
    "pages_to_show",
    "render_document",
    "render_page",
    "render_summary",
    "sanitize_table",
    "write_report",
]

#: Stages whose rows are one page each, in order of preference (Describe adds captions).
PAGE_STAGES = ("describe", "extract")
ASSEMBLE_STAGE = "assemble"


class ReportOptions(BaseModel):
    """What the HTML report shows and where it is written."""

    html: str | None = Field(None, description="Where to write the report (default: OUT/report.html).")
    max_documents: int = Field(20, ge=1, description="Documents shown at most (the first ones, in input order).")
    max_pages_per_document: int = Field(20, ge=1, description="Pages shown per document at most (the first ones).")
    storage_options: dict[str, Any] = Field(
        default_factory=dict, description="JSON object of fsspec storage options for OUT, the sources and the report."
    )


class ReportError(Exception):
    """The report cannot be made (e.g. the output folder holds no pages)."""


# ============================================================================================
# Untrusted text → safe HTML

_esc = html.escape  # quote=True by default: safe in text and in double-quoted attributes

#: Tags a sanitized table keeps. Attributes other than colspan/rowspan are always dropped.
_TABLE_TAGS = frozenset({"table", "thead", "tbody", "tfoot", "tr", "th", "td", "caption", "br"})
_SPAN_ATTRS = frozenset({"colspan", "rowspan"})
#: Elements whose content is code or a nested document, not text: dropped with their content.
_DROP_WITH_CONTENT = frozenset(
    {"script", "style", "iframe", "object", "embed", "template", "noscript", "textarea", "title",
     "xmp", "noembed", "noframes", "svg", "math", "frameset", "select", "option"}
)
_VOID = frozenset({"br"})


class _TableSanitizer(HTMLParser):
    """Re-serialises an HTML fragment keeping only table structure and text.

    Nothing from the input is copied verbatim: tags are rebuilt from a whitelist, the only
    attributes are integer ``colspan``/``rowspan`` values we format ourselves, and all text is
    escaped again after the parser decoded its entities. Unclosed tags are closed at the end
    and stray end tags ignored, so the output is balanced and cannot swallow what follows.
    """

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.open: list[str] = []
        self.dropping = 0  # depth inside elements dropped with their content

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _DROP_WITH_CONTENT:
            self.dropping += 1
            return
        if self.dropping or tag not in _TABLE_TAGS:
            return
        if tag in _VOID:
            self.out.append(f"<{tag}>")
            return
        kept = ""
        for name, value in attrs:
            if name in _SPAN_ATTRS and value is not None and value.strip().isdigit():
                span = int(value.strip())
                if 1 <= span <= 1000:  # browsers clamp spans anyway; keep absurd values out
                    kept += f' {name}="{span}"'
        self.out.append(f"<{tag}{kept}>")
        self.open.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _DROP_WITH_CONTENT:
            return  # <script/> has no content to drop
        self.handle_starttag(tag, attrs)
        if tag in _TABLE_TAGS and tag not in _VOID and not self.dropping:
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in _DROP_WITH_CONTENT:
            self.dropping = max(0, self.dropping - 1)
            return
        if self.dropping or tag not in self.open:
            return
        while self.open:
            top = self.open.pop()
            self.out.append(f"</{top}>")
            if top == tag:
                break

    def handle_data(self, data: str) -> None:
        if not self.dropping:
            self.out.append(_esc(data))

    def result(self) -> str:
        self.close()
        while self.open:
            self.out.append(f"</{self.open.pop()}>")
        return "".join(self.out)


def sanitize_table(fragment: str) -> str:
    """An HTML table from model output, reduced to table tags, spans and escaped text.

    Why our own sanitizer rather than a dependency such as ``nh3``: the whitelist is a handful of
    tags and two integer attributes, and this one is safe by construction (it emits only markup it
    builds itself, never input markup), so a general-purpose sanitizer would add a compiled
    dependency for no added safety. The report's Content-Security-Policy backs it up.
    """
    parser = _TableSanitizer()
    parser.feed(fragment)
    return parser.result()


#: DeepSeek-OCR writes tables as HTML; an unclosed table runs to the end of the text.
_TABLE_RE = re.compile(r"<table\b[^>]*>.*?(?:</table\s*>|\Z)", re.IGNORECASE | re.DOTALL)
#: DeepSeek-OCR wraps captions in <center>; the tag only centres, so it is simply removed.
_CENTER_RE = re.compile(r"</?center\s*>", re.IGNORECASE)
_SCHEME_RE = re.compile(r"^([a-z][a-z0-9+.\-]*):", re.IGNORECASE)
_SAFE_SCHEMES = frozenset({"http", "https", "mailto", "figure"})
_DATA_IMAGE_RE = re.compile(r"^data:image/(?:png|jpeg|gif|webp);base64,[a-z0-9+/=\s]*$", re.IGNORECASE)


def _validate_link(url: str) -> bool:
    """Whether markdown-it may turn ``url`` into a link or image source.

    Only http(s), mailto, our own ``figure:`` references, inline raster images and plain
    relative references pass; anything else that looks like a scheme (``javascript:``,
    ``vbscript:``, ``data:text/html``, an obfuscated ``java%09script:``) is refused, and
    markdown-it then leaves the whole construct as plain text.
    """
    url = url.strip()
    match = _SCHEME_RE.match(url)
    if match:
        scheme = match.group(1).lower()
        return scheme in _SAFE_SCHEMES or (scheme == "data" and bool(_DATA_IMAGE_RE.match(url)))
    head = url.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    return ":" not in head  # "java%09script:x" is not a valid scheme but looks like one: refuse


#: (figure id, alt text) → HTML for that figure, or None when the figure is unknown.
FigureHTML = Callable[[str, str], "str | None"]


def _render_image(self: Any, tokens: list[Any], idx: int, options: Any, env: dict[str, Any]) -> str:
    """markdown-it image rule: figures become their crops; nothing is fetched from elsewhere."""
    token = tokens[idx]
    src = token.attrGet("src") or ""
    alt = self.renderInlineAsText(token.children or [], options, env)
    if src.lower().startswith("figure:"):
        figure_id = unquote(src[len("figure:") :])
        rendered = env.get("figure_html", _no_figure)(figure_id, alt)
        if rendered is not None:
            return rendered
        return f'<span class="llmocr-missing">[figure {_esc(figure_id)} not in the output]</span>'
    if _DATA_IMAGE_RE.match(src):
        return f'<img src="{_esc(src)}" alt="{_esc(alt)}">'
    # A remote image would make the report load from the network: show the reference instead.
    return f'<span class="llmocr-missing">[image {_esc(alt)}: {_esc(src)}]</span>'


def _no_figure(figure_id: str, alt: str) -> None:
    return None


def _render_link_open(self: Any, tokens: list[Any], idx: int, options: Any, env: dict[str, Any]) -> str:
    # The report is a local file: links open elsewhere without giving it a referrer or opener.
    tokens[idx].attrSet("rel", "nofollow noopener noreferrer")
    return self.renderToken(tokens, idx, options, env)


@lru_cache(maxsize=1)
def _markdown() -> MarkdownIt:
    """The one configured markdown-it instance (built on first use, not at import)."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable(["table", "strikethrough"])
    md.validateLink = _validate_link  # type: ignore[method-assign]
    md.add_render_rule("image", _render_image)
    md.add_render_rule("link_open", _render_link_open)
    return md


def markdown_to_html(text: str | None, figure_html: FigureHTML | None = None) -> str:
    """Model Markdown → safe HTML.

    Raw HTML is escaped, except DeepSeek-OCR's ``<table>`` blocks, which are sanitized by
    :func:`sanitize_table` and put back in place. ``![](figure:ID)`` references are rendered
    by ``figure_html``. Safe to call with any text: the output never holds markup or URLs
    taken from the input other than escaped text, table structure and vetted links.
    """
    if not text:
        return ""
    # Tables are lifted out before markdown-it sees the text and replaced by placeholders made
    # of letters and digits, which Markdown leaves alone; the random nonce means document text
    # cannot forge one (and a forged one would only yield a sanitized table anyway).
    nonce = secrets.token_hex(8)
    tables: list[str] = []

    def lift(match: re.Match[str]) -> str:
        tables.append(sanitize_table(match.group(0)))
        return f"\n\nLLMOCRTABLE{nonce}N{len(tables) - 1}X\n\n"

    source = _TABLE_RE.sub(lift, _CENTER_RE.sub("", text))
    rendered = _markdown().render(source, {"figure_html": figure_html or _no_figure})
    for i, table in enumerate(tables):
        placeholder = f"LLMOCRTABLE{nonce}N{i}X"
        wrapped = f'<div class="llmocr-table">{table}</div>'
        rendered = rendered.replace(f"<p>{placeholder}</p>", wrapped).replace(placeholder, wrapped)
    return rendered


def _text_block(text: str | None, css: str = "llmocr-pre") -> str:
    return f'<pre class="{css}">{_esc(text or "")}</pre>'


def _anchor(*parts: object) -> str:
    """An element id derived from untrusted values without ever containing them."""
    digest = hashlib.sha1("\x00".join(str(p) for p in parts).encode("utf-8", "surrogatepass")).hexdigest()
    return "llmocr-" + digest[:14]


_IMAGE_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def _sniff_mime(data: bytes) -> str | None:
    """The MIME type of raster image bytes, or None: only known raster formats are inlined."""
    for magic, mime in _IMAGE_MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _data_uri(data: bytes, mime: str | None = None) -> str | None:
    mime = mime or _sniff_mime(data)
    if mime is None:
        return None
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _figure_bytes(figure: Mapping[str, Any]) -> bytes | None:
    image = figure.get("image")
    if isinstance(image, Mapping):
        image = image.get("bytes")
    return bytes(image) if isinstance(image, (bytes, bytearray)) and image else None


# ============================================================================================
# Page images, re-rendered from the source


@dataclass
class PageView:
    """The image of a page to draw boxes on: encoded bytes and size, or why there is none."""

    data: bytes | None = None
    mime: str | None = None
    width: int | None = None
    height: int | None = None
    note: str | None = None


class SourcePages:
    """Re-renders the pages of one source document, as Extract did; a context manager.

    Remote sources are copied to a temporary file through :class:`~llm_ocr.storage.Storage`
    (the renderer reads local files lazily and cannot take storage options). Closing releases
    the temporary file and the renderer's open PDFs. pypdfium2 is not thread-safe: use from
    one thread, and not while an in-process Extract renders.
    """

    def __init__(
        self,
        doc_id: str,
        source: str | None,
        options: RenderOptions | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.doc_id = doc_id
        self.source = source
        self.options = options or RenderOptions()
        self.storage_options = dict(storage_options or {})
        self._ref: DocumentRef | None = None
        self._problem: str | None = None
        self._tmp: str | None = None
        self._opened = False

    def __enter__(self) -> SourcePages:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the temporary copy and the open PDFs."""
        if self._opened:
            from llm_ocr.sources.render import close_documents

            close_documents()
        if self._tmp is not None:
            try:
                os.unlink(self._tmp)
            except OSError:
                pass
            self._tmp = None

    def _open(self) -> None:
        self._opened = True
        source = self.source
        if not source:
            self._problem = "the row has no source"
            return
        try:
            store = Storage(source, self.storage_options)
            if not store.fs.isfile(store.root):
                self._problem = (
                    "the source is a dataset or folder; page images of dataset rows are not kept in the output"
                    if store.fs.isdir(store.root)
                    else "the source file is not reachable"
                )
                return
            kind = document_kind(source)
            if kind is None:
                if source.lower().endswith(".parquet"):
                    self._problem = "the source is a dataset; page images of dataset rows are not kept in the output"
                    return
                # Extract sniffs unknown extensions the same way (see sources.listing).
                kind = "pdf" if b"%PDF" in retry_io(lambda: store.fs.cat_file(store.root, 0, 1024), what="sniffing") else "image"
            location = store.root
            if not store.is_local:
                suffix = posixpath.splitext(store.root)[1]
                handle, self._tmp = tempfile.mkstemp(prefix="llm-ocr-report-", suffix=suffix)
                with os.fdopen(handle, "wb") as out:
                    out.write(store.read_bytes(store.root))
                location = self._tmp
            self._ref = DocumentRef(doc_id=self.doc_id, index=0, source=source, kind=kind, location=location)
        except Exception as exc:  # noqa: BLE001 -- an unreachable source only costs the picture
            self._problem = f"the source cannot be read ({type(exc).__name__}: {exc})"

    def page(self, number: int) -> PageView:
        """The re-rendered page ``number`` (1-based), or a :class:`PageView` with a ``note``."""
        from llm_ocr.sources.render import render_pages

        if not self._opened:
            self._open()
        if self._ref is None:
            return PageView(note=self._problem)
        if number < 1:
            return PageView(note="no page image for a document-level row")
        try:
            (result,) = render_pages(self._ref, self.options, number, number)
        except Exception as exc:  # noqa: BLE001 -- DocumentError, a page out of range, a broken file
            return PageView(note=f"the page cannot be re-rendered ({exc})")
        if isinstance(result, PageFailure):
            return PageView(note=f"the page cannot be re-rendered ({result.error})")
        return PageView(result.image, result.mime, result.width, result.height)


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
    return _PALETTE[int(hashlib.sha1(label.encode("utf-8", "surrogatepass")).hexdigest(), 16) % len(_PALETTE)]


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
""".strip()


def _status_badge(status: str | None) -> str:
    status = status or "unknown"
    css = status if status in ("ok", "truncated", "partial", "error") else "error"
    return f'<span class="llmocr-status llmocr-status-{css}">{_esc(status)}</span>'


def _figure_block(figure: Mapping[str, Any], anchor: str | None = None, alt: str = "") -> str:
    """A figure crop with its id, caption, structured caption and error."""
    figure_id = str(figure.get("id") or "")
    id_attr = f' id="{anchor}"' if anchor else ""
    parts = [f'<figure class="llmocr-figure"{id_attr}>']
    data = _figure_bytes(figure)
    uri = _data_uri(data) if data else None
    if uri:
        parts.append(f'<img src="{uri}" alt="{_esc(alt or "figure " + figure_id)}">')
    else:
        parts.append('<span class="llmocr-missing">[no image stored for this figure]</span>')
    caption = [f'<span class="llmocr-figid">{_esc(figure_id)}</span>']
    page = figure.get("page")
    if page is not None:
        caption.append(f'<span class="llmocr-figid"> (page {_esc(str(page))})</span>')
    if figure.get("description"):
        caption.append(markdown_to_html(str(figure["description"])))
    elif not figure.get("error"):
        caption.append('<div class="llmocr-missing">no description</div>')
    if figure.get("description_json"):
        pretty = _text_block(_pretty_json(str(figure["description_json"])))
        caption.append(f"<details><summary>description JSON</summary>{pretty}</details>")
    if figure.get("error"):
        caption.append(f'<div class="llmocr-error">{_esc(str(figure["error"]))}</div>')
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
    uri = _data_uri(view.data, view.mime) if view.data else None
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
        tip = _esc(f"{number}. {label}: {(block.get('text') or '')[:400]}")
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
                f"{_esc(label)}</text></g>"
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
        f'<span><i style="border-color:{label_colour(label)}"></i>{_esc(label)} &times;{n}</span>'
        for label, n in counts.most_common()
    )
    return f'<div class="llmocr-legend">{items}</div>'


def render_page(row: Mapping[str, Any], view: PageView | None = None, *, anchor_prefix: str = "") -> str:
    """One page row → an HTML fragment (image with boxes, Markdown, figures, status, error)."""
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
        return _figure_block(figure, _anchor(anchor_prefix, doc_id, page, figure_id) if first else None, alt)

    markdown = markdown_to_html(row.get("markdown"), figure_html)
    title = "document" if page == 0 else f"page {_esc(str(page))}"
    num_pages = row.get("num_pages")
    parts = [
        f'<section class="llmocr-page" id="{_anchor(anchor_prefix, doc_id, page)}">',
        f"<h3>{title.capitalize()}{f' of {num_pages}' if num_pages and page else ''} {_status_badge(row.get('status'))}</h3>",
    ]
    if row.get("error"):
        parts.append(f'<div class="llmocr-error">{_esc(str(row["error"]))}</div>')
    blocks = list(row.get("blocks") or [])
    # A document-level row (page 0: the document could not be opened) has no picture.
    picture, note = _boxes_svg(row, view) if page != 0 or blocks else ("", None)
    if note:
        parts.append(f'<div class="llmocr-note">{_esc(note)}</div>')
    left = picture + _legend(blocks)
    right = markdown or '<p class="llmocr-missing">no Markdown</p>'
    parts.append(f'<div class="llmocr-cols"><div>{left}</div><div class="llmocr-md">{right}</div></div>')
    others = [f for f in figures if str(f.get("id")) not in inline]
    if others:
        parts.append("<div><strong>Figures</strong><br>")
        parts += [_figure_block(f, _anchor(anchor_prefix, doc_id, page, f.get("id"))) for f in others]
        parts.append("</div>")
    meta = [
        f"{name}: {_esc(str(row.get(key)))}"
        for name, key in (
            ("finish", "finish_reason"), ("prompt tokens", "prompt_tokens"), ("completion tokens", "completion_tokens"),
            ("latency s", "latency_s"), ("attempts", "attempts"), ("model", "model"),
        )
        if row.get(key) is not None
    ]
    if row.get("width") and row.get("height"):
        meta.append(f"sent image: {_esc(str(row['width']))}&times;{_esc(str(row['height']))} px")
    if meta:
        parts.append(f'<div class="llmocr-meta">{" &middot; ".join(meta)}</div>')
    if row.get("raw"):
        parts.append(f"<details><summary>Raw model output</summary>{_text_block(row.get('raw'))}</details>")
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
            f'<a class="llmocr-figid" href="#{target}">[figure {_esc(figure_id)}, page {_esc(str(page))}]</a>'
            f"{' ' + _esc(str(caption)) if caption else ''}"
        )

    failed = row.get("failed_pages") or []
    head = f"Assembled Markdown {_status_badge(row.get('status'))}"
    body = [markdown_to_html(row.get("markdown"), figure_html) or '<p class="llmocr-missing">empty</p>']
    if failed:
        body.insert(0, f'<div class="llmocr-error">failed pages: {_esc(", ".join(str(p) for p in failed))}</div>')
    if row.get("error"):
        body.insert(0, f'<div class="llmocr-error">{_esc(str(row["error"]))}</div>')
    return f'<details class="llmocr-assembled"><summary>{head}</summary><div class="llmocr-md">{"".join(body)}</div></details>'


# ============================================================================================
# Reading the output folder


@dataclass
class DocumentEntry:
    """What the index pass learned about one document: where its rows are and their status."""

    doc_id: str
    doc_index: int
    source: str | None = None
    num_pages: int | None = None
    pages: dict[int, str] = field(default_factory=dict)  # page → status
    parts: list[str] = field(default_factory=list)  # page-stage parts holding its rows, in order
    assemble_parts: list[str] = field(default_factory=list)

    @staticmethod
    def _add_part(path: str, into: list[str]) -> None:
        if path not in into:
            into.append(path)


@dataclass
class Summary:
    """Counts over a whole output folder (not only the documents a report shows)."""

    out: str
    stage: str | None = None
    documents: int = 0
    pages: int = 0
    status_counts: dict[str, int] = field(default_factory=dict)
    document_failures: int = 0
    assembled: dict[str, int] | None = None
    shown_documents: int | None = None


_INDEX_COLUMNS = ["doc_id", "doc_index", "page", "status", "source", "num_pages"]


class OutputReader:
    """Reads an output folder for the report and the notebook helpers.

    ``scan()`` makes one pass over small columns of every part; ``page_rows()`` and
    ``assembled_row()`` then read one document's rows, keeping at most one part in memory.
    """

    def __init__(self, out: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.out = out
        self.storage = Storage(out, dict(storage_options or {}))
        self.stage_name: str | None = None
        self.stage: Storage | None = None
        for name in PAGE_STAGES:
            stage = self.storage.child(name)
            if list_parts(stage):
                self.stage_name, self.stage = name, stage
                break
        self.assemble = self.storage.child(ASSEMBLE_STAGE)
        self._cached: tuple[str, pa.Table] | None = None

    def _table(self, stage: Storage, path: str, columns: list[str] | None = None) -> pa.Table:
        import pyarrow.parquet as pq

        if columns is None and self._cached and self._cached[0] == path:
            return self._cached[1]

        def read() -> pa.Table:
            # Through the storage door, with a file handle: only the requested columns' bytes
            # are read, which keeps the index pass cheap on object stores too.
            with stage.fs.open(path, "rb") as handle:
                return pq.read_table(handle, columns=columns)

        table = retry_io(read, what=f"reading {stage.display(path)}")
        if columns is None:
            self._cached = (path, table)  # documents tend to sit together in one part
        return table

    def scan(self, max_documents: int | None = None, only: set[str] | None = None) -> tuple[Summary, list[DocumentEntry]]:
        """Count everything and index the documents to show.

        The documents kept are those in ``only`` if given, else the ``max_documents`` first in
        input order (``doc_index``), chosen with a bounded heap so memory does not grow with
        the output. Documents are counted by their page-1 (or document-level page-0) row.
        """
        summary = Summary(out=self.out, stage=self.stage_name)
        status: Counter[str] = Counter()
        kept: dict[str, DocumentEntry] = {}
        heap: list[tuple[int, str]] = []  # (-doc_index, doc_id): the worst kept document on top
        if self.stage is not None:
            for path in list_parts(self.stage):
                table = self._table(self.stage, path, _INDEX_COLUMNS)
                for batch in table.to_batches(max_chunksize=4096):
                    cols = batch.to_pydict()
                    for doc_id, doc_index, page, state, source, num_pages in zip(*(cols[c] for c in _INDEX_COLUMNS), strict=True):
                        page = page or 0
                        if page <= 1:
                            summary.documents += 1
                        if page == 0:
                            summary.document_failures += 1
                        else:
                            summary.pages += 1
                            status[state or "unknown"] += 1
                        entry = kept.get(doc_id)
                        if entry is None:
                            rank = doc_index if doc_index is not None else 2**62
                            if only is not None:
                                if doc_id not in only:
                                    continue
                            elif max_documents is not None and len(kept) >= max_documents:
                                if rank >= -heap[0][0]:
                                    continue
                                _, evicted = heapq.heappop(heap)
                                del kept[evicted]
                            entry = kept[doc_id] = DocumentEntry(doc_id, rank)
                            if only is None:
                                heapq.heappush(heap, (-rank, doc_id))
                        entry.source = entry.source or source
                        entry.num_pages = num_pages if num_pages is not None else entry.num_pages
                        entry.pages[page] = state or "unknown"
                        entry._add_part(path, entry.parts)
        summary.status_counts = dict(status)
        assembled = list_parts(self.assemble)
        if assembled:
            counts: Counter[str] = Counter()
            for path in assembled:
                table = self._table(self.assemble, path, ["doc_id", "status"])
                for doc_id, state in zip(table.column("doc_id").to_pylist(), table.column("status").to_pylist(), strict=True):
                    counts[state or "unknown"] += 1
                    if doc_id in kept:
                        kept[doc_id]._add_part(path, kept[doc_id].assemble_parts)
            summary.assembled = dict(counts)
        return summary, sorted(kept.values(), key=lambda e: (e.doc_index, e.doc_id))

    def _rows(self, stage: Storage, paths: list[str], doc_id: str, pages: set[int] | None) -> list[dict[str, Any]]:
        import pyarrow.compute as pc

        rows: list[dict[str, Any]] = []
        for path in paths:
            table = self._table(stage, path)
            mask = pc.equal(table.column("doc_id"), doc_id)
            if pages is not None and "page" in table.column_names:
                mask = pc.and_(mask, pc.is_in(table.column("page"), value_set=_int_array(pages)))
            rows.extend(table.filter(mask).to_pylist())
        return rows

    def page_rows(self, entry: DocumentEntry, pages: set[int] | None = None) -> list[dict[str, Any]]:
        """The page rows of one document (only ``pages`` if given), in page order."""
        if self.stage is None:
            return []
        rows = self._rows(self.stage, entry.parts, entry.doc_id, pages)
        # A page should appear once; if a store without atomic writes left a duplicate, show
        # the most useful row (a finished one over an error).
        best: dict[int, dict[str, Any]] = {}
        for row in rows:
            page = row.get("page") or 0
            if page not in best or best[page].get("status") == "error":
                best[page] = row
        return [best[p] for p in sorted(best)]

    def assembled_row(self, entry: DocumentEntry) -> dict[str, Any] | None:
        """The Assemble row of one document, if there is one."""
        rows = self._rows(self.assemble, entry.assemble_parts, entry.doc_id, None)
        return rows[-1] if rows else None

    def release(self) -> None:
        """Drop the cached part table."""
        self._cached = None


def _int_array(values: set[int]) -> pa.Array:
    import pyarrow as pa

    return pa.array(sorted(values), type=pa.int32())


def render_summary(summary: Summary) -> str:
    """The summary table: documents, pages by status, assembled documents by status."""
    rows = [("Output", _esc(summary.out)), ("Pages read from", _esc(f"{summary.stage}/" if summary.stage else "(no pages)"))]
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
    body = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    body += "".join(f'<tr><th>{_esc(k)}</th><td class="n">{n}</td></tr>' for k, n in numbers)
    return f'<table class="llmocr-summary">{body}</table>'


def render_document(
    entry: DocumentEntry,
    rows: Sequence[Mapping[str, Any]],
    *,
    assembled: Mapping[str, Any] | None = None,
    pages: SourcePages | None = None,
    anchor_prefix: str = "",
) -> Iterator[str]:
    """One document as HTML fragments, yielded page by page so a caller can stream them."""
    shown = {int(r.get("page") or 0) for r in rows}
    total = entry.num_pages
    yield f'<section class="llmocr-doc" id="{_anchor(anchor_prefix, "doc", entry.doc_id)}">'
    yield f"<h2>{_esc(entry.doc_id)}</h2>"
    meta = [f"source: {_esc(entry.source or '?')}"]
    if total:
        meta.append(f"{total} page{'s' if total != 1 else ''}")
    counts = Counter(entry.pages.values())
    meta.append(", ".join(f"{_esc(s)} {n}" for s, n in sorted(counts.items())))
    real_shown = sorted(p for p in shown if p > 0)
    if total and real_shown and len(real_shown) < total:
        contiguous = real_shown == list(range(real_shown[0], real_shown[-1] + 1))
        meta.append(
            f"showing pages {real_shown[0]}&ndash;{real_shown[-1]}" if contiguous else f"showing {len(real_shown)} pages"
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
                _anchor(anchor_prefix, entry.doc_id, row.get("page"), f.get("id"))
            for row in rows
            for f in row.get("figures") or []
        }
        yield render_assembled(assembled, figure_anchors=anchors)
    for row in rows:
        page = int(row.get("page") or 0)
        view = pages.page(page) if pages is not None and page > 0 else None
        yield render_page(row, view, anchor_prefix=anchor_prefix)
    yield "</section>"


# ============================================================================================
# The report file

#: No scripts, nothing from the network: only inline styles and data: images. If a sanitizer
#: bug ever let markup through, the browser would still refuse to run or fetch anything.
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"


@dataclass
class ReportResult:
    """Where the report went and what it holds."""

    path: str
    documents: int
    pages: int
    summary: Summary


def pages_to_show(entry: DocumentEntry, limit: int) -> set[int]:
    """The first ``limit`` pages of a document (plus its document-level row, if any)."""
    pages = sorted(entry.pages)
    return set(pages[: limit + (1 if 0 in entry.pages else 0)])


def write_report(
    out: str,
    html_path: str | None = None,
    *,
    max_documents: int = 20,
    max_pages_per_document: int = 20,
    render: RenderOptions | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> ReportResult:
    """Write the HTML report of output folder ``out``; returns where and how much.

    The file is written to a local temporary file as documents are rendered, then moved (or,
    for a remote ``html_path``, uploaded) in one piece, so a reader never sees half a report.
    """
    so = dict(storage_options or {})
    reader = OutputReader(out, so)
    if reader.stage is None:
        raise ReportError(f"no page rows under {out}: expected Parquet parts in {out}/describe or {out}/extract")
    summary, entries = reader.scan(max_documents=max_documents)
    summary.shown_documents = len(entries)
    target = Storage(html_path or reader.storage.url + "/report.html", so)
    pages_written = 0
    local_dir = posixpath.dirname(target.root) if target.is_local else None
    if local_dir:
        os.makedirs(local_dir, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=".report-", suffix=".html.tmp", dir=local_dir)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as f:
            f.write(_head(f"llm-ocr report: {out}"))
            f.write(f"<h1>llm-ocr report</h1>{render_summary(summary)}")
            if entries:
                f.write("<nav><strong>Documents</strong><ol>")
                for entry in entries:
                    status = ", ".join(f"{_esc(s)} {n}" for s, n in sorted(Counter(entry.pages.values()).items()))
                    link = f'<a href="#{_anchor("", "doc", entry.doc_id)}">{_esc(entry.doc_id)}</a>'
                    f.write(f'<li>{link} <span class="llmocr-meta">({status})</span></li>')
                f.write("</ol></nav>")
            for entry in entries:
                rows = reader.page_rows(entry, pages_to_show(entry, max_pages_per_document))
                assembled = reader.assembled_row(entry) if entry.assemble_parts else None
                with SourcePages(entry.doc_id, entry.source, render, so) as source_pages:
                    for fragment in render_document(entry, rows, assembled=assembled, pages=source_pages):
                        f.write(fragment)
                pages_written += len(rows)
                log.info("report: %s (%d pages)", entry.doc_id, len(rows))
            reader.release()
            f.write("</div></body></html>\n")
        if target.is_local:
            # mkstemp creates the file private (0600); give the report the usual permissions.
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
            os.replace(tmp, target.root)
        else:
            retry_io(lambda: target.fs.put_file(tmp, target.root), what=f"writing {target.display(target.root)}")
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return ReportResult(target.display(target.root), len(entries), pages_written, summary)


def _head(title: str) -> str:
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="referrer" content="no-referrer">'
        f"<title>{_esc(title)}</title><style>body{{margin:1.2em;background:#fff}}\n{CSS}</style></head>"
        '<body><div class="llmocr">'
    )
