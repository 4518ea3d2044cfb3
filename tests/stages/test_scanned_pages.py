"""Scanned dense pages whose text lines the ink does not show (issue 47, item 4: decide from
what the server returns).

An old newspaper page scanned: grey paper with grain in every row, so that no row between two
text lines is blank and counting lines in the ink finds one or two in a band 1,300 px tall. Its
text layer, where it has one, is an earlier OCR's: lines merged, set off from where they are
printed, some missing. Read by DeepSeek-OCR at 4,096 tokens of context (answers of 3,072) from
the crop adversary (tests/fakes/crop_adversary.py: a server that is not the project's
simulator, answering any crop with what the scan shows there, at most ``max_tokens``), the
page is read in pieces whose answers run out. Each is cut again while its halves can be read:
the page ends ``ok`` with its words, or at the cost bound saying so; never ``truncated``
because a count of its lines said a piece was too few lines tall to cut.
"""

from __future__ import annotations

import io
import random
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from reportlab.lib.utils import ImageReader
from reportlab.pdfgen import canvas

import llm_ocr
from tests.conftest import read_stage
from tests.fakes.crop_adversary import (
    BOXLESS_MODEL,
    MODEL,
    CropAdversary,
    ServedAdversary,
    TruthPage,
    draw_page,
    scanned,
)

WORDS = ("council harbour railway meeting steamer cargo freight market wheat cattle mayor ferry "
         "election parish mill lumber schooner county weather grain bridge wharf tannery").split()
#: DeepSeek-OCR renders a PDF page at 144 DPI: a page of this many points per pixel of the scan
#: renders pixel for pixel as the scan, and the adversary finds its crops at their own scale.
PT_PER_PX = 72 / 144
#: The adversary writes twice the tokens a character the project first guesses (0.35): the
#: pieces planned from the page's estimate run out, as a real model's did.
TOKENS_PER_CHAR = 0.7


def newspaper(name: str, seed: int = 3, verso: float = 0.0) -> TruthPage:
    """Six columns of 84 numbered lines (1,450 x 1,586 px, ~12,000 characters: about 8,500
    answer tokens at :data:`TOKENS_PER_CHAR`, nearly three answers), scanned; with ``verso``,
    the other side's print showing through between this side's lines (17 px apart)."""
    rng = random.Random(seed)
    columns, n = [], 0
    for _ in range(6):
        paragraphs = []
        for _ in range(7):
            block = []
            for _ in range(12):
                n += 1
                block.append(f"L{n:03d} " + " ".join(rng.choice(WORDS) for _ in range(3)))
            paragraphs.append(block)
        columns.append(paragraphs)
    page = draw_page(name, columns, size=13, margin=30, gutter=26, pitch=1.3)
    return scanned(page, seed, verso=verso, verso_shift=8)


def old_ocr_pdf(page: TruthPage, path: Path, seed: int = 5) -> None:
    """``page``'s scan as a PDF whose invisible text layer is an earlier OCR's: every third pair
    of lines merged into one, lines set off by up to a line's height, a fifth of them missing."""
    rng = random.Random(seed)
    width, height = page.size
    pdf = canvas.Canvas(str(path), pagesize=(width * PT_PER_PX, height * PT_PER_PX))
    pdf.drawImage(ImageReader(io.BytesIO(page.png)), 0, 0, width * PT_PER_PX, height * PT_PER_PX)
    text = pdf.beginText()
    text.setTextRenderMode(3)  # invisible, as an OCR layer over a scan
    text.setFont("Helvetica", 6.5)
    lines = page.lines
    i = 0
    while i < len(lines):
        line, words = lines[i], lines[i].text
        if i % 6 == 0 and i + 1 < len(lines):  # two lines read as one
            words, i = f"{words} {lines[i + 1].text}", i + 1
        i += 1
        if rng.random() < 0.2:
            continue  # a line the old OCR lost
        dx, dy = rng.uniform(-12, 12), rng.uniform(-18, 18)
        text.setTextOrigin((line.left + dx) * PT_PER_PX, (height - line.bottom + dy) * PT_PER_PX)
        text.textLine(words)
    pdf.drawText(text)
    pdf.showPage()
    pdf.save()


@pytest.fixture(scope="module")
def scan(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[CropAdversary, str, dict[str, TruthPage], Path]]:
    folder = tmp_path_factory.mktemp("scans")
    pages = {"grain": newspaper("grain"), "verso": newspaper("verso", verso=0.25)}
    for name, page in pages.items():
        (folder / f"{name}.png").write_bytes(page.png)
        old_ocr_pdf(page, folder / f"{name}.pdf")
    server = CropAdversary(list(pages.values()), max_model_len=4096, tokens_per_char=TOKENS_PER_CHAR)
    with ServedAdversary(server) as served:
        yield server, served.base_url, pages, folder


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def recall(truth: str, got: str) -> float:
    """The share of the page's words the row holds."""
    want, have = Counter(_words(truth)), Counter(_words(got))
    return sum(min(n, have[w]) for w, n in want.items()) / max(1, sum(want.values()))


#: (source, model): DeepSeek-OCR (tiles joined by boxes; a tile that ran out keeps its complete
#: blocks) on the grainy page without a layer and with the old OCR's; olmOCR-2 (bands joined by
#: the text they repeat, each cut in halves when it runs out) on the page whose other side shows
#: through: the lines its bands' ink shows are too few, and they are cut by pixels.
CASES = [("grain.png", MODEL), ("grain.pdf", MODEL), ("verso.pdf", BOXLESS_MODEL)]


@pytest.mark.parametrize(("source", "model"), CASES,
                         ids=["no text layer", "old OCR layer", "old OCR layer, show-through, bands"])
def test_a_scanned_newspaper_page_is_cut_until_its_answers_fit(scan, tmp_path: Path, source: str,
                                                               model: str) -> None:
    """The page ends ``ok`` with 97% of its words (an honest reading of every piece finds them
    all; a piece that ran out and was kept loses the rest of its answer), or at the cost bound,
    its row saying so."""
    server, url, pages, folder = scan
    name = source.split(".")[0]
    page = pages[name]
    before = len(server.requests_for(name))
    result = llm_ocr.extract([str(folder / source)], output=str(tmp_path / "out"), endpoint=url, model=model,
                             workers=0, progress="off")
    assert result.exit_code in (0, 1), result
    (row,) = read_stage(tmp_path / "out", "extract")
    seen = server.requests_for(name)[before:]
    assert len(seen) >= 3 and any(s.finish == "length" for s in seen), [(s.region, s.finish) for s in seen]
    if row["status"] != "ok":  # bounded, and saying so
        assert row["status"] == "truncated" and "cost bound" in row["cut_reason"], (row["error"], row["cut_reason"])
    else:
        assert recall(page.text, row["markdown"]) >= 0.97, (recall(page.text, row["markdown"]), row["cut_reason"])
