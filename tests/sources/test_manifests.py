"""Manifest INPUTs (Parquet, JSONL, CSV): each shard's share, relative paths, bad rows, the
manifest ``plan --write-manifest`` and ``launch`` write, on local disk, S3 (moto server) and GCS
(gcp-storage-emulator)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import llm_ocr
from llm_ocr.sources import InputError, plan_inputs
from llm_ocr.sources.manifest_write import write_manifest
from llm_ocr.testing import SimulatedServer
from tests.conftest import read_stage
from tests.sources.sources_testdata import make_pdf, png
from tests.storage_servers import AWS_TEST_ENV, shared_gcs, shared_moto

#: 23 rows of uneven lengths, so byte ranges and row counts do not line up.
ROWS = [{"url": f"docs/{'sub/' * (i % 3)}d{i:02d}.pdf", "id": f"doc-{i}", "size": 1000 + i} for i in range(23)]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    # Blank lines between rows and at the end are not rows.
    lines = [json.dumps(r) + ("\n\n" if i % 5 == 4 else "\n") for i, r in enumerate(rows)]
    path.write_text("".join(lines) + "\n")
    return path


def write_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("url,id,size\r\n" + "".join(f"{r['url']},{r['id']},{r['size']}\r\n" for r in rows))
    return path


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    table = pa.table({k: [r[k] for r in rows] for k in ("url", "id", "size")})
    pq.write_table(table, path, row_group_size=4)  # 6 row groups: shares cut through them
    return path


def shards_of(inp: str, num_shards: int) -> list[list[tuple[int, str, str]]]:
    plan = plan_inputs([inp])
    shards = []
    for shard in range(num_shards):
        refs = [(r.index, r.doc_id, r.location) for r in plan.documents(num_shards, shard)]
        assert plan.shard_size(num_shards, shard) == len(refs)
        shards.append(refs)
    return shards


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_every_row_is_in_exactly_one_shard_numbered_in_manifest_order(fmt: str, tmp_path: Path) -> None:
    path = {"jsonl": write_jsonl, "csv": write_csv, "parquet": write_parquet}[fmt](tmp_path / f"m.{fmt}", ROWS)
    expected = [(i, r["id"], str(tmp_path / r["url"])) for i, r in enumerate(ROWS)]  # relative to the manifest
    for num_shards in (1, 3, 7, 40):
        shards = shards_of(str(path), num_shards)
        assert [ref for shard in shards for ref in shard] == expected, num_shards
        if num_shards == 3:
            assert all(6 <= len(shard) <= 10 for shard in shards)  # balanced: by bytes, or by rows for Parquet
    # A work group's slice of a shard's list (docs/stragglers.md) is that slice, and no more.
    plan = plan_inputs([str(path)])
    whole = [r.index for r in plan.documents(3, 1)]
    assert [r.index for r in plan.documents(3, 1, start=2, stop=5)] == whole[2:5]


def test_a_manifest_after_another_input_numbers_on_and_rows_can_go_round_robin(tmp_path: Path) -> None:
    first = write_jsonl(tmp_path / "a.jsonl", ROWS[:5])
    second = write_parquet(tmp_path / "b.parquet", ROWS[5:])
    plan = plan_inputs([str(first), str(second)])
    shares = [[r.index for r in plan.documents(4, s)] for s in range(4)]
    assert sorted(i for share in shares for i in share) == list(range(23))
    assert [plan.shard_size(4, s) for s in range(4)] == [len(s) for s in shares]
    # by_rows: the rule an output begun by listing a folder keeps (llm_ocr.runners.inputs)
    by_rows = [[r.index for r in plan.documents(4, s, by_rows=True)] for s in range(4)]
    assert by_rows == [list(range(s, 23, 4)) for s in range(4)]


def test_paths_resolve_against_the_manifest_folder_and_urls_and_absolute_paths_stay(tmp_path: Path) -> None:
    (tmp_path / "lists").mkdir()
    rows = [{"path": "../scans/a.pdf"}, {"path": "/abs/b.png"}, {"url": "s3://bucket/c.pdf", "id": ""},
            {"url": "https://example.com/get?doc=4"}]
    plan = plan_inputs([str(write_jsonl(tmp_path / "lists" / "m.jsonl", rows))])
    refs = list(plan.documents())
    assert [r.location for r in refs] == [str(tmp_path / "scans/a.pdf"), "/abs/b.png", "s3://bucket/c.pdf",
                                          "https://example.com/get?doc=4"]
    assert [r.doc_id for r in refs] == ["../scans/a.pdf", "abs/b.png", "bucket/c.pdf", "example.com/get?doc=4"]
    assert [r.kind for r in refs] == ["pdf", "image", "pdf", "pdf"]


def test_a_parquet_with_images_stays_a_dataset_and_a_manifest_needs_a_url_column(tmp_path: Path) -> None:
    images = pa.table({"image": [{"bytes": png(), "path": "a.png"}], "url": ["a.png"]})
    pq.write_table(images, tmp_path / "images.parquet")
    assert next(plan_inputs([str(tmp_path / "images.parquet")]).documents()).kind == "dataset_row"
    (tmp_path / "bad.csv").write_text("name,size\na.pdf,3\n")
    with pytest.raises(InputError, match="no url or path column"):
        plan_inputs([str(tmp_path / "bad.csv")])


@pytest.fixture(scope="module")
def server() -> Iterator[SimulatedServer]:
    with SimulatedServer("--instant") as sim:
        yield sim


def test_bad_rows_and_missing_documents_get_their_own_error_rows_and_the_rest_is_read(
        server: SimulatedServer, tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.pdf").write_bytes(make_pdf(2))
    (tmp_path / "docs" / "b.png").write_bytes(png(size=(200, 100)))
    lines = [json.dumps({"url": "docs/a.pdf"}), json.dumps({"id": "no-url"}), "{not json",
             json.dumps({"url": "docs/missing.pdf"}), json.dumps({"url": "docs/b.png", "size": "big"}),
             json.dumps({"path": "docs/b.png", "id": "b-again"})]
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    llm_ocr.extract([manifest], out, endpoint=server.base_url, workers=0, progress="off")
    rows = {(r["doc_id"], r["page"]): r for r in read_stage(out, "extract")}
    ok = sorted(k for k, r in rows.items() if r["status"] == "ok")
    assert ok == [("b-again", 1), ("docs/a.pdf", 1), ("docs/a.pdf", 2)]
    errors = {k[0]: r["error"] for k, r in rows.items() if r["status"] == "error"}
    assert errors["no-url"] == "manifest row 1 has no url or path"
    assert errors["m.jsonl/row-00000002"].startswith("manifest row 2 does not parse as jsonl: ")
    assert errors["docs/missing.pdf"] == f"file not found: {tmp_path / 'docs/missing.pdf'}"
    assert errors["docs/b.png"] == "manifest row 4: size 'big' is not a whole number"
    assert sorted(r["doc_index"] for r in rows.values() if r["page"] <= 1) == [0, 1, 2, 3, 4, 5]


def make_folder(root: Path) -> Path:
    for i in range(5):
        (root / f"part{i % 2}").mkdir(parents=True, exist_ok=True)
        (root / f"part{i % 2}" / f"s{i}.png").write_bytes(png())
    (root / "notes.txt").write_text("not a document")
    return root


def test_a_written_manifest_lists_what_listing_the_folder_lists(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "scans")
    listed = plan_inputs([str(folder)])
    written = write_manifest(listed, str(tmp_path / "manifest"), inputs=[str(folder)])
    assert (written.rows, written.files) == (5, 1)
    index = json.loads((tmp_path / "manifest" / "_manifest.json").read_text())
    assert index["rows"] == 5 and index["inputs"] == [str(folder)]
    sizes = pq.read_table(tmp_path / "manifest" / "part-00000.parquet").column("size").to_pylist()
    assert sizes == [len(png())] * 5
    from_folder = [(r.doc_id, r.index, r.location, r.kind) for r in listed.documents()]
    from_manifest = [(r.doc_id, r.index, r.location, r.kind) for s in range(3)
                     for r in plan_inputs([str(tmp_path / "manifest")]).documents(3, s)]
    assert from_manifest == from_folder


def test_a_launch_of_a_folder_hands_the_shards_a_manifest_written_once(tmp_path: Path) -> None:
    from llm_ocr.costs import Hardware
    from llm_ocr.launchers.core.api import build_request
    from llm_ocr.launchers.core.plan import plan_launch, write_launch_manifest
    from llm_ocr.launchers.core.spec import LaunchError, LaunchOptions, Target
    from llm_ocr.options import DatasetOptions
    from llm_ocr.runners.inputs import check_inputs
    from llm_ocr.storage import Storage

    class Platform:
        name, shard_env, shared_filesystem = "fake", False, True

        def resolve(self, request: Any) -> Target:
            return Target(Hardware("cpu", 0, None, None), "image", [], {})

        def plan_jobs(self, specs: Any, target: Any) -> list:
            return []

    folder = make_folder(tmp_path / "scans")
    out = tmp_path / "out"
    request = build_request("fake", LaunchOptions(output=str(out), num_shards=3), [str(folder)], {"dpi": 100})
    dry = plan_launch(request, Platform(), check_writable=False)  # type: ignore[arg-type]
    manifest = out / "_state" / "manifest"
    assert any("written to" in n for n in dry.notes) and dry.manifest is None
    plan = plan_launch(request, Platform())  # type: ignore[arg-type]
    assert not manifest.exists()  # written when the launch submits, after every check
    write_launch_manifest(plan)
    # The commands name the folder (a dry run's run as they are); each shard finds the listing in OUT.
    assert all(spec.command[:5] == ["llm-ocr", "run", str(folder), "--dpi", "100"] for spec in plan.specs)
    listed = [(r.doc_id, r.index, r.location) for r in plan_inputs([str(folder)]).documents()]
    (folder / "part0" / "new.png").write_bytes(png())  # listed at launch: a shard does not list it again
    shard_plan = check_inputs([str(folder)], DatasetOptions(), {}, Storage(str(out)))
    assert [(r.doc_id, r.index, r.location) for r in shard_plan.documents()] == listed
    assert len(list(check_inputs([str(folder)], DatasetOptions(), {}).documents())) == len(listed) + 1
    first = (manifest / "part-00000.parquet").stat().st_mtime_ns
    again = plan_launch(request, Platform())  # type: ignore[arg-type]
    write_launch_manifest(again)  # a relaunch keeps the listing the shards of OUT read
    assert (manifest / "part-00000.parquet").stat().st_mtime_ns == first and again.manifest is None
    other = build_request("fake", LaunchOptions(output=str(out), num_shards=3), [str(folder / "part0")], {})
    with pytest.raises(LaunchError, match="lists other INPUTs"):
        plan_launch(other, Platform())  # type: ignore[arg-type]


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_in_a_bucket_a_folder_is_listed_once_and_its_manifest_read_by_shards(
        scheme: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # S3 (moto) and GCS (gcp-storage-emulator), each this process's shared server: the folder is
    # listed once into a Parquet manifest that the shards read, beside a CSV of relative paths.
    bucket = f"ocr-{tmp_path.name.lower().replace('_', '-')}"[:60]  # the GCS emulator keeps buckets
    scans = make_folder(tmp_path / "scans")
    if scheme == "s3":
        s3 = shared_moto()
        s3.client().create_bucket(Bucket=bucket)
        s3.upload_folder(scans, bucket, "scans")
        s3.client().put_object(Bucket=bucket, Key="lists/m.csv", Body=b"path\n../scans/part1/s1.png\n")
        so: dict[str, Any] = {"key": AWS_TEST_ENV["AWS_ACCESS_KEY_ID"], "secret": AWS_TEST_ENV["AWS_SECRET_ACCESS_KEY"],
                              "client_kwargs": {"endpoint_url": s3.url, "region_name": "us-east-1"}}
    else:
        gcs = shared_gcs()
        so = gcs.use_in_this_process(monkeypatch)  # gcsfs finds the emulator by the standard variable
        gcs.create_bucket(bucket)
        gcs.upload_folder(scans, bucket, "scans")
        gcs.upload(bucket, "lists/m.csv", b"path\n../scans/part1/s1.png\n")
    root = f"{scheme}://{bucket}"
    listed = plan_inputs([f"{root}/scans"], storage_options=so)
    write_manifest(listed, f"{root}/out/manifest", storage_options=so)
    plan = plan_inputs([f"{root}/out/manifest", f"{root}/lists/m.csv"], storage_options=so)
    refs = sorted(((r.doc_id, r.index, r.location) for s in range(2) for r in plan.documents(2, s)), key=lambda r: r[1])
    expected = [(f"part{i}/s{j}.png", 0, f"{root}/scans/part{i}/s{j}.png") for i, j in
                [(0, 0), (0, 2), (0, 4), (1, 1), (1, 3)]]
    expected = [(d, n, u) for n, (d, _, u) in enumerate(expected)]
    assert refs == [*expected, ("../scans/part1/s1.png", 5, f"{root}/scans/part1/s1.png")]


def test_a_line_manifest_counts_the_rows_before_a_share_as_it_reads_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Rows are counted a block at a time (blocks of 7 bytes here, so lines straddle them), and
    # must agree with the rows read line by line for every share: blank and whitespace lines
    # are not rows, the last line may lack its newline.
    import fsspec

    from llm_ocr.sources import manifest as module

    monkeypatch.setattr(module, "LINE_BLOCK", 7)
    text = b'{"url": "a.pdf"}\n\n   \n{"url": "bb.pdf"}\r\n{"url": "c.pdf"}\n \t\n{"url": "d.pdf"}'
    (tmp_path / "m.jsonl").write_bytes(text)
    table = module.line_table(fsspec.filesystem("file"), str(tmp_path / "m.jsonl"), len(text), "jsonl")
    assert table.num_rows == 4
    for lo in range(len(text) + 1):
        for hi in range(lo, len(text) + 2):
            assert table._count(lo, hi) == len(list(table._lines(lo, hi))), (lo, hi)
