"""JPEG q95 versus PNG for page images: encoding cost, size, and what the model gets to see.

DeepSeek-OCR in vLLM's "Gundam" mode (docs/facts.md#deepseek-ocr) looks at a page twice: a *global
view*, the page padded to a 1024x1024 square (``ImageOps.pad``, bicubic), and *tiles* of 640x640 cut
from the page resized (bicubic) to the closest ``cols x rows`` grid of 640 px tiles with 2..6 tiles.
A Letter page at 144 DPI (1224x1584) gets a 2x3 grid, i.e. 1280x1920: slightly *up*-scaled, so the
tiles see JPEG artifacts at about native resolution, while the global view averages them away.
:func:`encoding_report` measures PSNR against the lossless page at
native size, in the global view and in the tile canvas.
"""

from __future__ import annotations

import io
import math
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import pypdfium2 as pdfium
from PIL import Image, ImageOps

from llm_ocr.options import RenderOptions
from llm_ocr.sources.images import encode

GLOBAL_VIEW = 1024
TILE = 640
MIN_TILES, MAX_TILES = 2, 6  # vLLM's DeepSeek-OCR processor (docs/facts.md#deepseek-ocr)


def tile_grid(width: int, height: int) -> tuple[int, int]:
    """``(cols, rows)`` of 640 px tiles for an image, by the closest aspect ratio (DeepSeek-OCR's
    ``dynamic_preprocess``; ties go to the larger grid when the image is big enough)."""
    aspect = width / height
    grids = sorted(
        {(i, j) for n in range(MIN_TILES, MAX_TILES + 1) for i in range(1, n + 1) for j in range(1, n + 1)
         if MIN_TILES <= i * j <= MAX_TILES},
        key=lambda g: g[0] * g[1],
    )
    best, best_diff = (1, 1), math.inf
    for cols, rows in grids:
        diff = abs(aspect - cols / rows)
        if diff < best_diff:
            best, best_diff = (cols, rows), diff
        elif diff == best_diff and width * height > 0.5 * TILE * TILE * cols * rows:
            best = (cols, rows)
    return best


def psnr(a: Image.Image, b: Image.Image) -> float:
    """Peak signal-to-noise ratio in dB of two same-size 8-bit images (inf when identical)."""
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    mse = float(np.mean((x - y) ** 2))
    return math.inf if mse == 0 else 10 * math.log10(255.0**2 / mse)


def psnr_busy(a: Image.Image, b: Image.Image, block: int = 16) -> float:
    """PSNR over the ``block``-pixel squares of ``a`` that hold ink (a range of values over 32):
    a page is mostly blank paper, which JPEG keeps perfectly and which would flatter the score."""
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    h, w = (x.shape[0] // block) * block, (x.shape[1] // block) * block
    xb = x[:h, :w].reshape(h // block, block, w // block, block, -1)
    yb = y[:h, :w].reshape(h // block, block, w // block, block, -1)
    busy = (xb.max(axis=(1, 3, 4)) - xb.min(axis=(1, 3, 4))) > 32
    if not busy.any():
        return math.inf
    diff = (xb - yb) ** 2
    mse = float(diff.mean(axis=(1, 3, 4))[busy].mean())
    return math.inf if mse == 0 else 10 * math.log10(255.0**2 / mse)


def model_views(img: Image.Image) -> dict[str, Image.Image]:
    """What the model sees of a page: native, the padded global view, the tile canvas."""
    cols, rows = tile_grid(*img.size)
    return {
        "native": img,
        "global_1024": ImageOps.pad(img, (GLOBAL_VIEW, GLOBAL_VIEW), color=(127, 127, 127)),
        f"tiles_{cols}x{rows}": img.resize((cols * TILE, rows * TILE), Image.Resampling.BICUBIC),
    }


def _decode(data: bytes) -> Image.Image:
    with Image.open(io.BytesIO(data)) as im:
        return im.convert("RGB")


def encoding_report(pdfs: list[Path], pages: int = 8, dpi: float = 144.0) -> dict[str, Any]:
    """Encode ``pages`` pages (spread over the documents) as JPEG q95 and PNG; report per-page
    encode time, bytes, and PSNR of the JPEG against the lossless page in each model view."""
    # First pages of successive documents (so scans are included: every fifth document), then
    # last pages when there are fewer documents than pages wanted.
    chosen: list[tuple[Path, int]] = [(path, 0) for path in pdfs[:pages]]
    for path in pdfs:
        if len(chosen) >= pages:
            break
        with pdfium.PdfDocument(str(path)) as pdf:
            if len(pdf) > 1:
                chosen.append((path, len(pdf) - 1))
    chosen = chosen[:pages]
    jpeg_opts, png_opts = RenderOptions(image_format="jpeg"), RenderOptions(image_format="png")
    timings: dict[str, list[float]] = {"jpeg": [], "png": []}
    sizes: dict[str, list[int]] = {"jpeg": [], "png": []}
    quality: dict[str, list[float]] = {}
    ink: dict[str, list[float]] = {}
    for path, index in chosen:
        with pdfium.PdfDocument(str(path)) as pdf:
            page = pdf[index]
            img = page.render(scale=dpi / 72, rev_byteorder=True).to_pil().convert("RGB")
            page.close()
        encoded = {}
        for name, opts in (("jpeg", jpeg_opts), ("png", png_opts)):
            started = time.perf_counter()
            data, _ = encode(img, opts)
            timings[name].append(time.perf_counter() - started)
            sizes[name].append(len(data))
            encoded[name] = data
        lossless = _decode(encoded["png"])
        assert np.array_equal(np.asarray(lossless), np.asarray(img)), "PNG must be lossless"
        reference, lossy = model_views(lossless), model_views(_decode(encoded["jpeg"]))
        for view in reference:
            quality.setdefault(view, []).append(psnr(reference[view], lossy[view]))
            ink.setdefault(view, []).append(psnr_busy(reference[view], lossy[view]))
    return {
        "pages": len(chosen),
        "size": f"{img.width}x{img.height}",
        "jpeg_quality": jpeg_opts.jpeg_quality,
        "encode_ms": {k: round(1000 * statistics.median(v), 1) for k, v in timings.items()},
        "kbytes": {k: round(statistics.mean(v) / 1024, 1) for k, v in sizes.items()},
        # The worst page matters more than the average one.
        "jpeg_psnr_db_min": {k: round(min(v), 2) for k, v in quality.items()},
        "jpeg_psnr_db_mean": {k: round(statistics.mean(v), 2) for k, v in quality.items()},
        "jpeg_psnr_ink_db_min": {k: round(min(v), 2) for k, v in ink.items()},
    }
