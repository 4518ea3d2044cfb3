"""Fields and the CPU OCR engine: the engine reads pages, it is no language model, so Fields
refuses it before sending a single request, with an error that says what to do; ``llm-ocr run
--schema`` on it still reads, describes and assembles the pages first."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import llm_ocr
from llm_ocr.options import FieldsOptions, JobOptions, ServerOptions, StageSpec
from llm_ocr.runners.fields import launched_engine_refusal
from llm_ocr.testing import OFFLINE_ENV, CpuServer, SimulatedServer
from tests.conftest import REPO, read_stage, run_cli

SCHEMA = str(REPO / "examples" / "receipt.schema.json")
RECEIPT = "receipt-0381.pdf"  # one page
FAST = {"workers": 0, "progress": "off"}


@pytest.fixture(scope="module")
def engine() -> Iterator[CpuServer]:
    pytest.importorskip("rapidocr")
    with CpuServer("--threads", "1", offline=True) as server:
        yield server


@pytest.fixture
def receipt(tmp_path: Path) -> Path:
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(REPO / "samples" / RECEIPT, folder)
    return folder


def _markers(out: Path) -> set[str]:
    return {p.parent.name for p in (out / "_state").glob("*/done-*.json")}


def test_the_refusal_is_known_from_the_options_when_this_process_launches_the_cpu_engine() -> None:
    def spec(engine: str, endpoint: str | None = None, fields_endpoint: str | None = None) -> StageSpec:
        return StageSpec(JobOptions(output="out", endpoint=endpoint), server=ServerOptions(engine=engine),
                         fields=FieldsOptions(fields_schema=SCHEMA, fields_endpoint=fields_endpoint))

    refusal = launched_engine_refusal(spec("cpu"))
    assert refusal is not None and "--fields-endpoint" in refusal and "(--engine cpu)" in refusal
    # This machine has no CUDA GPU: auto launches the CPU engine too, and the message says why.
    auto = launched_engine_refusal(spec("auto"))
    assert auto is not None and "--engine auto: no CUDA GPU found" in auto
    assert launched_engine_refusal(spec("cpu", fields_endpoint="http://llm:8000/v1")) is None  # the advice, followed
    assert launched_engine_refusal(spec("cpu", endpoint="http://gpu-box:8000/v1")) is None  # known once open
    assert launched_engine_refusal(spec("sim")) is None  # the simulator answers structured requests


def test_run_with_a_schema_on_the_cpu_engine_reads_the_pages_then_refuses_fields(receipt: Path, tmp_path: Path) -> None:
    pytest.importorskip("rapidocr")
    out = tmp_path / "out"
    args = ("run", str(receipt), "--output", str(out), "--schema", SCHEMA, "--engine", "cpu", "--workers", "0",
            "--progress", "log")
    first = run_cli(*args, env=OFFLINE_ENV, timeout=300)
    assert first.returncode == 2, first.stderr  # could not do what was asked: exit 2
    log = first.stderr
    # Said at the start, before any page is read, and again as the run's error at the end.
    warned, read = log.find("fields needs a language model"), log.find("[extract shard 1/1]")
    assert -1 < warned < read, log
    error = log.splitlines()[-1]
    assert "ERROR" in error and "--fields-endpoint" in error and "Extract, Describe and Assemble are done" in error
    # The pages are read, described and assembled; no Fields row or marker (nothing was asked).
    assert _markers(out) == {"extract", "describe", "assemble"}
    (document,) = read_stage(out, "assemble")
    assert document["doc_id"] == RECEIPT and document["status"] == "ok" and "Corner Bakery" in document["markdown"]
    assert not (out / "fields").exists()

    # Run again: refused at once, without launching the engine again for nothing.
    again = run_cli(*args, env=OFFLINE_ENV, timeout=120)
    assert again.returncode == 2 and "--fields-endpoint" in again.stderr.splitlines()[-1]
    assert "launching the cpu engine" in log and "launching" not in again.stderr


def test_an_endpoint_that_is_the_cpu_engine_is_refused_before_any_fields_request(
    engine: CpuServer, receipt: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    with pytest.raises(llm_ocr.RunError, match=r"fields endpoint .* CPU OCR engine.*--fields-endpoint.*are done and kept"):
        llm_ocr.run(receipt, output=out, endpoint=engine.base_url, schema=SCHEMA, **FAST)
    assert _markers(out) == {"extract", "describe", "assemble"}
    sent = engine.requests()
    # Only the page was asked about (with its image); Fields sent nothing, not even a text-only request.
    assert len(sent) == 1 and "image_url" in json.dumps(sent[0]["body"]["messages"])
    with pytest.raises(llm_ocr.RunError, match="CPU OCR engine"):
        llm_ocr.fields(out, fields_endpoint=engine.base_url, schema=SCHEMA, progress="off")
    assert len(engine.requests()) == 1
    # What the message says to do works: a language model's endpoint for Fields, the same OCR.
    with SimulatedServer("--instant") as llm:
        result = llm_ocr.fields(out, endpoint=engine.base_url, fields_endpoint=llm.base_url, schema=SCHEMA, progress="off")
        assert len(llm.requests()) >= 1
    (row,) = read_stage(out, "fields")
    # Answered (the simulator's reading of the CPU engine's Markdown need not be valid): no error row.
    assert row["status"] in ("ok", "invalid") and isinstance(json.loads(row["fields"]), dict), row
    assert result.exit_code == 0 and len(engine.requests()) == 1  # ok or invalid: a verdict either way
