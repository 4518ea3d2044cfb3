"""``llm-ocr bench --ordering``: how close a run comes to the longest-first bound when the pages
are ranked only once rendered (``before``: ``--estimate-ahead 0``) and when they are ranked from
the PDFs before rendering (``after``: :mod:`llm_ocr.runners.render_order`), on a sweep of
workloads, at 64 and 256 slots; and how well each estimate ranks the real answers' lengths.

Every workload is generated here (no download), served as olmOCR-2 by the simulator, which knows
the born-digital original of every page and answers each from its text (a page's answer is as
long as its text, as with a real model). The client reads the workload's own PDFs:

- **long tail**: the long-tail corpus of ``--losses`` (:mod:`.long_tail`): born-digital, its text
  layer exact;
- **longest last**: the same kinds of page, the input sorted so that every long page comes after
  every short one (the run's own order is the worst order);
- **mixed documents**: born-digital documents of every kind, covers that are mostly a photograph
  (an image over half the page: taken for a scan, over-estimated), pages with a photograph beside
  their text, and a 96-page report whose longest pages come last;
- **scans**: the pages of ``mixed documents`` rasterised at 150 DPI (grey JPEG, paper noise) into
  image-only PDFs: no text layer, only the images' size to go by;
- **scans, old OCR**: the same scans with an invisible OCR layer that lost a random 0-95% of
  each page's lines (a tenth of the pages have none): a text layer whose lengths are wrong;
- **born-digital and scans**: half the documents of ``mixed documents`` as they are, half
  rasterised: the two estimates on one scale.

Per workload and slot count: the longest-first bound over the wall time (1 = a client that knew
every answer's length, :func:`llm_ocr.bench.lower_bound.longest_first_bound`), before and after;
and per workload the Spearman rank correlation of each estimate with the pages' completion
tokens (the rows'): the one the look-ahead ranked by before (the page's text as rendered: its
text layer, else its ink) and the one read from the PDF before rendering.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llm_ocr.bench.config import BenchConfig
from llm_ocr.bench.corpus import LETTER_PT, _pdf_text, document_lengths, pdf_file
from llm_ocr.bench.long_tail import KINDS, MARGIN_PT, PageKind, make_long_tail_corpus, page_stream

if TYPE_CHECKING:  # the run imports the client and the runners: the CLI lists its options without them
    from llm_ocr.bench.run import RunResult
    from llm_ocr.sources.page_cost import PageEstimate

#: Bump when the generated workloads change, so a cached corpus is never silently reused stale.
ORDERING_VERSION = 1
OLMOCR = "allenai/olmOCR-2-7B-1025-FP8"
WORKLOADS = ("long tail", "longest last", "mixed documents", "scans", "scans, old OCR", "born-digital and scans")
#: Slot counts and the simulated decode speed at each (as ``--losses``' long-tail workloads).
SLOTS = {64: 3.0, 256: 6.0}
SCAN_DPI = 150
SCAN_QUALITY = 75
#: Paper noise of a scan (standard deviation of grey levels).
SCAN_NOISE = 3.0
#: The 96-page report of ``mixed documents`` (a fifth of the pages in a smaller workload).
REPORT_PAGES = 96

#: ``mixed documents``: kinds of page and their shares (the long-tail kinds, then a page of text
#: beside a photograph, then a cover: a title over a photograph).
PHOTO = PageKind("photo", 0.14, 1, 10.0, (0.2, 0.55))
COVER = PageKind("cover", 0.06, 1, 10.0, (0.0, 0.0))
MIXED_KINDS = (replace(KINDS[0], share=0.62), replace(KINDS[1], share=0.12), replace(KINDS[2], share=0.06), PHOTO,
               COVER)


@dataclass
class Workload:
    """A generated workload: the PDFs the client reads and the originals the simulator knows."""

    name: str
    client: Path
    originals: Path


@dataclass
class OrderingRun:
    """One run: its workload, slots, ``before`` or ``after``, the result and the estimates' ranks."""

    workload: str
    slots: int
    label: str
    result: RunResult
    #: Spearman of each estimate with the completion tokens: ``rendered``, ``pdf``.
    spearman: dict[str, float | None] = field(default_factory=dict)
    pages_ranked: int = 0

    @property
    def fraction(self) -> float | None:
        """The longest-first bound over the wall time."""
        r = self.result
        return r.longest_first_s / r.wall_s if r.longest_first_s and r.wall_s else None

    @property
    def order(self) -> float | None:
        """The longest-first bound over the bound in the order the run sent its requests: 1 when
        that order is as good as longest first, whatever the machine's load did to the wall time."""
        r = self.result
        return r.longest_first_s / r.lower_bound_s if r.longest_first_s and r.lower_bound_s else None


# -- generating the workloads --------------------------------------------------------------------


def _kind(rng: random.Random, kinds: Sequence[PageKind]) -> PageKind:
    roll, total = rng.random(), 0.0
    for kind in kinds:
        total += kind.share
        if roll < total:
            return kind
    return kinds[-1]


def _photo(rng: random.Random, width: int, height: int) -> bytes:
    """A photograph-like RGB JPEG: smooth colour fields with grain (many bytes, no text)."""
    import numpy as np
    from PIL import Image

    small = Image.fromarray(np.asarray([[[rng.randrange(256) for _ in range(3)] for _ in range(8)]
                                        for _ in range(6)], dtype=np.uint8), "RGB")
    big = np.asarray(small.resize((width, height), Image.Resampling.BICUBIC), dtype=np.float32)
    grain = np.random.default_rng(rng.randrange(2**32)).normal(0, 12, big.shape)
    buffer = io.BytesIO()
    Image.fromarray(np.clip(big + grain, 0, 255).astype(np.uint8), "RGB").save(buffer, "JPEG", quality=85)
    return buffer.getvalue()


def _page(rng: random.Random, title: str, kind: PageKind) -> tuple[bytes, bytes | None, tuple[int, int]]:
    """One born-digital page: its content stream, a photograph's JPEG (None: no photograph) and
    the photograph's pixel size; the photograph is drawn as ``/Im0``."""
    width, height = LETTER_PT
    if kind is COVER:
        stream = f"BT /F2 24 Tf {MARGIN_PT} {height - 120:.1f} Td {_pdf_text(title)} Tj ET".encode("latin-1")
        box = (MARGIN_PT, MARGIN_PT, width - 2 * MARGIN_PT, height - 200.0)
    elif kind is PHOTO:
        fill = rng.uniform(*kind.fill)
        stream, _ = page_stream(rng, title, replace(kind, fill=(fill, fill)))
        top = height - MARGIN_PT - 30.0
        bottom = top - (top - MARGIN_PT) * fill
        box = (MARGIN_PT, MARGIN_PT, width - 2 * MARGIN_PT, bottom - 16.0 - MARGIN_PT)
    else:
        return page_stream(rng, title, kind)[0], None, (0, 0)
    x, y, w, h = box
    pixels = (max(8, round(w / 72 * SCAN_DPI)), max(8, round(h / 72 * SCAN_DPI)))
    stream += f"\nq {w:.1f} 0 0 {h:.1f} {x:.1f} {y:.1f} cm /Im0 Do Q".encode("latin-1")
    return stream, _photo(rng, *pixels), pixels


def _image_object(data: bytes, pixels: tuple[int, int], colour: str) -> bytes:
    return (f"<< /Type /XObject /Subtype /Image /Width {pixels[0]} /Height {pixels[1]} /ColorSpace /Device{colour} "
            f"/BitsPerComponent 8 /Filter /DCTDecode /Length {len(data)} >>\nstream\n").encode() + data + b"\nendstream"


def _pdf(pages: Sequence[tuple[bytes, bytes | None, tuple[int, int], str]]) -> bytes:
    """A PDF of Letter pages, each ``(stream, JPEG or None, its pixel size, its colour space)``,
    fonts ``/F1`` Helvetica and ``/F2`` Helvetica-Bold, the JPEG as ``/Im0``."""
    objects: list[bytes] = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica-Bold /Encoding /WinAnsiEncoding >>",
    ]
    kids = []
    for stream, image, pixels, colour in pages:
        page_obj = len(objects) + 1
        kids.append(f"{page_obj} 0 R")
        xobject = f" /XObject << /Im0 {page_obj + 2} 0 R >>" if image is not None else ""
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {LETTER_PT[0]} {LETTER_PT[1]}] /Resources << "
                       f"/Font << /F1 3 0 R /F2 4 0 R >>{xobject} >> /Contents {page_obj + 1} 0 R >>".encode())
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
        if image is not None:
            objects.append(_image_object(image, pixels, colour))
    objects[1] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {len(pages)} >>".encode()
    return pdf_file(objects)


def _born_digital(folder: Path, total: int, seed: int, kinds: Sequence[PageKind], *, longest_last: bool = False,
                  report: bool = False) -> None:
    """Born-digital documents of ``total`` pages of ``kinds`` in ``folder`` (``longest_last``: the
    input sorted by kind, every long page after every short one; ``report``: one document of
    :data:`REPORT_PAGES` pages in the middle of the input, its longest pages last)."""
    rng = random.Random(f"ordering|{seed}|{folder.name}")
    report_pages = min(REPORT_PAGES, total // 5) if report else 0
    lengths = document_lengths(total - report_pages, seed)
    report_at = len(lengths) // 2 if report_pages else -1
    if report_pages:
        lengths.insert(report_at, report_pages)
    drawn = [_kind(rng, kinds) for _ in range(total)]
    if longest_last:
        drawn.sort(key=lambda k: list(kinds).index(k))
    place = 0
    for i, pages in enumerate(lengths):
        doc_kinds = drawn[place : place + pages]
        place += pages
        if i == report_at:
            doc_kinds.sort(key=lambda k: (k.columns, k.font_pt < 10))  # its densest pages last
        doc_rng = random.Random(hashlib.sha256(f"{seed}|{folder.name}|{i}".encode()).digest())
        built = []
        for number, kind in enumerate(doc_kinds, 1):
            stream, image, pixels = _page(doc_rng, f"Document {i} page {number}", kind)
            built.append((stream, image, pixels, "RGB"))
        (folder / f"doc-{i:05d}-{pages:03d}p.pdf").write_bytes(_pdf(built))


def _scan(source: Path, target: Path, rng: random.Random, ocr: bool) -> None:
    """``source`` rasterised: each page a grey JPEG with paper noise filling the page, and with
    ``ocr`` an invisible text layer holding a random share of the page's lines (none on a tenth
    of the pages), as an old OCR left it."""
    import numpy as np
    import pypdfium2 as pdfium
    from PIL import Image

    noise = np.random.default_rng(rng.randrange(2**32))
    pdf = pdfium.PdfDocument(str(source))
    pages = []
    try:
        for index in range(len(pdf)):
            page = pdf[index]
            try:
                grey = np.asarray(page.render(scale=SCAN_DPI / 72, grayscale=True).to_pil().convert("L"), np.float32)
                textpage = page.get_textpage()
                text = textpage.get_text_range()
                textpage.close()
            finally:
                page.close()
            buffer = io.BytesIO()
            paper = np.clip(grey + noise.normal(0, SCAN_NOISE, grey.shape), 0, 255).astype(np.uint8)
            Image.fromarray(paper, "L").save(buffer, "JPEG", quality=SCAN_QUALITY)
            ops = [f"q {LETTER_PT[0]} 0 0 {LETTER_PT[1]} 0 0 cm /Im0 Do Q"]
            if ocr and rng.random() >= 0.1:
                kept = rng.uniform(0.05, 1.0)
                lines = [line for line in text.splitlines() if line.strip() and rng.random() < kept]
                y = LETTER_PT[1] - 40.0
                for line in lines:
                    safe = line.encode("latin-1", "replace").decode("latin-1")
                    ops.append(f"BT 3 Tr /F1 8 Tf 40 {y:.1f} Td {_pdf_text(safe)} Tj ET")
                    y = max(20.0, y - 9.0)
            pages.append(("\n".join(ops).encode("latin-1"), buffer.getvalue(),
                          (int(paper.shape[1]), int(paper.shape[0])), "Gray"))
    finally:
        pdf.close()
    target.write_bytes(_pdf(pages))


def make_workload(root: Path, name: str, total: int, seed: int) -> Workload:
    """Generate workload ``name`` of ``total`` pages under ``root`` (reused when ``root`` holds
    one made the same way)."""
    if name not in WORKLOADS:
        raise ValueError(f"unknown ordering workload {name!r}: one of {', '.join(WORKLOADS)}")
    if name == "long tail":
        folder = root / f"long-tail-{total}-seed-{seed}"
        make_long_tail_corpus(folder, total, seed)
        return Workload(name, folder, folder)
    originals = root / f"originals-{'longest-last' if name == 'longest last' else 'mixed'}-{total}-seed-{seed}"
    _generated(originals, {"version": ORDERING_VERSION, "pages": total, "seed": seed}, lambda folder: _born_digital(
        folder, total, seed, KINDS if name == "longest last" else MIXED_KINDS, longest_last=name == "longest last",
        report=name != "longest last"))
    if name in ("longest last", "mixed documents"):
        return Workload(name, originals, originals)
    client = root / f"{name.replace(' ', '-').replace(',', '')}-{total}-seed-{seed}"

    def rasterise(folder: Path) -> None:
        for i, source in enumerate(sorted(originals.glob("*.pdf"))):
            rng = random.Random(f"scan|{seed}|{name}|{source.name}")
            if name == "born-digital and scans" and i % 2 == 0:
                shutil.copyfile(source, folder / source.name)
            else:
                _scan(source, folder / source.name, rng, ocr=name == "scans, old OCR")

    _generated(client, {"version": ORDERING_VERSION, "pages": total, "seed": seed, "workload": name}, rasterise)
    return Workload(name, client, originals)


def _generated(folder: Path, record: dict[str, Any], make: Callable[[Path], None]) -> None:
    """Run ``make(folder)`` unless ``FOLDER.json`` says the folder holds what it makes already."""
    marker = folder.with_name(folder.name + ".json")
    try:
        if json.loads(marker.read_text()) == record and any(folder.glob("*.pdf")):
            return
    except (OSError, ValueError):
        pass
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    make(folder)
    marker.write_text(json.dumps(record))


# -- measuring -----------------------------------------------------------------------------------


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's rank correlation of two equally long sequences (ties get their mean rank);
    None when either is constant or shorter than 3."""
    if len(xs) != len(ys) or len(xs) < 3:
        return None
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    vx, vy = sum((a - mx) ** 2 for a in rx), sum((b - my) ** 2 for b in ry)
    return cov / (vx * vy) ** 0.5 if vx and vy else None


def _ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def pdf_estimates(folder: Path) -> dict[tuple[str, int], PageEstimate | None]:
    """Each page's estimate read from the PDF, as a run reads it."""
    from llm_ocr.options import RenderOptions
    from llm_ocr.sources.base import DocumentRef
    from llm_ocr.sources.page_cost import page_estimates
    from llm_ocr.sources.render import close_documents, count_pages

    out: dict[tuple[str, int], PageEstimate | None] = {}
    opts = RenderOptions()
    for path in sorted(folder.glob("*.pdf")):
        ref = DocumentRef(path.name, 0, str(path), "pdf", str(path))
        pages = list(range(1, count_pages(ref, opts) + 1))
        out.update(((path.name, p), c) for p, c in zip(pages, page_estimates(ref, opts, pages)))
    close_documents()
    return out


def on_one_scale(estimates: dict[tuple[str, int], PageEstimate | None]) -> dict[tuple[str, int], float | None]:
    """The estimates as a run whose plan holds them all ranks them: text-layer and scan estimates
    on one scale (:class:`~llm_ocr.runners.cost_scale.CostScale`)."""
    from llm_ocr.runners.cost_scale import CostScale

    scale = CostScale()
    scale.add(e for e in estimates.values() if e is not None)
    return {key: None if e is None else scale.value(e) for key, e in estimates.items()}


def _rows(output: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = []
    for path in sorted((output / "extract").glob("*.parquet")):
        rows.extend(pq.read_table(path, columns=["doc_id", "page", "status", "completion_tokens",
                                                 "text_estimate"]).to_pylist())
    return rows


def rank_estimates(rows: list[dict[str, Any]], estimates: dict[tuple[str, int], PageEstimate | None]) -> tuple[
        dict[str, float | None], int]:
    """Spearman of the rendered estimate and of the PDF's with the completion tokens of the rows
    read whole and well (a page without an estimate counts as 0 characters): ``pdf`` on the
    run's one scale, ``pdf_raw`` as read (a scan's characters from its image's size)."""
    ok = [r for r in rows if r["status"] == "ok" and r["completion_tokens"]]
    tokens = [float(r["completion_tokens"]) for r in ok]
    rendered = [float(r["text_estimate"] or 0) for r in ok]
    scaled = on_one_scale(estimates)
    pdf = [float(scaled.get((r["doc_id"], r["page"])) or 0) for r in ok]
    raw = [float(getattr(estimates.get((r["doc_id"], r["page"])), "chars", 0)) for r in ok]
    return {"rendered": spearman(rendered, tokens), "pdf": spearman(pdf, tokens), "pdf_raw": spearman(raw, tokens)}, \
        len(ok)


def base_config(pages: int, seed: int, workers: int | None) -> BenchConfig:
    """The served model and client of the sweep: ``--losses``' long-tail workloads, dense pages
    read whole. No page of the sweep is longer than one answer (16,000 characters at most: some
    4,800 tokens of 8,000), but an OCR layer that lost lines makes the run's tokens a character,
    learnt from answers against the text layers, several times too high, and a long page is
    then planned in tiles, which the simulator refuses cut from the sweep's 640-pixel renders
    (and searches for first, seconds each): one such run took 212 s instead of 70."""
    return BenchConfig(pages=pages, seed=seed, workers=workers, model=OLMOCR, long_side=640, max_tokens=None,
                       max_model_len=16384, adaptive=True, loop_rate=0.0, tile_dense_pages=False)


def run_ordering(
    base: BenchConfig,
    *,
    corpus_dir: str | Path | None = None,
    work_dir: str | Path | None = None,
    only: Sequence[str] | None = None,
    slots: Sequence[int] = tuple(SLOTS),
    on_result: Callable[[OrderingRun], None] | None = None,
) -> tuple[list[OrderingRun], ReadingCost]:
    """Run each workload at each slot count, before and after; returns every run, and what reading
    the estimates cost."""
    from llm_ocr.bench.run import run_once

    runs: list[OrderingRun] = []
    with tempfile.TemporaryDirectory(prefix="llm-ocr-ordering-") as tmp:
        corpus_root = Path(corpus_dir) if corpus_dir else Path(tmp) / "corpus"
        work_root = Path(work_dir) if work_dir else Path(tmp) / "work"
        made = []
        for name in WORKLOADS:
            if only and name not in only:
                continue
            workload = make_workload(corpus_root, name, base.pages, base.seed)
            made.append(workload)
            estimates = pdf_estimates(workload.client)
            for count in slots:
                config = replace(base, slots=count, decode_ms_per_token=SLOTS.get(count, 3.0),
                                 sim_corpus=str(workload.originals))
                for label, ahead in (("before", 0), ("after", None)):
                    work = work_root / f"{name.replace(' ', '-').replace(',', '')}-{count}-{label}"
                    result = asyncio.run(run_once(replace(config, estimate_ahead=ahead), workload.client, work,
                                                  keep=True))
                    run = OrderingRun(name, count, label, result)
                    if result.output:
                        run.spearman, run.pages_ranked = rank_estimates(_rows(Path(result.output)), estimates)
                        shutil.rmtree(result.output, ignore_errors=True)
                    runs.append(run)
                    if on_result is not None:
                        on_result(run)
        cost = reading_cost(corpus_root, made, base.seed)
    return runs, cost


@dataclass
class ReadingCost:
    """What reading the estimates costs: CPU milliseconds a page per workload, and for one
    document of :data:`LONG_DOCUMENT` born-digital pages, seconds to open it and to read them all."""

    ms_per_page: dict[str, float] = field(default_factory=dict)
    long_document_open_s: float = 0.0
    long_document_read_s: float = 0.0


#: Pages of the long document :func:`reading_cost` reads.
LONG_DOCUMENT = 1000


def reading_cost(root: Path, workloads: Sequence[Workload], seed: int) -> ReadingCost:
    """CPU time of :func:`pdf_estimates` on each workload's PDFs, and on one 1,000-page document."""
    from llm_ocr.options import RenderOptions
    from llm_ocr.sources.base import DocumentRef
    from llm_ocr.sources.page_cost import page_costs
    from llm_ocr.sources.render import close_documents, count_pages

    cost = ReadingCost()
    for workload in workloads:
        start = time.process_time()
        pages = len(pdf_estimates(workload.client))
        cost.ms_per_page[workload.name] = 1000 * (time.process_time() - start) / max(1, pages)
    path = root / f"long-document-{LONG_DOCUMENT}p-seed-{seed}.pdf"
    if not path.exists():
        rng = random.Random(f"long document|{seed}")
        path.write_bytes(_pdf([(page_stream(rng, f"Page {n}", _kind(rng, KINDS))[0], None, (0, 0), "RGB")
                               for n in range(1, LONG_DOCUMENT + 1)]))
    ref = DocumentRef(path.name, 0, str(path), "pdf", str(path))
    close_documents()
    start = time.process_time()
    count = count_pages(ref, RenderOptions())
    cost.long_document_open_s = time.process_time() - start
    page_costs(ref, RenderOptions(), list(range(1, count + 1)))
    cost.long_document_read_s = time.process_time() - start - cost.long_document_open_s
    close_documents()
    return cost


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def format_ordering(runs: list[OrderingRun], cost: ReadingCost | None = None) -> str:
    """The table: per workload, each estimate's Spearman and the longest-first fractions; then each
    run's wall time and bound, and what reading the estimates cost."""
    slots = sorted({r.slots for r in runs})
    header = ["workload", "Spearman rendered / PDF / one scale"] + [f"{s} slots before -> after" for s in slots]
    lines = [header]
    worst: dict[tuple[int, str], float] = {}
    for name in dict.fromkeys(r.workload for r in runs):
        mine = {(r.slots, r.label): r for r in runs if r.workload == name}
        ranked = next((r for r in mine.values() if r.spearman), None)
        row = [name, f"{_cell(ranked.spearman.get('rendered'))} / {_cell(ranked.spearman.get('pdf_raw'))}"
               f" / {_cell(ranked.spearman.get('pdf'))}"
               if ranked else "-"]
        for s in slots:
            before, after = mine.get((s, "before")), mine.get((s, "after"))
            row.append(f"{_cell(before.fraction if before else None)} -> {_cell(after.fraction if after else None)}")
            for label, run in (("before", before), ("after", after)):
                if run is not None and run.fraction is not None:
                    worst[(s, label)] = min(worst.get((s, label), 1e9), run.fraction)
        lines.append(row)
    lines.append(["worst", ""] + [f"{_cell(worst.get((s, 'before')))} -> {_cell(worst.get((s, 'after')))}"
                                  for s in slots])
    width = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = ["  ".join(f"{cell:<{width[i]}}" if i == 0 else f"{cell:>{width[i]}}" for i, cell in enumerate(line))
           for line in lines]
    out.append("")
    out.append("wall s (longest-first bound s), the order sent against longest first (1: as good), first request s, "
               "load average at start:")
    for r in runs:
        res = r.result
        out.append(f"  {r.workload}, {r.slots} slots, {r.label}: {res.wall_s:.1f} ({res.longest_first_s or 0:.1f}), "
                   f"{_cell(r.order)}, {res.breakdown['first_request_s']:.1f}, {res.machine['loadavg_before'][0]:.1f}")
    if cost is not None:
        per_page = ", ".join(f"{name} {ms:.2f}" for name, ms in cost.ms_per_page.items())
        out.append(f"reading the estimates, CPU ms a page: {per_page}")
        out.append(f"  a {LONG_DOCUMENT:,}-page born-digital document: opened in {cost.long_document_open_s:.3f} s, "
                   f"its pages read in {cost.long_document_read_s:.2f} s")
    out.append(f"({os.cpu_count()} cores; every number is one run)")
    return "\n".join(out)
