"""``llm-ocr launch hf-jobs --stage run --classes FILE`` against the fake Hugging Face Jobs API
that really runs the jobs: the local classes file and its schemas are shipped beside the output,
every shard runs the four stages, and ``llm-ocr jobs status`` shows Fields' marker and counts
beside the pages."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.launchers.common import (
    OUTPUT,
    OUTPUT_REPO,
    fake_jobs,
    launch_args,
    launcher_env,
    launcher_here,
    llm_ocr,
    stage_rows,
)

# Valid ones only: an invalid document makes `llm-ocr run` exit 1, which the platform retries.
INVOICES = ("invoice-2024-0017.pdf", "invoice-2024-0042.pdf")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("launch-fields") / "docs"
    folder.mkdir()
    for name in INVOICES:
        shutil.copy(REPO / "samples" / name, folder)
    return folder


def test_jobs_status_of_a_run_launched_with_a_schema_shows_fields(tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with fake_jobs(tmp_path / "jobs", corpus) as hub, launcher_here(hub, tmp_path, monkeypatch):
        # A classes file on this machine, naming its schemas by relative path: the jobs cannot see it.
        local = tmp_path / "my-classes"
        (local / "schemas").mkdir(parents=True)
        for name in ("invoice", "receipt"):
            shutil.copy(REPO / "examples" / f"{name}.schema.json", local / "schemas")
        classes = (REPO / "examples" / "classes.yaml").read_text().replace("schema: ", "schema: schemas/")
        (local / "classes.yaml").write_text(classes)
        env = launcher_env(hub, tmp_path)
        done = llm_ocr(*launch_args("--classes", str(local / "classes.yaml"), "--wait", "--interval", "0.5", shards=2),
                       env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        commands = [json.dumps(job.body) for job in hub.jobs.values()]
        assert commands and not any(str(local) in c for c in commands), commands  # only the copies are named
        shipped = [n for n in hub.files(OUTPUT_REPO) if n.startswith("_state/launch-files/")]
        assert sorted(n.rsplit("/", 1)[1] for n in shipped) == ["classes.yaml", "invoice.schema.json", "receipt.schema.json"]
        fields = stage_rows(hub, "fields")
        assert sorted(r["doc_id"] for r in fields) == sorted(INVOICES)
        assert {r["status"] for r in fields} == {"ok"}
        assert {r["class"] for r in fields} == {"invoice"}

        # The table (CLI, from the launch record) shows Fields' marker and counts per shard.
        shown = llm_ocr("jobs", "status", OUTPUT, "--json", env=env)
        assert shown.returncode == 0, shown.stderr
        table = json.loads(shown.stdout)
        assert table["fields"] and table["succeeded"]
        markers = hub.files(OUTPUT_REPO)
        for row in table["shards"]:
            assert row["stages_done"] == ["extract", "describe", "assemble", "fields"]
            marker = json.loads(markers[f"_state/fields/done-{row['shard']:05d}-of-00002.json"])
            assert row["fields"] == {k: marker["documents"][k] for k in ("ok", "invalid", "error")}
        assert table["totals"]["fields"] == {"ok": 2, "invalid": 0, "error": 0}
        text = llm_ocr("jobs", "status", OUTPUT, "--count", env=env).stdout
        assert "fields: 2 documents = ok 2, invalid 0, error 0" in text and text.count("  ok 1  ") == 2, text

