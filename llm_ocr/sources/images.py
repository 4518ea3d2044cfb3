"""Pillow helpers for the renderer: open safely, convert any mode to 8-bit RGB, fit, encode.

Decompression bombs: :func:`open_image` relies on ``Image.open`` being lazy (it reads only the
header), checks the pixel count against ``max_image_pixels`` itself, and only then lets anything
be decoded. Pillow's own global limit is switched off while opening (our limit replaces it with a
clearer message, and may be higher than Pillow's default) and set to our limit, with its warning
turned into an error, while decoding, as a second line of defence. Both touch Pillow globals:
fine in single-threaded worker processes, not thread-safe.

HEIF/HEIC (phone photos) is read by pillow-heif's Pillow plugin (the ``heif`` extra: its wheels
bundle GPL-licensed x265, so it is not a core dependency), registered the first time Pillow
recognises no format in an image; without it, or for a format no plugin reads (AVIF before
Pillow 11.3, JPEG XL, DjVu), the refusal names the format and what reads it.
"""

from __future__ import annotations

import io
import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

import PIL
from PIL import Image, ImageOps, UnidentifiedImageError

from llm_ocr.options import RenderOptions
from llm_ocr.resizing import smart_resize

_EXIF_ORIENTATION = 0x0112


class ImageRefused(Exception):
    """An image that cannot be used; the message is the user-facing reason."""


def bomb_message(width: int, height: int, limit: int) -> str:
    return (
        f"image is {width}x{height} = {width * height} pixels, over the limit of {limit} "
        "(max_image_pixels); likely a decompression bomb"
    )


@contextmanager
def _pillow_limit(limit: int | None) -> Iterator[None]:
    saved = Image.MAX_IMAGE_PIXELS
    Image.MAX_IMAGE_PIXELS = limit
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            yield
    finally:
        Image.MAX_IMAGE_PIXELS = saved


def open_image(fp: IO[bytes], opts: RenderOptions) -> Image.Image:
    """Open (without decoding) and refuse unreadable data or too many pixels."""
    start = fp.tell()
    try:
        try:
            with _pillow_limit(None):
                img = Image.open(fp)
        except UnidentifiedImageError:
            if not _register_heif():
                raise
            fp.seek(start)  # pillow-heif's plugin is there now: one more try
            with _pillow_limit(None):
                img = Image.open(fp)
    except UnidentifiedImageError as e:
        # Pillow's message names the file object ("cannot identify image file <...LocalFileOpener
        # object at 0x7f...>"): a memory address, different on every run, in the error row.
        fp.seek(start)
        raise ImageRefused(f"not a readable image: {unread_format(fp.read(32))}") from e
    except (OSError, SyntaxError, ValueError) as e:  # Pillow plugins raise all of these on bad headers
        raise ImageRefused(f"not a readable image: {type(e).__name__}: {e}") from e
    check_size(img, opts)
    return img


#: Whether pillow-heif's opener is registered in this process (None: not tried yet).
_heif: bool | None = None


def _register_heif() -> bool:
    """Register pillow-heif's Pillow plugin, once per process: True the first time it is
    registered (worth opening the image again), False when it was already or is not installed."""
    global _heif
    if _heif is not None:
        return False
    try:
        from pillow_heif import register_heif_opener
    except ImportError:
        _heif = False
        return False
    register_heif_opener()
    _heif = True
    return True


#: ISO base media ``ftyp`` brands of HEIF/HEIC images (ISO/IEC 23008-12) and of AVIF.
_HEIF_BRANDS = frozenset({b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"hevm", b"hevs", b"mif1", b"msf1"})
_AVIF_BRANDS = frozenset({b"avif", b"avis"})


def unread_format(head: bytes) -> str:
    """Why no plugin read an image that starts with ``head``: the format and what reads it, when
    the first bytes tell it, else that no format recognises the data."""
    brand = head[8:12] if head[4:8] == b"ftyp" else b""
    if brand in _AVIF_BRANDS:
        return (f"an AVIF image, and this Pillow ({PIL.__version__}) cannot read AVIF: Pillow 11.3 or later can "
                "(pip install -U pillow)")
    if brand in _HEIF_BRANDS:
        if _heif is False:
            return "a HEIF/HEIC image: reading it needs pillow-heif, pip install 'llm-ocr[heif]'"
        return "a HEIF/HEIC image that pillow-heif cannot decode"
    if head.startswith((b"\xff\x0a", b"\x00\x00\x00\x0cJXL \r\n\x87\n")):
        return "a JPEG XL image, which Pillow cannot read: convert it to PNG or JPEG first"
    if head.startswith(b"AT&TFORM"):
        return "a DjVu document, which llm-ocr cannot read: convert it to PDF first (e.g. ddjvu -format=pdf)"
    return "no image format recognises the data"


def check_size(img: Image.Image, opts: RenderOptions) -> None:
    """Refuse the current frame of ``img`` if it has more pixels than ``opts.max_image_pixels``."""
    w, h = img.size
    if w * h > opts.max_image_pixels:
        raise ImageRefused(bomb_message(w, h, opts.max_image_pixels))
    if w < 1 or h < 1:
        raise ImageRefused(f"not a readable image: size {w}x{h}")


def page_count(img: Image.Image) -> int:
    """Pages in an opened image: every frame of a TIFF, otherwise 1.

    Animated GIF, APNG and animated WebP are animations, not multi-page documents: only their
    first frame is a page. (Other multi-frame formats, such as MPO stereo JPEGs, likewise.)
    """
    return getattr(img, "n_frames", 1) if img.format == "TIFF" else 1


def prepare_frame(img: Image.Image, frame: int, opts: RenderOptions) -> Image.Image:
    """Decode frame ``frame`` (0-based) of an opened image as 8-bit RGB fitted to the page budget."""
    with _pillow_limit(opts.max_image_pixels):
        try:
            if frame != img.tell():
                img.seek(frame)
                check_size(img, opts)  # frames of a TIFF may differ in size
            img.load()
            # Phone photos of pages carry their orientation in EXIF; the model must see them upright.
            # (Checked first: exif_transpose copies even when there is nothing to do.)
            if img.getexif().get(_EXIF_ORIENTATION, 1) != 1:
                img = ImageOps.exif_transpose(img)
            rgb = to_rgb(img)
        except Image.DecompressionBombError as e:
            raise ImageRefused(f"{e} (max_image_pixels)") from e
        except Image.DecompressionBombWarning as e:
            raise ImageRefused(f"{e} (max_image_pixels)") from e
        except (OSError, SyntaxError, ValueError, EOFError) as e:
            raise ImageRefused(f"not a readable image: {type(e).__name__}: {e}") from e
        return fit(fit_long_side(rgb, opts), opts.max_page_pixels)


def fit_long_side(img: Image.Image, opts: RenderOptions) -> Image.Image:
    """``img`` scaled so its longer side is ``opts.long_side`` (up or down), then down to at most
    ``opts.max_long_side``; unchanged when neither is set."""
    target = opts.long_side or max(img.size)
    if opts.max_long_side:
        target = min(target, opts.max_long_side)
    if target == max(img.size):
        return img
    scale = target / max(img.size)
    size = (max(1, round(img.width * scale)), max(1, round(img.height * scale)))
    return img.resize(size, Image.Resampling.LANCZOS)


def to_rgb(img: Image.Image) -> Image.Image:
    """Any Pillow mode → 8-bit RGB; transparency is composited on white (pages are paper)."""
    mode = img.mode
    if mode in ("I", "F") or mode.startswith("I;16"):
        return _high_depth_to_l(img).convert("RGB")
    if mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in img.info:
        rgba = img.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    if mode == "RGB":
        return img
    return img.convert("RGB")  # 1, L, P, CMYK, YCbCr, RGBX, ...


def _high_depth_to_l(img: Image.Image) -> Image.Image:
    """16/32-bit integer and float images → 8-bit grayscale.

    ``convert("L")`` would clip (a 16-bit scan turns white), so scale instead: values that fit in
    0..255 stay, values in 0..65535 are divided by 256 (16-bit data), floats in 0..1 are
    multiplied by 255, anything else is stretched from its min..max.
    """
    if img.mode != "F":
        img = img.convert("I")  # I;16, I;16B, ... → 32-bit signed, values preserved
    lo, hi = img.getextrema()
    assert isinstance(lo, (int, float)) and isinstance(hi, (int, float))  # one band (I or F): two numbers
    if img.mode == "F" and 0 <= lo and hi <= 1:
        scale, offset = 255.0, 0.0
    elif 0 <= lo and hi <= 255:
        scale, offset = 1.0, 0.0
    elif img.mode == "I" and 0 <= lo and hi <= 65535:
        scale, offset = 1 / 256, 0.0
    else:
        span = (hi - lo) or 1
        scale, offset = 255 / span, -lo * 255 / span
    if img.mode == "I":
        img = img.convert("F")  # point() on I images rounds the scale; work in float
    return img.point(lambda v: v * scale + offset).convert("L")


def fit_scale(width: float, height: float, max_pixels: int) -> float:
    """The factor (≤ 1) that brings ``width x height`` within ``max_pixels``."""
    area = width * height
    return 1.0 if area <= max_pixels else math.sqrt(max_pixels / area)


def fit(img: Image.Image, max_pixels: int) -> Image.Image:
    """Resize down (LANCZOS) so the image has at most ``max_pixels`` pixels."""
    w, h = img.size
    s = fit_scale(w, h, max_pixels)
    if s >= 1:
        return img
    nw, nh = max(1, math.floor(w * s)), max(1, math.floor(h * s))
    # reducing_gap: box-reduce first, then LANCZOS the last step; same look, much faster on scans.
    return img.resize((nw, nh), Image.Resampling.LANCZOS, reducing_gap=3.0)


def to_multiple(img: Image.Image, opts: RenderOptions) -> Image.Image:
    """``img`` with both sides multiples of ``opts.size_multiple``, rounded to the nearest within
    ``opts.max_page_pixels`` (Qwen2-VL's ``smart_resize``, bicubic as the families' clients resize:
    Infinity-Parser2, GLM-OCR); unchanged when that is unset or already so."""
    multiple = opts.size_multiple
    if not multiple:
        return img
    height, width = smart_resize(img.height, img.width, multiple, multiple * multiple, opts.max_page_pixels)
    return img if (width, height) == img.size else img.resize((width, height), Image.Resampling.BICUBIC)


def encode(img: Image.Image, opts: RenderOptions) -> tuple[bytes, str]:
    """Encode an RGB image as configured; returns (bytes, mime type)."""
    buf = io.BytesIO()
    if opts.image_format == "png":
        img.save(buf, "PNG", compress_level=1)  # FACTS: ~75 ms vs ~110 ms at level 6 per page
        return buf.getvalue(), "image/png"
    img.save(buf, "JPEG", quality=opts.jpeg_quality)
    return buf.getvalue(), "image/jpeg"
