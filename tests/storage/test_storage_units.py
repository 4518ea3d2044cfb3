"""Storage building blocks without subprocesses: options, secrets, error classes as each store's
client really raises them, retries, the batching sink, and the Hub committer against the fake
Hub in a thread (with an explicit endpoint, so huggingface_hub's import-time HF_ENDPOINT does
not matter)."""

from __future__ import annotations

import hashlib
import io
import threading
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from llm_ocr.storage import Storage, retry_io
from llm_ocr.storage import retry as retry_module
from llm_ocr.storage.sinks import BatchingSink, DirectSink, Operation
from llm_ocr.storage.stores import StorageError, classify, explain, redact, scrub, store_options
from tests.fakes.fake_hub import FakeHub
from tests.waiting import wait_until

HUB_TOKEN = "hf_test_writer_token"


# --------------------------------------------------------------------------------------------
# Options and secrets


def test_storage_options_per_protocol_with_flat_keys_and_aliases() -> None:
    options = {"anon": False, "s3": {"key": "K", "endpoint_url": "http://s3"}, "gcs": {"token": "T"}, "hf": {"token": "H"}}
    assert store_options("s3://b/x", options) == {"anon": False, "key": "K", "endpoint_url": "http://s3"}
    assert store_options("s3a://b/x", options) == {"anon": False, "key": "K", "endpoint_url": "http://s3"}
    assert store_options("gs://b/x", options) == {"anon": False, "token": "T"}  # "gcs" entry, "gs" URL
    assert store_options("hf://datasets/o/n", options) == {"anon": False, "token": "H"}
    assert store_options("/local/path", {"s3": {"key": "K"}}) == {}
    # The old flat form still goes to every store, and the caller's dict is never changed.
    flat = {"key": "K", "client_kwargs": {"region_name": "eu-west-1"}}
    assert store_options("s3://b", flat) == flat and store_options("s3://b", flat) is not flat


def test_redact_and_scrub_never_show_secret_values(monkeypatch: pytest.MonkeyPatch) -> None:
    options = {"s3": {"key": "AKIA123456", "secret": "s3cr3t-value", "endpoint_url": "http://127.0.0.1:9000",
                      "client_kwargs": {"region_name": "eu", "aws_session_token": "sess-token-1"}}}
    shown = redact(options)
    assert shown == {"s3": {"key": "***", "secret": "***", "endpoint_url": "http://127.0.0.1:9000",
                            "client_kwargs": {"region_name": "eu", "aws_session_token": "***"}}}
    monkeypatch.setenv("HF_TOKEN", "hf_abcdefghijklmnopqrstuvwxyz012345")
    text = scrub("denied for s3cr3t-value, sess-token-1, hf_abcdefghijklmnopqrstuvwxyz012345 and Bearer abc.def.ghi123 via HF_ENDPOINT", options)
    assert "s3cr3t-value" not in text and "sess-token-1" not in text and "hf_abcdefghij" not in text
    assert "abc.def.ghi123" not in text and "HF_ENDPOINT" in text


# --------------------------------------------------------------------------------------------
# Errors as the clients raise them


def _hf_error(status: int, headers: dict[str, str] | None = None) -> Exception:
    """The exception huggingface_hub itself raises for a response with ``status``."""
    from huggingface_hub.utils import hf_raise_for_status

    try:
        import httpx2  # the HTTP client of huggingface_hub 2.x
    except ImportError:  # pragma: no cover - huggingface_hub 1.x uses httpx
        import httpx as httpx2

    request = httpx2.Request("POST", "https://huggingface.co/api/datasets/o/n/commit/main")
    response = httpx2.Response(status, headers=headers or {}, json={"error": "x"}, request=request)
    try:
        hf_raise_for_status(response)
    except Exception as exc:  # noqa: BLE001
        return exc
    raise AssertionError("no error raised")


def _client_error(code: str, status: int) -> Exception:
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "PutObject")


def test_errors_from_each_store_are_classified() -> None:
    from botocore.exceptions import EndpointConnectionError, NoCredentialsError
    from gcsfs.retry import HttpError
    from s3fs.errors import translate_boto_error

    transient = [
        _client_error("SlowDown", 503),
        translate_boto_error(_client_error("SlowDown", 503)),  # what s3fs raises: OSError(EBUSY)
        translate_boto_error(_client_error("InternalError", 500)),
        EndpointConnectionError(endpoint_url="http://x"),
        HttpError({"code": 429, "message": "rate"}),
        HttpError({"code": 503, "message": "unavailable"}),
        _hf_error(429),
        _hf_error(502),
        _hf_error(412),  # concurrent commits on one branch
        ConnectionResetError(),
    ]
    access = [
        translate_boto_error(_client_error("AccessDenied", 403)),
        translate_boto_error(_client_error("InvalidAccessKeyId", 403)),
        NoCredentialsError(),
        OSError("Forbidden: https://storage.googleapis.com/b\nno access"),  # gcsfs's 403
        _hf_error(401),
        _hf_error(403),
    ]
    assert [classify(e) for e in transient] == ["transient"] * len(transient)
    assert [classify(e) for e in access] == ["access"] * len(access)
    assert classify(FileNotFoundError("x")) == "missing"
    assert classify(_hf_error(404, {"X-Error-Code": "EntryNotFound"})) == "missing"
    assert classify(ValueError("bad")) == "other"


def test_explain_names_the_store_and_what_to_set() -> None:
    from s3fs.errors import translate_boto_error

    message = explain(translate_boto_error(_client_error("AccessDenied", 403)), "s3://b/out", "write to")
    assert message.startswith("cannot write to s3://b/out: AccessDenied")
    assert "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE" in message and "--storage-options" in message
    assert "HF_TOKEN" in explain(_hf_error(401), "hf://datasets/o/n", "write to")
    assert "GOOGLE_APPLICATION_CREDENTIALS" in explain(OSError("Forbidden: x"), "gs://b/o", "read")


def test_retry_io_retries_transient_errors_then_gives_up_with_a_storage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from s3fs.errors import translate_boto_error

    sleeps: list[float] = []
    monkeypatch.setattr(retry_module.time, "sleep", sleeps.append)
    calls = iter([translate_boto_error(_client_error("SlowDown", 503)), _hf_error(429, {"Retry-After": "7"}), "done"])

    def flaky() -> str:
        item = next(calls)
        if isinstance(item, Exception):
            raise item
        return item

    assert retry_io(flaky, what="writing s3://b/x", attempts=5, base_delay=0.01) == "done"
    assert len(sleeps) == 2 and sleeps[1] >= 7  # Retry-After is honoured

    def always_throttled() -> None:
        raise translate_boto_error(_client_error("SlowDown", 503))

    with pytest.raises(StorageError, match=r"cannot write to s3://b/x: .*S3 kept failing after retries"):
        retry_io(always_throttled, what="writing s3://b/x", attempts=3, base_delay=0.01)

    def denied() -> None:
        raise translate_boto_error(_client_error("AccessDenied", 403))

    sleeps.clear()
    with pytest.raises(StorageError, match="AWS_ACCESS_KEY_ID"):
        retry_io(denied, what="reading s3://b/x", attempts=5, base_delay=0.01)
    assert sleeps == []  # access errors are not retried

    def gone() -> None:
        raise _hf_error(404, {"X-Error-Code": "EntryNotFound"})

    with pytest.raises(FileNotFoundError):  # callers rely on the type ("absent folder")
        retry_io(gone, what="listing hf://datasets/o/n/x")


# --------------------------------------------------------------------------------------------
# The batching sink


class RecordingCommitter:
    """A Committer that records batches; can fail on demand; ``direct/`` paths are not batched."""

    def __init__(self, existing: set[str] | None = None) -> None:
        self.batches_made: list[list[tuple[str, str]]] = []
        self.existing = set(existing or ())
        self.fail_next = 0
        self.lock = threading.Lock()

    def batches(self, path: str) -> bool:
        return not path.startswith("direct/")

    def exists(self, path: str) -> bool:
        return path in self.existing

    def commit(self, operations: list[Operation], message: str) -> None:
        with self.lock:
            if self.fail_next:
                self.fail_next -= 1
                raise StorageError("cannot commit to hf://datasets/o/n: 503")
            self.batches_made.append([(op.kind, op.path) for op in operations])
            for op in operations:
                (self.existing.add if op.kind == "put" else self.existing.discard)(op.path)


def _sink(committer: RecordingCommitter, **kwargs: Any) -> tuple[BatchingSink, list[str]]:
    direct_writes: list[str] = []
    direct = DirectSink(lambda p, d: direct_writes.append(p), lambda p: direct_writes.append(f"rm {p}"))
    return BatchingSink(committer, direct, **kwargs), direct_writes


def test_thirty_parts_and_a_marker_make_one_commit_with_the_marker_last() -> None:
    committer = RecordingCommitter()
    sink, _ = _sink(committer, max_files=64, max_age=0)
    for i in range(30):
        sink.put(f"out/extract/part-{i:06d}.parquet", b"x")
    sink.put("out/_state/extract/done.json", b"{}")
    assert committer.batches_made == [] and sink.pending == 31
    sink.close()
    (batch,) = committer.batches_made
    assert len(batch) == 31 and batch[-1] == ("put", "out/_state/extract/done.json")


def test_batches_are_cut_at_max_files_and_keep_their_order() -> None:
    committer = RecordingCommitter()
    sink, _ = _sink(committer, max_files=10, max_age=0)
    for i in range(25):
        sink.put(f"p{i:02d}", b"x")
    assert [len(b) for b in committer.batches_made] == [10, 10]
    sink.flush()
    assert [len(b) for b in committer.batches_made] == [10, 10, 5]
    assert [p for b in committer.batches_made for _, p in b] == [f"p{i:02d}" for i in range(25)]


def test_queued_bytes_are_bounded() -> None:
    committer = RecordingCommitter()
    sink, _ = _sink(committer, max_files=64, max_bytes=1000, max_age=0)
    for i in range(5):
        sink.put(f"p{i}", b"x" * 400)
    assert [len(b) for b in committer.batches_made] == [3]  # 1200 bytes queued: commit
    assert sink.pending_bytes == 800


def test_the_timer_commits_what_waited_max_age() -> None:
    committer = RecordingCommitter()
    sink, _ = _sink(committer, max_files=64, max_age=0.2)
    sink.put("a", b"x")
    wait_until(lambda: committer.batches_made, "the timer committed")
    assert committer.batches_made == [[("put", "a")]]
    sink.close()


def test_rewrites_replace_queued_ops_and_deletes_only_what_exists() -> None:
    committer = RecordingCommitter(existing={"old"})
    sink, direct = _sink(committer, max_age=0)
    sink.put("a", b"1")
    sink.put("b", b"1")
    sink.put("a", b"2")  # replaces the queued write, moves after "b"
    sink.delete("b")  # only queued: just dropped
    sink.delete("missing")  # absent: a Hub commit deleting it would fail
    sink.delete("old")
    sink.put("direct/x", b"1")  # not batched (e.g. hf://buckets)
    sink.flush()
    assert committer.batches_made == [[("put", "a"), ("delete", "old")]]
    assert direct == ["direct/x"]


def test_a_failed_commit_keeps_its_operations_for_the_next_flush() -> None:
    committer = RecordingCommitter()
    sink, _ = _sink(committer, max_files=2, max_age=0)
    committer.fail_next = 1
    sink.put("a", b"1")
    with pytest.raises(StorageError):
        sink.put("b", b"1")  # the batch is full: the commit fails
    with pytest.raises(StorageError):
        sink.put("c", b"1")  # and the failure is reported until a flush succeeds
    sink.flush()
    assert [p for b in committer.batches_made for _, p in b] == ["a", "b"]


# --------------------------------------------------------------------------------------------
# The Hub committer, against the fake Hub


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Any:
    # No Xet (the fake Hub has none): huggingface_hub reads HF_HUB_DISABLE_XET at import time
    # into constants, and checks the constant before every LFS upload.
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    with FakeHub() as server:
        yield server


def _hub_storage(hub: FakeHub, repo: str, token: str = HUB_TOKEN) -> Storage:
    return Storage(f"hf://datasets/{repo}", {"hf": {"endpoint": hub.url, "token": token}})


def _parquet(n: int) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(pa.table({"i": list(range(n))}), buffer)
    return buffer.getvalue()


def test_hub_commits_retry_throttling_and_conflicts_then_give_up_cleanly(hub: FakeHub) -> None:
    from llm_ocr.storage.hub import HubCommitter

    out = _hub_storage(hub, "tester/retry")
    out.sink.committer = HubCommitter(out.fs, attempts=3, base_delay=0.01)  # type: ignore[attr-defined]
    from llm_ocr.storage.access import check_output

    check_output(out)  # creates the repo (private) and queues the dataset card
    assert hub.repos[("dataset", "tester/retry")].private
    hub.fail("POST", r"/commit/", 429, headers={"Retry-After": "0"})
    hub.fail("POST", r"/commit/", 412)
    out.write_atomic(out.path("extract", "part-00000-of-00001-000000.parquet"), _parquet(3))
    out.flush()
    (commit,) = hub.commits_to("tester/retry")
    assert sorted(commit.added) == ["README.md", "extract/part-00000-of-00001-000000.parquet"]
    assert commit.lfs == ["extract/part-00000-of-00001-000000.parquet"]  # Parquet goes through LFS
    hub.fail("POST", r"/commit/", 503, count=3)
    out.write_atomic(out.path("extract", "part-00000-of-00001-000001.parquet"), _parquet(1))
    with pytest.raises(StorageError, match=r"cannot commit to hf://datasets/tester/retry: .*503"):
        out.flush()
    out.flush()  # the store is back: the queued part is committed, once
    assert len(hub.commits_to("tester/retry")) == 2
    # The failed attempts had uploaded it already: LFS stores each content once.
    oid = hashlib.sha256(_parquet(1)).hexdigest()
    assert hub.lfs_uploads.count(oid) == 1
    # Read back through HfFileSystem: the Hub redirects to LFS storage, as for a real part.
    assert pq.read_table(io.BytesIO(out.read_bytes(out.path("extract", "part-00000-of-00001-000001.parquet")))).num_rows == 1
    assert ("GET", f"/objects/{oid}") in hub.requests


def test_hub_write_check_needs_a_write_token(hub: FakeHub) -> None:
    from llm_ocr.storage.access import check_output

    hub.create("tester/public", private=False)
    with pytest.raises(StorageError, match=r"cannot write to hf://datasets/tester/public: .*HF_TOKEN"):
        check_output(_hub_storage(hub, "tester/public", token="hf_test_reader_token"))
    assert hub.commits == []


def _concurrent_reader_never_sees_a_partial_part(stage: Storage, parts: int = 12, rows: int = 150_000) -> None:
    """Write large parts (overwriting some) while another thread reads every part it lists."""
    payloads = {n: _parquet(rows + n) for n in range(3)}
    stop = threading.Event()
    seen: list[int] = []
    problems: list[str] = []

    def reader() -> None:
        while not stop.is_set():
            for path in stage.glob("part-*.parquet"):
                try:
                    table = pq.read_table(io.BytesIO(stage.read_bytes(path)))
                except FileNotFoundError:
                    continue
                except Exception as exc:  # noqa: BLE001 - exactly what must never happen
                    problems.append(f"{path}: {exc}")
                    continue
                if table.num_rows not in {rows + n for n in payloads}:
                    problems.append(f"{path}: {table.num_rows} rows")
                seen.append(table.num_rows)
                read_one.set()

    read_one = threading.Event()
    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(parts):
            stage.write_atomic(stage.path(f"part-00000-of-00001-{i % 4:06d}.parquet"), payloads[i % 3])
            if i == 0:
                # The rest are written while the reader reads: on a loaded machine its thread once
                # got no turn before all 12 were written, and read nothing at all.
                assert read_one.wait(120), "the reader read no part"
    finally:
        stop.set()
        thread.join()
    assert problems == []
    assert seen, "the reader should have read parts while they were being written"


def test_local_writes_are_atomic_for_a_concurrent_reader(tmp_path: Any) -> None:
    _concurrent_reader_never_sees_a_partial_part(Storage(str(tmp_path / "out")).child("extract"))


def test_no_import_time_side_effects_and_gcsfs_is_prepared_for_the_emulator() -> None:
    """Importing llm_ocr changes nothing; building the first gs:// filesystem with
    STORAGE_EMULATOR_HOST set turns gcsfs's zonal/HNS layer off before gcsfs is imported
    (otherwise every call against the emulator waits 60 s, docs/facts.md#local-stand-ins)."""
    import os
    import subprocess
    import sys

    script = (
        "import os, sys\n"
        "import llm_ocr.storage, llm_ocr.storage.stores, llm_ocr.storage.sinks, llm_ocr.storage.hub, llm_ocr.storage.access, llm_ocr.storage.upstream\n"
        "assert 'GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT' not in os.environ\n"
        "assert not {'gcsfs', 's3fs', 'huggingface_hub'} & set(sys.modules), set(sys.modules) & {'gcsfs', 's3fs', 'huggingface_hub'}\n"
        "from llm_ocr.storage import Storage\n"
        "fs = Storage('gs://some-bucket/out').fs\n"
        "print(os.environ['GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT'], type(fs).__module__)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GCSFS_", "STORAGE_EMULATOR"))}
    env["STORAGE_EMULATOR_HOST"] = "http://127.0.0.1:9"  # never contacted: building the filesystem is enough
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["false", "gcsfs.core"]


def test_a_local_glob_matches_what_fsspec_matches_without_reading_each_entry(tmp_path: Any,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A process taking another shard's group lists each other shard's claims folder; fsspec's
    glob reads every entry's metadata (27 ms of CPU for 2,400 claim files, at every group taken).
    The local glob lists names only, and matches what fsspec's glob matches: names that start
    with a dot, folders, patterns in several parts; and in a folder whose own name looks like a
    pattern, what it matches elsewhere."""
    names = ["_state/claims/run/00000-of-00002/000001-0001.json", "_state/claims/run/00000-of-00002/.x.json",
             "_state/claims/run/00001-of-00002/000002-0001.done.json", "_state/claims/run/00001-of-00002/a.tmp",
             "_state/claims/extract/00000-of-00003/000001-0001.json", "_state/claims/run/dir.json/z.json"]
    patterns = [("_state", "claims", "*", "*-of-*", "*.json"), ("_state", "claims", "run", "00000-of-00002", "*.json"),
                ("_state", "claims", "run", "*.json"), ("_state", "claims", "run", "0000[1]-of-00002", "*"),
                ("_state/claims/run/00001-of-00002", "??????-0001.*.json"), ("absent", "*.json")]
    found = {}
    for folder in ("out", "out [1]"):
        for name in names:
            (tmp_path / folder / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / folder / name).write_text("{}")
        storage = Storage(str(tmp_path / folder))
        if folder == "out":
            by_fsspec = [sorted(storage.fs.glob(storage.path(*parts))) for parts in patterns]
        with monkeypatch.context() as patch:
            patch.setattr(storage.fs, "find", lambda *a, **k: pytest.fail("fsspec's glob read every entry"))
            found[folder] = [[p.removeprefix(storage.root) for p in storage.glob(*parts)] for parts in patterns]
    assert found["out"] == [[p.removeprefix(str(tmp_path / "out")) for p in paths] for paths in by_fsspec]
    assert found["out [1]"] == found["out"]
    assert found["out"][1] == ["/_state/claims/run/00000-of-00002/.x.json",
                               "/_state/claims/run/00000-of-00002/000001-0001.json"]


def test_a_completion_marker_is_one_line_of_json_read_back_whole(tmp_path: Any) -> None:
    """A marker is written compact (json's C encoder; an indented dump is encoded in Python, about
    1 ms for a page stage's marker, three a document in the service) and read back unchanged."""
    from llm_ocr.storage.state import marker_path, read_marker, write_marker

    out = Storage(str(tmp_path))
    stats = {"pages": {"ok": 1, "error": 0}, "model": "m", "nested": [{"a": 1}, {"b": [1, 2]}]}
    write_marker(out, "extract", 0, 1, stats)
    assert read_marker(out, "extract", 0, 1) == stats
    assert b"\n" not in out.read_bytes(marker_path(out, "extract", 0, 1))
