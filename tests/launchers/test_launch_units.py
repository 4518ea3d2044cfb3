"""The launcher's pieces in isolation: the shipped wheel, timeout sizing, the status table's
arithmetic, the launch record, the request body, the progress ticks."""

from __future__ import annotations

import asyncio
import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from llm_ocr.launchers.core.adapter import JobState
from llm_ocr.launchers.core.record import LaunchRecord, load_record, save_record
from llm_ocr.launchers.core.sizing import DEFAULT_TIMEOUT_S, shard_timeout
from llm_ocr.launchers.core.spec import ShardSpec
from llm_ocr.launchers.core.table import LaunchStatus, marker_costs, shard_status
from llm_ocr.launchers.core.wheel import build_wheel
from llm_ocr.runners.progress import ProgressReporter, RunCounters
from llm_ocr.storage import Storage
from llm_ocr.storage.state import write_marker
from tests.conftest import REPO
from tests.waiting import HANG_GUARD_S


def test_wheel_is_byte_stable_holds_every_file_and_changes_with_the_code(tmp_path: Path) -> None:
    shutil.copytree(REPO / "llm_ocr", tmp_path / "llm_ocr", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    package = tmp_path / "llm_ocr"
    first = build_wheel(package)
    for path in package.rglob("*.py"):
        os.utime(path, (1_700_000_000, 1_700_000_000))  # new timestamps, same content
    assert build_wheel(package).data == first.data
    names = set(zipfile.ZipFile(io.BytesIO(first.data)).namelist())
    files = {f"llm_ocr/{p.relative_to(package).as_posix()}" for p in package.rglob("*") if p.is_file()}
    assert files <= names
    entry_points = zipfile.ZipFile(io.BytesIO(first.data)).read("llm_ocr-0.1.0.dist-info/entry_points.txt").decode()
    assert "llm-ocr = llm_ocr.cli:run" in entry_points
    (package / "launchers" / "core" / "plan.py").write_text((package / "launchers" / "core" / "plan.py").read_text() + "\n# changed\n")
    assert build_wheel(package).digest != first.digest


@pytest.mark.parametrize(
    ("pages", "shards", "rate", "expected"),
    [
        (None, 4, 2.5, DEFAULT_TIMEOUT_S),  # unknown page count
        (10_000, 4, 2.5, 3600),  # 2500 pages: 20 min start-up + 2000 s x 2 = 3200 s -> the 1 h floor
        (100_000, 4, 2.5, 21_600),  # 25000 pages: 1200 + 20000 = 21200 s -> next quarter hour
        (1_000, 1, 0.7, 4_500),  # 1200 + 1000 / 0.7 x 2 = 4057 s -> 4500
    ],
)
def test_timeout_is_sized_from_the_shard_page_count(pages: int | None, shards: int, rate: float, expected: int) -> None:
    assert shard_timeout(pages, shards, rate) == expected


def test_status_rows_and_totals_from_markers_progress_and_jobs() -> None:
    price, gpus = 10.0, 4
    done = {
        "extract": {"pages": {"ok": 90, "truncated": 5, "error": 5, "skipped": 0}, "wall_time_s": 1800.0},
        "describe": {"pages": {"ok": 100}, "wall_time_s": 1700.0},
        "assemble": {"documents": {"ok": 10}, "wall_time_s": 60.0},
    }
    rows = [
        shard_status(0, "run", done, None, JobState("j0", "succeeded", "COMPLETED", running_s=2000.0), gpus=gpus, price_per_hour=price),
        shard_status(1, "run", {}, {"pages": {"ok": 40}, "wall_time_s": 900.0}, JobState("j1", "running", "RUNNING", running_s=1000.0),
                     gpus=gpus, price_per_hour=price),
        shard_status(2, "run", {}, None, JobState("j2", "failed", "ERROR", "exited with code 2", 100.0), gpus=gpus, price_per_hour=price),
        shard_status(3, "run", {}, None, None, gpus=gpus, price_per_hour=price),
    ]
    assert [r.state for r in rows] == ["done (5 failed)", "running", "failed", "not launched"]
    assert rows[0].cost_usd == pytest.approx(2000 / 3600 * 10, abs=1e-4)  # billed seconds, not marker time
    assert rows[0].gpu_hours == pytest.approx(2000 * 4 / 3600, abs=1e-4)
    assert rows[2].message == "exited with code 2"
    table = LaunchStatus("hf://datasets/o/n", "run", 4, rows, gpus=gpus, price_per_hour=price)
    totals = table.totals()
    assert totals["counts"] == {"ok": 130, "truncated": 5, "error": 5}
    assert totals["gpu_hours"] == pytest.approx(3100 * 4 / 3600, abs=1e-4)
    assert totals["cost_usd"] == pytest.approx(3100 / 3600 * 10, abs=1e-3)
    assert totals["pages_per_s_per_gpu"] == pytest.approx(140 / (3100 * 4), abs=1e-3)
    assert not table.finished and not table.succeeded  # shard 1 still runs
    text = str(table)
    assert "done (5 failed)" in text and "failed: exited with code 2" in text and "cost: $8.61" in text


class _FinishesWhileAsked:
    """A platform whose job finishes as its state is asked: it writes the shard's markers (the
    job's last act before it exits), then says it succeeded. A poller on a busy machine meets
    exactly this between two reads of one poll."""

    def __init__(self, out: Storage, stages: tuple[str, ...]) -> None:
        self.out, self.stages = out, stages

    def states(self, jobs: list[dict]) -> dict[str, JobState]:
        for stage in self.stages:
            write_marker(self.out, stage, 0, 1, {"stage": stage, "pages": {"ok": 2}, "wall_time_s": 1.0})
        return {j["job_id"]: JobState(j["job_id"], "succeeded", "COMPLETED") for j in jobs}

    def shard_phase(self, state: JobState, shard: int) -> JobState:
        return state


def test_a_job_that_finishes_while_the_status_is_read_is_done_not_without_marker(tmp_path: Path) -> None:
    """The job's state is read before OUT's markers: a job seen succeeded has written them, so a
    shard is never shown ``no marker`` (a final state: ``wait`` would stop and call the launch
    failed) because it finished between the two reads."""
    from llm_ocr.launchers.core.follow import collect_status

    out = Storage(str(tmp_path / "out"))
    record = LaunchRecord("20250101-000000-aaaa", "hf-jobs", out.url, "run", 1, "l4x1", 1, 0.8, "img")
    record.add({"job_id": "a0", "shards": [0], "launch_id": record.launch_id})
    platform = _FinishesWhileAsked(out, record.needed_markers())
    status = collect_status(out, record, platform=platform, cache={})  # type: ignore[arg-type]
    assert [row.state for row in status.shards] == ["done"]
    assert status.succeeded


def test_marker_costs_use_wall_time_gpus_and_price() -> None:
    markers = {
        "extract": {0: {"pages": {"ok": 3600}, "wall_time_s": 3600.0}, 1: {"pages": {"ok": 10}, "wall_time_s": 10.0}},
        "describe": {0: {}, 1: {}},
        "assemble": {0: {"wall_time_s": 0.0}},  # shard 1 has not assembled: not counted
    }
    table = marker_costs("run", markers, hardware="a100x4", gpus=4, price_per_hour=10.0)
    assert [r["shard"] for r in table.rows] == [0]
    row = table.rows[0]
    assert (row["wall_hours"], row["gpu_hours"], row["cost_usd"], row["pages_per_s_per_gpu"]) == (1.0, 4.0, 10.0, 0.25)
    assert table.totals()["cost_usd"] == 10.0


def test_records_are_found_latest_first_and_carry_over_unrelaunched_shards(tmp_path: Path) -> None:
    out = Storage(str(tmp_path / "out"))
    first = LaunchRecord("20250101-000000-aaaa", "hf-jobs", out.url, "run", 3, "l4x1", 1, 0.8, "img")
    for shard in range(3):
        first.add({"job_id": f"a{shard}", "shards": [shard], "launch_id": first.launch_id})
    save_record(out, first)
    second = LaunchRecord("20250102-000000-bbbb", "hf-jobs", out.url, "run", 3, "l4x1", 1, 0.8, "img")
    second.carry_over(first, {0, 2})  # shard 1 is relaunched
    second.add({"job_id": "b1", "shards": [1], "launch_id": second.launch_id})
    save_record(out, second)
    latest = load_record(out)
    assert latest is not None and latest.launch_id == second.launch_id
    assert [latest.job_of_shard(s)["job_id"] for s in range(3)] == ["a0", "b1", "a2"]
    assert load_record(out, first.launch_id).shards == {"0": "a0", "1": "a1", "2": "a2"}


def test_request_body_is_what_huggingface_hub_sends() -> None:
    """The dry run's bodies come from our builder; huggingface_hub's own is the oracle."""
    from huggingface_hub import Volume
    from huggingface_hub._jobs_api import _create_job_spec

    from llm_ocr.launchers.hf_jobs.adapter import job_body

    spec = ShardSpec(2, 4, "llm-ocr-run-00002-of-00004", "vllm/vllm-openai:v0.29.0", ["sh", "-c", "x", "llm-ocr", "run"],
                     {"LLM_OCR_SHARD_INDEX": "2"}, {"HF_TOKEN": "hf_xyz"}, "l4x1", 5400, 3,
                     {"llm-ocr-launch": "L", "llm-ocr-shard": "00002-of-00004"})
    volumes = [Volume(type="model", source="me/code", mount_path="/llm-ocr-code")]
    expected = _create_job_spec(image=spec.image, command=spec.command, env=spec.env, secrets=spec.secrets, flavor=spec.hardware,
                                timeout=spec.timeout_s, attempts=spec.attempts, name=spec.name, labels=spec.labels, volumes=volumes)
    assert job_body(spec, volumes, redact=False) == expected
    assert job_body(spec, volumes, redact=True)["secrets"] == {"HF_TOKEN": "<secret>"}


def test_progress_ticks_whatever_the_display_mode() -> None:
    ticks: list[dict] = []

    async def run() -> None:
        loop = asyncio.get_running_loop()
        two = asyncio.Event()

        def tick(summary: dict) -> None:  # called in a worker thread
            ticks.append(summary)
            if len(ticks) >= 2:
                loop.call_soon_threadsafe(two.set)

        counters = RunCounters("extract", 1, 4)
        reporter = ProgressReporter(counters, "off", 0.05, on_tick=tick)
        reporter.start()
        counters.pages["ok"] += 3
        # Two ticks on the interval, however long a loaded machine takes to give them (a fixed
        # 0.3 s gave 2 at load 20); then the one at the end carries the last count.
        await asyncio.wait_for(two.wait(), 60)
        counters.pages["error"] += 1
        await reporter.stop()

    asyncio.run(run())
    assert len(ticks) >= 3
    assert ticks[-1]["pages"]["ok"] == 3 and ticks[-1]["pages"]["error"] == 1 and ticks[-1]["shard"] == 1


@pytest.mark.parametrize("platform", ["hf-jobs", "sagemaker", "cloud-run"])
def test_every_launch_keyword_belongs_to_one_kind_of_option(platform: str) -> None:
    """``llm_ocr.launch`` routes each keyword by its name to the launch, the platform or the
    launched stage: no name may be two of them, whatever the stage."""
    from llm_ocr.launchers import platform_class
    from llm_ocr.launchers.core.spec import LaunchOptions
    from llm_ocr.stage_table import STAGES

    launch_names = set(LaunchOptions.model_fields)
    platform_names = set(platform_class(platform).options.model_fields)
    assert not launch_names & platform_names
    for stage in STAGES.values():
        # The stage's --output and --num-shards are the launch's own, which it gives every job.
        stage_names = set(stage.option_names()) - {"output", "num_shards"}
        assert not stage_names & (launch_names | platform_names), stage.name


def test_launch_keywords_are_checked_and_the_stage_options_reach_the_command_line() -> None:
    from llm_ocr.launchers.core.api import build_request, split_options
    from llm_ocr.launchers.core.spec import LaunchError, LaunchOptions
    from llm_ocr.launchers.hf_jobs.adapter import HfJobs

    with pytest.raises(LaunchError, match="did you mean 'describe_model'"):
        split_options(HfJobs, {"describe_modle": "x"})
    with pytest.raises(LaunchError, match="has no option 'dpi'"):
        split_options(HfJobs, {"stage": "assemble", "dpi": 200})  # Assemble renders nothing
    launch, platform, stage = split_options(HfJobs, {"flavor": "l4x1", "timeout": "90m", "dpi": 200, "cut_loops": False})
    assert (launch, platform, stage) == ({"timeout": "90m"}, {"flavor": "l4x1"}, {"dpi": 200, "cut_loops": False})
    options = LaunchOptions(output="hf://datasets/me/out", num_shards=2, **launch)
    request = build_request("hf-jobs", options, "hf://datasets/me/in", stage, hardware="l4x1")
    assert request.timeout_s == 5400 and request.hardware == "l4x1"
    assert request.stage_args == ["hf://datasets/me/in", "--dpi", "200", "--no-cut-loops"]
    with pytest.raises(LaunchError, match="--dpi"):
        build_request("hf-jobs", options, "hf://datasets/me/in", {"dpi": -1})
    with pytest.raises(LaunchError, match="--api-key cannot be passed"):
        build_request("hf-jobs", options, "hf://datasets/me/in", {"api_key": "sk-secret"})


def test_fields_launches_take_no_input_need_a_model_unless_given_an_endpoint_and_count_documents() -> None:
    from llm_ocr.launchers.core.api import build_request
    from llm_ocr.launchers.core.spec import LaunchError, LaunchOptions

    options = LaunchOptions(output="hf://datasets/o/n", num_shards=2, stage="fields")
    schema = {"classes": "hf://datasets/o/n/classes.yaml"}
    request = build_request("hf-jobs", options, [], schema)
    assert (request.stage, request.needs_model, request.inputs) == ("fields", True, [])
    assert request.stage_args == ["--classes", "hf://datasets/o/n/classes.yaml"]
    elsewhere = build_request("hf-jobs", options, [], {**schema, "fields_endpoint": "https://llm.example/v1"})
    assert elsewhere.needs_model is False  # the model is served elsewhere: a CPU job is enough
    with pytest.raises(LaunchError, match="takes no INPUT"):
        build_request("hf-jobs", options, ["hf://datasets/o/scans"], schema)
    marker = {"fields": {"documents": {"ok": 7, "invalid": 2, "error": 1, "skipped": 3}, "wall_time_s": 60.0}}
    row = shard_status(0, "fields", marker, None, JobState("j0", "succeeded", "COMPLETED", running_s=70.0), gpus=1, price_per_hour=1.0)
    assert row.counts == {"ok": 7, "invalid": 2, "error": 1} and row.earlier == 3 and row.stages_done == ["fields"]
    table = LaunchStatus("hf://datasets/o/n", "fields", 1, [row], gpus=1, price_per_hour=1.0)
    assert "documents: 10 = ok 7, invalid 2, error 1" in "\n".join(table.totals_lines())


def test_a_run_launched_with_a_schema_is_done_with_fields_marker_and_shows_its_counts(tmp_path: Path) -> None:
    from llm_ocr.launchers.core.api import build_request
    from llm_ocr.launchers.core.spec import LaunchOptions

    options = LaunchOptions(output="hf://datasets/o/n", num_shards=2)
    request = build_request("hf-jobs", options, ["hf://datasets/o/scans"], {"fields_schema": "hf://datasets/o/n/s.json"})
    assert request.markers == ("extract", "describe", "assemble", "fields")
    assert build_request("hf-jobs", options, ["hf://datasets/o/scans"], {}).markers == ("extract", "describe", "assemble")
    # `llm-ocr launch ... --schema URL --from images`, spelled as `llm-ocr run` takes them.
    from llm_ocr.commands.launch import _stage_options

    inputs, given = _stage_options("run", ["hf://datasets/o/scans", "--schema", "hf://datasets/o/n/s.json", "--from", "images"])
    aliased = build_request("hf-jobs", options, inputs, given)
    assert aliased.markers == request.markers and "--fields-schema" in aliased.stage_args
    assert aliased.stage_args[-2:] == ["--fields-from", "images"]
    # The record keeps them; a record written before it did means the stage's own.
    out = Storage(str(tmp_path / "out"))
    save_record(out, LaunchRecord("20250101-000000-aaaa", "hf-jobs", out.url, "run", 2, "l4x1", 1, 1.0, "img",
                                  markers=list(request.markers)))
    assert load_record(out).needed_markers() == request.markers
    assert LaunchRecord.from_json({**load_record(out).to_json(), "markers": []}).needed_markers() == ("extract", "describe", "assemble")

    pages = {
        "extract": {"pages": {"ok": 20, "error": 1}, "wall_time_s": 100.0},
        "describe": {"pages": {"ok": 21}, "wall_time_s": 90.0},
        "assemble": {"documents": {"ok": 4}, "wall_time_s": 2.0},
    }
    fields = {"fields": {"documents": {"ok": 3, "invalid": 1, "error": 0, "skipped": 0}, "wall_time_s": 30.0}}
    needed = request.markers
    done = shard_status(0, "run", {**pages, **fields}, None, None, gpus=1, price_per_hour=3600.0, needed=needed)
    # Pages read but fields not extracted yet: the job still runs, the shard is not done.
    busy = shard_status(1, "run", pages, None, JobState("j1", "running", "RUNNING"), gpus=1, price_per_hour=3600.0, needed=needed)
    assert (done.state, done.stages_done[-1], done.fields) == ("done (1 failed)", "fields", {"ok": 3, "invalid": 1, "error": 0})
    assert done.elapsed_s == 132.0  # Extract (Describe overlaps it), Assemble and Fields
    assert (busy.state, busy.fields) == ("running", {})
    table = LaunchStatus("hf://datasets/o/n", "run", 2, [done, busy], gpus=1, price_per_hour=3600.0, fields=True)
    text = str(table)
    header = text.splitlines()[1].split()
    assert header[header.index("error") + 1] == "fields"
    assert "ok 3, invalid 1" in text.splitlines()[2] and text.splitlines()[3].split()[-3] == "-"
    assert "fields: 4 documents = ok 3, invalid 1, error 0" in text
    assert table.to_dict()["totals"]["fields"] == {"ok": 3, "invalid": 1, "error": 0}
    # Counted in the parts: the rows of every run, for a shard without its marker too.
    table.count_rows({0: {"ok": 21}, 1: {"ok": 5}}, 0, {0: {"ok": 4}, 1: {"ok": 1}})
    assert [row.fields for row in table.shards] == [{"ok": 4, "invalid": 0, "error": 0}, {"ok": 1, "invalid": 0, "error": 0}]
    # Its cost counts Fields' time; a shard without Fields' marker is not finished.
    costs = marker_costs("run", {s: {0: m} for s, m in {**pages, **fields}.items()} | {"extract": {0: pages["extract"], 1: pages["extract"]}},
                         hardware="l4x1", gpus=1, price_per_hour=3600.0, needed=needed)
    assert [(r["shard"], r["cost_usd"]) for r in costs.rows] == [(0, 132.0)]


def test_local_schema_files_are_shipped_beside_the_output_and_urls_inline_json_pass_unchanged(tmp_path: Path) -> None:
    import llm_ocr
    from llm_ocr.launchers.core.spec import LaunchError

    out = "s3://bucket/out"
    schema = tmp_path / "invoice.schema.json"
    shutil.copy(REPO / "examples" / "invoice.schema.json", schema)

    def command(**options: object) -> list[str]:
        plan = llm_ocr.launch("hf-jobs", "s3://bucket/in", output=out, num_shards=1, dry_run=True, offline=True,
                              **options).plan  # type: ignore[arg-type]
        return plan.to_json()["jobs"][0]["command"]

    # schema= is short for fields_schema=, as --schema is for --fields-schema.
    shipped = command(schema=str(schema))
    url = shipped[shipped.index("--fields-schema") + 1]
    digest = url.split("/")[-2]
    assert url == f"{out}/_state/launch-files/{digest}/invoice.schema.json" and str(tmp_path) not in " ".join(shipped)
    assert command(fields_schema=str(schema)) == shipped  # same bytes, same copy
    schema.write_text(schema.read_text().replace('"title"', '"description": "edited", "title"'))
    assert command(schema=str(schema)) != shipped  # new bytes: a new copy, never over one a job may read
    for passed in ("hf://datasets/o/n/s.json", '{"type": "object", "properties": {"n": {"type": "string"}}}',
                   "mypkg.models:Invoice"):
        given = command(schema=passed)
        assert given[given.index("--fields-schema") + 1] == passed
    with pytest.raises(LaunchError, match="give schema= or fields_schema=, not both"):
        command(schema=str(schema), fields_schema="hf://datasets/o/n/s.json")
    bad = tmp_path / "classes.yaml"
    bad.write_text("classes: [unclosed")
    with pytest.raises(LaunchError, match="not valid YAML"):
        command(classes=str(bad))


def test_jobs_status_does_not_load_the_model_families_pyarrow_or_the_pdf_renderer(tmp_path: Path) -> None:
    """``llm-ocr jobs status`` (run over and over while jobs run, by users and the launcher tests)
    reads a record, markers and the platform's job states: it must start without the model
    families and the Parquet records (pyarrow, numpy: about 0.5 s of CPU), nor the input listing's
    PDF rendering, all of which only a launch needs. A fresh interpreter, since this one has
    loaded them all."""
    out = Storage(str(tmp_path / "out"))
    record = LaunchRecord("20250101-000000-aaaa", "slurm", out.url, "extract", 2, None, 1, None, "img")
    record.add({"job_id": "123", "shards": [0, 1], "launch_id": record.launch_id})
    save_record(out, record)
    write_marker(out, "extract", 0, 2, {"pages": {"ok": 3}, "wall_time_s": 2.0})
    script = (
        "import json, sys\n"
        "from llm_ocr.cli import main\n"
        f"code = main(['jobs', 'status', {out.url!r}, '--json'])\n"
        "heavy = ('pyarrow', 'numpy', 'PIL', 'pypdfium2', 'llm_ocr.vlm.families', 'llm_ocr.sources')\n"
        "print(json.dumps({'code': code, 'loaded': [m for m in heavy if m in sys.modules]}))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLM_OCR_")}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=HANG_GUARD_S)
    assert result.returncode == 0, result.stderr
    table, _, last = result.stdout.rpartition("\n{")
    shown = json.loads(table)
    assert [row["state"] for row in shown["shards"]][:1] == ["done"]  # the status was really read
    assert json.loads("{" + last) == {"code": 0, "loaded": []}
