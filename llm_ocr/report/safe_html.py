"""Untrusted model text -> safe HTML: Markdown without raw HTML, links limited to harmless
schemes, DeepSeek-OCR's tables through a whitelist sanitizer, images as ``data:`` URIs."""

from __future__ import annotations

import base64
import hashlib
import html
import logging
import re
import secrets
from collections.abc import Callable, Mapping
from functools import lru_cache
from html.parser import HTMLParser
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

if TYPE_CHECKING:
    from markdown_it import MarkdownIt

log = logging.getLogger(__name__)


# ============================================================================================
# Untrusted text → safe HTML

esc = html.escape  # quote=True by default: safe in text and in double-quoted attributes

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
            self.out.append(esc(data))

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
        return f'<span class="llmocr-missing">[figure {esc(figure_id)} not in the output]</span>'
    if _DATA_IMAGE_RE.match(src):
        return f'<img src="{esc(src)}" alt="{esc(alt)}">'
    # A remote image would make the report load from the network: show the reference instead.
    return f'<span class="llmocr-missing">[image {esc(alt)}: {esc(src)}]</span>'


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


def text_block(text: str | None, css: str = "llmocr-pre") -> str:
    return f'<pre class="{css}">{esc(text or "")}</pre>'


def anchor(*parts: object) -> str:
    """An element id derived from untrusted values without ever containing them."""
    data = "\x00".join(str(p) for p in parts).encode("utf-8", "surrogatepass")
    digest = hashlib.sha1(data, usedforsecurity=False).hexdigest()
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


def data_uri(data: bytes, mime: str | None = None) -> str | None:
    mime = mime or _sniff_mime(data)
    if mime is None:
        return None
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def figure_bytes(figure: Mapping[str, Any]) -> bytes | None:
    image = figure.get("image")
    if isinstance(image, Mapping):
        image = image.get("bytes")
    return bytes(image) if isinstance(image, (bytes, bytearray)) and image else None
