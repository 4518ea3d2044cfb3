"""Rendering documents to encoded page images, and every way a document or a page can fail."""

from __future__ import annotations

import io
import sys
import uuid

import fsspec
import pytest
from PIL import Image
from reportlab.lib.pagesizes import A0
from sources_testdata import animated_gif, bomb_png, encode_image, make_pdf, multipage_tiff, png, write, zero_page_pdf

from llm_ocr.options import RenderOptions
from llm_ocr.sources import DocumentError, DocumentRef, PageFailure, PageImage, count_pages, render_pages
from llm_ocr.sources import images as images_mod
from llm_ocr.sources import render as render_mod

OPTS = RenderOptions()


def ref_for(path, kind) -> DocumentRef:
    return DocumentRef(doc_id=path.name, index=0, source=str(path), kind=kind, location=str(path))


def row(*images: bytes) -> DocumentRef:
    return DocumentRef(doc_id="ds/default/train/00000000", index=0, source="x", kind="dataset_row", images=images)


def decode(page: PageImage) -> Image.Image:
    img = Image.open(io.BytesIO(page.image))
    img.load()
    assert img.size == (page.width, page.height)
    return img


def render_all(ref, opts=OPTS):
    return render_pages(ref, opts, 1, count_pages(ref, opts))


@pytest.fixture(scope="module")
def pdf3(tmp_path_factory):
    return write(tmp_path_factory.mktemp("pdf") / "three.pdf", make_pdf(pages=3))


# ---------------------------------------------------------------------------------------- PDF


def test_letter_pages_at_144_dpi_in_chunks(pdf3):
    ref = ref_for(pdf3, "pdf")
    assert count_pages(ref, OPTS) == 3
    pages = render_pages(ref, OPTS, 1, 2) + render_pages(ref, OPTS, 3, 3)
    assert [p.page for p in pages] == [1, 2, 3]
    for p in pages:
        assert isinstance(p, PageImage) and p.mime == "image/jpeg"
        assert abs(p.width - 1224) <= 1 and abs(p.height - 1584) <= 1
        img = decode(p)
        assert img.mode == "RGB" and img.format == "JPEG"
        assert img.convert("L").getextrema()[0] < 64  # the "Page N" text is drawn
    # The open document is cached in the worker, not reopened per chunk.
    assert any(key[0] == str(pdf3) for key in render_mod._PDF_CACHE)
    cached = render_mod._open_pdf(str(pdf3))
    assert render_mod._open_pdf(str(pdf3)) is cached
    render_mod.close_documents()
    assert not render_mod._PDF_CACHE


def test_rotated_page_is_rendered_as_displayed(tmp_path):
    ref = ref_for(write(tmp_path / "rot.pdf", make_pdf(pages=1, rotate=90)), "pdf")
    (page,) = render_all(ref)
    assert (page.width, page.height) == (1584, 1224)  # landscape
    gray = decode(page).convert("L")
    # The square drawn at the top-left of the unrotated page ends up top-right after /Rotate 90.
    assert gray.getpixel((page.width - 50, 50)) < 64
    assert gray.getpixel((50, 50)) > 192


def test_pixel_cap_lowers_the_scale(pdf3, tmp_path):
    opts = RenderOptions(max_page_pixels=500_000)
    (page,) = render_pages(ref_for(pdf3, "pdf"), opts, 1, 1)
    assert page.width * page.height <= 500_000
    assert page.width * page.height > 480_000
    assert abs(page.height / page.width - 11 / 8.5) < 0.01
    poster = ref_for(write(tmp_path / "a0.pdf", make_pdf(pages=1, pagesize=A0)), "pdf")
    (page,) = render_all(poster)  # A0 at 144 DPI would be ~32 MP
    assert 11_900_000 < page.width * page.height <= OPTS.max_page_pixels


def test_png_encoding(pdf3):
    (page,) = render_pages(ref_for(pdf3, "pdf"), RenderOptions(image_format="png"), 2, 2)
    assert page.mime == "image/png" and decode(page).format == "PNG"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (make_pdf(encrypt="secret"), "encrypted PDF: a password is required"),
        (make_pdf()[: len(make_pdf()) // 2], r"^truncated PDF: it ends before its %%EOF trailer .* \(PDFium: data format error\)$"),
        (b"", r"empty file \(0 bytes\)"),
        (b"just text, no PDF", r"^not a PDF: the file does not start with %PDF- \(it starts with b'just text, no PD'\)"),
        (zero_page_pdf(), "^PDF has no pages$"),
        (make_pdf(encrypt="secret"), "encrypted PDF: a password is required"),  # after zero-pages
    ],
    ids=["encrypted", "truncated", "empty", "junk", "zero-pages", "encrypted-again"],
)
def test_pdf_document_errors(tmp_path, data, message):
    ref = ref_for(write(tmp_path / "bad.pdf", data), "pdf")
    with pytest.raises(DocumentError, match=message):
        count_pages(ref, OPTS)
    with pytest.raises(DocumentError, match=message):
        render_pages(ref, OPTS, 1, 1)


def test_pdf_page_limit_and_missing_file(pdf3, tmp_path):
    with pytest.raises(DocumentError, match=r"PDF has 3 pages, over the limit of 2 \(max_pages\)"):
        count_pages(ref_for(pdf3, "pdf"), RenderOptions(max_pages=2))
    with pytest.raises(DocumentError, match="file not found"):
        count_pages(ref_for(tmp_path / "gone.pdf", "pdf"), OPTS)


def test_a_failing_page_fails_alone(pdf3, monkeypatch):
    real = render_mod._render_pdf_page

    def flaky(pdf, index, opts, *args):
        if index == 1:
            raise RuntimeError("boom")
        return real(pdf, index, opts, *args)

    monkeypatch.setattr(render_mod, "_render_pdf_page", flaky)
    pages = render_all(ref_for(pdf3, "pdf"))
    assert [type(p) for p in pages] == [PageImage, PageFailure, PageImage]
    assert pages[1].page == 2 and "boom" in pages[1].error


def test_remote_locations_render_through_fsspec(pdf3):
    fs = fsspec.filesystem("memory")
    base = f"/render-{uuid.uuid4().hex}"
    fs.pipe(f"{base}/doc.pdf", pdf3.read_bytes())
    fs.pipe(f"{base}/scan.tif", multipage_tiff())
    pdf = DocumentRef("doc.pdf", 0, "memory://x", "pdf", f"memory://{base}/doc.pdf")
    assert [p.page for p in render_pages(pdf, OPTS, 2, 3)] == [2, 3]
    tif = DocumentRef("scan.tif", 1, "memory://x", "image", f"memory://{base}/scan.tif")
    assert [p.width for p in render_all(tif)] == [30, 50, 10]


def test_page_range_is_checked(pdf3):
    with pytest.raises(ValueError):
        render_pages(ref_for(pdf3, "pdf"), OPTS, 3, 4)


# ------------------------------------------------------------------------------------- images


def _cmyk_jpeg():
    return encode_image(Image.new("CMYK", (30, 20), (0, 255, 255, 0)), "JPEG")  # red in CMYK


def _p_transparent():
    img = Image.new("P", (30, 20), 0)
    img.putpalette([0, 0, 0] + [255, 0, 0] * 255)
    return encode_image(img, "PNG", transparency=0)  # index 0 = black, but transparent


@pytest.mark.parametrize(
    ("name", "data", "expected"),
    [
        ("one-bit.png", encode_image(Image.new("1", (30, 20), 1), "PNG"), (255, 255, 255)),
        ("gray.png", encode_image(Image.new("L", (30, 20), 100), "PNG"), (100, 100, 100)),
        ("palette.gif", encode_image(Image.new("RGB", (30, 20), (0, 0, 255)).convert("P"), "GIF"), (0, 0, 255)),
        ("palette-transparent.png", _p_transparent(), (255, 255, 255)),
        ("la.png", encode_image(Image.new("LA", (30, 20), (0, 0)), "PNG"), (255, 255, 255)),
        ("rgba.png", encode_image(Image.new("RGBA", (30, 20), (255, 0, 0, 0)), "PNG"), (255, 255, 255)),
        ("rgba-opaque.webp", encode_image(Image.new("RGBA", (30, 20), (0, 255, 0, 255)), "WEBP", lossless=True), (0, 255, 0)),
        ("cmyk.jpg", _cmyk_jpeg(), (255, 0, 0)),
        ("sixteen.png", encode_image(Image.new("I;16", (30, 20), 32768), "PNG"), (128, 128, 128)),
        ("int32.tif", encode_image(Image.new("I", (30, 20), 65535), "TIFF"), (255, 255, 255)),
        ("float.tif", encode_image(Image.new("F", (30, 20), 0.5), "TIFF"), (128, 128, 128)),
        ("rgb.bmp", encode_image(Image.new("RGB", (30, 20), (10, 20, 30)), "BMP"), (10, 20, 30)),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_every_mode_becomes_an_rgb_jpeg(tmp_path, name, data, expected):
    path = write(tmp_path / name, data)
    mode = Image.open(path).mode
    (page,) = render_all(ref_for(path, "image"))
    assert isinstance(page, PageImage), page
    img = decode(page)
    assert img.mode == "RGB" and (img.width, img.height) == (30, 20), mode
    got = img.getpixel((15, 10))
    assert all(abs(g - e) <= 6 for g, e in zip(got, expected)), (mode, got)


def test_sixteen_bit_png_is_really_sixteen_bit():
    assert Image.open(io.BytesIO(encode_image(Image.new("I;16", (4, 4), 32768), "PNG"))).mode.startswith("I")


def test_multipage_tiff_frames_are_pages(tmp_path):
    ref = ref_for(write(tmp_path / "scan.tif", multipage_tiff()), "image")
    assert count_pages(ref, OPTS) == 3
    pages = render_all(ref)
    assert [(p.page, p.width, p.height) for p in pages] == [(1, 30, 40), (2, 50, 20), (3, 10, 10)]
    assert decode(pages[1]).getpixel((5, 5))[0] == pytest.approx(60, abs=4)


def test_animated_gif_is_one_page(tmp_path):
    gif = write(tmp_path / "anim.gif", animated_gif())
    assert Image.open(gif).n_frames == 4
    assert count_pages(ref_for(gif, "image"), OPTS) == 1


def test_exif_orientation_is_applied(tmp_path):
    img = Image.new("RGB", (40, 20), "white")
    exif = img.getexif()
    exif[0x0112] = 6  # rotate 90° clockwise to display
    (page,) = render_all(ref_for(write(tmp_path / "phone.jpg", encode_image(img, "JPEG", exif=exif)), "image"))
    assert (page.width, page.height) == (20, 40)


def test_decompression_bomb_is_refused_before_decoding(tmp_path):
    ref = ref_for(write(tmp_path / "bomb.png", bomb_png()), "image")
    message = r"image is 20000x20000 = 400000000 pixels, over the limit of 120000000 .*decompression bomb"
    with pytest.raises(DocumentError, match=message):
        count_pages(ref, OPTS)
    # Below Pillow's own limit but above ours: still ours that speaks.
    with pytest.raises(DocumentError, match="over the limit of 1000 "):
        count_pages(ref_for(write(tmp_path / "p.png", png(size=(50, 50))), "image"), RenderOptions(max_image_pixels=1000))


def test_big_image_is_resized_to_the_page_budget(tmp_path):
    ref = ref_for(write(tmp_path / "big.png", png(size=(2000, 1000))), "image")
    (page,) = render_all(ref, RenderOptions(max_page_pixels=200_000))
    assert page.width * page.height <= 200_000 and (page.width, page.height) == (632, 316)


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("bad.png", b"", r"empty file \(0 bytes\)"),
        ("bad.png", b"this is text, not a PNG", "not a readable image: no image format recognises the data"),
        # JPEG XL (ISO/IEC 18181-2's container signature) and DjVu: page formats Pillow has no plugin for.
        ("page.jxl", b"\x00\x00\x00\x0cJXL \r\n\x87\n" + bytes(64), "a JPEG XL image, which Pillow cannot read"),
        ("book.djvu", b"AT&TFORM\x00\x00\x00\x40DJVUINFO" + bytes(64), "a DjVu document, .* convert it to PDF"),
    ],
)
def test_image_document_errors(tmp_path, name, data, message):
    ref = ref_for(write(tmp_path / name, data), "image")
    with pytest.raises(DocumentError, match=message):
        count_pages(ref, OPTS)


def test_truncated_image_fails_its_page(tmp_path):
    data = encode_image(Image.effect_noise((200, 200), 50).convert("RGB"), "PNG")
    (page,) = render_all(ref_for(write(tmp_path / "cut.png", data[: len(data) // 2]), "image"))
    assert isinstance(page, PageFailure) and page.error.startswith("not a readable image")


def test_heic_and_avif_photos_are_read(tmp_path):
    """Phone photos: HEIC through pillow-heif (extra heif), whose Pillow plugin the reader registers
    itself (the file is written without registering it); AVIF through Pillow itself (11.3 on)."""
    import pillow_heif

    blue = Image.new("RGB", (64, 48), (0, 0, 255))
    pillow_heif.from_pillow(blue).save(tmp_path / "photo.heic")
    blue.save(tmp_path / "photo.avif")
    for name in ("photo.heic", "photo.avif"):
        (page,) = render_all(ref_for(tmp_path / name, "image"))
        assert decode(page).getpixel((32, 24)) == pytest.approx((0, 0, 255), abs=12), name


def test_heic_without_pillow_heif_is_an_error_naming_the_extra(tmp_path, monkeypatch):
    import pillow_heif

    path = tmp_path / "photo.heic"
    pillow_heif.from_pillow(Image.new("RGB", (64, 48), "white")).save(path)
    # This process as if pillow-heif were not installed: no module, and no plugin registered with Pillow.
    monkeypatch.setitem(sys.modules, "pillow_heif", None)
    monkeypatch.setattr(images_mod, "_heif", None)
    monkeypatch.setattr(Image, "ID", [name for name in Image.ID if name != "HEIF"])
    with pytest.raises(DocumentError, match=r"a HEIF/HEIC image: reading it needs pillow-heif, pip install "
                                            r"'llm-ocr\[heif\]'"):
        count_pages(ref_for(path, "image"), OPTS)


# -------------------------------------------------------------------------------- dataset rows


def test_dataset_row_pages_and_page_level_failures():
    ref = row(png("red"), b"garbage", b"", bomb_png())
    assert count_pages(ref, OPTS) == 4
    pages = render_all(ref)
    assert isinstance(pages[0], PageImage) and decode(pages[0]).getpixel((1, 1)) == pytest.approx((254, 0, 0), abs=2)
    assert [type(p) for p in pages[1:]] == [PageFailure] * 3
    assert pages[1].error.startswith("not a readable image")
    assert "0 bytes" in pages[2].error
    assert "decompression bomb" in pages[3].error
    with pytest.raises(DocumentError, match="dataset row has no images"):
        count_pages(row(), OPTS)
    with pytest.raises(DocumentError, match="over the limit of 3"):
        count_pages(row(*[png()] * 4), RenderOptions(max_pages=3))


@pytest.mark.parametrize(("min_side", "expected"), [(640, (640, 320)), (0, (144, 72)), (100, (144, 72))])
def test_tiny_pages_render_at_the_minimum_side_unless_turned_off(tmp_path, min_side, expected):
    import pypdfium2

    label = pypdfium2.PdfDocument.new()
    label.new_page(72, 36)  # 1 x 0.5 inch: 144 x 72 px at 144 DPI
    label.save(str(tmp_path / "label.pdf"))
    (page,) = render_pages(ref_for(tmp_path / "label.pdf", "pdf"), RenderOptions(min_page_side=min_side), 1, 1)
    assert (page.width, page.height) == expected == decode(page).size
