"""Content fingerprints: a document's sha256, a page image's perceptual hash and exact comparison.

A document is a duplicate of another when their bytes hash alike (sha256: a collision is not a
risk worth counting). A page is a candidate duplicate of another when its image's difference
hash (:func:`page_fingerprint`) and size are the same, and *is* one only when
:func:`same_pixels` finds every pixel equal: the hash finds candidates cheaply, never decides.
Both page functions run in render workers (they decode an image).
"""

from __future__ import annotations

import hashlib
import io
from typing import BinaryIO

from PIL import Image

#: Bytes hashed at a time.
BLOCK = 1 << 20
#: The side of the grey thumbnail a page is hashed from: 9 x 8 pixels give 64 left-right
#: differences, the usual difference hash (dHash).
HASH_WIDTH, HASH_HEIGHT = 9, 8


def file_sha256(path: str) -> str:
    """The sha256 of the local file at ``path`` (hex)."""
    with open(path, "rb") as handle:
        return stream_sha256(handle)


def stream_sha256(handle: BinaryIO) -> str:
    """The sha256 of what is left to read of ``handle`` (hex)."""
    digest = hashlib.sha256()
    while block := handle.read(BLOCK):
        digest.update(block)
    return digest.hexdigest()


def page_fingerprint(data: bytes) -> tuple[int, int, int]:
    """``(width, height, dhash)`` of an encoded page image: its size and the 64-bit difference
    hash of its grey 9 x 8 thumbnail (bit set where a pixel is brighter than its right
    neighbour). Equal images give equal fingerprints; the converse is only likely."""
    with Image.open(io.BytesIO(data)) as image:
        size = image.size
        # A JPEG is decoded at 1/8 scale (its DCT's own reduction: 3 ms instead of 8 for a page);
        # other formats decode whole. Equal bytes give equal hashes either way, and the pages
        # compared are encoded by the one renderer, so equal pixels come as equal bytes.
        image.draft("L", (size[0] // 8, size[1] // 8))
        small = image.convert("L").resize((HASH_WIDTH, HASH_HEIGHT), Image.Resampling.BOX)
    pixels = small.tobytes()
    bits = 0
    for row in range(HASH_HEIGHT):
        for col in range(HASH_WIDTH - 1):
            left, right = pixels[row * HASH_WIDTH + col], pixels[row * HASH_WIDTH + col + 1]
            bits = (bits << 1) | (left > right)
    return size[0], size[1], bits


def pixel_sha256(data: bytes) -> str:
    """The sha256 (hex) of an encoded image's decoded pixels, with their mode and size: equal for
    two images of the same pixels whatever their encoding's bytes (a PNG's compression, its
    metadata), so that a page rendered alike by two processes hashes alike."""
    with Image.open(io.BytesIO(data)) as image:
        image.load()
        digest = hashlib.sha256(f"{image.mode} {image.size[0]}x{image.size[1]}\n".encode())
        digest.update(image.tobytes())
    return digest.hexdigest()


def same_pixels(first: bytes, second: bytes) -> bool:
    """Whether two encoded images decode to the same pixels, every one (same mode and size)."""
    if first == second:
        return True
    with Image.open(io.BytesIO(first)) as a, Image.open(io.BytesIO(second)) as b:
        if a.size != b.size:
            return False
        a_rgb, b_rgb = a.convert("RGBA"), b.convert("RGBA")
        return a_rgb.tobytes() == b_rgb.tobytes()
