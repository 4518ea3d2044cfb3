"""A 1:60 strip read by every model family, against one simulated server playing them all.

The server plays each family (``--recipe NAME=FAMILY``), knows the strip (``--corpus``: its text
layer and its figure) and answers any piece of it with the words inside; it refuses (400,
``unreadable_refused``) an image under the family's minimum readable size and a piece cut from a
downscaled render of the whole page. So a run proves that every piece went out rendered from the
source at the size the family reads: before pieces were rendered from the source, olmOCR-2's
strip was rendered 22 x 1,288 px whole and cut into 22 x 44 px segments, which the server refuses
(the last test sends exactly that). Each family is read through the Python API in this process
(tests/sweeps.py); ``tests/e2e/stages/test_strip_command.py`` reads the strip once through
``llm-ocr extract`` with a render worker process.
"""

from __future__ import annotations

import io
import random
import re
import zlib
from collections import Counter
from pathlib import Path

import pytest
from PIL import Image

from llm_ocr.bench.corpus import pdf_file
from llm_ocr.options import ExtractOptions, RenderOptions
from llm_ocr.sources.base import DocumentRef
from llm_ocr.sources.pieces import plan_pieces
from llm_ocr.sources.render import _pdf_scale, render_pages
from llm_ocr.sources.segments import Segment
from llm_ocr.stages.extract import family_render
from llm_ocr.testing import SimulatedServer
from llm_ocr.vlm.families import FAMILIES, Family
from tests.conftest import read_stage
from tests.sweeps import Counters, by_shape, extract, families_server

#: The strip: 234 x 14,040 pt (1:60), 9 pt lines every 12 pt, a 150 x 100 pt chart 5,000 pt down.
WIDTH, HEIGHT = 234, 14040
FIGURE = (40, 5000, 190, 5100)  # x1, y1, x2, y2 in points from the top left
#: A page longer than this many times its width is read in pieces (the run's default, 3).
MAX_ASPECT = ExtractOptions().max_page_aspect
WORDS = "survey district coastal sample annual report volunteers transect figure table river".split()


def _text(s: str) -> str:
    return "(" + s.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ")"


def strip_pdf(path: Path) -> list[str]:
    """Write the strip; returns its lines of text."""
    rng = random.Random(60)
    ops, lines, y = [], [], HEIGHT - 30.0
    while y > 20:
        top = HEIGHT - y
        if FIGURE[1] - 14 <= top <= FIGURE[3] + 14:
            y -= 12
            continue
        line = f"{len(lines) + 1} " + " ".join(rng.choice(WORDS) for _ in range(4))
        ops.append(f"BT /F1 9 Tf 14 {y:.1f} Td {_text(line)} Tj ET")
        lines.append(line)
        y -= 12
    x1, y1, x2, y2 = FIGURE
    ops.append(f"q {x2 - x1} 0 0 {y2 - y1} {x1} {HEIGHT - y2} cm /Im1 Do Q")
    stream = "\n".join(ops).encode("latin-1")
    chart = Image.new("RGB", (60, 40), "white")
    for i, colour in enumerate(((200, 40, 40), (40, 120, 200), (40, 160, 80))):
        chart.paste(colour, (6 + i * 18, 30 - 8 * (i + 1), 18 + i * 18, 38))
    pixels = zlib.compress(chart.tobytes())
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
        f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {WIDTH} {HEIGHT}] "
        "/Resources << /Font << /F1 3 0 R >> /XObject << /Im1 6 0 R >> >> /Contents 5 0 R >>".encode(),
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /XObject /Subtype /Image /Width 60 /Height 40 /ColorSpace /DeviceRGB /BitsPerComponent 8 "
        b"/Filter /FlateDecode /Length %d >>\nstream\n" % len(pixels) + pixels + b"\nendstream",
    ]
    path.write_bytes(pdf_file(objects))
    return lines


def _recall(truth: str, got: str) -> float:
    want, have = Counter(re.findall(r"[a-z0-9]+", truth.lower())), Counter(re.findall(r"[a-z0-9]+", got.lower()))
    return sum(min(n, have[w]) for w, n in want.items()) / max(1, sum(want.values()))


@pytest.fixture(scope="module")
def strip(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    folder = tmp_path_factory.mktemp("strip")
    return folder, strip_pdf(folder / "strip.pdf")


@pytest.fixture(scope="module")
def sim(strip: tuple[Path, list[str]]):  # (SimulatedServer, {family: served name})
    """One server playing every family, each under its own served name."""
    server, names = families_server(FAMILIES, "--instant", "--max-model-len", "32768", corpus=strip[0])
    with server:
        yield server, names


def planned_pieces(family: Family) -> tuple[list[Segment], float]:
    """The strip's pieces as a run plans them for ``family`` (the segments, in the pixels of the
    page's virtual render, and that render's scale): the plan alone, nothing rendered (the run
    renders and sends the pieces; the request log shows what it sent)."""
    opts = family_render(RenderOptions(), family)
    segments, scale = plan_pieces(WIDTH, HEIGHT, MAX_ASPECT, lambda w, h: _pdf_scale(w, h, opts))
    assert segments and scale > 0, (family.name, segments, scale)
    return segments, scale


def check_strip_read(out: Path, lines: list[str], family: Family, plan: tuple[list[Segment], float],
                     counted: dict, sent: list[dict]) -> None:
    """The run's one row read the whole strip in the planned pieces, each sent at least the
    family's minimum readable size (``sent``: the server's log of the run's requests), found on
    the page and none refused (``counted``: the server's counters over the run); a family that
    boxes and crops figures cropped the chart where it is, from the pieces."""
    segments, scale = plan
    assert counted["recipe_refused"] == 0 and counted["unreadable_refused"] == 0, counted
    (row,) = read_stage(out, "extract")
    assert row["status"] == "ok", row["error"]
    assert row["segments"] == len(segments) >= 20
    sizes = [entry["image_size"] for entry in sent if entry.get("image_size")]
    assert len(sizes) >= row["segments"], sent[:3]  # every piece went out (a family may ask more)
    assert all(min(size) >= family.min_readable_side for size in sizes), sizes
    assert counted["known_crops"] >= row["segments"], counted  # every piece found on the page it is of
    assert _recall("\n".join(lines), row["markdown"]) >= 0.97, row["markdown"][:500]
    if not (family.outputs.boxes and family.outputs.figure_crops):
        return
    figures = [f for f in row["figures"] if f.get("image")]
    assert len(figures) == 1, row["figures"]
    x1, y1, x2, y2 = figures[0]["bbox"]
    sx, sy = row["width"] / WIDTH, row["height"] / HEIGHT
    centre = ((x1 + x2) / 2 / sx, (y1 + y2) / 2 / sy)
    assert abs(centre[0] - (FIGURE[0] + FIGURE[2]) / 2) < 40 and abs(centre[1] - (FIGURE[1] + FIGURE[3]) / 2) < 40
    with Image.open(io.BytesIO(figures[0]["image"]["bytes"])) as crop:
        # Cropped from the pieces, not from the family-sized page: as sharp as the model saw it.
        assert crop.width >= 150 * 0.9 * min(1.0, scale), (crop.size, scale)


@pytest.mark.parametrize("family", by_shape(FAMILIES))
def test_a_strip_is_read_in_pieces_rendered_from_the_source(
    strip: tuple[Path, list[str]], sim: tuple[SimulatedServer, dict[str, str]], tmp_path: Path, family: Family
) -> None:
    folder, lines = strip
    server, names = sim
    plan = planned_pieces(family)
    counters = Counters(server)
    result = extract(folder, tmp_path / "out", server, names[family.name], family.name)
    assert result.exit_code == 0, result
    check_strip_read(tmp_path / "out", lines, family, plan, counters.since(), counters.requests(names[family.name]))


def test_a_png_strip_is_read_in_pieces_cut_from_full_resolution(tmp_path: Path) -> None:
    """An image strip: each piece cropped from the full-resolution image, sized as a page."""
    from llm_ocr.vlm.families import family_named

    family = family_named("olmocr")
    image = Image.new("RGB", (300, 18000), "white")
    path = tmp_path / "strip.png"
    image.save(path)
    (page,) = render_pages(DocumentRef("s", 0, "s", "image", str(path)), family_render(RenderOptions(), family),
                           1, 1, max_aspect=3.0)
    assert (page.width, page.height) == (21, 1288)  # the whole page, at olmOCR-2's longest side
    assert page.pieces is not None and len(page.pieces.pieces) >= 20
    assert all((p.width, p.height) == (644, 1288) or max(p.width, p.height) == 1288 for p in page.pieces.pieces)
    assert min(min(p.width, p.height) for p in page.pieces.pieces) >= family.min_readable_side


def test_the_simulator_refuses_pieces_cut_from_the_family_sized_page(
    strip: tuple[Path, list[str]], sim: tuple[SimulatedServer, dict[str, str]]
) -> None:
    """The old path: the strip rendered whole at olmOCR-2's 1,288 px and cut into 22 x 44 px
    segments (what a run sends when the page comes without its pieces). Every one is refused."""
    import json
    import urllib.request

    from llm_ocr.sources.segments import plan_segments
    from llm_ocr.vlm.families import family_named

    folder, _ = strip
    family = family_named("olmocr")
    (page,) = render_pages(DocumentRef("s", 0, "s", "pdf", str(folder / "strip.pdf")),
                           family_render(RenderOptions(), family), 1, 1)
    segments = plan_segments(page.width, page.height)
    with Image.open(io.BytesIO(page.image)) as whole:
        crops = [whole.crop(tuple(s.box)) for s in segments[:3]]
    server, names = sim
    olmocr = names[family.name]
    counters = Counters(server)
    for crop in crops:
        buffer = io.BytesIO()
        crop.save(buffer, format="PNG")
        body = family.body(buffer.getvalue(), "image/png", temperature=family.retries.temperatures[0], max_tokens=512)
        body = {**{k: v for k, v in body.items() if k != "extra_body"}, **body.get("extra_body", {}), "model": olmocr}
        request = urllib.request.Request(f"{server.base_url}/chat/completions", json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(request, timeout=60)
            raise AssertionError(f"{olmocr}: a piece of a downscaled render was answered")
        except urllib.error.HTTPError as exc:
            assert exc.code == 400
            assert "unreadable image" in exc.read().decode()
    assert counters.since()["unreadable_refused"] == 3
