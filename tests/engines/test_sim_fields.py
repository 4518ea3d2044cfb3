"""The simulated server's structured answers about documents (what llm-ocr fields asks): read from
the text it is given, or from a known page's text layer, with invalid JSON and invented values
on demand, and a correct answer to a repair request."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from llm_ocr.engines.sim import fields as sim_fields
from llm_ocr.testing import SimulatedServer
from tests.conftest import REPO

MODEL = "deepseek-ai/DeepSeek-OCR"
EXAMPLES = REPO / "examples"
INVOICE_SCHEMA = json.loads((EXAMPLES / "invoice.schema.json").read_text())
TRUTH = json.loads((EXAMPLES / "fields-truth.json").read_text())

#: The sample invoice as a text-layer OCR of it reads (what `llm-ocr run` assembles with the simulator).
INVOICE_TEXT = """# Harbor Lane Supplies Ltd

## INVOICE

Invoice number: INV-2024-0017

Invoice date: March 15, 2024

Due date: April 14, 2024

Seller: Harbor Lane Supplies Ltd

Bill to: Meridian Dental Clinic

Currency: EUR

Description Quantity Unit price Amount

Nitrile gloves, box of 100 4 12.50 50.00

Autoclave pouches 3 18.20 54.60

Dental bib clips 10 3.75 37.50

Subtotal: 142.10

Tax: 28.42

Total: 170.52
"""


def chat(sim: SimulatedServer, messages: list[dict[str, Any]], **extra: Any) -> tuple[int, dict[str, Any]]:
    status, data = sim.call("POST", "/v1/chat/completions", {"model": MODEL, "messages": messages, "max_tokens": 2000, **extra})
    return status, json.loads(data)


def json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "invoice", "schema": schema}}}


def answer_of(body: dict[str, Any]) -> str:
    return body["choices"][0]["message"]["content"]


@pytest.fixture(scope="module")
def sim() -> Any:
    with SimulatedServer("--instant", "--fields-invalid-rate", "1", "--fields-invent-rate", "0") as server:
        yield server


def test_a_text_only_request_is_answered_as_vllm_answers_it() -> None:
    with SimulatedServer("--instant") as server:
        status, body = chat(server, [{"role": "user", "content": "Free OCR."}])
        assert status == 200 and answer_of(body)
        # A structured question about a text: the values come from the text.
        status, body = chat(server, [{"role": "system", "content": "Extract."}, {"role": "user", "content": INVOICE_TEXT}],
                            **json_schema(INVOICE_SCHEMA))
    assert status == 200
    assert json.loads(answer_of(body)) == TRUTH["invoice-2024-0017.pdf"]["fields"]


def test_a_table_in_html_is_read_as_a_markdown_one() -> None:
    """DeepSeek-OCR and the CPU engine write tables in HTML: the line items are read from it, and
    a sum the table holds in its amounts' column (the CPU engine's layout of a total under its
    items) is the labelled value, not an item."""
    rows = [("Nitrile gloves, box of 100", "4", "12.50", "50.00"), ("Autoclave pouches", "3", "18.20", "54.60"),
            ("Dental bib clips", "10", "3.75", "37.50"), ("Subtotal:", "", "", "142.10")]
    cells = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    table = f"<table><tr><td>Description</td><td>Quantity</td><td>Unit price</td><td>Amount</td></tr>{cells}</table>"
    start, end = INVOICE_TEXT.index("Description"), INVOICE_TEXT.index("Tax:")
    text = INVOICE_TEXT[:start] + table + "\n\n" + INVOICE_TEXT[end:]
    assert sim_fields.read_object(INVOICE_SCHEMA, text) == TRUTH["invoice-2024-0017.pdf"]["fields"]


def test_an_invalid_first_answer_is_repaired_when_the_model_is_shown_its_errors(sim: SimulatedServer) -> None:
    messages = [{"role": "system", "content": "Extract."}, {"role": "user", "content": INVOICE_TEXT}]
    status, first = chat(sim, messages, **json_schema(INVOICE_SCHEMA))
    assert status == 200
    with pytest.raises(json.JSONDecodeError):
        json.loads(answer_of(first))
    repair = [*messages, {"role": "assistant", "content": answer_of(first)}, {"role": "user", "content": "Not JSON. Again."}]
    status, second = chat(sim, repair, **json_schema(INVOICE_SCHEMA))
    assert status == 200 and json.loads(answer_of(second)) == TRUTH["invoice-2024-0017.pdf"]["fields"]
    kinds = [r.get("fault") for r in sim.requests()[-2:]]
    assert kinds == ["invalid_json", None]


def test_an_invented_value_is_nowhere_in_the_document() -> None:
    with SimulatedServer("--instant", "--fields-invent-rate", "1") as server:
        status, body = chat(server, [{"role": "user", "content": INVOICE_TEXT}], **json_schema(INVOICE_SCHEMA))
    assert status == 200
    value = json.loads(answer_of(body))
    truth = TRUTH["invoice-2024-0017.pdf"]["fields"]
    changed = {k for k in truth if value[k] != truth[k]}
    assert changed == {"seller_name"}  # the first free-text field (no enum, format or pattern)
    assert value["seller_name"].lower() not in INVOICE_TEXT.lower()


def test_without_structured_outputs_the_schema_in_the_instruction_is_followed() -> None:
    system = f"Extract.\n\nJSON Schema:\n```json\n{json.dumps(INVOICE_SCHEMA)}\n```"
    messages = [{"role": "system", "content": system}, {"role": "user", "content": INVOICE_TEXT}]
    with SimulatedServer("--instant", "--no-structured-outputs") as server:
        status, refused = chat(server, messages, **json_schema(INVOICE_SCHEMA))
        assert status == 400 and "response_format" in refused["error"]["message"]
        status, body = chat(server, messages)
    assert status == 200 and json.loads(answer_of(body)) == TRUTH["invoice-2024-0017.pdf"]["fields"]


def test_a_known_page_image_is_read_from_its_text_layer(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    shutil.copy(REPO / "samples" / "receipt-0381.pdf", folder)
    import pypdfium2 as pdfium

    page = pdfium.PdfDocument(str(folder / "receipt-0381.pdf"))[0]
    image = page.render(scale=2).to_pil()
    import io

    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="JPEG")
    url = "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode()
    schema = json.loads((EXAMPLES / "receipt.schema.json").read_text())
    messages = [{"role": "system", "content": "Extract."},
                {"role": "user", "content": [{"type": "text", "text": "Page 1 of 1."}, {"type": "image_url", "image_url": {"url": url}}]}]
    with SimulatedServer("--instant", corpus=folder) as server:
        status, body = chat(server, messages, **json_schema(schema))
    assert status == 200 and json.loads(answer_of(body)) == TRUTH["receipt-0381.pdf"]["fields"]


@pytest.mark.parametrize(
    ("printed", "value"),
    [("$1,234.50", 1234.5), ("1.234,50", 1234.5), ("12,5", 12.5), ("-3", -3.0), ("1 234", 1234.0)],
)
def test_numbers_read_as_printed(printed: str, value: float) -> None:
    assert sim_fields.parse_number(printed) == value


def test_the_invoice_generator_writes_documents_whose_values_are_known(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "make_invoices.py"), str(tmp_path), str(tmp_path / "t.json")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "t.json").read_text()) == TRUTH
    # Reproducible: the committed samples are what the script writes.
    for name in TRUTH:
        assert (tmp_path / name).read_bytes() == (REPO / "samples" / name).read_bytes(), name
