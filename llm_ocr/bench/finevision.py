"""FineVision-shaped Parquet datasets made on the spot, for tests and ``llm-ocr bench-reads``.

The columns follow ``HuggingFaceM4/FineVision`` (FACTS): ``images: List(Image)``,
``texts: List({user, assistant})``, ``source: string`` and four ``*_ratings: List(int64)`` with
their ``*_min: int64``, with the ``datasets`` features in the schema metadata so ``datasets``
reads ``images`` as images. Files are written with a :class:`pyarrow.parquet.ParquetWriter`, a
row group at a time (``Dataset.from_list`` of image rows costs gigabytes; FACTS), and differ in
size on purpose: rows per file and image sizes vary, so balance by bytes is put to the test.
Page images are noise (PNG or JPEG by PIL), so compression cannot shrink them away.
"""

from __future__ import annotations

import io
import random
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

RATINGS = ("relevance", "visual_dependency", "image_correspondence", "formatting")


@dataclass
class GeneratedDataset:
    """What was written: the files (sorted), rows per file and the page images of every row."""

    folder: Path
    files: list[Path] = field(default_factory=list)
    rows_per_file: list[int] = field(default_factory=list)
    images: list[list[bytes]] = field(default_factory=list)  # per global row, in file order

    @property
    def total_bytes(self) -> int:
        """Size of all the files on disk."""
        return sum(p.stat().st_size for p in self.files)


def finevision_schema() -> pa.Schema:
    """The Arrow schema of a FineVision row, with the ``datasets`` features as metadata."""
    from datasets import Features, Image, List, Value

    features = Features(
        {
            "images": List(Image()),
            "texts": List({"user": Value("string"), "assistant": Value("string")}),
            "source": Value("string"),
            **{f"{name}_ratings": List(Value("int64")) for name in RATINGS},
            **{f"{name}_min": Value("int64") for name in RATINGS},
        }
    )
    return features.arrow_schema


def noise_image(rng: random.Random, width: int, height: int, fmt: str) -> bytes:
    """An RGB image of random pixels, encoded as ``fmt`` (``PNG`` or ``JPEG``)."""
    from PIL import Image

    img = Image.frombytes("RGB", (width, height), rng.randbytes(width * height * 3))
    buffer = io.BytesIO()
    img.save(buffer, fmt, **({"quality": 90} if fmt == "JPEG" else {"compress_level": 1}))
    return buffer.getvalue()


def write_finevision(
    folder: Path,
    *,
    files: int = 16,
    rows: tuple[int, int] = (4, 16),
    row_group_rows: int = 4,
    images_per_row: tuple[int, int] = (1, 3),
    image_side: tuple[int, int] = (48, 160),
    seed: int = 0,
    name: str = "train-{index:05d}-of-{files:05d}.parquet",
) -> GeneratedDataset:
    """Write ``files`` Parquet files of FineVision-shaped rows into ``folder``.

    Each file gets a random number of rows in ``rows`` (inclusive) and its own image side in
    ``image_side``, so files differ in size by an order of magnitude; rows hold a random number
    of page images in ``images_per_row``; every ``row_group_rows`` rows make one row group.
    """
    rng = random.Random(seed)
    schema = finevision_schema()
    folder.mkdir(parents=True, exist_ok=True)
    out = GeneratedDataset(folder)
    for index in range(files):
        path = folder / name.format(index=index, files=files)
        count = rng.randint(*rows)
        side = rng.randint(*image_side)
        with pq.ParquetWriter(path, schema) as writer:
            for start in range(0, count, row_group_rows):
                batch = [_row(rng, side, images_per_row) for _ in range(min(row_group_rows, count - start))]
                out.images += [[image["bytes"] for image in row["images"]] for row in batch]
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
        out.files.append(path)
        out.rows_per_file.append(count)
    return out


def _row(rng: random.Random, side: int, images_per_row: tuple[int, int]) -> dict:
    pages = rng.randint(*images_per_row)
    images = []
    for _ in range(pages):
        fmt = rng.choice(("PNG", "JPEG"))
        # The path stays None: with a path, datasets would re-read the file (FACTS).
        images.append({"bytes": noise_image(rng, side, side + rng.randint(0, side // 2), fmt), "path": None})
    row: dict = {
        "images": images,
        "texts": [{"user": "Convert the page to markdown.", "assistant": f"page text {rng.random():.6f}"}],
        "source": "olmOCR-mix-0225-documents",
    }
    for name in RATINGS:
        ratings = [rng.randint(1, 5) for _ in range(pages)]
        row[f"{name}_ratings"] = ratings
        row[f"{name}_min"] = min(ratings, default=None)
    return row
