"""Fields' pure parts: schemas and classes (bad input refused early), validation, merging long
documents, the value-in-text check, request splitting and the typed columns."""

from __future__ import annotations

import datetime as dt
import json
import re
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from llm_ocr.stages.fields.chunks import PageText, split_pages, text_chunks
from llm_ocr.stages.fields.classes import load_classes
from llm_ocr.stages.fields.columns import fields_arrow_schema, typed_columns
from llm_ocr.stages.fields.evidence import Evidence, check_values, number_readings
from llm_ocr.stages.fields.merge import PartAnswer, merge_answers
from llm_ocr.stages.fields.schema import SchemaError, load_fields_schema, partial_schema
from llm_ocr.stages.fields.validate import validate_answer
from tests.conftest import REPO

EXAMPLES = REPO / "examples"
TRUTH = json.loads((EXAMPLES / "fields-truth.json").read_text())


def invoice():
    return load_fields_schema(str(EXAMPLES / "invoice.schema.json"))


def good_invoice() -> dict:
    return json.loads(json.dumps(TRUTH["invoice-2024-0017.pdf"]["fields"]))


# ---------------------------------------------------------------------------------------------
# Schemas and classes files: refused before any request, with a message that says where


def test_a_schema_file_loads_with_its_name_checks_and_wire_form() -> None:
    schema = invoice()
    assert schema.name == "invoice"
    assert [c.op for c in schema.checks] == ["product", "sum", "sum"]
    assert "x-llm-ocr-checks" not in json.dumps(schema.wire) and "x-llm-ocr-merge" not in json.dumps(schema.wire)
    assert schema.merge_policy("total") == "last" and schema.merge_policy("invoice_number") == "first"
    assert schema.merge_policy("line_items") == "concat"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"type": "object", "properties": {"a": {"type": "string"}},}', "not valid JSON: Expecting property name"),
        ('{"type": "object", "properties": {"a": {"type": "strang"}}}', "not a valid JSON Schema at properties/a/type"),
        ('{"type": "array", "items": {"type": "string"}}', "the root must be an object with properties"),
        ('{"type": "object", "properties": {"a": {"type": "number"}}, "x-llm-ocr-checks": [{"sum": "b", "equals": "a"}]}',
         "'b' names no property of the schema (properties there: a)"),
        ('{"type": "object", "properties": {"a": {"type": "number", "x-llm-ocr-merge": "mean"}}}',
         "x-llm-ocr-merge must be one of first, last, concat"),
    ],
)
def test_a_bad_schema_is_refused_with_where_and_why(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "bad.schema.json"
    path.write_text(text)
    with pytest.raises(SchemaError, match="--schema") as info:
        load_fields_schema(str(path))
    assert expected in str(info.value)


def test_a_pydantic_model_path_loads_and_one_that_does_not_import_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    model = load_fields_schema("examples.invoice_model:Invoice")
    assert model.name == "invoice" and model.model is not None and len(model.checks) == 3
    assert model.schema["properties"]["invoice_date"]["format"] == "date"
    # The model's own validator runs: a due date before the invoice date is a problem.
    bad = {**good_invoice(), "due_date": "2024-01-01"}
    assert any("due date is before" in p.message for p in validate_answer(bad, model))
    assert validate_answer(good_invoice(), model) == []

    (tmp_path / "broken_models.py").write_text("import not_a_module_anywhere\n")
    monkeypatch.chdir(tmp_path)
    sys.modules.pop("broken_models", None)
    with pytest.raises(SchemaError, match=r"cannot import module 'broken_models': ModuleNotFoundError"):
        load_fields_schema("broken_models:Invoice")
    with pytest.raises(SchemaError, match=re.escape("cannot import module 'no_such_pkg.models': ModuleNotFoundError: No module named 'no_such_pkg'")):
        load_fields_schema("no_such_pkg.models:Invoice")
    (tmp_path / "plain_models.py").write_text("class Invoice:\n    pass\nx = 1\n")
    with pytest.raises(SchemaError, match="is not a pydantic model class"):
        load_fields_schema("plain_models:Invoice")
    with pytest.raises(SchemaError, match="has no attribute 'Receipt'"):
        load_fields_schema("plain_models:Receipt")


def test_a_classes_file_naming_a_missing_schema_is_refused(tmp_path: Path) -> None:
    (tmp_path / "invoice.schema.json").write_text((EXAMPLES / "invoice.schema.json").read_text())
    classes = tmp_path / "classes.yaml"
    classes.write_text("classes:\n  invoice: {schema: invoice.schema.json}\n  receipt: {schema: receipts.json}\n")
    with pytest.raises(SchemaError) as info:
        load_classes(str(classes))
    assert "class 'receipt'" in str(info.value) and "receipts.json" in str(info.value)
    for body, expected in [
        ("classes:\n  other: {schema: invoice.schema.json}\n", "'other' is reserved"),
        ("classes:\n  invoice: {schema: invoice.schema.json, keyword: [x]}\n", "unknown keys: keyword"),
        ("classes:\n  invoice: {files: ['*']}\n", "names no schema"),
        ("classes: [invoice]\n", "non-empty 'classes' mapping"),
        ("classes:\n  invoice: {schema: invoice.schema.json\n", "not valid YAML"),
    ]:
        classes.write_text(body)
        with pytest.raises(SchemaError, match="--classes") as info:
            load_classes(str(classes))
        assert expected in str(info.value)


def test_rules_decide_by_file_name_then_keywords_and_leave_the_rest_undecided() -> None:
    classes = load_classes(str(EXAMPLES / "classes.yaml"))
    assert classes.names == ["invoice", "receipt"]
    by_name = classes.by_rules("2024/Invoice-77.PDF", "nothing")
    assert by_name is not None and (by_name.name, by_name.by) == ("invoice", "file name")
    by_words = classes.by_rules("scan-1.pdf", "Receipt number: 5\nPaid by: card")
    assert by_words is not None and (by_words.name, by_words.by) == ("receipt", "keywords")
    # One keyword each: a tie decides nothing; no keyword at all decides nothing.
    assert classes.by_rules("scan-2.pdf", "an invoice and a receipt") is None
    assert classes.by_rules("scan-3.pdf", "Minutes of the garden committee") is None
    # "invoices" is not the keyword "invoice": whole words only.
    assert classes.by_rules("scan-4.pdf", "invoices") is None


# ---------------------------------------------------------------------------------------------
# Validation beyond the schema's types


def test_pattern_format_and_enum_are_enforced_and_checks_add_up() -> None:
    schema = invoice()
    assert validate_answer(good_invoice(), schema) == []
    bad = good_invoice()
    bad.update(invoice_number="2024-17", invoice_date="15 March 2024", currency="CHF")
    problems = {p.path: p.message for p in validate_answer(bad, schema)}
    assert "does not match" in problems["/invoice_number"]
    assert "is not a 'date'" in problems["/invoice_date"]
    assert "is not one of" in problems["/currency"]

    wrong = good_invoice()
    wrong["line_items"][1]["amount"] = 45.6  # 3 × 18.20 is 54.60
    wrong["total"] = 170.0  # subtotal + tax is 170.52
    messages = {p.path: p.message for p in validate_answer(wrong, schema)}
    assert "quantity × unit price = amount" in messages["/line_items/1/amount"]
    assert "line items sum to the subtotal: sum is 133.1, subtotal is 142.1" in messages["/subtotal"]
    assert "differs by 0.52, tolerance 0.01" in messages["/total"]
    # Within the tolerance is fine.
    close = good_invoice()
    close["total"] = 170.525
    assert validate_answer(close, schema) == []


# ---------------------------------------------------------------------------------------------
# Long documents: split by page, answers merged


def test_pages_are_packed_into_requests_that_fit_and_a_huge_page_is_cut() -> None:
    markdown = "A" * 90 + "SEP" + "B" * 90 + "SEP" + "C" * 300
    pages = split_pages(markdown, [0, 93, 186], 3)
    assert [p.text[:1] for p in pages] == ["A", "B", "C"]
    # 70 tokens ≈ 200 characters (0.35 tokens a character): pages 1 and 2 share a request, page 3
    # is alone and cut.
    chunks = text_chunks(pages, 70)
    assert [c.pages for c in chunks] == [[1, 2], [3]]
    assert chunks[0].text == markdown[:186] and chunks[1].cut and len(chunks[1].text) == 200
    assert [c.pages for c in text_chunks(pages, None)] == [[1, 2, 3]]
    # Without page offsets (rows written before them) the document is one run of every page.
    assert split_pages("x", None, 3) == [PageText((1, 2, 3), "x")]


def test_answers_of_a_long_document_merge_arrays_in_order_and_resolve_scalars() -> None:
    schema = invoice()
    page1 = {"invoice_number": "INV-2024-0042", "currency": "USD", "total": None,
             "line_items": [{"description": "a", "quantity": 1, "unit_price": 2, "amount": 2}]}
    page2 = {"invoice_number": "INV-2024-0042", "total": 5.0, "currency": None,
             "line_items": [{"description": "a", "quantity": 1, "unit_price": 2, "amount": 2}]}
    page3 = {"invoice_number": "INV-2024-0099", "total": 7.0,
             "line_items": [{"description": "c", "quantity": 1, "unit_price": 3, "amount": 3}]}
    merged = merge_answers([PartAnswer([1], page1), PartAnswer([2], page2), PartAnswer([3, 4], page3)], schema)
    # Items concatenated in page order, identical ones kept.
    assert [i["description"] for i in merged.value["line_items"]] == ["a", "a", "c"]
    assert merged.origins["/line_items/2"] == [3, 4]
    # First non-null wins by default; "last" for the total (x-llm-ocr-merge).
    assert merged.value["invoice_number"] == "INV-2024-0042" and merged.value["currency"] == "USD"
    assert merged.value["total"] == 7.0 and merged.origins["/total"] == [3, 4]
    conflicts = {c["path"]: c for c in merged.conflicts}
    assert conflicts["/invoice_number"] == {"path": "/invoice_number", "values": ["INV-2024-0042", "INV-2024-0099"], "pages": [1, 3]}
    assert conflicts["/total"]["values"] == ["5.0", "7.0"]
    assert "/currency" not in conflicts

    relaxed = partial_schema(schema.schema)
    assert "required" not in relaxed
    assert validate_answer({"total": None}, schema, json_schema=relaxed) == []


# ---------------------------------------------------------------------------------------------
# Values found nowhere in the text


def test_values_are_found_whatever_their_formatting_and_invented_ones_are_flagged() -> None:
    assert {float(d) for d in number_readings("1,234")} == {1234.0, 1.234}
    pages = Evidence([
        (1, "# Harbor Lane Supplies Ltd\n\nInvoice date: March 15, 2024\n\nBill to: MERIDIAN  dental clinic."),
        (2, "Oak desk 6 1.212,50 7 275,00\n\nTotal: 16,511.20 — Due 14/04/2024"),
    ])
    answer = {"seller_name": "Harbor Lane Supplies Ltd", "buyer_name": "Meridian Dental Clinic", "invoice_date": "2024-03-15",
              "due_date": "2024-04-14", "total": 16511.2, "subtotal": 1212.5, "tax": 275, "invoice_number": "INV-2024-0017",
              "currency": "EUR", "line_items": [{"description": "Quillfeather chairs", "quantity": 6, "unit_price": 1212.5, "amount": 9.99}]}
    found = check_values(answer, invoice().schema, pages)
    assert sorted((u["path"], u["value"]) for u in found.unsupported) == [
        ("/invoice_number", "INV-2024-0017"), ("/line_items/0/amount", "9.99"), ("/line_items/0/description", "Quillfeather chairs"),
    ]
    where = {p["path"]: p["page"] for p in found.pages}
    assert where["/seller_name"] == 1 and where["/invoice_date"] == 1 and where["/due_date"] == 2
    assert where["/total"] == 2 and where["/tax"] == 2 and "/currency" not in where  # an enum is a choice, not checked


def test_an_items_numbers_are_placed_on_the_page_of_its_text() -> None:
    pages = Evidence([(1, "Widget 2 5.00 10.00"), (2, "Gadget 2 5.00 10.00")])
    answer = {"line_items": [{"description": "Gadget", "quantity": 2, "unit_price": 5, "amount": 10}]}
    found = check_values(answer, invoice().schema, pages)
    assert {p["path"]: p["page"] for p in found.pages} == {
        "/line_items/0/description": 2, "/line_items/0/quantity": 2, "/line_items/0/unit_price": 2, "/line_items/0/amount": 2,
    }


# ---------------------------------------------------------------------------------------------
# Typed columns


def test_typed_columns_get_arrow_types_from_the_schema_and_load_in_datasets(tmp_path: Path) -> None:
    import datasets

    receipt = load_fields_schema(str(EXAMPLES / "receipt.schema.json"))
    odd = load_fields_schema(textwrap.dedent('''{"type": "object", "properties": {
        "total": {"type": "integer"}, "date": {"type": "integer"}, "status": {"type": "string"},
        "paid_at": {"type": "string", "format": "date-time"}, "rush": {"type": ["boolean", "null"]}}}'''), name="odd")
    columns = typed_columns([invoice(), receipt, odd])
    kinds = {c.column: c.kind for c in columns}
    assert kinds["invoice_date"] == "date" and kinds["subtotal"] == "number" and kinds["currency"] == "string"
    assert kinds["total"] == "number"  # number in two schemas, integer in one
    assert kinds["date"] == "string"  # a date in one schema, an integer in another
    assert kinds["field_status"] == "string" and kinds["rush"] == "boolean" and kinds["paid_at"] == "date-time"
    assert "line_items" not in kinds and "items" not in kinds
    schema = fields_arrow_schema(columns, "abc")
    assert schema.field("invoice_date").type == pa.date32() and schema.field("paid_at").type == pa.timestamp("us", tz="UTC")
    by_column = {c.column: c for c in columns}
    row = dict.fromkeys(schema.names)
    row.update({"doc_id": "a", "doc_index": 0, "invoice_date": by_column["invoice_date"].convert("2024-03-15"),
                "paid_at": by_column["paid_at"].convert("2024-03-15T10:00:00+02:00"), "total": by_column["total"].convert(12),
                "subtotal": by_column["subtotal"].convert("twelve"), "status": "ok", "validation_errors": [],
                "unsupported_values": [{"path": "/x", "value": "y"}]})
    pq.write_table(pa.Table.from_pylist([row], schema=schema), tmp_path / "part.parquet")
    loaded = datasets.load_dataset("parquet", data_files=str(tmp_path / "part.parquet"), split="train")
    assert loaded[0]["invoice_date"] == dt.date(2024, 3, 15)
    assert loaded[0]["paid_at"] == dt.datetime(2024, 3, 15, 8, 0, tzinfo=dt.timezone.utc)
    assert loaded[0]["total"] == 12.0 and loaded[0]["subtotal"] is None
    assert loaded[0]["unsupported_values"] == [{"path": "/x", "value": "y"}]
