"""How much text a page holds, estimated before the model reads it: text layer and ink."""

from __future__ import annotations

from pathlib import Path

import pypdfium2 as pdfium
import pytest
from PIL import Image, ImageDraw

from llm_ocr.bench.corpus import dense_pdf, make_corpus
from llm_ocr.options import RenderOptions
from llm_ocr.sources.base import DocumentRef, PageImage
from llm_ocr.sources.density import ink_estimate, text_layer_estimate
from llm_ocr.sources.render import render_pages


@pytest.fixture(scope="module")
def pdfs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    folder = tmp_path_factory.mktemp("density")
    dense_pdf(folder / "dense.pdf", seed=1)
    normal = make_corpus(folder / "normal", 60, seed=2)  # every fifth document is a scan
    return folder / "dense.pdf", normal


def first_page_layer_and_image(path: Path, dpi: float) -> tuple[int | None, Image.Image]:
    pdf = pdfium.PdfDocument(str(path))
    try:
        estimate = text_layer_estimate(pdf[0])
        return (estimate.chars if estimate else None), pdf[0].render(scale=dpi / 72).to_pil()
    finally:
        pdf.close()


def test_a_text_layer_is_counted_and_a_scan_has_none(pdfs: tuple[Path, list[Path]]) -> None:
    dense, normal = pdfs
    counts = [first_page_layer_and_image(path, 36)[0] for path in normal]
    assert None in counts  # the scans
    assert all(1_000 < c < 6_000 for c in counts if c is not None)
    dense_count = first_page_layer_and_image(dense, 36)[0]
    assert dense_count is not None and dense_count > 20_000


@pytest.mark.parametrize("dpi", [72, 144])
def test_the_ink_estimate_is_within_0_75_to_1_35_times_the_text_layer(pdfs: tuple[Path, list[Path]], dpi: int) -> None:
    dense, normal = pdfs
    for path in [dense, *normal]:
        count, image = first_page_layer_and_image(path, dpi)
        if count is None:
            continue
        estimate = ink_estimate(image)
        assert estimate is not None and estimate.source == "ink"
        assert 0.75 <= estimate.chars / count <= 1.35, (path.name, dpi, estimate.chars, count)


def test_the_ink_estimate_tells_a_dense_scan_from_a_normal_one(pdfs: tuple[Path, list[Path]]) -> None:
    dense, normal = pdfs
    scan = next(path for path in normal if first_page_layer_and_image(path, 72)[0] is None)
    normal_chars = ink_estimate(first_page_layer_and_image(scan, 144)[1])
    dense_chars = ink_estimate(first_page_layer_and_image(dense, 144)[1])
    assert normal_chars is not None and dense_chars is not None
    assert dense_chars.chars > 4 * normal_chars.chars


def test_no_ink_estimate_without_text_lines() -> None:
    blank = Image.new("RGB", (800, 1000), "white")
    assert ink_estimate(blank) is None
    picture = Image.new("RGB", (800, 1000), "white")
    ImageDraw.Draw(picture).ellipse((100, 100, 700, 900), fill=(40, 90, 200))  # a figure, no lines
    assert ink_estimate(picture) is None


def test_rendered_pages_carry_their_estimate_when_asked(pdfs: tuple[Path, list[Path]], tmp_path: Path) -> None:
    dense, _ = pdfs
    ref = DocumentRef("dense.pdf", 0, str(dense), "pdf", str(dense))
    (page,) = render_pages(ref, RenderOptions(dpi=72), 1, 1, estimate_text=True)
    assert isinstance(page, PageImage) and page.text_estimate is not None
    assert page.text_estimate.source == "text layer" and page.text_estimate.chars > 20_000
    # The same page as an image file: its ink tells.
    _, image = first_page_layer_and_image(dense, 144)
    path = tmp_path / "dense.png"
    image.save(path)
    picture_ref = DocumentRef("dense.png", 0, str(path), "image", str(path))
    (picture,) = render_pages(picture_ref, RenderOptions(), 1, 1, estimate_text=True)
    assert isinstance(picture, PageImage) and picture.text_estimate is not None
    assert picture.text_estimate.source == "ink" and picture.text_estimate.chars > 15_000
    # A run that cannot tile (another family, --no-tile-dense-pages) spends nothing on it.
    for unasked in (render_pages(ref, RenderOptions(dpi=72), 1, 1), render_pages(picture_ref, RenderOptions(), 1, 1)):
        assert isinstance(unasked[0], PageImage) and unasked[0].text_estimate is None
