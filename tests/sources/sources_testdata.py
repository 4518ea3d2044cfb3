"""Test inputs made on the fly: PDFs (reportlab), images in every mode (Pillow), datasets."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

from PIL import Image
from reportlab.lib.pagesizes import letter
from reportlab.pdfgen import canvas


def make_pdf(pages: int = 3, pagesize=letter, rotate: int = 0, encrypt: str | None = None) -> bytes:
    """A PDF whose page i says "Page i" and has a black square in its top-left corner.

    ``rotate`` sets /Rotate on every page afterwards (with pypdfium2: reportlab's own
    setPageRotation also swaps the MediaBox, which would hide what the test checks).
    """
    buf = io.BytesIO()
    c = canvas.Canvas(buf, pagesize=pagesize, encrypt=encrypt)
    _, h = pagesize
    for i in range(1, pages + 1):
        c.rect(0, h - 100, 100, 100, stroke=0, fill=1)
        c.setFont("Helvetica", 24)
        c.drawString(144, h - 144, f"Page {i}")
        c.showPage()
    c.save()
    if not rotate:
        return buf.getvalue()
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(buf.getvalue())
    for page in pdf:
        page.set_rotation(rotate)
    out = io.BytesIO()
    pdf.save(out)
    return out.getvalue()


def _pdf_from_objects(objects: list[str]) -> bytes:
    out = b"%PDF-1.4\n"
    offsets = []
    for i, obj in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{i} 0 obj\n{obj}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return out


def zero_page_pdf() -> bytes:
    """A syntactically valid PDF whose page tree is empty."""
    return _pdf_from_objects(["<< /Type /Catalog /Pages 2 0 R >>", "<< /Type /Pages /Kids [] /Count 0 >>"])


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def bomb_png(width: int = 20000, height: int = 20000) -> bytes:
    """A tiny PNG whose header claims ``width x height`` 1-bit pixels (never decoded by the tests)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 64)
    return b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IDAT", idat) + _png_chunk(b"IEND", b"")


def encode_image(img: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def png(color="red", size=(40, 20)) -> bytes:
    return encode_image(Image.new("RGB", size, color), "PNG")


def multipage_tiff(sizes=((30, 40), (50, 20), (10, 10))) -> bytes:
    frames = [Image.new("L", s, 60 * i) for i, s in enumerate(sizes)]
    return encode_image(frames[0], "TIFF", save_all=True, append_images=frames[1:])


def animated_gif(frames: int = 4) -> bytes:
    imgs = [Image.new("RGB", (32, 32), (60 * i, 0, 255 - 60 * i)) for i in range(frames)]
    return encode_image(imgs[0], "GIF", save_all=True, append_images=imgs[1:], duration=100, loop=0)


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def finevision_parquet(path: Path, rows: list[list[bytes]]) -> Path:
    """A Parquet file shaped like FineVision: images List(Image), texts List({user, assistant}), source."""
    from datasets import Dataset, Features, List, Value
    from datasets import Image as HFImage

    features = Features(
        {
            "images": List(HFImage()),
            "texts": List({"user": Value("string"), "assistant": Value("string")}),
            "source": Value("string"),
        }
    )
    data = {
        # {"bytes", "path"} dicts keep the exact bytes (a PIL image would be re-encoded; FACTS).
        "images": [[{"bytes": b, "path": None} for b in row] for row in rows],
        "texts": [[{"user": "Convert", "assistant": f"row {i}"}] for i in range(len(rows))],
        "source": ["olmOCR-mix-0225-documents"] * len(rows),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    Dataset.from_dict(data, features=features).to_parquet(str(path))
    return path
