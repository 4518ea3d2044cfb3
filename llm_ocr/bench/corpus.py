"""The benchmark's workload: Letter-size PDFs of varied length, made without reportlab.

Most documents are *vector* PDFs written by hand (Helvetica text, ruled tables, grey figure
boxes): rendering them costs what born-digital documents cost. Every fifth document is a
*scan*: Pillow-drawn 144 DPI page images saved as an image PDF, whose rendering is a JPEG
decode plus a resample, like scanned books. Every page's text is different, so every page
image (and its simulated answer length) is different too.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: Bump when the generated pages change, so a cached corpus is never silently reused stale.
CORPUS_VERSION = 1

LETTER_PT = (612, 792)  # 8.5 x 11 in at 72 pt/in
SCAN_DPI = 144  # DeepSeek-OCR's own rendering resolution (docs/facts.md#deepseek-ocr)
#: Document lengths drawn from here (pages): many short documents, a few long reports.
DOC_LENGTHS = (1, 1, 2, 3, 4, 6, 8, 12, 20, 32)
SCAN_EVERY = 5  # every fifth document is a scan

_WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her all she there would their we him been has when who will more no "
    "if out so said what up its about into than them can only other new some could time these two "
    "may then do first any my now such like our over man me even most made after also did many "
    "before must through back years where much your way well down should because each just those "
    "people how too little state good very make world still own see men work long get here between "
    "both life being under never day same another know while last might us great old year off come "
    "since against go came right used take three measurement survey results analysis sample method "
    "average coastal population figure table section appendix report annual transect volunteers"
).split()


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(6, 18))]
    return " ".join(words).capitalize() + "."


def _paragraph_lines(rng: random.Random, chars_per_line: int) -> list[str]:
    """One paragraph wrapped at ``chars_per_line`` characters."""
    words = " ".join(_sentence(rng) for _ in range(rng.randint(3, 7))).split()
    lines, line = [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > chars_per_line:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        lines.append(line)
    return lines


def _page_items(rng: random.Random, title: str) -> Iterator[tuple[str, Any]]:
    """A page's layout top to bottom: ('title', text), ('line', text), ('gap', pt),
    ('figure', height_pt), ('table', (rows, cols, cells)), the value's type set by the kind;
    about 3,000-4,000 characters."""
    yield "title", title
    budget = 640.0  # points of text height below the title (1 in margins, 10 pt lines of 12 pt)
    while budget > 40:
        roll = rng.random()
        if roll < 0.12 and budget > 200:
            height = rng.uniform(120, 180)
            yield "figure", height
            yield "line", f"Figure {rng.randint(1, 9)}: {_sentence(rng)}"
            budget -= height + 30
        elif roll < 0.22 and budget > 120:
            rows, cols = rng.randint(3, 6), rng.randint(3, 5)
            cells = [[rng.choice(_WORDS).capitalize() for _ in range(cols)]]
            cells += [[f"{rng.uniform(0, 999):.1f}" for _ in range(cols)] for _ in range(rows - 1)]
            yield "table", (rows, cols, cells)
            budget -= rows * 16 + 20
        else:
            for line in _paragraph_lines(rng, 95):
                if budget <= 12:
                    break
                yield "line", line
                budget -= 12
            yield "gap", 8
            budget -= 8


def _pdf_text(text: str) -> str:
    return "(" + text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ")"


def _vector_page_stream(rng: random.Random, title: str) -> bytes:
    """The content stream of one vector page (PDF operators, points, origin bottom-left)."""
    ops: list[str] = []
    y = 792 - 72.0
    left = 72.0
    for kind, value in _page_items(rng, title):
        if kind == "title":
            ops.append(f"BT /F2 18 Tf {left} {y - 18:.1f} Td {_pdf_text(str(value))} Tj ET")
            y -= 40
        elif kind == "line":
            ops.append(f"BT /F1 10 Tf {left} {y - 10:.1f} Td {_pdf_text(str(value))} Tj ET")
            y -= 12
        elif kind == "gap":
            y -= float(value)
        elif kind == "figure":
            height = float(value)
            ops.append(f"0.75 g {left + 60} {y - height:.1f} 348 {height:.1f} re f 0 g")
            ops.append(f"0.3 G 2 w {left + 80} {y - height + 20:.1f} m {left + 200} {y - 30:.1f} l "
                       f"{left + 320} {y - height + 60:.1f} l S 0 G 1 w")
            y -= height + 10
        elif kind == "table":
            rows, cols, cells = value
            width = 468.0 / cols
            top = y
            for r in range(rows + 1):
                ops.append(f"{left} {top - r * 16:.1f} m {left + 468} {top - r * 16:.1f} l S")
            for c in range(cols + 1):
                ops.append(f"{left + c * width:.1f} {top:.1f} m {left + c * width:.1f} {top - rows * 16:.1f} l S")
            for r, row in enumerate(cells):
                for c, cell in enumerate(row):
                    x, y_cell = left + c * width + 4, top - r * 16 - 12
                    ops.append(f"BT /F1 9 Tf {x:.1f} {y_cell:.1f} Td {_pdf_text(cell)} Tj ET")
            y -= rows * 16 + 20
    return "\n".join(ops).encode("latin-1")


def vector_pdf(pages: int, rng: random.Random, name: str) -> bytes:
    """A born-digital PDF of ``pages`` Letter pages (standard Helvetica, nothing embedded)."""
    return _helvetica_pdf([_vector_page_stream(rng, f"{name}: part {number}") for number in range(1, pages + 1)],
                          LETTER_PT)


def _helvetica_pdf(streams: list[bytes], size: tuple[float, float]) -> bytes:
    """A PDF of one page per content stream, ``size`` points, fonts ``/F1`` Helvetica and
    ``/F2`` Helvetica-Bold (standard, nothing embedded)."""
    # Object numbers: 1 catalog, 2 page tree, 3-4 fonts, then a page and its stream per page.
    objects: list[bytes] = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"",  # the page tree, filled in once the page objects are numbered
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica-Bold /Encoding /WinAnsiEncoding >>",
    ]
    kids = []
    for stream in streams:
        page_obj, stream_obj = len(objects) + 1, len(objects) + 2
        kids.append(f"{page_obj} 0 R")
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {size[0]} {size[1]}] "
            f"/Resources << /Font << /F1 3 0 R /F2 4 0 R >> >> /Contents {stream_obj} 0 R >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    objects[1] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {len(streams)} >>".encode()
    return pdf_file(objects)


def pdf_file(objects: list[bytes]) -> bytes:
    """A PDF file of numbered ``objects`` (the first is the catalog), with its xref table."""
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for i, obj in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + obj + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


#: A real PDF page of 234 x 14,295 pt (docs/facts.md#real-pdfs): 443 x 27,049 px at 144 DPI under
#: the 12 MP cap.
STRIP_PT = (234, 14295)


def strip_pdf(path: Path, seed: int = 0, size: tuple[int, int] = STRIP_PT) -> int:
    """A one-page PDF as long and narrow as ``size`` (points), text lines all the way down;
    returns the number of lines."""
    rng = random.Random(f"strip|{seed}")
    ops, y, lines = [], size[1] - 30.0, 0
    while y > 20:
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 5)))
        ops.append(f"BT /F1 9 Tf 14 {y:.1f} Td {_pdf_text(f'{lines + 1}. {words}')} Tj ET")
        y -= 12
        lines += 1
    stream = "\n".join(ops).encode("latin-1")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
        f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {size[0]} {size[1]}] "
        "/Resources << /Font << /F1 3 0 R >> >> /Contents 5 0 R >>".encode(),
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
    ]
    path.write_bytes(pdf_file(objects))
    return lines


def scanned_pdf(pages: int, rng: random.Random, name: str, path: Path) -> None:
    """An image-only PDF of ``pages`` Pillow-drawn 144 DPI Letter pages (a "scan")."""
    from PIL import Image, ImageDraw, ImageFont

    scale = SCAN_DPI / 72
    size = (round(LETTER_PT[0] * scale), round(LETTER_PT[1] * scale))
    body = ImageFont.load_default(size=20)
    head = ImageFont.load_default(size=36)
    images = []
    for number in range(1, pages + 1):
        img = Image.new("L", size, 250)  # off-white paper
        draw = ImageDraw.Draw(img)
        x, y = 144, 144
        for kind, value in _page_items(rng, f"{name}: part {number}"):
            if kind == "title":
                draw.text((x, y), str(value), fill=20, font=head)
                y += 80
            elif kind == "line":
                draw.text((x, y), str(value), fill=30, font=body)
                y += 24
            elif kind == "gap":
                y += int(float(value) * scale)
            elif kind == "figure":
                height = int(float(value) * scale)
                draw.rectangle((x + 120, y, x + 816, y + height), fill=190)
                y += height + 20
            elif kind == "table":
                _, cols, cells = value
                width = 936 // cols
                for row in cells:
                    for c, cell in enumerate(row):
                        draw.rectangle((x + c * width, y, x + (c + 1) * width, y + 32), outline=40)
                        draw.text((x + c * width + 8, y + 6), cell, fill=30, font=body)
                    y += 32
                y += 40
        images.append(img)
    images[0].save(path, "PDF", save_all=True, append_images=images[1:], resolution=SCAN_DPI)


def document_lengths(total_pages: int, seed: int) -> list[int]:
    """Page counts of the documents, summing to ``total_pages`` (the last one is cut to fit)."""
    rng = random.Random(f"lengths|{seed}")
    lengths: list[int] = []
    left = total_pages
    while left > 0:
        n = min(left, rng.choice(DOC_LENGTHS))
        lengths.append(n)
        left -= n
    return lengths


def make_corpus(folder: Path, total_pages: int, seed: int = 0) -> list[Path]:
    """Write the workload into ``folder`` (reused as is when a matching corpus is already there).

    Returns the PDF paths. ``FOLDER.json`` (next to the folder, so that listing the folder
    finds only PDFs) records what was generated; a folder whose record differs is regenerated.
    """
    folder.mkdir(parents=True, exist_ok=True)
    manifest_path = folder.with_name(folder.name + ".json")
    lengths = document_lengths(total_pages, seed)
    names = [f"doc-{i:05d}-{n:03d}p.pdf" for i, n in enumerate(lengths)]
    manifest = {"version": CORPUS_VERSION, "pages": total_pages, "seed": seed, "documents": names}
    if manifest_path.exists():
        try:
            if json.loads(manifest_path.read_text()) == manifest and all((folder / n).exists() for n in names):
                return [folder / n for n in names]
        except (OSError, json.JSONDecodeError):
            pass
    for old in folder.glob("*.pdf"):
        old.unlink()
    for i, (name, pages) in enumerate(zip(names, lengths)):
        # Each document has its own stream of text: regenerating one does not shift the others.
        rng = random.Random(hashlib.sha256(f"{seed}|{i}".encode()).digest())
        title = " ".join(rng.choice(_WORDS).capitalize() for _ in range(rng.randint(3, 6)))
        if i % SCAN_EVERY == SCAN_EVERY - 1:
            scanned_pdf(pages, rng, title, folder / name)
        else:
            (folder / name).write_bytes(vector_pdf(pages, rng, title))
    manifest_path.write_text(json.dumps(manifest, indent=1))
    return [folder / n for n in names]


#: A broadsheet page (11 x 17 in): the dense page of :func:`dense_pdf`.
DENSE_PT = (792, 1224)
DENSE_COLUMNS = 7
#: Between two columns: wider than two text lines, so a reader of the text layer (and the
#: simulator) never joins the lines of neighbouring columns into one.
DENSE_GUTTER_PT = 16.0


def dense_page_items(rng: random.Random, title: str) -> list[tuple[str, list[list[str]]]]:
    """A newspaper page's text in reading order: ``(part, paragraphs)`` (each a list of lines)
    for the masthead, each headline and each column (about 28,000 characters in all: some 9,000
    tokens of DeepSeek-OCR's markup, more than one answer may hold)."""
    column_chars = 26
    parts: list[tuple[str, list[list[str]]]] = [("masthead", [[title]])]
    height = DENSE_PT[1] - 100.0 - 36.0  # points of column below the masthead
    for column in range(DENSE_COLUMNS):
        if column in (0, 4):  # an article starts here, under a headline across 2 or 3 columns
            words = 4 if column == 0 else 6
            parts.append(("headline", [[" ".join(rng.choice(_WORDS).capitalize() for _ in range(words))]]))
        room = height - (30.0 if column in (0, 1, 4, 5, 6) else 0.0)  # under the headlines' band
        paragraphs: list[list[str]] = []
        while room > 14:
            lines = []
            for line in _paragraph_lines(rng, column_chars):
                if room <= 7:
                    break
                lines.append(line)
                room -= 7.0
            paragraphs.append(lines)
            room -= 6.0  # paragraph gap: more than a line's height, so a new block
        parts.append((f"column {column + 1}", paragraphs))
    return parts


def dense_pdf(path: Path, seed: int = 0, pages: int = 1) -> list[list[tuple[str, list[list[str]]]]]:
    """A born-digital broadsheet PDF of ``pages`` dense newspaper pages: a masthead, seven
    columns of 6 pt text, and two headlines across columns (over columns 1-2 and 5-7). Returns
    each page's parts in reading order (see :func:`dense_page_items`)."""
    rng = random.Random(f"dense|{seed}")
    width, height = DENSE_PT
    column_width = (width - 72 - (DENSE_COLUMNS - 1) * DENSE_GUTTER_PT) / DENSE_COLUMNS
    streams, truth = [], []
    for number in range(1, pages + 1):
        title = f"The {rng.choice(_WORDS).capitalize()} Gazette No. {seed * 100 + number}"
        parts = dense_page_items(rng, title)
        ops = [f"BT /F2 26 Tf 36 {height - 62:.1f} Td {_pdf_text(title)} Tj ET",
               f"36 {height - 74:.1f} m {width - 36} {height - 74:.1f} l S"]
        headlines = iter(paragraphs[0][0] for name, paragraphs in parts if name == "headline")
        for name, paragraphs in parts:
            if not name.startswith("column "):
                continue
            column = int(name.split()[1]) - 1
            x = 36 + column * (column_width + DENSE_GUTTER_PT)
            y = height - 100.0
            if column in (0, 4):
                ops.append(f"BT /F2 12 Tf {x:.1f} {y - 12:.1f} Td {_pdf_text(next(headlines))} Tj ET")
            if column in (0, 1, 4, 5, 6):
                y -= 30.0
            for lines in paragraphs:
                for line in lines:
                    ops.append(f"BT /F1 6 Tf {x:.1f} {y - 6:.1f} Td {_pdf_text(line)} Tj ET")
                    y -= 7.0
                y -= 6.0
        streams.append("\n".join(ops).encode("latin-1"))
        truth.append(parts)
    path.write_bytes(_helvetica_pdf(streams, DENSE_PT))
    return truth


def with_dense_pages(folder: Path, normal: Path, count: int, seed: int = 0) -> Path:
    """``folder`` holding the PDFs of ``normal`` (hard links) and ``count`` one-page dense PDFs
    (:func:`dense_pdf`) spread through them in listing order, the last among the last few
    documents (a dense page read late is the one that can hold up the end of a run). The dense
    PDFs are also written to ``folder/../NAME-dense/`` alone, for the simulator's ``--corpus``;
    returns that folder."""
    import os
    import shutil

    dense = folder.with_name(folder.name + "-dense")
    for target in (folder, dense):
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
    documents = sorted(normal.glob("*.pdf"))
    for path in documents:
        try:
            os.link(path, folder / path.name)
        except OSError:
            shutil.copyfile(path, folder / path.name)
    # Spread: after 10%, ..., and the last one 95% of the way through the documents.
    positions = [round(len(documents) * (0.1 + 0.85 * k / max(1,
        count - 1))) for k in range(count)] if count > 1 else [len(documents) // 2]
    for k, position in enumerate(positions):
        anchor = documents[min(position, len(documents) - 1)].name.split("-")[1] if documents else f"{k:05d}"
        name = f"doc-{anchor}-dense{k}.pdf"  # sorts right after document number ``anchor``
        dense_pdf(dense / name, seed=seed * 100 + k)
        shutil.copyfile(dense / name, folder / name)
    return dense
