"""The output columns, declared once as the record dataclasses: the Parquet a stage writes with
the derived schemas reads back into the same records, and ``datasets`` decodes its images."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

from PIL import Image

from llm_ocr.records import Block, DocumentResult, Figure, PageResult, document_schema, page_schema
from llm_ocr.storage.parts import rows_to_bytes

if TYPE_CHECKING:  # imported where it is used: about a CPU-second that collection need not pay
    import datasets


def png(width: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, 20), (10, 120, 200)).save(buffer, "PNG")
    return buffer.getvalue()


def load(path: Path) -> datasets.Dataset:
    import datasets

    return datasets.load_dataset("parquet", data_files=str(path), split="train", cache_dir=str(path.parent / "cache"))


def test_a_page_row_round_trips_and_its_figures_decode_as_images(tmp_path: Path) -> None:
    page = PageResult(
        "report.pdf", 2**40, 3, "scans/report.pdf", 9, markdown="# Title", raw="<|ref|>", status="truncated",
        figures=[Figure("3-0", [1, 2, 30, 40], image=png(31), description="A chart.", description_json='{"a": 1}')],
        blocks=[Block("title", [[0, 0, 10, 10], [5, 5, 9, 9]], "Title")], width=800, height=1000,
        finish_reason="length", prompt_tokens=900, completion_tokens=4096, latency_s=1.5, attempts=2, cut_tokens=812,
        cut_reason="looped", segments=2, model="m", quarantined=True, fallback_text="text layer", fallback_note="why",
    )
    path = tmp_path / "pages.parquet"
    path.write_bytes(rows_to_bytes([page.to_row()], page_schema()))
    (row,) = load(path)
    image = row["figures"][0]["image"]
    assert isinstance(image, Image.Image) and image.size == (31, 20)
    row["figures"][0]["image"] = {"bytes": png(31)}  # what was written, to compare the rest
    assert PageResult.from_row(row) == page  # every field, 64-bit doc_index included


def test_a_document_row_keeps_each_figures_page_and_decodes_its_image(tmp_path: Path) -> None:
    figure = {**Figure("2-1", [3, 4, 50, 60], image=png(47), description="A map.").to_row(), "page": 2}
    document = DocumentResult("report.pdf", 5, "scans/report.pdf", 9, "text", [figure], "partial", [4, 7], "page 4 failed")
    path = tmp_path / "documents.parquet"
    path.write_bytes(rows_to_bytes([document.to_row()], document_schema()))
    (row,) = load(path)
    (loaded,) = row["figures"]
    assert loaded["page"] == 2 and loaded["id"] == "2-1" and isinstance(loaded["image"], Image.Image)
    assert (row["status"], row["failed_pages"], row["error"]) == ("partial", [4, 7], "page 4 failed")
