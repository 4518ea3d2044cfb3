"""One document's fields against the simulated server: generated invoices and receipts whose values
are known, OCR'd by the real pipeline, then classified, extracted, validated, repaired, merged and
checked against their text, with faults the simulator injects."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

import pytest

from llm_ocr.options import ClientOptions
from llm_ocr.stages.fields import FieldsContext, FieldsResult, document_fields, load_classes, typed_columns
from llm_ocr.stages.fields.classes import Classes, single_class
from llm_ocr.stages.fields.schema import load_fields_schema
from llm_ocr.stages.fields.validate import validate_answer
from llm_ocr.testing import SimulatedServer
from llm_ocr.vlm.client import VlmClient
from tests.conftest import REPO, read_stage
from tests.stages.common import stage
from tests.waiting import HANG_GUARD_S

EXAMPLES = REPO / "examples"
TRUTH: dict[str, Any] = json.loads((EXAMPLES / "fields-truth.json").read_text())


@pytest.fixture(scope="module")
def documents(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Assemble rows of the samples plus the test-only documents, by file name."""
    root = tmp_path_factory.mktemp("fields")
    docs = root / "docs"
    done = __import__("subprocess").run(
        [__import__("sys").executable, str(REPO / "scripts" / "make_invoices.py"), str(docs), str(root / "truth.json"), "--extra"],
        capture_output=True, text=True, timeout=HANG_GUARD_S,
    )
    assert done.returncode == 0, done.stderr
    TRUTH.update(json.loads((root / "truth.json").read_text()))
    with SimulatedServer("--instant", corpus=docs) as sim:
        result = stage("run", root / "out", sim, str(docs))
    assert result.returncode == 0, result.stderr
    return {row["doc_id"]: row for row in read_stage(root / "out", "assemble")}


def extract(rows: list[dict[str, Any]], classes: Classes, *sim_args: str, single: bool = False,
            **settings: Any) -> tuple[list[FieldsResult], list[dict[str, Any]]]:
    """Fields of ``rows`` with a simulated server started with ``sim_args``; also its request log."""

    async def go(base_url: str) -> list[FieldsResult]:
        client = VlmClient(base_url, "deepseek-ai/DeepSeek-OCR", options=ClientOptions())
        ctx = FieldsContext(client=client, classes=classes, single=single, columns=typed_columns(classes.schemas),
                            context_tokens=await client.max_model_len(), **settings)
        try:
            return list(await asyncio.gather(*(document_fields(row, ctx) for row in rows)))
        finally:
            await client.close()

    with SimulatedServer("--instant", *sim_args) as sim:
        results = asyncio.run(go(sim.base_url))
        return results, sim.requests()


def assert_no_ok_row_fails_its_schema(results: list[FieldsResult], classes: Classes) -> None:
    import jsonschema

    for r in results:
        if r.status == "ok" and r.class_ != "other":
            schema = classes.get(r.class_).schema  # type: ignore[union-attr]
            jsonschema.validate(r.fields, schema.wire, format_checker=jsonschema.FormatChecker())
            assert validate_answer(r.fields, schema) == [], r.doc_id


def test_every_field_is_right_and_the_misprinted_invoice_is_invalid(documents: dict[str, dict[str, Any]]) -> None:
    classes = load_classes(str(EXAMPLES / "classes.yaml"))
    results, requests = extract(list(documents.values()), classes)
    by_doc = {r.doc_id: r for r in results}
    assert set(by_doc) == set(TRUTH)
    for doc_id, truth in TRUTH.items():
        row = by_doc[doc_id]
        assert row.class_ == truth["class"], doc_id
        assert row.fields == truth["fields"], doc_id
        assert row.unsupported_values == [], (doc_id, row.unsupported_values)
    # Rules decided the named files and the keyword-bearing scans; the model only the letter.
    assert {d: by_doc[d].class_by for d in by_doc} == {
        **{d: "file name" for d in TRUTH if not d.startswith("scan-")},
        "scan-0001.pdf": "keywords", "scan-0002.pdf": "keywords", "scan-0003.pdf": "model",
    }
    classify = [r for r in requests if "Which kind of document" in json.dumps(r.get("body"))]
    assert len(classify) == 1 and classify[0]["body"]["response_format"]["json_schema"]["schema"]["properties"]["class"]["enum"] == ["invoice", "receipt", "other"]
    assert by_doc["scan-0003.pdf"].status == "ok" and by_doc["scan-0003.pdf"].fields is None
    # The misprinted subtotal: the values are what the invoice prints, and the row says why it is invalid.
    misprint = by_doc["invoice-2024-0051.pdf"]
    assert misprint.status == "invalid" and misprint.repaired is False and misprint.requests == 2
    assert [p.path for p in misprint.validation_errors] == ["/subtotal"]
    assert "sum is 340, subtotal is 304" in misprint.validation_errors[0].message
    assert all(by_doc[d].status == "ok" for d in TRUTH if d != "invoice-2024-0051.pdf")
    assert_no_ok_row_fails_its_schema(results, classes)
    # Every fields request asked for structured outputs with the class's schema, no guided_json.
    for entry in requests:
        body = entry["body"]
        assert "guided_json" not in body and entry["ignored_fields"] == []
        assert body["response_format"]["type"] == "json_schema"
    # The page each value was found on: the two-page invoice's last items and totals are on page 2.
    pages = {p["path"]: p["page"] for p in by_doc["invoice-2024-0042.pdf"].value_pages}
    assert pages["/invoice_number"] == 1 and pages["/line_items/8/description"] == 1
    assert pages["/line_items/9/description"] == 2 and pages["/line_items/12/amount"] == 2 and pages["/total"] == 2


def test_invalid_answers_are_repaired_once_with_their_errors(documents: dict[str, dict[str, Any]]) -> None:
    schema = load_fields_schema(str(EXAMPLES / "invoice.schema.json"))
    rows = [documents[d] for d in ("invoice-2024-0017.pdf", "invoice-2024-0042.pdf")]
    results, requests = extract(rows, single_class(schema), "--fields-invalid-rate", "1", single=True)
    for r in results:
        assert (r.status, r.repaired, r.requests, r.class_by) == ("ok", True, 2, "schema"), r
        assert r.fields == TRUTH[r.doc_id]["fields"]
    repairs = [e["body"] for e in requests if len(e["body"]["messages"]) == 4]
    assert len(repairs) == 2
    for body in repairs:
        assert body["messages"][2]["role"] == "assistant"
        assert "not valid JSON" in body["messages"][3]["content"]
    # Without the repair request, the row is invalid and says why.
    results, _ = extract(rows[:1], single_class(schema), "--fields-invalid-rate", "1", single=True, repair=False)
    assert results[0].status == "invalid" and results[0].fields is None
    assert "not valid JSON" in results[0].validation_errors[0].message


def test_every_invented_value_is_flagged(documents: dict[str, dict[str, Any]]) -> None:
    classes = load_classes(str(EXAMPLES / "classes.yaml"))
    rows = [documents[d] for d in TRUTH if TRUTH[d]["class"] != "other"]
    results, requests = extract(rows, classes, "--fields-invent-rate", "1")
    invented = sum(1 for e in requests if e.get("fault") == "invented_value")
    assert invented == len(rows)
    for r in results:
        truth = TRUTH[r.doc_id]["fields"]
        wrong = {f"/{k}": v for k, v in r.fields.items() if v != truth[k]}
        if r.doc_id == "invoice-2024-0051.pdf":
            # Its subtotal check fails, so it got a repair request, answered honestly: nothing invented left.
            assert r.requests == 2 and wrong == {} and r.unsupported_values == []
            continue
        assert len(wrong) == 1 and r.status == "ok"
        # Flagged exactly: the invented value, and nothing the document really says.
        assert [(u["path"], u["value"]) for u in r.unsupported_values] == list(wrong.items())


def test_a_long_document_is_split_by_page_and_merged(documents: dict[str, dict[str, Any]]) -> None:
    schema = load_fields_schema(str(EXAMPLES / "invoice.schema.json"))
    row = documents["scan-0001.pdf"]  # 20 line items over 3 pages
    assert row["num_pages"] == 3 and len(row["page_starts"]) == 3
    starts = [*row["page_starts"], len(row["markdown"])]
    sizes = [b - a for a, b in itertools.pairwise(starts)]
    # A budget that holds the longest page but no two pages together: one request per page.
    budget = max(sizes) // 3 + 1
    assert min(a + b for a, b in itertools.pairwise(sizes)) > budget * 3
    results, requests = extract([row], single_class(schema), single=True, max_input_tokens=budget)
    result = results[0]
    assert result.requests == 3 and result.status == "ok"
    assert result.fields == TRUTH["scan-0001.pdf"]["fields"] and result.conflicts == []
    # Each request carried one page's text, under the relaxed schema (no required fields).
    for entry, page in zip(requests, (1, 2, 3)):
        text = entry["body"]["messages"][1]["content"]
        assert f"page {page} of 3" in text
        assert "required" not in entry["body"]["response_format"]["json_schema"]["schema"]
    pages = {p["path"]: p["page"] for p in result.value_pages}
    assert pages["/line_items/0/description"] == 1 and pages["/line_items/19/description"] == 3 and pages["/total"] == 3


def test_an_endpoint_without_structured_outputs_gets_json_mode_then_an_instruction(documents: dict[str, dict[str, Any]]) -> None:
    schema = load_fields_schema(str(EXAMPLES / "receipt.schema.json"))
    results, requests = extract([documents["receipt-0977.pdf"]], single_class(schema), "--no-structured-outputs", single=True)
    assert results[0].status == "ok" and results[0].structured == "instruction"
    assert results[0].fields == TRUTH["receipt-0977.pdf"]["fields"]
    sent = [e["body"].get("response_format", {}).get("type") for e in requests]
    assert sent == ["json_schema", "json_object", None]
    # The instruction carries the schema in every mode.
    assert '"merchant"' in requests[-1]["body"]["messages"][0]["content"]


def test_a_document_without_text_gets_an_error_row_and_classification_by_the_model(documents: dict[str, dict[str, Any]]) -> None:
    classes = load_classes(str(EXAMPLES / "classes.yaml"))
    broken = {**documents["invoice-2024-0017.pdf"], "status": "error", "markdown": "", "error": "encrypted PDF"}
    renamed = {**documents["receipt-0381.pdf"], "doc_id": "x.pdf"}
    results, _ = extract([broken, renamed], classes, classify="model")
    assert results[0].status == "error" and "no text to read: encrypted PDF" in (results[0].error or "")
    assert results[1].class_ == "receipt" and results[1].class_by == "model" and results[1].status == "ok"
    row = results[1].to_row(typed_columns(classes.schemas))
    assert row["date"].isoformat() == "2024-03-02" and row["total"] == 10.9 and json.loads(row["fields"]) == TRUTH["receipt-0381.pdf"]["fields"]
