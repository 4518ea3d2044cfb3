"""A local stand-in for the Hugging Face Hub's HTTP API: just the routes llm-ocr's paths call.

Found by reading huggingface_hub 2.x (``hf_api.py``, ``_commit_api.py``, ``hf_file_system.py``,
``utils/_http.py``): what ``HfApi.create_commit`` / ``auth_check`` / ``create_repo`` and
``HfFileSystem`` (listing, info, reading) send, and the headers ``hf_raise_for_status`` reads
to pick its error class (``X-Error-Code``, ``X-Error-Message``).

Routes (``{type}s`` is ``datasets``, ``models`` or ``spaces``; revisions are branch names):

- ``GET  /api/whoami-v2``
- ``POST /api/repos/create``
- ``GET  /api/{type}s/{ns}/{name}`` and ``.../revision/{rev}`` (repo info)
- ``GET  /api/{type}s/{ns}/{name}/auth-check[/write]``
- ``GET  /api/{type}s/{ns}/{name}/refs``
- ``GET  /api/{type}s/{ns}/{name}/tree/{rev}[/{path}]`` (``recursive``; paginated by ``Link``)
- ``POST /api/{type}s/{ns}/{name}/paths-info/{rev}``
- ``POST /api/{type}s/{ns}/{name}/preupload/{rev}`` (always ``regular``: no LFS/Xet uploads)
- ``POST /api/{type}s/{ns}/{name}/commit/{rev}`` (NDJSON: ``file``, ``deletedFile``)
- ``POST /api/validate-yaml``
- ``GET|HEAD /{types/}{ns}/{name}/resolve/{rev}/{path}`` (with ``Range``)

Not modelled: LFS and Xet uploads (the ``preupload`` answer never asks for them), pull
requests, concurrency conflicts other than injected ones, buckets.

Tokens: ``Authorization: Bearer T``; ``tokens`` maps each known token to ``"write"`` or
``"read"``; an unknown token gets 401 everywhere; no token may read public repos only.
Every commit is recorded (:attr:`FakeHub.commits`) so tests can count them, and failures can be
injected per route (:meth:`FakeHub.fail`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TYPES = {"datasets": "dataset", "models": "model", "spaces": "space"}
PAGE_SIZE = 50  # tree entries per page, small so pagination is exercised


@dataclass
class Repo:
    """One repository: its files at the head of ``main`` and its commit history."""

    repo_type: str
    repo_id: str
    private: bool = True
    files: dict[str, bytes] = field(default_factory=dict)
    sha: str = "0" * 40


@dataclass
class Commit:
    """A recorded commit."""

    repo_id: str
    summary: str
    added: list[str]
    deleted: list[str]
    at: float


class FakeHub:
    """The fake Hub server, in a thread of the test process, on a free loopback port."""

    def __init__(self, tokens: dict[str, str] | None = None, user: str = "tester") -> None:
        self.tokens = dict(tokens or {"hf_test_writer_token": "write", "hf_test_reader_token": "read"})
        self.user = user
        self.repos: dict[tuple[str, str], Repo] = {}
        self.commits: list[Commit] = []
        self.requests: list[tuple[str, str]] = []
        #: Body bytes of file downloads (``resolve``), by repo file path: what readers pulled.
        self.served: dict[str, int] = {}
        self._failures: list[tuple[str, str, int, dict[str, str]]] = []  # (method, path regex, status, headers)
        self.lock = threading.RLock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeHub:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- test helpers ---------------------------------------------------------------------------

    def create(self, repo_id: str, repo_type: str = "dataset", files: dict[str, bytes] | None = None, private: bool = False) -> Repo:
        """Create a repo directly (no request)."""
        with self.lock:
            repo = Repo(repo_type, repo_id, private=private, files=dict(files or {}))
            self.repos[(repo_type, repo_id)] = repo
            return repo

    def files(self, repo_id: str, repo_type: str = "dataset") -> dict[str, bytes]:
        """The files of a repo now."""
        with self.lock:
            return dict(self.repos[(repo_type, repo_id)].files)

    def commits_to(self, repo_id: str) -> list[Commit]:
        with self.lock:
            return [c for c in self.commits if c.repo_id == repo_id]

    def fail(self, method: str, path_pattern: str, status: int, count: int = 1, headers: dict[str, str] | None = None) -> None:
        """Answer the next ``count`` requests matching ``method`` and ``path_pattern`` with ``status``."""
        with self.lock:
            self._failures += [(method, path_pattern, status, dict(headers or {}))] * count

    def extra_route(self, handler: Any, path: str, query: dict[str, list[str]]) -> bool:
        """Routes a subclass adds (e.g. the Jobs API): True when ``handler`` answered."""
        return False

    def _take_failure(self, method: str, path: str) -> tuple[int, dict[str, str]] | None:
        with self.lock:
            for i, (m, pattern, status, headers) in enumerate(self._failures):
                if m == method and re.search(pattern, path):
                    del self._failures[i]
                    return status, headers
        return None


class _Error(Exception):
    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


def _oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # keep test output quiet
            pass

        # -- plumbing ---------------------------------------------------------------------------

        def _send(self, status: int, body: Any = None, headers: dict[str, str] | None = None, raw: bytes | None = None) -> None:
            data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
            self.send_response(status)
            self.send_header("Content-Type", "application/json" if raw is None else "application/octet-stream")
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _body(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _role(self) -> str | None:
            auth = self.headers.get("Authorization") or ""
            token = auth[7:].strip() if auth.lower().startswith("bearer ") else None
            if token is None:
                return None
            if token not in hub.tokens:
                raise _Error(401, "Invalid credentials in Authorization header")
            return hub.tokens[token]

        def _repo(self, type_plural: str, repo_id: str, *, write: bool = False) -> Repo:
            role = self._role()
            repo = hub.repos.get((TYPES[type_plural], repo_id))
            if repo is None or (repo.private and role is None):
                raise _Error(404 if role else 401, "Repository not found", "RepoNotFound")
            if write and role != "write":
                raise _Error(403 if role else 401, "You don't have the rights to write to this repo")
            return repo

        def _dispatch(self) -> None:
            parsed = urllib.parse.urlsplit(self.path)
            path = urllib.parse.unquote(parsed.path)
            query = urllib.parse.parse_qs(parsed.query)
            hub.requests.append((self.command, path))
            self.body = self._body()  # read it first: an error answer must not leave it unread
            injected = hub._take_failure(self.command, path)
            if injected is not None:
                status, headers = injected
                self._send(status, {"error": f"injected {status}"}, headers)
                return
            try:
                self._route(path, query)
            except _Error as exc:
                headers = {"X-Error-Message": exc.message}
                if exc.code:
                    headers["X-Error-Code"] = exc.code
                self._send(exc.status, {"error": exc.message}, headers)

        do_GET = do_POST = do_HEAD = _dispatch  # noqa: N815

        # -- routes -----------------------------------------------------------------------------

        def _route(self, path: str, query: dict[str, list[str]]) -> None:
            if hub.extra_route(self, path, query):
                return
            if path == "/api/whoami-v2":
                role = self._role()
                if role is None:
                    raise _Error(401, "Invalid credentials in Authorization header")
                self._send(200, {"type": "user", "name": hub.user, "auth": {"accessToken": {"role": role}}})
                return
            if path == "/api/validate-yaml":
                self._send(200, {})
                return
            if path == "/api/repos/create" and self.command == "POST":
                self._create(json.loads(self.body or b"{}"))
                return
            m = re.match(r"^/api/(datasets|models|spaces)/([^/]+/[^/@]+)(?:/(.*))?$", path)
            if m:
                self._api(m.group(1), m.group(2), m.group(3) or "", query)
                return
            m = re.match(r"^/(?:(datasets|spaces)/)?([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
            if m:
                self._resolve(m.group(1) or "models", m.group(2), m.group(4))
                return
            raise _Error(404, f"no route {self.command} {path}")

        def _create(self, payload: dict[str, Any]) -> None:
            role = self._role()
            if role != "write":
                raise _Error(403 if role else 401, "You don't have the rights to create a repo")
            repo_id = f"{payload.get('organization') or hub.user}/{payload['name']}"
            repo_type = payload.get("type") or "model"
            url = f"{hub.url}/{'datasets/' if repo_type == 'dataset' else ''}{repo_id}"
            with hub.lock:
                if (repo_type, repo_id) in hub.repos:
                    # The Hub's 409 carries the repo's URL: create_repo(exist_ok=True) returns it.
                    message = "You already created this repo"
                    self._send(409, {"error": message, "url": url}, {"X-Error-Message": message})
                    return
                private = payload.get("private", payload.get("visibility") == "private")
                hub.repos[(repo_type, repo_id)] = Repo(repo_type, repo_id, private=bool(private))
            self._send(200, {"url": url, "name": repo_id})

        def _api(self, type_plural: str, repo_id: str, rest: str, query: dict[str, list[str]]) -> None:
            # Any revision is the head of main here (branches other than main are not modelled;
            # datasets asks for the commit sha it was told).
            if (rest == "" or rest.startswith("revision/")) and self.command == "GET":
                repo = self._repo(type_plural, repo_id)
                self._send(200, {"id": repo_id, "sha": repo.sha, "private": repo.private,
                                 "siblings": [{"rfilename": p} for p in sorted(repo.files)]})
                return
            if rest in ("auth-check", "auth-check/write"):
                self._repo(type_plural, repo_id, write=rest.endswith("write"))
                self._send(200, {})
                return
            if rest == "refs":
                repo = self._repo(type_plural, repo_id)
                self._send(200, {"branches": [{"name": "main", "ref": "refs/heads/main", "targetCommit": repo.sha}],
                                 "converts": [], "tags": []})
                return
            m = re.match(r"^tree/([^/]+)/?(.*)$", rest)
            if m:
                self._tree(type_plural, repo_id, m.group(2).strip("/"), query)
                return
            m = re.match(r"^paths-info/([^/]+)$", rest)
            if m:
                repo = self._repo(type_plural, repo_id)
                form = urllib.parse.parse_qs(self.body.decode())
                self._send(200, [e for p in form.get("paths", []) if (e := _entry(repo, p.strip("/"))) is not None])
                return
            m = re.match(r"^preupload/([^/]+)$", rest)
            if m:
                repo = self._repo(type_plural, repo_id, write=True)
                files = json.loads(self.body)["files"]
                self._send(200, {"files": [
                    {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False,
                     "oid": _oid(repo.files[f["path"]]) if f["path"] in repo.files else None}
                    for f in files
                ]})
                return
            m = re.match(r"^commit/([^/]+)$", rest)
            if m and self.command == "POST":
                self._commit(type_plural, repo_id)
                return
            raise _Error(404, f"no route {rest}")

        def _tree(self, type_plural: str, repo_id: str, folder: str, query: dict[str, list[str]]) -> None:
            repo = self._repo(type_plural, repo_id)
            recursive = (query.get("recursive") or ["false"])[0].lower() in ("1", "true")
            prefix = f"{folder}/" if folder else ""
            with hub.lock:
                paths = sorted(p for p in repo.files if p.startswith(prefix))
                if folder and not paths:
                    raise _Error(404, "Entry not found", "EntryNotFound")
                entries: dict[str, dict[str, Any]] = {}
                for p in paths:
                    rel = p[len(prefix):].split("/")
                    for depth in range(1, len(rel)):
                        sub = prefix + "/".join(rel[:depth])
                        if recursive or depth == 1:
                            entries.setdefault(sub, {"type": "directory", "oid": "1" * 40, "path": sub})
                    if recursive or len(rel) == 1:
                        entries[p] = _entry(repo, p)  # type: ignore[assignment]
            ordered = [entries[k] for k in sorted(entries)]
            start = int((query.get("cursor") or ["0"])[0])
            page = ordered[start : start + PAGE_SIZE]
            headers = {}
            if start + PAGE_SIZE < len(ordered):
                params = {k: v[0] for k, v in query.items()}
                params["cursor"] = str(start + PAGE_SIZE)
                base = self.path.split("?", 1)[0]
                headers["Link"] = f'<{hub.url}{base}?{urllib.parse.urlencode(params)}>; rel="next"'
            self._send(200, page, headers)

        def _commit(self, type_plural: str, repo_id: str) -> None:
            repo = self._repo(type_plural, repo_id, write=True)
            lines = [json.loads(line) for line in self.body.splitlines() if line.strip()]
            header = next(item["value"] for item in lines if item["key"] == "header")
            added, deleted = [], []
            with hub.lock:
                files = dict(repo.files)
                for item in lines:
                    value = item["value"]
                    if item["key"] == "file":
                        files[value["path"]] = base64.b64decode(value["content"])
                        added.append(value["path"])
                    elif item["key"] == "deletedFile":
                        if value["path"] not in files:
                            raise _Error(404, "A file with this name doesn't exist", "EntryNotFound")
                        del files[value["path"]]
                        deleted.append(value["path"])
                    elif item["key"] == "lfsFile":
                        raise _Error(400, "the fake Hub does not model LFS uploads")
                repo.files = files
                repo.sha = hashlib.sha1(f"{repo.sha}{time.time()}{added}{deleted}".encode()).hexdigest()
                hub.commits.append(Commit(repo_id, header["summary"], added, deleted, time.time()))
            prefix = "datasets/" if repo.repo_type == "dataset" else ""
            self._send(200, {"success": True, "commitOid": repo.sha,
                             "commitUrl": f"{hub.url}/{prefix}{repo_id}/commit/{repo.sha}"})

        def _resolve(self, type_plural: str, repo_id: str, file_path: str) -> None:
            repo = self._repo(type_plural, repo_id)
            with hub.lock:
                data = repo.files.get(file_path)
                sha = repo.sha
            if data is None:
                raise _Error(404, "Entry not found", "EntryNotFound")
            headers = {"ETag": f'"{_oid(data)}"', "X-Repo-Commit": sha, "Accept-Ranges": "bytes"}
            byte_range = self.headers.get("Range")
            if byte_range and (m := re.match(r"bytes=(\d+)-(\d*)", byte_range)):
                start = int(m.group(1))
                end = int(m.group(2)) if m.group(2) else len(data) - 1
                chunk = data[start : end + 1]
                headers["Content-Range"] = f"bytes {start}-{start + len(chunk) - 1}/{len(data)}"
                self._count(file_path, chunk)
                self._send(206, headers=headers, raw=chunk)
                return
            self._count(file_path, data)
            self._send(200, headers=headers, raw=data)

        def _count(self, file_path: str, body: bytes) -> None:
            if self.command != "HEAD":
                with hub.lock:
                    hub.served[file_path] = hub.served.get(file_path, 0) + len(body)

    return Handler


def _entry(repo: Repo, path: str) -> dict[str, Any] | None:
    if path in repo.files:
        return {"type": "file", "oid": _oid(repo.files[path]), "size": len(repo.files[path]), "path": path}
    if any(p.startswith(path + "/") for p in repo.files):
        return {"type": "directory", "oid": "1" * 40, "path": path}
    return None


def main() -> None:  # pragma: no cover - manual use: python -m tests.fakes.fake_hub
    with FakeHub() as hub:
        print(hub.url, flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
