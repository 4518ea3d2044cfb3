"""Storage.create_exclusive on every store: processes racing to create the same names, exactly
one wins each name, and the file holds the winner's content (docs/stragglers.md).

Local disk, S3 (moto server: it honours ``If-None-Match: *``, moto's ``put_object``), GCS and the
Hub (the fake Hub refuses a commit whose ``parentCommit`` is not the head, as the Hub does). The
GCS emulator ignores ``ifGenerationMatch``; the tests run it with uploads that check the
precondition as GCS documents it (https://cloud.google.com/storage/docs/request-preconditions;
tests/fakes/gcs_emulator.py), and racers there go through a proxy that counts the conditional
uploads and the 412s, so the test shows llm-ocr sends it and reads a 412 as "taken". That the
emulator as it ships lets every racer win is checked too (if it ever enforces the precondition,
the patch can go).
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.fakes.fake_hub import FakeHub
from tests.storage_servers import GcsEmulator, MotoS3, clean_env
from tests.waiting import wait_until

RACERS = 4
NAMES = [f"claims/{n:06d}-0001.json" for n in range(24)]


def race(url: str, env: dict[str, str], folder: Path, racers: int = RACERS) -> list[dict[str, Any]]:
    """Start ``racers`` processes on ``url``, release them at once, return what each won."""
    folder.mkdir(parents=True, exist_ok=True)
    procs = [subprocess.Popen([sys.executable, "-m", "tests.e2e.storage.exclusive_racer", url, str(folder), *NAMES],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(REPO))
             for _ in range(racers)]
    try:
        for proc in procs:  # every racer has its client up before any create
            wait_until(lambda p=proc: any(f.name == f"ready-{p.pid}" for f in folder.iterdir()),
                       "a racer got ready", process=proc)
        (folder / "go").touch()
        results = []
        for proc in procs:
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err[-3000:]
            results.append(json.loads(out.strip().splitlines()[-1]))
        return results
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()


def assert_one_winner_each(results: list[dict[str, Any]], read: Any) -> None:
    winners: dict[str, list[str]] = {name: [] for name in NAMES}
    for result in results:
        for name in result["won"]:
            winners[name].append(result["token"])
    assert {name: len(tokens) for name, tokens in winners.items()} == dict.fromkeys(NAMES, 1)
    for name, (token,) in winners.items():
        assert read(name) == f"{token} {name}".encode()


def test_local_disk_one_winner_per_name(tmp_path: Path) -> None:
    out = tmp_path / "out"
    results = race(str(out), clean_env(), tmp_path / "race")
    assert_one_winner_each(results, lambda name: (out / name).read_bytes())
    assert not list(out.rglob("*.tmp"))  # the temporary files linked from are gone


@pytest.fixture(scope="module")
def s3() -> Iterator[MotoS3]:
    server = MotoS3()
    try:
        server.client().create_bucket(Bucket="race")
        yield server
    finally:
        server.stop()


def test_s3_one_winner_per_name(s3: MotoS3, tmp_path: Path) -> None:
    # moto checks If-None-Match and then stores, in two steps of a threaded server (two racers
    # both passed the check once in a full run on a loaded machine); the tests run it with its
    # conditional puts made one at a time (tests/fakes/moto_server.py), as S3 decides them
    # atomically. The proxy counts them and their 412s: llm-ocr must ask for the condition on
    # every create, and read a refusal as "taken".
    puts = ConditionalCreates(s3_conditional_put)
    proxy = Proxy(s3.url, puts)
    try:
        results = race("s3://race/out", clean_env(**{**s3.env, **_endpoint_env(s3.env, proxy.url)}), tmp_path / "race")
    finally:
        proxy.stop()
    assert_one_winner_each(results, lambda name: s3.read("race", f"out/{name}"))
    assert puts.asked == RACERS * len(NAMES)
    assert puts.refused == (RACERS - 1) * len(NAMES)


def _endpoint_env(env: dict[str, str], url: str) -> dict[str, str]:
    """``env``'s S3 endpoint variables pointed at ``url``."""
    moved = {k: url for k in env if k.startswith("AWS_ENDPOINT_URL")}
    assert moved, env
    return moved


class Request:
    """One request the proxy received: its method, path, headers and body."""

    def __init__(self, command: str, path: str, headers: Any, body: bytes) -> None:
        self.command, self.path, self.headers, self.body = command, path, headers, body


Answer = tuple[int, list[tuple[str, str]], bytes]


class Proxy:
    """An HTTP proxy in front of ``target``. Each request goes to ``hook(request, forward)``,
    which answers it: usually by calling ``forward(request)`` (under a lock, or after a check of
    its own); with no hook every request is forwarded as it comes."""

    def __init__(self, target: str, hook: Any = None) -> None:
        self.target = urllib.parse.urlsplit(target)
        proxy = self
        hook = hook or (lambda request, forward: forward(request))

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, headers, data = hook(Request(self.command, self.path, self.headers, body), proxy.forward)
                self.send_response(status)
                for key, value in headers:
                    self.send_header(key, value)
                if self.command != "HEAD":  # a HEAD answer keeps the object's own Content-Length
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def forward(self, request: Request) -> Answer:
        """Send ``request`` to the target and return its answer."""
        conn = http.client.HTTPConnection(self.target.hostname, self.target.port, timeout=60)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        conn.request(request.command, request.path, body=request.body,
                     headers={**headers, "Content-Length": str(len(request.body))})
        answer = conn.getresponse()
        data = answer.read()
        conn.close()
        dropped = ("transfer-encoding", "connection") if request.command == "HEAD" else (
            "transfer-encoding", "content-length", "connection")
        return answer.status, [(k, v) for k, v in answer.getheaders() if k.lower() not in dropped], data

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class ConditionalCreates:
    """A proxy hook that counts the requests ``conditional`` says ask to create only if absent
    (S3's ``If-None-Match: *``, GCS's ``ifGenerationMatch=0``) and those the store refused (412),
    forwarding every request as it comes."""

    def __init__(self, conditional: Callable[[Request], bool]) -> None:
        self.conditional = conditional
        self.lock = threading.Lock()
        self.asked = 0
        self.refused = 0

    def __call__(self, request: Request, forward: Any) -> Answer:
        answer = forward(request)
        if self.conditional(request):
            with self.lock:
                self.asked += 1
                self.refused += answer[0] == 412
        return answer


def s3_conditional_put(request: Request) -> bool:
    return request.command == "PUT" and request.headers.get("If-None-Match") == "*"


def gcs_conditional_upload(request: Request) -> bool:
    parsed = urllib.parse.urlsplit(request.path)
    return (parsed.path.startswith("/upload/storage/v1/b/")
            and urllib.parse.parse_qs(parsed.query).get("ifGenerationMatch") == ["0"])


@pytest.fixture(scope="module")
def gcs() -> Iterator[GcsEmulator]:
    server = GcsEmulator()
    try:
        server.create_bucket("race")
        yield server
    finally:
        server.stop()


def test_gcs_one_winner_per_name_with_the_precondition_enforced(gcs: GcsEmulator, tmp_path: Path) -> None:
    precondition = ConditionalCreates(gcs_conditional_upload)
    proxy = Proxy(gcs.url, precondition)
    try:
        env = clean_env(STORAGE_EMULATOR_HOST=proxy.url, GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT="false")
        results = race("gs://race/out", env, tmp_path / "race")
    finally:
        proxy.stop()
    assert_one_winner_each(results, lambda name: gcs.read("race", f"out/{name}"))
    # Every create asked for the precondition; all but the winner of each name were refused.
    assert precondition.asked == RACERS * len(NAMES)
    assert precondition.refused == (RACERS - 1) * len(NAMES)


def test_the_gcs_emulator_as_it_ships_ignores_the_precondition(tmp_path: Path) -> None:
    """Why the tests patch it (tests/fakes/gcs_emulator.py): straight to the emulator as it
    ships, two racers both "create" one name."""
    bare = GcsEmulator(strict=False)
    try:
        bare.create_bucket("race")
        results = race("gs://race/alone", clean_env(**bare.env), tmp_path / "race", racers=2)
    finally:
        bare.stop()
    assert all(len(result["won"]) == len(NAMES) for result in results)


@pytest.fixture
def hub() -> Iterator[FakeHub]:
    with FakeHub() as server:
        server.create("tester/claims", private=True)
        yield server


def test_hub_one_winner_per_name(hub: FakeHub, tmp_path: Path) -> None:
    env = clean_env(HF_ENDPOINT=hub.url, HF_TOKEN="hf_test_writer_token", HF_HUB_DISABLE_XET="1",
                    LLM_OCR_STORAGE_RETRY_DELAY="0.05")
    results = race("hf://datasets/tester/claims/out", env, tmp_path / "race")
    assert_one_winner_each(results, lambda name: hub.files("tester/claims")[f"out/{name}"])
    # One commit per name: the losers' commits were refused (412) or never sent (the name existed).
    assert len([c for c in hub.commits_to("tester/claims") if c.added]) == len(NAMES)
