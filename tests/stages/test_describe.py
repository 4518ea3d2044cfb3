"""Describe: figure crops of OUT/extract → descriptions in OUT/describe."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from llm_ocr.records import Figure, PageResult
from llm_ocr.stages.describe import DescribeContext, describe_page, parse_structured, readable
from llm_ocr.testing import SimulatedServer
from tests.conftest import REPO, read_stage
from tests.docs import make_corpus
from tests.stages.common import DESCRIBE_PROMPT, bodies, page_keys, prompt_of, stage
from tests.waiting import hold_request, wait_until, wait_until_held


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 PDFs x 3 pages, a chart on pages 1 and 3."""
    folder = tmp_path_factory.mktemp("describe") / "docs"
    make_corpus(folder, documents=2, pages=3)
    return folder


@pytest.fixture(scope="module")
def server(corpus: Path) -> SimulatedServer:
    """One instant simulated server for the module (tests look at their own slice of its log)."""
    with SimulatedServer("--instant", corpus=corpus) as sim:
        yield sim


@pytest.fixture(scope="module")
def extracted(corpus: Path, server: SimulatedServer) -> Path:
    """The Extract output of the corpus, made once per module; tests copy it."""
    result = stage("extract", corpus.parent / "template", server, str(corpus))
    assert result.returncode == 0, result.stderr
    return corpus.parent / "template"


def fresh_output(extracted: Path, tmp_path: Path) -> Path:
    """A new OUT holding a copy of the shared Extract output."""
    import shutil

    out = tmp_path / "out"
    shutil.copytree(extracted, out)
    return out


def test_every_figure_is_described_with_the_deepseek_prompt(extracted: Path, tmp_path: Path) -> None:
    out = fresh_output(extracted, tmp_path)
    # A slow server with 8 slots: concurrent figure requests show as several running at once.
    with SimulatedServer("--prefill-ms", "300", "--slots", "8") as server:
        result = stage("describe", out, server)
        assert result.returncode == 0, result.stderr
        requests = bodies(server)
        peak = server.stats()["max_running"]
        again = stage("describe", out, server)  # finished shard: nothing is sent again
        assert again.returncode == 0 and len(bodies(server)) == len(requests)
    extract_rows = read_stage(out, "extract")
    rows = read_stage(out, "describe")
    assert page_keys(rows) == page_keys(extract_rows) and len(rows) == 6  # every page, figures or not
    figures = [f for r in rows for f in r["figures"]]
    assert len(figures) == 4 == len(requests)
    for figure in figures:
        assert figure["description"] and figure["description"].startswith("The image is a landscape picture")
        assert figure["error"] is None and figure["description_json"] is None
    by_key = {(r["doc_id"], r["page"]): r for r in extract_rows}
    for row in rows:  # the page itself is untouched
        before = by_key[(row["doc_id"], row["page"])]
        assert (row["markdown"], row["status"], row["raw"]) == (before["markdown"], before["status"], before["raw"])
        assert [f["image"] for f in row["figures"]] == [f["image"] for f in before["figures"]]
    for body in requests:
        assert prompt_of(body) == DESCRIBE_PROMPT
        assert body["messages"][0]["content"][0]["image_url"]["url"]["data_uri"] == "image/png"
        assert body["temperature"] == 0 and body["max_tokens"] == 1024
        assert body["vllm_xargs"]["ngram_size"] == 30  # the repetition blocker stays on
        # docs/facts.md#vllms-openai-compatible-server: guided_json is silently ignored by vLLM >=
        # 0.12; never send it.
        assert "guided_json" not in body and "response_format" not in body and "skip_special_tokens" not in body
    assert peak >= 3, "figure requests were not issued concurrently"


def test_prompt_max_tokens_and_temperature_are_options(extracted: Path, tmp_path: Path, server: SimulatedServer) -> None:
    out = fresh_output(extracted, tmp_path)
    before = len(bodies(server))
    result = stage(
        "describe", out, server, "--describe-prompt", "What does this chart show?", "--describe-max-tokens", "77",
        env={"LLM_OCR_DESCRIBE_TEMPERATURE": "0.3"},  # every option is also a variable
    )
    assert result.returncode == 0, result.stderr
    requests = bodies(server)[before:]
    assert len(requests) == 4
    for body in requests:
        assert prompt_of(body) == "What does this chart show?"
        assert body["max_tokens"] == 77 and body["temperature"] == 0.3
        assert body["model"] == "deepseek-ai/DeepSeek-OCR"  # --describe-model defaults to --model
    figures = [f for r in read_stage(out, "describe") for f in r["figures"]]
    assert len(figures) == 4 and all(f["description"] for f in figures)
    # The simulator's answer to an unknown prompt is long: 77 tokens cut it, the text is kept and
    # the figure says why it ends (the page stays ok).
    assert {f["error"] for f in figures} == {"description hit --describe-max-tokens (77) and is cut short"}
    assert {r["status"] for r in read_stage(out, "describe")} == {"ok"}


SCHEMA = {
    "type": "object",
    "properties": {
        "caption": {"type": "string", "maxLength": 60},
        "kind": {"type": "string", "enum": ["chart", "photo", "diagram"]},
        "bars": {"type": "integer", "minimum": 2},
    },
    "required": ["caption", "kind", "bars"],
    "additionalProperties": False,
}


def test_structured_output_is_requested_validated_and_stored(
    extracted: Path, tmp_path: Path, server: SimulatedServer
) -> None:
    out = fresh_output(extracted, tmp_path)
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(SCHEMA))
    before = len(bodies(server))
    result = stage("describe", out, server, "--describe-schema", str(schema_file))
    requests = bodies(server)[before:]
    assert result.returncode == 0, result.stderr
    assert len(requests) == 4
    for body in requests:
        assert body["response_format"] == {
            "type": "json_schema",
            "json_schema": {"name": "figure_description", "schema": SCHEMA},
        }
        assert "guided_json" not in body
    figures = [f for r in read_stage(out, "describe") for f in r["figures"]]
    assert len(figures) == 4
    for figure in figures:
        value = json.loads(figure["description_json"])
        jsonschema.validate(value, SCHEMA)
        assert figure["error"] is None
        # Readable form: the caption first, then the other fields.
        assert figure["description"] == f"{value['caption']}; kind: {value['kind']}; bars: {value['bars']}"


def test_an_answer_that_breaks_the_schema_is_a_figure_error(
    extracted: Path, tmp_path: Path, server: SimulatedServer
) -> None:
    out = fresh_output(extracted, tmp_path)
    # The simulator does not honour "pattern", so its answers are valid JSON that fails validation.
    # The schema comes inline, through the environment variable.
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[0-9]{3}$"}}, "required": ["code"]}
    result = stage("describe", out, server, env={"LLM_OCR_DESCRIBE_SCHEMA": json.dumps(schema)})
    assert result.returncode == 0, result.stderr  # figure failures never fail a page
    rows = read_stage(out, "describe")
    assert {r["status"] for r in rows} == {"ok"}
    figures = [f for r in rows for f in r["figures"]]
    assert len(figures) == 4
    for figure in figures:
        assert figure["description"] is None and figure["description_json"] is None
        assert "does not match --describe-schema at code" in figure["error"]


def test_a_bad_schema_stops_before_any_request(extracted: Path, tmp_path: Path, server: SimulatedServer) -> None:
    out = fresh_output(extracted, tmp_path)
    before = server.stats()["requests"]
    result = stage("describe", out, server, "--describe-schema", '{"type": 5}')
    assert server.stats()["requests"] == before
    assert result.returncode == 2 and "not a valid JSON schema" in result.stderr


def test_a_failing_figure_request_keeps_its_page(extracted: Path, tmp_path: Path, server: SimulatedServer) -> None:
    out = fresh_output(extracted, tmp_path)
    server.inject("error", count=1, status=400)  # permanent: not retried
    result = stage("describe", out, server, "--max-in-flight", "1")
    assert server.clear_faults() == 0  # the fault hit this run
    assert result.returncode == 0, result.stderr
    rows = read_stage(out, "describe")
    assert len(rows) == 6 and {r["status"] for r in rows} == {"ok"}
    figures = [f for r in rows for f in r["figures"]]
    failed = [f for f in figures if f["error"]]
    assert len(failed) == 1 and "HTTP 400" in failed[0]["error"] and failed[0]["description"] is None
    assert failed[0]["image"]["bytes"]  # the crop is kept
    assert sum(1 for f in figures if f["description"]) == 3


def describe_view(out: Path) -> list[tuple]:
    """Describe rows as comparable tuples (one per page, so a duplicate would show)."""
    return sorted(
        (r["doc_id"], r["page"], r["status"], r["markdown"],
         tuple((f["id"], f["description"], f["error"], (f["image"] or {}).get("bytes")) for f in r["figures"]))
        for r in read_stage(out, "describe")
    )


def test_describe_alone_resumes_after_sigkill(extracted: Path, tmp_path: Path, server: SimulatedServer) -> None:
    """``kill -9`` of ``llm-ocr describe`` mid-run, then the same command again: every page once in
    OUT/describe, every figure described, only the unfinished pages' figures sent again."""
    reference = fresh_output(extracted, tmp_path / "reference")
    assert stage("describe", reference, server).returncode == 0  # uninterrupted, for comparison
    out = fresh_output(extracted, tmp_path / "killed")
    pages, figures = len(read_stage(out, "extract")), sum(len(r["figures"]) for r in read_stage(out, "extract"))
    # One figure request at a time, one row per part; the second figure request (page 3 of the
    # first document) is held until the kill, so the kill lands mid-run however slow the machine.
    with SimulatedServer("--instant") as held:
        held_at = hold_request(held, after=1)
        command = [
            sys.executable, "-m", "llm_ocr.cli", "describe", "--output", str(out), "--endpoint", held.base_url,
            "--progress", "off", "--flush-interval", "0.2", "--part-rows", "1", "--max-in-flight", "1",
        ]
        process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_until_held(held, held_at, process)
            wait_until(lambda: list((out / "describe").glob("*.parquet")), "a part was stored", process=process)
            os.kill(process.pid, signal.SIGKILL)
        finally:
            process.wait()
    assert process.returncode == -signal.SIGKILL
    assert not (out / "_state" / "describe").exists()  # no completion marker from a killed run
    partial = read_stage(out, "describe")
    assert 0 < len(partial) < pages, "the kill should land mid-run"
    assert len(set(page_keys(partial))) == len(partial)  # nothing written twice, even when killed
    finished = set(page_keys(partial))
    left = sum(len(r["figures"]) for r in read_stage(out, "extract") if (r["doc_id"], r["page"]) not in finished)
    assert 0 < left < figures
    # The rerun goes to another server, so its log holds the rerun's requests only: the killed
    # run's held request is logged when the server notices its client is gone, which on a busy
    # machine can be after any moment the test picks (it was counted as resent, 4 for 3).
    before = len(bodies(server))
    result = stage("describe", out, server, "--max-in-flight", "4")
    assert result.returncode == 0, result.stderr
    resent = bodies(server)[before:]
    # Only the figures of the pages the killed run had not stored are sent again.
    assert len(resent) == left and all(prompt_of(b) == DESCRIBE_PROMPT for b in resent)
    rows = read_stage(out, "describe")
    assert len(rows) == pages == len(set(page_keys(rows))) and page_keys(rows) == page_keys(read_stage(out, "extract"))
    described = [f for r in rows for f in r["figures"]]
    assert len(described) == figures and all(f["description"] and f["error"] is None for f in described)
    assert describe_view(out) == describe_view(reference)  # the same rows as an uninterrupted run
    assert not list(out.rglob("*.tmp"))  # a write cut by the kill leaves no litter after the rerun
    assert (out / "_state" / "describe" / "done-00000-of-00001.json").exists()


def test_describe_without_extract_output_cannot_run(tmp_path: Path) -> None:
    result = stage("describe", tmp_path / "empty", None, "--endpoint", "http://127.0.0.1:9/v1", subprocess_=True)
    assert result.returncode == 2 and "run llm-ocr extract first" in result.stderr


class _NoClient:
    model = "deepseek-ai/DeepSeek-OCR"

    async def chat(self, body):  # pragma: no cover - must not be called
        raise AssertionError("no request expected")


def test_figures_without_image_and_failed_pages_send_nothing() -> None:
    ctx = DescribeContext(client=_NoClient(), prompt=DESCRIBE_PROMPT, max_tokens=64)  # type: ignore[arg-type]
    no_crop = Figure(id="p1-f1", bbox=[0, 0, 1, 1], image=None, error="crop failed: boom")
    page = PageResult(doc_id="d", doc_index=0, page=1, source="d", status="ok", figures=[no_crop])
    described = asyncio.run(describe_page(page, ctx))
    assert described.figures == [no_crop] and ctx.counts.skipped == 1
    done = Figure(id="p1-f2", bbox=[0, 0, 1, 1], image=b"\x89PNG", description="Described earlier.")
    page = PageResult(doc_id="d", doc_index=0, page=1, source="d", status="ok", figures=[done])
    assert asyncio.run(describe_page(page, ctx)).figures == [done] and ctx.counts.already == 1  # not sent again
    failed = PageResult(doc_id="d", doc_index=0, page=2, source="d", status="error", error="x",
                        figures=[Figure(id="p2-f1", bbox=[0, 0, 1, 1], image=b"\x89PNG")])
    assert asyncio.run(describe_page(failed, ctx)) is failed


def test_structured_answers_parse_fenced_json_and_read_well() -> None:
    validator = jsonschema.Draft202012Validator(SCHEMA)
    value, error = parse_structured('```json\n{"caption": "Bars", "kind": "chart", "bars": 5}\n```', validator)
    assert error is None and value == {"caption": "Bars", "kind": "chart", "bars": 5}
    _, error = parse_structured('{"caption": "Bars", "kind": "chart"', validator)
    assert error.startswith("description is not valid JSON")
    _, error = parse_structured('{"caption": "Bars", "kind": "table", "bars": 1}', validator)
    assert "at bars" in error and "(+1 more)" in error
    assert readable({"kind": "chart", "summary": "Two bars.", "tags": ["a", "b"], "size": {"w": 3}}) == (
        "Two bars.; kind: chart; tags: a, b; size: (w: 3)"
    )
