"""How well an OCR endpoint reads born-digital pages (``llm-ocr bench-accuracy``).

Pages of PDFs with a text layer are rendered as the pipeline renders them for the served model's
family (its DPI or longest side, and image format, unless --dpi or --image-format say otherwise),
sent through the pipeline's own request path (the family's request and answer parser), and the
resulting Markdown is compared with the PDF's text layer:

- **CER**, character error rate: Levenshtein distance between the whitespace-normalised texts
  (Markdown/HTML markup removed from the answer) divided by the text layer's length, summed
  over pages before dividing. Reading order counts: a column read in the wrong place costs.
- **word recall**: the fraction of the text layer's words (case-sensitive, surrounding
  punctuation stripped) found in the answer, as multisets, so order does not count.
- **s/page**: wall-clock seconds per page at the given concurrency (1 by default).

Each page is read as Extract reads it (:func:`~llm_ocr.stages.extract.extract_page`): a page
longer than 1:3 in segments, each rendered from the PDF at the family's resolution as the
pipeline's render workers render them, its figures cropped. On the generated sets whose figures are known
(``--corpus layout|held-out``, :mod:`llm_ocr.bench.layout_pages`) it also counts the drawn
figures found (an output figure overlapping one by IoU >= 0.5) and the output figures that match
none.

Without PDFs it generates a small offline set of varied English pages with reportlab (fonts
and sizes, one and two columns, a table), or the ``--corpus`` named. Without ``--engine-url``
it launches the CPU engine (``python -m llm_ocr.engines.cpu``, one thread unless ``--threads``)
for the run.
"""

from __future__ import annotations

import logging
import re
import tempfile
import time
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llm_ocr.bench.sample_text import VOCAB, paragraph

if TYPE_CHECKING:
    from llm_ocr.bench.layout_pages import CorpusPage

log = logging.getLogger(__name__)


@dataclass
class AccuracyOptions:
    """What ``llm-ocr bench-accuracy`` measures and how (one field per command-line option)."""

    pdfs: list[str] = field(default_factory=list)
    pages: int | None = None
    dpi: float | None = None  # None: the model family's rendering
    image_format: str | None = None
    engine_url: str | None = None
    model: str | None = None
    threads: int = 1
    engine_args: str = ""
    concurrency: int = 1
    keep: str | None = None
    corpus: str = "basic"


# ---------------------------------------------------------------------------------------------
# Metrics


def levenshtein(a: str, b: str) -> int:
    """Edit distance (insertions, deletions, substitutions of one character each).

    rapidfuzz's exact ``Levenshtein.distance`` (C++; a bit-parallel algorithm): two 6,000-character
    pages in under a millisecond, where this module's own bit-parallel Python took 30 ms.
    """
    from rapidfuzz.distance import Levenshtein

    return int(Levenshtein.distance(a, b))


_TAG = re.compile(r"<[^<>\n]{0,200}>")
_FIGURE = re.compile(r"!\[[^\]\n]*\]\([^)\n]*\)")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+", re.MULTILINE)
_EMPHASIS = re.compile(r"(\*\*|__)")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u00ad\ufffe\uffff]")


def normalise(text: str) -> str:
    """NFKC, control characters and soft hyphens removed, runs of whitespace as one space."""
    text = _CONTROL.sub(" ", unicodedata.normalize("NFKC", text))
    return " ".join(text.split())


def markdown_to_text(markdown: str) -> str:
    """What a reader sees of the pipeline's Markdown: figure links, HTML tags (tables),
    heading marks and bold markers removed; table cells separated by spaces."""
    text = _FIGURE.sub(" ", markdown)
    text = _TAG.sub(" ", text)
    text = _HEADING.sub("", text)
    text = _EMPHASIS.sub("", text)
    for entity, char in (("&amp;", "&"), ("&lt;", "<"), ("&gt;", ">"), ("&quot;", '"'), ("&#x27;", "'")):
        text = text.replace(entity, char)
    return normalise(text)


def words(text: str) -> list[str]:
    """Words for recall: whitespace-separated tokens without surrounding punctuation."""
    out = []
    for token in text.split():
        token = token.strip(".,;:!?()[]{}\"'`“”‘’«»—–-*|")
        if token:
            out.append(token)
    return out


@dataclass
class PageScore:
    """One page's measurements."""

    source: str
    page: int
    chars: int  # characters of the normalised text layer
    edits: int  # Levenshtein distance to it
    words: int  # words of the text layer
    found: int  # of which found in the answer (multiset)
    seconds: float  # request latency
    finish_reason: str | None = None
    error: str | None = None
    kind: str = "text"  # "figures": the page holds drawn figures (their labels are not body text)
    figures: int = 0  # figures in the answer
    figures_drawn: int = 0  # figures drawn on the page, when known
    figures_found: int = 0  # of which an answer's figure overlaps (IoU >= 0.5)

    @property
    def cer(self) -> float:
        """Character error rate of the page."""
        return self.edits / max(1, self.chars)

    @property
    def recall(self) -> float:
        """Word recall of the page."""
        return self.found / max(1, self.words)


def score_page(truth: str, markdown: str) -> tuple[int, int, int, int]:
    """(chars, edits, words, found) of an answer against the text layer."""
    ref, hyp = normalise(truth), markdown_to_text(markdown)
    n, found = _words_found(ref, hyp)
    return len(ref), levenshtein(ref, hyp), n, found


def _words_found(ref: str, hyp: str) -> tuple[int, int]:
    """(words of ``ref``, of which in ``hyp``), as multisets."""
    ref_words, hyp_words = Counter(words(ref)), Counter(words(hyp))
    return sum(ref_words.values()), sum(min(n, hyp_words[w]) for w, n in ref_words.items())


def word_recall(truth: str, text: str) -> float:
    """Multiset word recall of ``text`` against ``truth`` (markup in ``text`` is ignored)."""
    # No edit distance: recall does not need one (it was computed here and discarded).
    n, found = _words_found(normalise(truth), markdown_to_text(text))
    return found / max(1, n)


# ---------------------------------------------------------------------------------------------
# Sample pages

def make_sample_pdfs(folder: Path, seed: int = 0) -> list[Path]:
    """Write the default benchmark PDFs into ``folder``; their paths.

    Nine US-Letter pages of English-like text: one column (Helvetica 11 pt, Times 10 pt, a
    full page of Times 10.5 pt),
    two columns (Times 9.5 pt; Helvetica 9 pt with paragraph breaks that line up across the
    columns), a table between paragraphs, mixed sizes from 8 to 22 pt with Courier, small
    print (Times Italic 8.5 pt, Helvetica 7 pt), and codes, dates, money and punctuation. The
    words are drawn from common English words, numbers and percentages, seeded.
    """
    import random

    from reportlab.lib import colors
    from reportlab.lib.pagesizes import letter
    from reportlab.lib.styles import ParagraphStyle
    from reportlab.lib.units import inch
    from reportlab.lib.utils import simpleSplit
    from reportlab.pdfgen import canvas
    from reportlab.platypus import (
        BalancedColumns,
        BaseDocTemplate,
        Frame,
        PageTemplate,
        Paragraph,
        Spacer,
        Table,
        TableStyle,
    )

    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    width, height = letter
    margin = 0.9 * inch

    def style(name: str, font: str, size: float, lead: float | None = None, **kw: Any) -> ParagraphStyle:
        return ParagraphStyle(name, fontName=font, fontSize=size, leading=lead or size * 1.25, spaceAfter=size * 0.8,
                              **kw)

    def build(name: str, story: list[Any]) -> Path:
        path = folder / name
        doc = BaseDocTemplate(str(path), pagesize=letter, leftMargin=margin, rightMargin=margin,
                              topMargin=margin, bottomMargin=margin, title=name)
        frame = Frame(margin, margin, width - 2 * margin, height - 2 * margin, id="body")
        doc.addPageTemplates([PageTemplate(id="p", frames=[frame])])
        doc.build(story)
        return path

    paths = []
    h1 = style("h1", "Helvetica-Bold", 18)
    h2 = style("h2", "Helvetica-Bold", 13)
    body = style("body", "Helvetica", 11)
    paths.append(build("single-helvetica.pdf", [
        Paragraph("Annual Survey of Coastal Stations", h1),
        *[Paragraph(paragraph(rng, 4), body) for _ in range(3)],
        Paragraph("Methods and Instruments", h2),
        *[Paragraph(paragraph(rng, 4), body) for _ in range(2)],
    ]))

    times = style("times", "Times-Roman", 10, alignment=4)  # justified
    paths.append(build("single-times-justified.pdf", [
        Paragraph("Report of the Budget Committee", style("t1", "Times-Bold", 16)),
        *[Paragraph(paragraph(rng, 5), times) for _ in range(5)],
    ]))

    # A full page of body text: what most pages of a report or a book look like.
    paths.append(build("dense-page.pdf", [
        Paragraph("Chapter Four", style("ch", "Times-Bold", 15)),
        *[Paragraph(paragraph(rng, 6), style(f"d{i}", "Times-Roman", 10.5, 13, alignment=4, firstLineIndent=14))
          for i in range(9)],
    ]))

    # Two balanced columns under a full-width title.
    col = style("col", "Times-Roman", 9.5, alignment=4)
    paths.append(build("two-columns-times.pdf", [
        Paragraph("Two Column Article on River Funding", style("t2", "Times-Bold", 17)),
        BalancedColumns([Paragraph(paragraph(rng, 5), col) for _ in range(8)], nCols=2, spaceBefore=6,
                        innerPadding=18),
    ]))

    # Two columns whose paragraph breaks line up across the gutter (every paragraph is four
    # lines): the case a plain XY-cut reads row by row.
    path = folder / "two-columns-aligned.pdf"
    pdf = canvas.Canvas(str(path), pagesize=letter)
    pdf.setFont("Helvetica-Bold", 16)
    pdf.drawString(margin, height - margin - 16, "Field Notes in Two Columns")
    gutter = 0.35 * inch
    col_w = (width - 2 * margin - gutter) / 2
    pdf.setFont("Helvetica", 9)
    for c in range(2):
        y = height - margin - 50
        for _ in range(5):
            lines = simpleSplit(paragraph(rng, 5), "Helvetica", 9, col_w)[:4]
            for line in lines:
                pdf.drawString(margin + c * (col_w + gutter), y, line)
                y -= 11.5
            y -= 11.5 * (5 - len(lines))  # one blank line, and keep rows aligned if short
    pdf.showPage()
    pdf.save()
    paths.append(path)

    rows = [["Station", "Region", "Retreat (m)", "Samples"]]
    for _ in range(8):
        rows.append([f"{rng.choice(VOCAB).capitalize()} {rng.randint(1, 99)}", rng.choice(VOCAB).capitalize(),
                     f"{rng.uniform(0, 5):.2f}", str(rng.randint(10, 500))])
    table = Table(rows, hAlign="LEFT", colWidths=[1.8 * inch, 1.5 * inch, 1.2 * inch, 1.0 * inch])
    table.setStyle(TableStyle([
        ("FONT", (0, 0), (-1, 0), "Helvetica-Bold", 10),
        ("FONT", (0, 1), (-1, -1), "Helvetica", 10),
        ("LINEBELOW", (0, 0), (-1, 0), 0.8, colors.black),
        ("BOTTOMPADDING", (0, 0), (-1, -1), 4),
    ]))
    paths.append(build("table.pdf", [
        Paragraph("Measurements by Station", h1),
        Paragraph(paragraph(rng, 4), body),
        table,
        Spacer(1, 12),
        Paragraph(paragraph(rng, 4), body),
    ]))

    paths.append(build("mixed-sizes.pdf", [
        Paragraph("Large Print Notice", style("big", "Helvetica-Bold", 22)),
        Paragraph(paragraph(rng, 2), style("b16", "Helvetica", 16)),
        Paragraph("Configuration listing", style("h3", "Times-Bold", 13)),
        Paragraph(paragraph(rng, 2), style("mono", "Courier", 10)),
        Paragraph(paragraph(rng, 3), style("t12", "Times-Roman", 12)),
        Paragraph(paragraph(rng, 3), style("small", "Helvetica", 8)),
    ]))

    # Small print: italic and footnote sizes, where recognisers start to slip.
    paths.append(build("small-print.pdf", [
        Paragraph("Terms and Conditions", style("h4", "Times-Bold", 12)),
        *[Paragraph(paragraph(rng, 4), style(f"it{i}", "Times-Italic", 8.5)) for i in range(3)],
        *[Paragraph(paragraph(rng, 4), style(f"fn{i}", "Helvetica", 7)) for i in range(3)],
    ]))

    # Codes, dates, money, quotes and punctuation, which no dictionary helps with.
    def symbols() -> str:
        parts = []
        for _ in range(rng.randint(4, 7)):
            parts.append(rng.choice([
                f"invoice #{rng.randint(1000, 99999)}",
                f"${rng.randint(1, 9999)}.{rng.randint(0, 99):02d}",
                f"\u20ac{rng.randint(1, 999)}",
                f"{rng.randint(2000, 2030)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
                f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}",
                f"({rng.choice(VOCAB)})",
                f"&quot;{rng.choice(VOCAB)} {rng.choice(VOCAB)}&quot;",
                f"{rng.choice(VOCAB)}@example.org",
                f"A{rng.randint(1, 9)}-{rng.randint(10, 99)}{rng.choice('bxq')}",
                f"{rng.randint(1, 40)}&#176;C",
                f"+{rng.randint(1, 99)} {rng.randint(100, 999)} {rng.randint(1000, 9999)}",
            ]))
            parts.append(" ".join(rng.choice(VOCAB) for _ in range(rng.randint(1, 4))))
        text = " ".join(parts)
        return text[:1].upper() + text[1:] + "."

    paths.append(build("symbols.pdf", [
        Paragraph("Orders, Dates and Amounts", h2),
        *[Paragraph(symbols(), style(f"sy{i}", font, 10))
          for i, font in enumerate(["Helvetica", "Times-Roman", "Courier", "Helvetica"])],
    ]))
    return paths


# ---------------------------------------------------------------------------------------------
# The run


def text_layer(path: str, page: int) -> str:
    """Text of one page (1-based) from the PDF's text layer (pypdfium2)."""
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(path)
    try:
        textpage = pdf[page - 1].get_textpage()
        return textpage.get_text_range()
    finally:
        pdf.close()


async def _measure(
    opts: AccuracyOptions, base_url: str, pdfs: list[str], known: dict[tuple[str, int], CorpusPage] | None = None
) -> tuple[list[PageScore], dict[str, Any]]:
    import asyncio

    from llm_ocr.bench.layout_pages import match_figures
    from llm_ocr.options import ClientOptions, ExtractOptions, RenderOptions
    from llm_ocr.runners.workers import crop_figures, transform_image
    from llm_ocr.sources.base import DocumentRef, PageImage
    from llm_ocr.sources.render import count_pages, render_pages
    from llm_ocr.stages.extract import ExtractContext, extract_page, family_render
    from llm_ocr.vlm.client import VlmClient
    from llm_ocr.vlm.families import family_for

    probe = VlmClient(base_url, opts.model or "", options=ClientOptions())
    served = await probe.served_models()
    await probe.close()
    model = opts.model or served[0]
    recipe = family_for(model)
    given = {"dpi": opts.dpi, "image_format": opts.image_format}
    render = family_render(RenderOptions(**{k: v for k, v in given.items() if v is not None}), recipe)
    client = VlmClient(base_url, model, options=ClientOptions(max_attempts=2))
    info: dict[str, Any] = {"endpoint": base_url, "model": model, "dpi": render.dpi, "long_side": render.long_side,
                            "image_format": render.image_format}
    known = known or {}

    async def crop(image: bytes, boxes: Sequence[Sequence[float]]) -> list[bytes]:
        return await asyncio.to_thread(crop_figures, image, boxes)

    async def transform(image: bytes, *args: Any) -> tuple[bytes, int, int]:
        return await asyncio.to_thread(transform_image, image, *args)

    try:
        info["ocr_engine"] = await _engine_info(base_url, model)
        max_tokens = recipe.max_tokens(None, await client.max_model_len())
        extract = ExtractOptions()
        ctx = ExtractContext(client, recipe, extract, max_tokens, crop, transform)
        jobs = []
        for index, path in enumerate(pdfs):
            location = str(Path(path).resolve())  # noqa: ASYNC240 - before any page request is in flight
            ref = DocumentRef(doc_id=Path(path).name, index=index, source=path, kind="pdf", location=location)
            n = count_pages(ref, render)
            last = min(n, opts.pages) if opts.pages else n
            # A long page's segments rendered from the source as Extract's render workers
            # render them, not cut from the page image (which --max-page-pixels may shrink).
            for page in render_pages(ref, render, 1, last, max_aspect=extract.max_page_aspect):
                if not isinstance(page, PageImage):
                    raise SystemExit(f"cannot render {path} page {page.page}: {page.error}")
                jobs.append((ref, n, page))

        sem = asyncio.Semaphore(max(1, opts.concurrency))

        async def one(ref: DocumentRef, n: int, page: PageImage) -> PageScore:
            path = ref.source
            truth = text_layer(path, page.page)
            # Read as Extract reads a page: one request for most pages, segments for a long one
            # (a family that takes several requests per page is measured by all of them).
            async with sem:
                t0 = time.perf_counter()
                row = await extract_page(ref, page, n, ctx)
                seconds = time.perf_counter() - t0
            if opts.keep:
                keep = Path(opts.keep)
                keep.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - only with --keep, a local folder
                stem = f"{Path(path).stem}-p{page.page}"
                (keep / f"{stem}.md").write_text(row.markdown, encoding="utf-8")
                (keep / f"{stem}.truth.txt").write_text(truth, encoding="utf-8")
            chars, edits, n_words, found = score_page(truth, row.markdown)
            error = row.error if row.status == "error" else None
            score = PageScore(Path(path).name, page.page, chars, edits, n_words, found, seconds, row.finish_reason,
                              error, figures=len(row.figures))
            drawn = known.get((Path(path).name, page.page))
            if drawn is not None:
                scale = page.width / drawn.size[0]
                truth_boxes = [tuple(v * scale for v in box) for box in drawn.figures]
                answer_boxes = [tuple(float(v) for v in f.bbox) for f in row.figures]
                score.kind = drawn.kind
                score.figures_drawn = len(truth_boxes)
                score.figures_found, _ = match_figures(truth_boxes, answer_boxes)  # type: ignore[arg-type]
            return score

        t0 = time.perf_counter()
        scores = list(await asyncio.gather(*(one(ref, n, page) for ref, n, page in jobs)))
        info["wall_s"] = time.perf_counter() - t0
    finally:
        await client.close()
    return scores, info


async def _engine_info(base_url: str, model: str) -> Any:
    """The ``ocr_engine`` metadata the CPU engine puts in ``/v1/models`` (None elsewhere)."""
    from llm_ocr.vlm.client import served_model_card

    return (await served_model_card(base_url, model)).get("ocr_engine")


def summarise(scores: list[PageScore], wall_s: float) -> dict[str, Any]:
    """Totals over pages: CER and recall pooled over characters/words, the lowest page recall,
    seconds per page; on pages with drawn figures, how many were found and how many answer
    figures match none; the same recall figures over the ``text`` pages alone."""
    pages = len(scores)
    chars = sum(s.chars for s in scores)
    words_n = sum(s.words for s in scores)
    worst = min(scores, key=lambda s: s.recall, default=None)
    text = [s for s in scores if s.kind == "text"]
    worst_text = min(text, key=lambda s: s.recall, default=None)
    return {
        "pages": pages,
        "cer": sum(s.edits for s in scores) / max(1, chars),
        "word_recall": sum(s.found for s in scores) / max(1, words_n),
        "min_recall": worst.recall if worst else 0.0,
        "min_recall_page": f"{worst.source} p{worst.page}" if worst else None,
        "text_pages": len(text),
        "text_word_recall": sum(s.found for s in text) / max(1, sum(s.words for s in text)),
        "text_min_recall": worst_text.recall if worst_text else 0.0,
        "figures": sum(s.figures for s in scores),
        "figures_drawn": sum(s.figures_drawn for s in scores),
        "figures_found": sum(s.figures_found for s in scores),
        "figures_unmatched": sum(s.figures - s.figures_found for s in scores),
        "s_per_page": wall_s / max(1, pages),
        "mean_latency_s": sum(s.seconds for s in scores) / max(1, pages),
        "errors": sum(1 for s in scores if s.error),
        "truncated": sum(1 for s in scores if s.finish_reason == "length"),
    }


def measure_accuracy(opts: AccuracyOptions) -> tuple[list[PageScore], dict[str, Any]]:
    """Score every page of ``opts.pdfs`` (or of generated sample pages) against its text layer;
    launches the CPU engine unless ``opts.engine_url`` is given. Returns the scores and run info."""
    import asyncio
    import shlex

    from llm_ocr.bench.layout_pages import CORPORA, make_corpus
    from llm_ocr.bench.sheet_pages import SHEET_CORPORA, make_sheets
    from llm_ocr.config import OptionError

    with tempfile.TemporaryDirectory(prefix="llm-ocr-bench-") as tmp:
        known: dict[tuple[str, int], CorpusPage] = {}
        if opts.pdfs:
            pdfs = list(opts.pdfs)
        elif opts.corpus == "basic":
            pdfs = [str(p) for p in make_sample_pdfs(Path(tmp) / "pages")]
        elif opts.corpus in CORPORA + SHEET_CORPORA:
            make = make_corpus if opts.corpus in CORPORA else make_sheets
            made = make(opts.corpus, Path(tmp) / "pages")
            known = {(p.path.name, p.page): p for p in made}
            pdfs = list(dict.fromkeys(str(p.path) for p in made))
        else:
            raise OptionError(f"--corpus must be basic, {', '.join(CORPORA + SHEET_CORPORA)}, not {opts.corpus!r}")
        for path in pdfs:
            if not Path(path).is_file():
                raise OptionError(f"no such PDF: {path}")
        if opts.engine_url:
            scores, info = asyncio.run(_measure(opts, opts.engine_url, pdfs, known))
        else:
            from llm_ocr.testing import CpuServer

            extra = ["--threads", str(opts.threads), *shlex.split(opts.engine_args)]
            log.info("launching the CPU engine: python -m llm_ocr.engines.cpu %s", " ".join(extra))
            with CpuServer(*extra) as engine:
                scores, info = asyncio.run(_measure(opts, engine.base_url, pdfs, known))
                info["engine_args"] = extra
                # The engine's own account: CPU time is what a page costs whatever else runs.
                done = [r for r in engine.requests() if r.get("outcome") == "ok"]
                info["engine_ocr_s"] = sum(r.get("ocr_s", 0.0) for r in done)
                info["engine_cpu_s"] = sum(r.get("ocr_cpu_s", 0.0) for r in done)
    return scores, info
