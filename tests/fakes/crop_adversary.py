"""A model server that is not the project's simulator: it answers crops of a page the way real
models go wrong at a crop's edge (issue 47, "checked against a model that is not ours").

The simulator (``llm_ocr/engines/sim``) answers a crop with every line that lies at least half
inside it, whole. A real model is shown pixels: a line cut across its length shows only its
letters inside the crop, and at the crop's edge it may write more than it sees. This server
knows the pages a test drew itself (:func:`draw_page`: Pillow, the Vera font reportlab ships,
every line's text and every letter's place known), finds where a received image lies on one of
them (normalised cross-correlation at the few scales a client sends pieces at: the page's own
pixels, a piece as wide or as tall as the page; :func:`locate`), and answers with what that part
of the page shows, in the family's markup (its own writer: DeepSeek-OCR's grounding tags, or
olmOCR-2's boxless Markdown, by the name asked for), changed by a
:class:`Behaviour`:

- ``honest``: each line at least half of whose height is inside, and of it only the letters
  whose middle is inside (a wide line cut in three reads ``quick brov`` / ``wn fox``);
- ``continues``: a line the crop's edge cuts (across its length, or through its height with a
  sliver of it showing) is written whole, completed from memory;
- ``header``: the page's first line is written at the top of every crop's answer;
- ``header_lower``: the same, but after a stray line (:data:`STRAY`), as the crop's second
  block: a header a model writes lower than the first line of its answer;
- ``next_line``: the first line below the crop is written at its end;
- ``crops_bad``: the whole page is read honestly, every crop with long unrepeated words that
  are not the page's, running to ``max_tokens``.

It runs in a thread of the test process (:class:`ServedAdversary`), on the OpenAI-compatible
frame the project's servers share (``llm_ocr/engines/frame``: request checks, streaming, token
budget), and keeps a log of what it was asked (:attr:`CropAdversary.seen`).
"""

from __future__ import annotations

import asyncio
import io
import os
import random
import threading
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from aiohttp import web
from PIL import Image, ImageDraw, ImageFont

from llm_ocr.engines.frame.app import FrameConfig, OpenAIServer
from llm_ocr.engines.frame.protocol import (
    ApiError,
    admit_max_tokens,
    error_response,
    estimate_prompt_tokens,
    parse_chat_request,
)
from llm_ocr.vlm.box import Box
from llm_ocr.vlm.families import family_for
from llm_ocr.vlm.view import Element, View

Behaviour = Literal["honest", "continues", "header", "header_lower", "next_line", "crops_bad"]
MODEL = "deepseek-ai/DeepSeek-OCR"
#: A family whose answers carry no boxes (its pieces are joined by the text they repeat).
BOXLESS_MODEL = "allenai/olmOCR-2-7B-1025-FP8"
#: A received image is taken for a part of a page when it correlates at least this well there.
MIN_CORRELATION = 0.6
#: A line is read when at least this share of its height is inside the crop (a real model reads
#: a line it sees most of) ...
READ_SHARE = 0.5
#: ... and, playing ``continues``, written whole when at least this share is (a sliver: it guesses the rest).
GUESS_SHARE = 0.02
#: A region within this many page pixels of the whole page on every side is the whole page.
WHOLE_SLACK = 4
#: The grey copies are compared with their longer side at most this many pixels.
MATCH_SIDE = 700
#: The stray line ``header_lower`` writes above the header: a mark a model reads off a crop's edge.
STRAY = "(continued)"


def font(size: int) -> ImageFont.FreeTypeFont:
    """reportlab's Vera (a test dependency ships it): the same glyphs on every machine."""
    import reportlab

    return ImageFont.truetype(os.path.join(os.path.dirname(reportlab.__file__), "fonts", "Vera.ttf"), size)


@dataclass(frozen=True)
class Line:
    """One line of a drawn page: its text, its paragraph, and where each letter lies (page px)."""

    text: str
    paragraph: int
    top: int
    bottom: int
    #: The left edge of each letter and the right edge of the last: ``len(text) + 1`` values.
    edges: tuple[float, ...]

    @property
    def left(self) -> float:
        return self.edges[0]

    @property
    def right(self) -> float:
        return self.edges[-1]

    def letters_in(self, x1: float, x2: float) -> str:
        """The letters whose middle lies in ``[x1, x2)``, as the crop shows them."""
        mids = [(a + b) / 2 for a, b in zip(self.edges, self.edges[1:])]
        return "".join(c for c, m in zip(self.text, mids) if x1 <= m < x2).strip()


@dataclass
class TruthPage:
    """A page a test drew: its image (PNG bytes), its grey pixels, its lines in reading order."""

    name: str
    png: bytes
    grey: np.ndarray = field(repr=False)
    lines: list[Line]

    @property
    def size(self) -> tuple[int, int]:
        return self.grey.shape[1], self.grey.shape[0]

    @property
    def text(self) -> str:
        return "\n".join(line.text for line in self.lines)


def draw_page(name: str, columns: list[list[list[str]]], *, width: int | None = None, size: int = 18,
              margin: int = 24, gutter: int = 48, pitch: float = 1.5, paragraph_gap: float = 0.8,
              height: int | None = None) -> TruthPage:
    """A page of ``columns`` (each a list of paragraphs, each a list of lines), left to right,
    in Vera ``size`` px, lines ``pitch`` sizes apart; as wide as its widest lines (or ``width``)
    and as tall as its longest column (or ``height``). Reading order: column by column."""
    face = font(size)
    step = round(size * pitch)
    widths = [max((face.getlength(t) for p in col for t in p), default=0) for col in columns]
    lefts, x = [], float(margin)
    for w in widths:
        lefts.append(x)
        x += w + gutter
    page_w = width or round(x - gutter + margin)
    tall = [sum(len(p) * step + round(paragraph_gap * step) for p in col) for col in columns]
    page_h = height or round(max(tall) + 2 * margin)
    image = Image.new("L", (page_w, page_h), 255)
    pen = ImageDraw.Draw(image)
    lines: list[Line] = []
    number = 0
    for left, col in zip(lefts, columns):
        y = margin
        for paragraph in col:
            for text in paragraph:
                pen.text((left, y), text, fill=0, font=face)
                edges = tuple(left + face.getlength(text[:i]) for i in range(len(text) + 1))
                lines.append(Line(text, number, y, y + size + size // 4, edges))
                y += step
            number += 1
            y += round(paragraph_gap * step)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return TruthPage(name, buffer.getvalue(), np.asarray(image, dtype=np.float64), lines)


def scanned(page: TruthPage, seed: int = 0, noise: float = 12.0, verso: float = 0.0, verso_shift: int = 0) -> TruthPage:
    """``page`` as a scanner gives it back: its ink a little blurred and lighter, on grey paper
    with ``noise`` grey levels of grain in every pixel (so no row of the page is blank), and,
    with ``verso``, the other side's print showing through at that share of its darkness
    (the page mirrored, ``verso_shift`` px lower: between the lines of this side). Its lines and
    letters stay where they were (a model reads this side); the server matches crops against
    the scan."""
    from PIL import ImageFilter

    rng = np.random.default_rng(seed)
    soft = Image.fromarray(page.grey.astype(np.uint8)).filter(ImageFilter.GaussianBlur(0.8))
    grey = np.asarray(soft, dtype=np.float64)
    if verso:
        grey = grey - verso * (255.0 - np.roll(grey[:, ::-1], verso_shift, axis=0))
    grey = np.clip(grey, 0, 255) * 0.85 + 25 + rng.normal(0.0, noise, page.grey.shape)
    grey = np.clip(grey, 0, 255).round()
    buffer = io.BytesIO()
    Image.fromarray(grey.astype(np.uint8)).save(buffer, format="PNG")
    return TruthPage(page.name, buffer.getvalue(), grey, page.lines)


# -- where a received image lies ------------------------------------------------------------------


def _ncc(page: np.ndarray, template: np.ndarray) -> tuple[float, int, int]:
    """The best normalised cross-correlation of ``template`` over ``page``: (score, x, y)."""
    ph, pw = page.shape
    th, tw = template.shape
    if th > ph or tw > pw or th < 4 or tw < 4:
        return -1.0, 0, 0
    t = template - template.mean()
    t_norm = float(np.sqrt((t * t).sum()))
    if t_norm == 0:
        return -1.0, 0, 0
    corr = np.fft.irfft2(np.fft.rfft2(page) * np.conj(np.fft.rfft2(t, s=page.shape)), s=page.shape)
    corr = corr[: ph - th + 1, : pw - tw + 1]

    def windows(a: np.ndarray) -> np.ndarray:
        s = np.zeros((ph + 1, pw + 1))
        s[1:, 1:] = a.cumsum(0).cumsum(1)
        return s[th:, tw:] - s[:-th, tw:] - s[th:, :-tw] + s[:-th, :-tw]

    total, squares = windows(page), windows(page * page)
    var = np.maximum(squares - total * total / (th * tw), 1e-9)
    score = corr / np.sqrt(var) / t_norm
    score[var < 1.0] = -1.0  # a blank window matches nothing
    y, x = np.unravel_index(int(np.argmax(score)), score.shape)
    return float(score[y, x]), int(x), int(y)


def locate(image: Image.Image, pages: list[TruthPage]) -> tuple[TruthPage, Box] | None:
    """The page ``image`` shows part (or all) of, and that part in page pixels; None: none.

    Scales tried: the page's own pixels (DeepSeek-OCR's pieces of an image are cut at its full
    resolution), and a piece as wide or as tall as the page (a page or a segment resized)."""
    grey = np.asarray(image.convert("L"), dtype=np.float64)
    h, w = grey.shape
    best: tuple[float, TruthPage, Box] | None = None
    for page in pages:
        pw, ph = page.size
        shrink = max(1.0, max(pw, ph) / MATCH_SIDE)
        small = np.asarray(Image.fromarray(page.grey.astype(np.uint8)).resize(
            (max(1, round(pw / shrink)), max(1, round(ph / shrink))), Image.Resampling.BOX), dtype=np.float64)
        for scale in sorted({1.0, w / pw, h / ph}):
            tw, th = round(w / scale / shrink), round(h / scale / shrink)
            if tw > small.shape[1] + 1 or th > small.shape[0] + 1:
                continue
            tw, th = min(tw, small.shape[1]), min(th, small.shape[0])
            template = np.asarray(Image.fromarray(grey.astype(np.uint8)).resize((tw, th), Image.Resampling.BOX),
                                  dtype=np.float64)
            score, x, y = _ncc(small, template)
            if best is None or score > best[0]:
                box = Box(x * shrink, y * shrink, x * shrink + w / scale, y * shrink + h / scale)
                best = (score, page, box)
    if best is None or best[0] < MIN_CORRELATION:
        return None
    return best[1], best[2]


# -- what a crop is answered with -------------------------------------------------------------------


def _visible(line: Line, region: Box) -> float:
    """The share of ``line``'s height inside ``region``."""
    inside = min(line.bottom, region.y2) - max(line.top, region.y1)
    return max(0.0, inside) / max(1, line.bottom - line.top)


def _element(lines: list[tuple[Line, str]], region: Box) -> Element:
    """A paragraph's lines as one text element, its box the letters shown, as image fractions."""
    x1 = max(region.x1, min(line.left for line, _ in lines))
    x2 = min(region.x2, max(line.right for line, _ in lines))
    y1 = max(region.y1, min(line.top for line, _ in lines))
    y2 = min(region.y2, max(line.bottom for line, _ in lines))
    w, h = region.width, region.height
    box = Box((x1 - region.x1) / w, (y1 - region.y1) / h, (x2 - region.x1) / w, (y2 - region.y1) / h)
    return Element("text", box, " ".join(text for _, text in lines))


def _edge_element(text: str, region: Box, top: bool, row: int = 0) -> Element:
    """A line the model invents at the crop's top or bottom edge (``row`` lines below its top)."""
    box = Box(0.02, 0.03 * row, 0.9, 0.03 * (row + 1)) if top else Box(0.02, 0.97, 0.9, 1.0)
    return Element("text", box, text)


def answer_elements(page: TruthPage, region: Box, behaviour: Behaviour, whole: bool) -> list[Element]:
    """What a model playing ``behaviour`` writes for the ``region`` of ``page`` it is shown."""
    shown: dict[int, list[tuple[Line, str]]] = {}
    for line in page.lines:
        share = _visible(line, region)
        cut = line.left < region.x1 - 1 or line.right > region.x2 + 1 or share < 1.0
        if behaviour == "continues" and not whole and cut and share >= GUESS_SHARE and (
                line.right > region.x1 and line.left < region.x2):
            text = line.text  # the line the edge cuts, completed from memory
        elif share >= READ_SHARE:
            text = line.letters_in(region.x1, region.x2)
        else:
            continue
        if text:
            shown.setdefault(line.paragraph, []).append((line, text))
    elements = [_element(lines, region) for lines in shown.values()]
    if whole:
        return elements
    if behaviour == "header" and page.lines and page.lines[0].paragraph not in shown:
        elements.insert(0, _edge_element(page.lines[0].text, region, top=True))
    if behaviour == "header_lower" and page.lines and page.lines[0].paragraph not in shown:
        elements[:0] = [_edge_element(STRAY, region, top=True), _edge_element(page.lines[0].text, region, top=True, row=1)]
    if behaviour == "next_line":
        below = [line for line in page.lines if line.top >= region.y2 - 1
                 and line.left < region.x2 and line.right > region.x1]
        if below:
            elements.append(_edge_element(min(below, key=lambda line: line.top).text, region, top=False))
    return elements


def wrong_words(seed: str, count: int) -> str:
    """``count`` words that never repeat a run: a model writing on past what it sees."""
    rng = random.Random(seed)
    syllables = "ka lo mi ne tu ra vo si pe du ga fi zo be ha ju xo wy qe ri".split()
    return " ".join("".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(count))


@dataclass
class Seen:
    """One request the adversary answered: the page and region it found, and how it ended."""

    page: str | None
    region: Box | None
    whole: bool
    finish: str


class CropAdversary(OpenAIServer):
    """An OpenAI-compatible server serving DeepSeek-OCR's and olmOCR-2's names that answers the pages it was
    given as :attr:`behaviour` says (see the module docstring); anything else it answers empty."""

    def __init__(self, pages: list[TruthPage], behaviour: Behaviour = "honest", *, max_model_len: int = 8192,
                 tokens_per_char: float = 0.3) -> None:
        super().__init__(FrameConfig(served_model_names=[MODEL, BOXLESS_MODEL], max_model_len=max_model_len,
                                     tokens_per_char=tokens_per_char))
        self.pages = pages
        self.behaviour: Behaviour = behaviour
        self.seen: list[Seen] = []
        self._lock = threading.Lock()

    def version_string(self) -> str:
        return "crop-adversary"

    def requests_for(self, page: str) -> list[Seen]:
        """The requests that showed ``page`` (or part of it)."""
        with self._lock:
            return [s for s in self.seen if s.page == page]

    def _text(self, image: bytes, max_tokens: int, model: str) -> tuple[Seen, str]:
        """What the image shows (where it was found) and the answer to it, before the token cut."""
        with Image.open(io.BytesIO(image)) as img:
            img.load()
            found = locate(img, self.pages)
        if found is None:
            return Seen(None, None, False, ""), ""
        page, region = found
        pw, ph = page.size
        whole = (region.x1 <= WHOLE_SLACK and region.y1 <= WHOLE_SLACK
                 and region.x2 >= pw - WHOLE_SLACK and region.y2 >= ph - WHOLE_SLACK)
        seen = Seen(page.name, region, whole, "")
        if self.behaviour == "crops_bad" and not whole:
            words = round(max_tokens / self.cfg.tokens_per_char / 5) + 50  # more than max_tokens holds
            return seen, wrong_words(f"{page.name}{region}", words)
        elements = answer_elements(page, region, self.behaviour, whole)
        return seen, family_for(model).write(View(round(region.width), round(region.height), tuple(elements)))

    async def _chat(self, request: web.Request, record: dict[str, Any]) -> web.StreamResponse:
        body = await self.read_body(request, record)
        if isinstance(body, web.StreamResponse):
            return body
        try:
            req = parse_chat_request(body, self.cfg.served_model_names, server_name="the crop adversary")
            with Image.open(io.BytesIO(req.image)) as img:
                width, height = img.size
        except ApiError as exc:
            return error_response(exc.status, exc.message, exc.type)
        except Exception as exc:  # noqa: BLE001 - PIL's many errors all mean a bad image
            return error_response(400, f"Failed to load image: {exc}")
        prompt_tokens = estimate_prompt_tokens(width, height, req.prompt, self.cfg.tokens_per_char)
        max_tokens = admit_max_tokens(prompt_tokens, req.max_tokens, self.cfg.max_model_len)
        seen, text = await asyncio.to_thread(self._text, req.image, max_tokens, req.model)
        text, completion_tokens, finish = self.fit_answer(req, text, max_tokens)
        seen.finish = finish
        with self._lock:
            self.seen.append(seen)
        return await self.answer(request, req, text, finish, prompt_tokens, completion_tokens, record)


class ServedAdversary:
    """A :class:`CropAdversary` serving from a thread of the test process: ``with`` it, then
    point llm-ocr at :attr:`base_url`."""

    def __init__(self, server: CropAdversary) -> None:
        self.server = server
        self.base_url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="crop-adversary", daemon=True)
        self._error: BaseException | None = None

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        runner = web.AppRunner(self.server.make_app(), handler_cancellation=True, access_log=None)
        try:
            loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, "127.0.0.1", 0)
            loop.run_until_complete(site.start())
            loop.run_until_complete(self.server.become_ready())
            self.base_url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(runner.cleanup())
            loop.close()

    def __enter__(self) -> ServedAdversary:
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
