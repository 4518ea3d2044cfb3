"""Fields through the Python API: ``llm_ocr.fields(out, schema=...)``, ``schema=`` on
``llm_ocr.run``, ``llm_ocr.load(out, "fields")``; a bad schema raises before any request."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import pytest

import llm_ocr
from llm_ocr.testing import SimulatedServer
from tests.conftest import REPO

EXAMPLES = REPO / "examples"
TRUTH = json.loads((EXAMPLES / "fields-truth.json").read_text())
FAST = {"workers": 0, "progress": "off"}


def test_fields_and_run_with_schema_from_python(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("invoice-2024-0017.pdf", "invoice-2024-0042.pdf"):
        shutil.copy(REPO / "samples" / name, docs)
    schema = str(EXAMPLES / "invoice.schema.json")
    with SimulatedServer("--instant", corpus=docs) as sim:
        # Every stage in one call: schema= is short for fields_schema=.
        result = llm_ocr.run(docs, output=tmp_path / "a", endpoint=sim.base_url, schema=schema, **FAST)
        assert result.exit_code == 0 and set(result.stats) == {"extract", "describe", "assemble", "fields"}
        # The stage alone, on an output Assemble wrote.
        llm_ocr.run(docs, output=tmp_path / "b", endpoint=sim.base_url, **FAST)
        before = len(sim.requests())
        with pytest.raises(llm_ocr.RunError, match="not valid JSON"):
            llm_ocr.fields(tmp_path / "b", endpoint=sim.base_url, schema="{not json", progress="off")
        assert len(sim.requests()) == before  # refused before any request
        with pytest.raises(llm_ocr.OptionError, match="not both"):
            llm_ocr.fields(tmp_path / "b", schema=schema, fields_schema=schema)
        alone = llm_ocr.fields(tmp_path / "b", endpoint=sim.base_url, schema=schema, progress="off")
    assert alone.exit_code == 0 and alone.documents == {"ok": 2, "invalid": 0, "error": 0, "skipped": 0}
    for out in (tmp_path / "a", tmp_path / "b"):
        rows = {r["doc_id"]: r for r in llm_ocr.load(out, "fields")}
        assert {d: json.loads(r["fields"]) for d, r in rows.items()} == {d: TRUTH[d]["fields"] for d in rows}
        assert rows["invoice-2024-0017.pdf"]["invoice_date"] == dt.date(2024, 3, 15)
