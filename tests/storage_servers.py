"""Real protocol servers for storage tests, on free loopback ports: S3 (moto server), GCS
(gcp-storage-emulator), and a TCP proxy that can cut a connection on demand; the environment
the CLI runs in against them and the fake Hub, and reading the rows it wrote.

Test code talks to them with plain HTTP (GCS JSON API through urllib) or boto3, so the test
process never imports gcsfs (whose import-time settings would then be fixed for the session).
"""

from __future__ import annotations

import atexit
import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq

from tests.conftest import REPO

if TYPE_CHECKING:
    from tests.fakes.fake_hub import FakeHub

VENV_BIN = Path(sys.executable).parent

#: Credentials the S3 stand-in accepts (moto without IAM checks accepts any).
AWS_TEST_ENV = {
    "AWS_ACCESS_KEY_ID": "testing-key-id",
    "AWS_SECRET_ACCESS_KEY": "testing-secret-key",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",  # never wait for an instance-metadata service
    "AWS_CONFIG_FILE": os.devnull,  # ignore the developer's ~/.aws
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}

#: The token the fake Hub (tests/fakes/fake_hub.py) accepts for writes.
HUB_TOKEN = "hf_test_writer_token"


def clean_env(**extra: str) -> dict[str, str]:
    """The subprocess environment: no stray credentials from the machine, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "HF_", "GOOGLE_", "STORAGE_EMULATOR", "GCSFS_"))}
    env["HF_HUB_DISABLE_TELEMETRY"] = "1"
    env["HF_HUB_OFFLINE"] = "0"
    return {**env, **extra}


def hub_env(hub: FakeHub, tmp: Path, **extra: str) -> dict[str, str]:
    """A subprocess environment that writes to ``hub`` with a token it accepts (``clean_env``
    plus ``extra``)."""
    # No Xet: the fake Hub stores LFS files through the Git LFS batch API only (huggingface_hub
    # would otherwise send every LFS file through Xet, which only the real-Hub test covers).
    return clean_env(HF_ENDPOINT=hub.url, HF_TOKEN=HUB_TOKEN, HF_HOME=str(tmp / "hf-home"), HF_HUB_DISABLE_XET="1", **extra)


def rows_of(read: Any, names: list[str]) -> list[dict[str, Any]]:
    """The rows of the Parquet files among ``names``, each read with ``read(name) -> bytes``."""
    rows: list[dict[str, Any]] = []
    for name in names:
        if name.endswith(".parquet"):
            rows += pq.read_table(io.BytesIO(read(name))).to_pylist()
    return rows


def hub_rows(hub: FakeHub, repo: str, folder: str = "extract/") -> list[dict[str, Any]]:
    """The rows of the Parquet files under ``folder`` in the fake Hub's ``repo``."""
    files = hub.files(repo)
    return rows_of(files.__getitem__, sorted(p for p in files if p.startswith(folder)))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_http(url: str, timeout: float, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before answering {url}")
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"no answer from {url} within {timeout}s")


#: Run by :class:`_Process` with ``dies_with_us``: ask Linux to SIGKILL this process when the
#: thread that started it ends (``prctl(PR_SET_PDEATHSIG)``, kept across ``exec``), then become
#: the server. Elsewhere it only becomes the server.
_DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys\n"
    "if sys.platform == 'linux':\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)\n"
    "    if os.getppid() != int(sys.argv[1]): os._exit(1)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


class _Process:
    """A server subprocess in its own process group, stopped by that group's id only.

    ``dies_with_us``: the server is killed when this process ends, however it ends (a server
    kept for a whole session must not outlive a worker killed by a timeout)."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None, dies_with_us: bool = False) -> None:
        if dies_with_us:
            args = [sys.executable, "-S", "-c", _DIE_WITH_PARENT, str(os.getpid()), *args]
        self.proc = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            env={**os.environ, **(env or {})},
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


class MotoS3(_Process):
    """``moto_server`` (S3 and friends), its conditional puts atomic as S3's are
    (tests/fakes/moto_server.py). ``enforce_auth``: check credentials from the first request.
    A test that needs no such setting takes this process's server from :func:`shared_moto`."""

    def __init__(self, enforce_auth: bool = False, dies_with_us: bool = False) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {"INITIAL_NO_AUTH_ACTION_COUNT": "0"} if enforce_auth else {}
        super().__init__([sys.executable, "-m", "tests.fakes.moto_server", "-H", "127.0.0.1", "-p", str(self.port)],
                         {**env, "PYTHONPATH": str(REPO)}, dies_with_us)
        _wait_http(f"{self.url}/moto-api/", 30, self.proc)

    def reset(self) -> None:
        """Forget every bucket, object, role and secret (moto's ``POST /moto-api/reset``)."""
        urllib.request.urlopen(urllib.request.Request(f"{self.url}/moto-api/reset", data=b"", method="POST"),
                               timeout=30).read()

    @property
    def env(self) -> dict[str, str]:
        """What a client process needs: test credentials and the endpoint (standard AWS variables)."""
        return {**AWS_TEST_ENV, "AWS_ENDPOINT_URL_S3": self.url}

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3", endpoint_url=self.url, aws_access_key_id=AWS_TEST_ENV["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=AWS_TEST_ENV["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1",
        )

    def upload_folder(self, folder: Path, bucket: str, prefix: str) -> None:
        s3 = self.client()
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                s3.put_object(Bucket=bucket, Key=f"{prefix}/{path.relative_to(folder).as_posix()}", Body=path.read_bytes())

    def list(self, bucket: str, prefix: str) -> list[str]:
        s3 = self.client()
        keys: list[str] = []
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            keys += [item["Key"] for item in page.get("Contents", [])]
        return sorted(keys)

    def read(self, bucket: str, key: str) -> bytes:
        return self.client().get_object(Bucket=bucket, Key=key)["Body"].read()


_SHARED_MOTO: MotoS3 | None = None


def shared_moto() -> MotoS3:
    """This process's moto server, started by the first test that asks and emptied for each
    later one (:meth:`MotoS3.reset`): a pytest-xdist worker runs one test at a time, so tests
    that create the same buckets do not meet, and each pays a reset (milliseconds) instead of a
    server's start (about 1.6 CPU-seconds). It stops when this process ends. Never :meth:`stop`
    it: the next test would find it gone and start another."""
    global _SHARED_MOTO
    if _SHARED_MOTO is not None and _SHARED_MOTO.proc.poll() is None:
        _SHARED_MOTO.reset()
        return _SHARED_MOTO
    _SHARED_MOTO = MotoS3(dies_with_us=True)
    atexit.register(_SHARED_MOTO.stop)
    return _SHARED_MOTO


class GcsEmulator(_Process):
    """``gcp-storage-emulator`` in memory, driven through the GCS JSON API. A test that only
    needs buckets of its own takes this process's emulator from :func:`shared_gcs`.

    It honours ``ifGenerationMatch=0`` as Cloud Storage does (tests/fakes/gcs_emulator.py: the
    emulator alone ignores it, and llm-ocr's atomic create on GCS is that precondition);
    ``strict=False`` runs the emulator as it ships."""

    def __init__(self, dies_with_us: bool = False, strict: bool = True) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = ([sys.executable, "-m", "tests.fakes.gcs_emulator"] if strict
                   else [str(VENV_BIN / "gcp-storage-emulator")])
        super().__init__(
            [*command, "start", "--host", "127.0.0.1", "--port", str(self.port), "--in-memory"],
            env={"PYTHONPATH": str(REPO)},
            dies_with_us=dies_with_us,
        )
        _wait_http(f"{self.url}/storage/v1/b", 30, self.proc)

    @property
    def env(self) -> dict[str, str]:
        """What a client process needs: the standard emulator variable (gcsfs and google-cloud-storage)."""
        return {"STORAGE_EMULATOR_HOST": self.url, "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}

    def use_in_this_process(self, monkeypatch: Any) -> dict[str, Any]:
        """Point this process's gcsfs at the emulator for one test; returns the storage options.

        gcsfs picks its filesystem class when it is *imported*: if an earlier test in this
        pytest worker imported it without ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false``, the
        class fsspec hands out is the zonal/HNS one, whose calls never get an answer from the
        emulator (seen: a test that passed alone hung in a full run). So the plain class is put
        in fsspec's registry for the test, and no cached instance (another emulator's) is reused.
        """
        import gcsfs.core
        from fsspec.registry import _registry  # fsspec's own table (its ``registry`` is a read-only view)

        for name, value in self.env.items():
            monkeypatch.setenv(name, value)
        for protocol in ("gs", "gcs"):
            monkeypatch.setitem(_registry, protocol, gcsfs.core.GCSFileSystem)
        return {"token": "anon", "skip_instance_cache": True}

    def _call(self, method: str, path: str, data: bytes | None = None, content_type: str = "application/json") -> bytes:
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method, headers={"Content-Type": content_type})
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.read()

    def create_bucket(self, name: str) -> None:
        self._call("POST", "/storage/v1/b?project=test", json.dumps({"name": name}).encode())

    def upload(self, bucket: str, name: str, data: bytes) -> None:
        query = urllib.parse.urlencode({"uploadType": "media", "name": name})
        self._call("POST", f"/upload/storage/v1/b/{bucket}/o?{query}", data, "application/octet-stream")

    def upload_folder(self, folder: Path, bucket: str, prefix: str) -> None:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                self.upload(bucket, f"{prefix}/{path.relative_to(folder).as_posix()}", path.read_bytes())

    def list(self, bucket: str, prefix: str) -> list[str]:
        query = urllib.parse.urlencode({"prefix": prefix})
        items = json.loads(self._call("GET", f"/storage/v1/b/{bucket}/o?{query}")).get("items", [])
        return sorted(item["name"] for item in items)

    def read(self, bucket: str, name: str) -> bytes:
        return self._call("GET", f"/storage/v1/b/{bucket}/o/{urllib.parse.quote(name, safe='')}?alt=media")


_SHARED_GCS: GcsEmulator | None = None


def shared_gcs() -> GcsEmulator:
    """This process's GCS emulator, started by the first test that asks (as :func:`shared_moto`;
    the emulator has no reset, so each test names buckets of its own). Never :meth:`stop` it."""
    global _SHARED_GCS
    if _SHARED_GCS is None or _SHARED_GCS.proc.poll() is not None:
        _SHARED_GCS = GcsEmulator(dies_with_us=True)
        atexit.register(_SHARED_GCS.stop)
    return _SHARED_GCS


class CuttableProxy:
    """A TCP proxy on a free port in front of ``target_port``; ``cut()`` makes it refuse and
    drop every connection (a store that went away), ``restore()`` brings it back.
    :attr:`received` counts the bytes the clients got (responses, headers included), and
    :attr:`unreached` the connections closed because the target refused them. ``swallow(n)``: the next ``n`` connections' requests reach the target, and their answers are
    read and thrown away, the client's connection closed without a byte (a server that did the
    work and died before answering)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.received = 0
        self.unreached = 0
        self.cut_event = threading.Event()
        self.server = socket.socket()
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(64)
        self.port = self.server.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._swallow = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def swallow(self, n: int = 1) -> None:
        with self._lock:
            self._swallow += n

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            if self.cut_event.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                with self._lock:
                    self.unreached += 1
                continue
            with self._lock:
                self._conns += [client, upstream]
                swallowed = self._swallow > 0
                self._swallow -= swallowed
            if swallowed:
                threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
                threading.Thread(target=self._drain, args=(upstream, client), daemon=True).start()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b, b is client), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, to_client: bool = False) -> None:
        try:
            while not self.cut_event.is_set() and (chunk := source.recv(65536)):
                sink.sendall(chunk)
                if to_client:
                    with self._lock:
                        self.received += len(chunk)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.close()
                except OSError:
                    pass

    @staticmethod
    def _drain(upstream: socket.socket, client: socket.socket) -> None:
        """Read the target's whole answer, then close the client's connection unanswered."""
        try:
            while upstream.recv(65536):
                pass
        except OSError:
            pass
        for sock in (upstream, client):
            try:
                # shutdown first: the pipe from the client is blocked in recv on this socket,
                # and a close alone would neither wake it nor end the connection.
                sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            except OSError:
                pass

    def cut(self) -> None:
        self.cut_event.set()
        with self._lock:
            for sock in self._conns:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self._conns.clear()

    def restore(self) -> None:
        self.cut_event.clear()

    def close(self) -> None:
        self.cut()
        self.server.close()
