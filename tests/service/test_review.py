"""The review pages and their forms, in process (FastAPI's TestClient over a real SQLite queue and
spool): a document's pages with the flagged ones first, nothing a document supplies runs as HTML,
corrections kept beside the model's values (API and export), approval, and the token."""

from __future__ import annotations

import html
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from llm_ocr.service.gateway import Gateway, create_app
from llm_ocr.service.spool import Spool
from llm_ocr.service.sqlite import SQLiteQueue
from tests.service.reviewed import FIELD_PAYLOAD, PAYLOADS, done_document

TOKEN = "review-token-for-the-test"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def reviewed(tmp_path: Path) -> Iterator[tuple[TestClient, str]]:
    queue, spool = SQLiteQueue(tmp_path / "service.db"), Spool(str(tmp_path / "spool"))
    doc_id = done_document(queue, spool, tmp_path)
    with TestClient(create_app(Gateway(queue, spool, token=TOKEN)), base_url="http://127.0.0.1:8080") as client:
        yield client, doc_id


def test_a_documents_page_puts_flagged_pages_first_and_runs_nothing_it_was_given(
        reviewed: tuple[TestClient, str]) -> None:
    client, doc_id = reviewed
    answer = client.get(f"/review/{doc_id}", headers=BEARER)
    assert answer.status_code == 200, answer.text
    page = answer.text
    # Page 2 was truncated: the quality checks flag it, and it comes before page 1.
    assert page.index("Page 2 of 2") < page.index("Page 1 of 2")
    assert "Pages flagged: 2" in page and "the answer was cut off at max_tokens" in page
    # The page image, its boxes, the figure's crop and the fields are there.
    assert page.count('<img src="data:image/jpeg;base64,') == 2 and page.count("<rect ") == 2
    assert '<img src="data:image/png;base64,' in page and "a red square" in page
    assert 'name="path" value="/total"' in page and 'action="/review/' in page
    for payload in PAYLOADS:  # shown as text, never as markup
        assert payload not in page
    assert "<script" not in page and "<img src=x" not in page
    assert html.escape(FIELD_PAYLOAD, quote=True) in page
    assert "script-src" not in answer.headers["content-security-policy"]  # default-src 'none': no script
    assert "default-src 'none'" in answer.headers["content-security-policy"]
    listing = client.get("/review", headers=BEARER)
    assert listing.status_code == 200 and f'href="/review/{doc_id}"' in listing.text
    assert "scan&lt;img src=x onerror=alert(1)&gt;.pdf" in listing.text and "<img src=x" not in listing.text


def test_corrections_sit_beside_the_models_values_and_are_exported(reviewed: tuple[TestClient, str]) -> None:
    client, doc_id = reviewed
    assert client.get("/v1/export", headers=BEARER).text == ""
    for path, value in (("/total", "121.75"), ("/vendor", "<b>ACME</b>"), ("/total", "120.25")):
        answer = client.post(f"/review/{doc_id}/fields", data={"path": path, "value": value}, headers=BEARER,
                             follow_redirects=False)
        assert answer.status_code == 303, answer.text
    bad = client.post(f"/review/{doc_id}/fields", data={"path": "/nope", "value": "1"}, headers=BEARER)
    assert bad.status_code == 422 and "/nope" in bad.json()["detail"]
    fields = client.get(f"/v1/documents/{doc_id}/fields", headers=BEARER).json()
    assert fields["fields"]["total"] == 118.5  # the model's value is kept
    assert fields["corrected_fields"]["total"] == 120.25  # a number field stays a number; the last one wins
    assert fields["corrected_fields"]["vendor"] == "<b>ACME</b>"
    assert [(c["path"], c["model"], c["corrected"]) for c in fields["corrections"]] == [
        ("/total", 118.5, 120.25), ("/vendor", FIELD_PAYLOAD, "<b>ACME</b>")]
    assert fields["approved"] is False
    page = client.get(f"/review/{doc_id}", headers=BEARER).text
    assert "&lt;b&gt;ACME&lt;/b&gt;" in page and "<b>ACME</b>" not in page
    assert client.post(f"/review/{doc_id}/approve", headers=BEARER, follow_redirects=False).status_code == 303
    assert client.get(f"/v1/documents/{doc_id}/fields", headers=BEARER).json()["approved"] is True
    exported = [json.loads(line) for line in client.get("/v1/export", headers=BEARER).text.splitlines()]
    assert len(exported) == 1 and exported[0]["id"] == doc_id and exported[0]["approved"] is True
    assert exported[0]["fields"]["total"] == 118.5 and exported[0]["corrected_fields"]["total"] == 120.25


def test_the_review_needs_the_token_and_its_forms_this_origin(reviewed: tuple[TestClient, str]) -> None:
    client, doc_id = reviewed
    asked = client.get(f"/review/{doc_id}")
    assert asked.status_code == 401 and 'action="/review/login"' in asked.text and "/total" not in asked.text
    assert client.post(f"/review/{doc_id}/approve", follow_redirects=False).status_code == 401
    assert client.post("/review/login", data={"token": "wrong"}).status_code == 401
    assert client.cookies.get("llm_ocr_review") is None
    logged = client.post("/review/login", data={"token": TOKEN}, follow_redirects=False)
    assert logged.status_code == 303 and TOKEN not in logged.headers["set-cookie"]
    assert "HttpOnly" in logged.headers["set-cookie"] and "SameSite=strict" in logged.headers["set-cookie"]
    assert client.get(f"/review/{doc_id}").status_code == 200  # the cookie opens the review pages...
    assert client.get(f"/v1/documents/{doc_id}").status_code == 401  # ...and nothing else
    foreign = client.post(f"/review/{doc_id}/approve", headers={"Origin": "https://elsewhere.example"})
    assert foreign.status_code == 403
    assert client.get(f"/v1/documents/{doc_id}/fields", headers=BEARER).json()["approved"] is False
    mine = client.post(f"/review/{doc_id}/approve", headers={"Origin": "http://127.0.0.1:8080"},
                       follow_redirects=False)
    assert mine.status_code == 303
