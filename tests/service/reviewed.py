"""A done document made by hand for the review tests: a real PDF, its queue row ended ``done``, and
result rows written where a worker writes them (Extract's page rows with blocks and a figure, an
Assemble row, a Fields row), so the review page has everything to show without running a model.

Page 2 is ``truncated`` (the quality signals flag it); document text and a field value carry HTML
that must never run (:data:`PAYLOADS`).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from llm_ocr.service.queue import DocumentQueue, new_id
from llm_ocr.service.spool import Spool
from llm_ocr.storage.parts import part_name
from tests.docs import make_pdf

#: Markup planted in the document's text, its name and a field value; each would run if unescaped.
MARKDOWN_PAYLOAD = '<script>document.title="pwned-md"</script><img src=x onerror="document.title=\'pwned-img\'">'
FIELD_PAYLOAD = '"><script>document.title="pwned-field"</script>'
NAME = 'scan<img src=x onerror=alert(1)>.pdf'
PAYLOADS = (MARKDOWN_PAYLOAD, FIELD_PAYLOAD, NAME)
#: The model's fields: ``total`` is the one the tests correct.
FIELDS = {"vendor": FIELD_PAYLOAD, "total": 118.5, "lines": [{"amount": 100}]}


def _png(colour: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (40, 30), colour).save(out, "PNG")
    return out.getvalue()


def _write(spool: Spool, doc_id: str, stage: str, rows: list[dict[str, Any]]) -> None:
    folder = Path(spool.url) / "results" / doc_id / stage
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), folder / part_name(0, 1, 0))


def done_document(queue: DocumentQueue, spool: Spool, folder: Path) -> str:
    """A two-page document that ended ``done``, with fields; its id."""
    pdf = folder / "scan.pdf"
    texts = make_pdf(pdf, 2, seed=7, figures=False)
    doc_id = new_id()
    queue.submit(doc_id, name=NAME, input_url=str(pdf), options={"fields_schema": "{}"}, pages=2, key=None, limit=10)
    assert queue.claim("hand", 60.0, 3) is not None
    figure = {"id": "p1-fig1", "page": 1, "bbox": [72, 72, 300, 200], "image": {"bytes": _png("red")},
              "description": "a red square"}
    pages = [
        {"doc_id": "scan.pdf", "page": 1, "num_pages": 2, "source": str(pdf), "status": "ok", "error": None,
         "finish_reason": "stop", "width": 612, "height": 792,
         "markdown": f"# {texts[0][0]}\n\n{MARKDOWN_PAYLOAD}\n\n![chart](figure:p1-fig1)",
         "blocks": [{"label": "title", "text": texts[0][0], "boxes": [[72, 60, 300, 80]]}], "figures": [figure]},
        {"doc_id": "scan.pdf", "page": 2, "num_pages": 2, "source": str(pdf), "status": "truncated", "error": None,
         "finish_reason": "length", "width": 612, "height": 792, "markdown": f"# {texts[1][0]}\n\nand then",
         "blocks": [{"label": "text", "text": texts[1][1], "boxes": [[72, 90, 500, 110]]}], "figures": []},
    ]
    _write(spool, doc_id, "extract", pages)
    _write(spool, doc_id, "assemble", [{"doc_id": "scan.pdf", "status": "partial", "figures": [figure],
                                         "markdown": "\n\n".join(p["markdown"] for p in pages)}])
    _write(spool, doc_id, "fields", [{
        "doc_id": "scan.pdf", "status": "ok", "class": "invoice", "class_by": "schema", "error": None,
        "fields": json.dumps(FIELDS), "value_pages": [{"path": "/total", "page": 1}],
    }])
    assert queue.finish(doc_id, "hand", "done", pages_done=2, pages_failed=0)
    return doc_id
