"""``llm-ocr fields`` end to end against the simulated server, on generated invoices and receipts
whose values are known: every field right, every invented value flagged, no ok row failing its
schema; resume, shards, exactly-once rows, bad input refused before any request, exports, the
report, ``llm-ocr status``."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from llm_ocr.testing import SimulatedServer
from tests.conftest import REPO, read_stage, run_cli
from tests.stages.common import stage
from tests.waiting import HANG_GUARD_S, hold_request, wait_until, wait_until_held

EXAMPLES = REPO / "examples"
CLASSES = str(EXAMPLES / "classes.yaml")
SCHEMAS = {name: json.loads((EXAMPLES / f"{name}.schema.json").read_text()) for name in ("invoice", "receipt")}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The sample invoices and receipts plus the test-only documents, and their truth."""
    root = tmp_path_factory.mktemp("fields-e2e")
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "make_invoices.py"), str(root / "docs"),
                           str(root / "truth.json"), "--extra"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return root / "docs", json.loads((root / "truth.json").read_text())


@pytest.fixture(scope="module")
def assembled(corpus: tuple[Path, dict[str, Any]]) -> Path:
    """OUT with Extract, Describe and Assemble done (made once; tests copy it)."""
    docs, _ = corpus
    out = docs.parent / "template"
    with SimulatedServer("--instant", corpus=docs) as sim:
        result = stage("run", out, sim, str(docs))
    assert result.returncode == 0, result.stderr
    return out


def fresh(assembled: Path, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(assembled, out)
    return out


def fields(out: Path, sim: SimulatedServer | None, *extra: str, subprocess_: bool = False, **kw: Any) -> subprocess.CompletedProcess[str]:
    return stage("fields", out, sim, *extra, subprocess_=subprocess_, **kw)


def check_rows(rows: list[dict[str, Any]], truth: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """One row per document; every ok row valid against its schema (checked here, independently)."""
    by_doc = {r["doc_id"]: r for r in rows}
    assert len(by_doc) == len(rows) == len(truth), sorted(r["doc_id"] for r in rows)
    for row in rows:
        if row["status"] == "ok" and row["class"] != "other":
            value = json.loads(row["fields"])
            jsonschema.validate(value, SCHEMAS[row["class"]], format_checker=jsonschema.FormatChecker())
            assert row["validation_errors"] == []
    return by_doc


def test_fields_of_every_document_with_classes_exports_and_status(assembled: Path, corpus: tuple[Path, dict[str, Any]],
                                                                   tmp_path: Path) -> None:
    import datasets

    _, truth = corpus
    out = fresh(assembled, tmp_path)
    with SimulatedServer("--instant", "--fields-invent-rate", "0.5", "--seed", "3") as sim:
        result = fields(out, sim, "--classes", CLASSES, "--export-jsonl", "--export-csv", subprocess_=True)
        requests = sim.requests()
    assert result.returncode == 0, result.stderr  # the misprinted invoice is invalid: a verdict, not a failure
    rows = read_stage(out, "fields")
    by_doc = check_rows(rows, truth)
    invented = 0
    for doc_id, expected in truth.items():
        row = by_doc[doc_id]
        assert row["class"] == expected["class"]
        if expected["fields"] is None:
            assert row["fields"] is None and row["status"] == "ok"
            continue
        got = json.loads(row["fields"])
        wrong = {f"/{k}": v for k, v in got.items() if v != expected["fields"][k]}
        # Every field right, except values the simulator invented, and every one of those flagged.
        assert [(u["path"], u["value"]) for u in row["unsupported_values"]] == list(wrong.items()), doc_id
        invented += len(wrong)
    # Every invention is flagged, but the misprint's: its failed check got it a repair request,
    # answered honestly.
    inventions = [r for r in requests if r.get("fault") == "invented_value"]
    assert invented == sum(1 for r in inventions if "invoice-2024-0051.pdf" not in json.dumps(r["body"]["messages"][1]))
    assert invented >= 2
    misprint = by_doc["invoice-2024-0051.pdf"]
    assert misprint["status"] == "invalid" and misprint["validation_errors"][0]["path"] == "/subtotal"
    assert {r["status"] for d, r in by_doc.items() if d != "invoice-2024-0051.pdf"} == {"ok"}
    # Typed columns: the schema's dates are dates, its numbers floats.
    loaded = datasets.load_dataset("parquet", data_files=str(out / "fields" / "*.parquet"), split="train")
    first = next(r for r in loaded if r["doc_id"] == "invoice-2024-0017.pdf")
    assert first["invoice_date"].isoformat() == "2024-03-15" and first["total"] == 170.52 and first["currency"] == "EUR"
    receipt = next(r for r in loaded if r["doc_id"] == "receipt-0381.pdf")
    assert receipt["date"].isoformat() == "2024-03-02" and receipt["invoice_date"] is None
    # The exports hold the same rows.
    lines = [json.loads(line) for line in (out / "fields.jsonl").read_text().splitlines()]
    assert {d["doc_id"]: d["fields"] for d in lines} == {d: json.loads(r["fields"]) if r["fields"] else None for d, r in by_doc.items()}
    table = list(csv.DictReader(io.StringIO((out / "fields.csv").read_text(encoding="utf-8-sig"))))
    assert {t["doc_id"]: t["total"] for t in table}["invoice-2024-0042.pdf"] == "16511.2"
    assert {t["doc_id"]: t["status"] for t in table} == {d: r["status"] for d, r in by_doc.items()}
    # The marker: counts, tokens and the cost estimate.
    marker = json.loads(next((out / "_state" / "fields").glob("done-*.json")).read_text())
    assert marker["documents"] == {"ok": 7, "invalid": 1, "error": 0, "skipped": 0}
    assert marker["classes"] == {"invoice": 4, "receipt": 3, "other": 1}
    assert marker["prompt_tokens"] > 0 and "gpu" in marker and marker["requests"] == len(requests)
    status = run_cli("status", str(out))
    assert "fields: 8 documents = invalid 1, ok 7; shards finished: 1" in status.stdout
    # A rerun has nothing to do: no request is sent.
    with SimulatedServer("--instant") as sim:
        again = fields(out, sim, "--classes", CLASSES, "--export-jsonl", "--export-csv")
        assert sim.requests() == []
    assert again.returncode == 0 and "already complete" in again.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--schema", "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"nope\"}}}"), "not a valid JSON Schema"),
        (("--schema", "nowhere_pkg.models:Invoice"), "cannot import module 'nowhere_pkg.models'"),
        (("--classes", "CLASSES_WITH_MISSING"), "class 'receipt' schema"),
        (("--schema", "x.json", "--classes", CLASSES), "exactly one of --schema"),
    ],
    ids=["schema-does-not-parse", "pydantic-path-does-not-import", "classes-name-a-missing-schema", "both"],
)
def test_bad_input_stops_the_run_before_any_request(assembled: Path, tmp_path: Path, args: tuple[str, ...], expected: str) -> None:
    out = fresh(assembled, tmp_path)
    missing = tmp_path / "classes.yaml"
    missing.write_text(f"classes:\n  invoice: {{schema: {EXAMPLES / 'invoice.schema.json'}}}\n  receipt: {{schema: receipt.json}}\n")
    args = tuple(str(missing) if a == "CLASSES_WITH_MISSING" else a for a in args)
    with SimulatedServer("--instant") as sim:
        result = fields(out, sim, *args)
        assert sim.requests() == []
    assert result.returncode == 2 and expected in result.stderr, result.stderr
    assert not (out / "fields").exists()


def test_shards_resume_after_kill_and_every_document_once(assembled: Path, corpus: tuple[Path, dict[str, Any]],
                                                            tmp_path: Path) -> None:
    _, truth = corpus
    out = fresh(assembled, tmp_path)
    schema = str(EXAMPLES / "invoice.schema.json")
    # Two shards of a slow server; shard 0 is killed once it has written some rows.
    with SimulatedServer("--prefill-ms", "400", "--slots", "1") as sim:
        argv = [sys.executable, "-m", "llm_ocr.cli", "fields", "--output", str(out), "--endpoint", sim.base_url,
                "--schema", schema, "--num-shards", "2", "--shard-index", "0", "--part-rows", "1", "--max-in-flight", "1",
                "--progress", "off"]
        # After the first answer every request is held until the kill: the shard cannot get
        # further, however late a loaded test process kills it.
        held_at = hold_request(sim, after=1, count=10)
        process = subprocess.Popen(argv, cwd=str(REPO), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            wait_until_held(sim, held_at, process)
            wait_until(lambda: list((out / "fields").glob("*.parquet")), "a part was stored", process=process)
            os.kill(process.pid, signal.SIGKILL)
        finally:
            process.wait(timeout=HANG_GUARD_S)
        sim.clear_faults()
        written = read_stage(out, "fields")
        assert 1 <= len(written) < 4, "killed too late to test a resume"
        for index in ("0", "1"):
            result = fields(out, sim, "--schema", schema, "--num-shards", "2", "--shard-index", index)
            assert result.returncode == 0, result.stderr  # receipts read as invoices are invalid: counted, not failed
    rows = read_stage(out, "fields")
    assert sorted(r["doc_id"] for r in rows) == sorted(truth)  # every document exactly once
    # With one --schema every document is an invoice: the invoices' fields are right, and the
    # receipts and the letter, read as invoices, fail the schema: never "ok" while invalid.
    by_doc = {r["doc_id"]: r for r in rows}
    for doc_id, expected in truth.items():
        row = by_doc[doc_id]
        assert row["class"] == "invoice" and row["class_by"] == "schema"
        if expected["class"] == "invoice" and doc_id != "invoice-2024-0051.pdf":
            assert row["status"] == "ok" and json.loads(row["fields"]) == expected["fields"]
        if expected["class"] != "invoice":
            assert row["status"] == "invalid", doc_id
    # The kept rows were not redone: the killed shard's rows are still there, once.
    assert {r["doc_id"] for r in written} <= {r["doc_id"] for r in rows}


def test_failed_requests_are_error_rows_retried_by_a_rerun(assembled: Path, corpus: tuple[Path, dict[str, Any]],
                                                            tmp_path: Path) -> None:
    _, truth = corpus
    out = fresh(assembled, tmp_path)
    receipt = str(EXAMPLES / "receipt.schema.json")
    with SimulatedServer("--instant") as sim:
        sim.inject("error", count=3, status=400, message="bad luck")
        first = fields(out, sim, "--schema", receipt, "--max-attempts", "1", "--max-in-flight", "1")
        assert first.returncode == 1
        errors = [r for r in read_stage(out, "fields") if r["status"] == "error"]
        assert len(errors) == 3 and all("bad luck" in r["error"] for r in errors)
        second = fields(out, sim, "--schema", receipt, "--max-in-flight", "1")
    rows = read_stage(out, "fields")
    assert len(rows) == len(truth) and not [r for r in rows if r["status"] == "error"]
    assert second.returncode == 0  # every error redone; invoices read as receipts are invalid, which a rerun cannot change


def test_fields_from_page_images_and_the_report_marks_flagged_values(assembled: Path, corpus: tuple[Path, dict[str, Any]],
                                                                     tmp_path: Path) -> None:
    docs, truth = corpus
    out = fresh(assembled, tmp_path)
    with SimulatedServer("--instant", "--fields-invent-rate", "1", corpus=docs) as sim:
        result = fields(out, sim, "--classes", CLASSES, "--from", "images")
        requests = sim.requests()
    assert result.returncode == 0, result.stderr
    # One request per page, each with its page image (and the classification of the letter).
    images = [r for r in requests if "image_url" in json.dumps(r["body"])]
    assert len(images) == len(requests) and len(requests) >= sum(t["pages"] for t in truth.values() if t["class"] != "other")
    rows = {r["doc_id"]: r for r in read_stage(out, "fields")}
    receipt = json.loads(rows["receipt-0977.pdf"]["fields"])
    assert {k: v for k, v in receipt.items() if k != "merchant"} == {k: v for k, v in truth["receipt-0977.pdf"]["fields"].items() if k != "merchant"}
    assert [u["path"] for u in rows["receipt-0977.pdf"]["unsupported_values"]] == ["/merchant"]
    report = run_cli("report", str(out))
    assert report.returncode == 0, report.stderr
    html = (out / "report.html").read_text()
    assert html.count('class="llmocr-fields"') == len(truth)
    flagged = html.split('title="not found anywhere in the document')
    assert len(flagged) - 1 == sum(len(r["unsupported_values"]) for r in rows.values()) >= 5
    assert receipt["merchant"] in flagged[1][:200] or any(receipt["merchant"] in part[:200] for part in flagged[1:])


def test_run_with_classes_does_every_stage_in_one_process_on_one_server(corpus: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    docs, truth = corpus
    out = tmp_path / "out"
    # No --endpoint: llm-ocr launches the server (the simulator here) once, for every stage.
    result = run_cli("run", str(docs), "--output", str(out), "--engine", "sim", "--classes", CLASSES, "--workers", "0",
                     "--progress", "off", "--export-csv", "--json", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]  # the misprinted invoice is invalid (counted)
    stats = json.loads(result.stdout)
    assert set(stats) == {"extract", "describe", "assemble", "fields"}
    rows = read_stage(out, "fields")
    assert sorted(r["doc_id"] for r in rows) == sorted(truth) and (out / "fields.csv").exists()
    logs = sorted(p.name for p in out.rglob("server-*.log"))
    assert len(logs) == 1 and "fields" not in logs[0], logs  # Fields used the run's server
    again = run_cli("run", str(docs), "--output", str(out), "--engine", "sim", "--classes", CLASSES, "--workers", "0",
                    "--progress", "off", "--export-csv", timeout=300)
    assert "already complete" in again.stderr and again.returncode == 0  # still one invalid document


def test_a_rerun_with_another_schema_into_the_same_output_is_refused(assembled: Path, tmp_path: Path) -> None:
    out = fresh(assembled, tmp_path)
    with SimulatedServer("--instant") as sim:
        assert fields(out, sim, "--schema", str(EXAMPLES / "receipt.schema.json")).returncode == 0
        rows = read_stage(out, "fields")
        before = len(sim.requests())
        other = fields(out, sim, "--schema", str(EXAMPLES / "invoice.schema.json"))
        assert len(sim.requests()) == before
    assert other.returncode == 2 and "extracted with another schema or classes file" in other.stderr, other.stderr
    assert read_stage(out, "fields") == rows  # nothing already written is lost


def test_page_images_of_dataset_rows_are_read_again_from_the_dataset(corpus: tuple[Path, dict[str, Any]],
                                                                      tmp_path: Path) -> None:
    """A Parquet input's page images are not kept in OUT: with ``--from images`` Fields reads each
    row's images again from the dataset (only its row group), from the column Extract was told
    (``--image-column``), and reads them right; once the dataset is gone, each document gets an
    error row that says so and names ``--fields-from markdown``, and a rerun from the Markdown
    redoes them."""
    import datasets
    import pypdfium2
    from PIL import Image

    docs, truth = corpus
    names = ["invoice-2024-0017.pdf", "invoice-2024-0042.pdf"]
    rows = []
    for name in names:  # each invoice as a FineVision row: its pages as PNG images
        pdf = pypdfium2.PdfDocument(str(docs / name))
        pages = []
        for page in pdf:
            buffer = io.BytesIO()
            page.render(scale=144 / 72).to_pil().save(buffer, format="PNG")
            pages.append(buffer.getvalue())
        rows.append(pages)
        pdf.close()
    # The pages in a column that is not the default one; "images" (found first) holds blank ones.
    blank = io.BytesIO()
    Image.new("RGB", (850, 1100), "white").save(blank, format="PNG")
    image = datasets.Image()
    features = datasets.Features({"images": datasets.List(image), "scan": datasets.List(image)})
    data = tmp_path / "scans" / "train-00000.parquet"
    data.parent.mkdir()
    datasets.Dataset.from_dict({
        "images": [[{"bytes": blank.getvalue(), "path": None}] * len(r) for r in rows],
        "scan": [[{"bytes": b, "path": None} for b in r] for r in rows],
    }, features=features).to_parquet(str(data))
    out = tmp_path / "out"
    schema = str(EXAMPLES / "invoice.schema.json")
    with SimulatedServer("--instant", corpus=docs) as sim:  # it knows the pages by their look
        assert stage("run", out, sim, str(data.parent), "--image-column", "scan").returncode == 0
        sent = len(sim.requests())
        result = fields(out, sim, "--schema", schema, "--from", "images", "--image-column", "scan")
        asked = sim.requests()[sent:]
    assert result.returncode == 0, result.stderr
    assert len(asked) == sum(len(r) for r in rows) and all("image_url" in json.dumps(r["body"]) for r in asked)
    got = {r["doc_id"]: r for r in read_stage(out, "fields")}
    assert sorted(got) == ["scans/default/train/00000000", "scans/default/train/00000001"]
    for number, name in enumerate(names):
        row = got[f"scans/default/train/{number:08d}"]
        assert row["status"] == "ok" and json.loads(row["fields"]) == truth[name]["fields"], (name, row)

    report = run_cli("report", str(out))  # the report draws the rows' pages, read the same way
    assert report.returncode == 0, report.stderr
    assert (out / "report.html").read_text().count("<img src=\"data:image/") >= sum(len(r) for r in rows)

    shutil.rmtree(data.parent)  # the dataset is gone: the error says so, and what to do instead
    shutil.rmtree(out / "fields")
    shutil.rmtree(out / "_state" / "fields")
    with SimulatedServer("--instant", corpus=docs) as sim:
        again = fields(out, sim, "--schema", schema, "--from", "images", "--image-column", "scan")
        assert sim.requests() == []  # nothing was asked about documents without images
    assert again.returncode == 1, again.stderr
    errors = read_stage(out, "fields")
    assert len(errors) == 2 and {r["status"] for r in errors} == {"error"}
    assert all("not reachable" in r["error"] and "--fields-from markdown" in r["error"] for r in errors), errors
    with SimulatedServer("--instant") as sim:
        redone = fields(out, sim, "--schema", schema)  # error rows are redone, from the Markdown
    assert redone.returncode == 0 and "error" not in {r["status"] for r in read_stage(out, "fields")}
