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
- ``POST /api/{type}s/{ns}/{name}/preupload/{rev}``: ``lfs`` or ``regular`` per file, as the
  real Hub decides (see :func:`upload_mode`)
- ``POST /{types/}{ns}/{name}.git/info/lfs/objects/batch`` and ``.../verify`` (Git LFS batch
  API, ``basic`` transfer, as ``huggingface_hub.lfs`` calls it)
- ``POST /api/{type}s/{ns}/{name}/commit/{rev}`` (NDJSON: ``file``, ``lfsFile``, ``deletedFile``)
- ``POST /api/validate-yaml``
- ``GET|HEAD /{types/}{ns}/{name}/resolve/{rev}/{path}`` (with ``Range``); for a file stored in
  LFS a 302 to the "CDN" with ``X-Linked-Etag``/``X-Linked-Size``, as the real Hub answers

A second server on another port stands for the storage behind LFS (S3 and the CDN): the batch
answer's upload URLs and the resolve redirects point there, signed, without the Hub's token.

LFS, as on the real Hub: ``.parquet`` and the other types of a new repo's default
``.gitattributes``, files over 10 MB and binary files are stored in LFS; the commit refers to
them by sha256 (``lfsFile``), and a ``regular`` upload of such a file is refused. Xet is not
modelled: clients must set ``HF_HUB_DISABLE_XET=1`` (huggingface_hub otherwise uploads every
LFS file through Xet when ``hf_xet`` is installed); the Xet token route answers with that advice.

Commits with a ``parentCommit`` that is no longer the head are refused with 412, as the Hub
does. Not modelled: Xet, multipart LFS uploads (the batch answer never asks for them), pull
requests, buckets.

Tokens: ``Authorization: Bearer T``; ``tokens`` maps each known token to ``"write"`` or
``"read"``; an unknown token gets 401 everywhere; no token may read public repos only.
Every commit is recorded (:attr:`FakeHub.commits`) so tests can count them, and failures can be
injected per route (:meth:`FakeHub.fail`).
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import json
import re
import secrets
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.fakes.http_server import FakeHTTPServer

TYPES = {"datasets": "dataset", "models": "model", "spaces": "space"}
PAGE_SIZE = 50  # tree entries per page, small so pagination is exercised

#: Patterns of the ``.gitattributes`` the Hub writes into a new dataset repo (``filter=lfs``),
#: the ones llm-ocr's outputs and inputs can match.
LFS_PATTERNS = (
    "*.parquet", "*.arrow", "*.bin", "*.gz", "*.npy", "*.npz", "*.pickle", "*.pkl", "*.pt", "*.safetensors",
    "*.tar", "*.tar.*", "*.zip", "*.zst", "*.png", "*.jpg", "*.jpeg", "*.webp", "*.gif", "*.bmp", "*.tiff",
)  # fmt: skip
#: Larger files are stored in LFS whatever their type.
LFS_SIZE = 10 * 1024 * 1024


def upload_mode(path: str, data: bytes) -> str:
    """``"lfs"`` or ``"regular"``: how the real Hub stores ``data`` at ``path`` (empty files are
    always regular: the client sends them so, LFS storage refuses them)."""
    if not data:
        return "regular"
    name = path.rsplit("/", 1)[-1]
    if any(fnmatch.fnmatch(name, pattern) for pattern in LFS_PATTERNS) or len(data) > LFS_SIZE:
        return "lfs"
    return "lfs" if _looks_binary(data[:512]) else "regular"


def _looks_binary(sample: bytes) -> bool:
    if b"\0" in sample:
        return True
    for cut in range(4):  # the 512-byte sample may end inside a multi-byte character
        try:
            sample[: len(sample) - cut].decode("utf-8")
            return False
        except UnicodeDecodeError:
            continue
    return True


@dataclass
class Repo:
    """One repository: its files at the head of ``main`` and its commit history."""

    repo_type: str
    repo_id: str
    private: bool = True
    files: dict[str, bytes] = field(default_factory=dict)
    sha: str = "0" * 40
    lfs: dict[str, str] = field(default_factory=dict)  # path -> sha256, for files stored in LFS


@dataclass
class Commit:
    """A recorded commit."""

    repo_id: str
    summary: str
    added: list[str]
    deleted: list[str]
    at: float
    lfs: list[str] = field(default_factory=list)  # the added paths that came as ``lfsFile``


class FakeHub(FakeHTTPServer):
    """The fake Hub server, in threads of the test process, on two free loopback ports (the Hub,
    and its LFS storage)."""

    ports = 2

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
        #: LFS storage: sha256 -> content, and the objects uploaded through the batch API, in order.
        self.lfs_objects: dict[str, bytes] = {}
        self.lfs_uploads: list[str] = []
        self._signing_key = secrets.token_hex(16)  # signs the storage URLs, as S3/CDN URLs are
        super().__init__()

    # -- lifecycle (tests/fakes/http_server.py) -------------------------------------------------

    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        return _handler(self)

    @property
    def _storage(self) -> ThreadingHTTPServer:
        return self.servers[1]

    @property
    def storage_url(self) -> str:
        """The LFS storage's origin (a different port: another host for the client)."""
        return self.url_of(1)

    # -- test helpers ---------------------------------------------------------------------------

    def create(self, repo_id: str, repo_type: str = "dataset", files: dict[str, bytes] | None = None, private: bool = False) -> Repo:
        """Create a repo directly (no request); files go to LFS where the real Hub would put them."""
        with self.lock:
            repo = Repo(repo_type, repo_id, private=private, files=dict(files or {}))
            for path, data in repo.files.items():
                if upload_mode(path, data) == "lfs":
                    oid = hashlib.sha256(data).hexdigest()
                    self.lfs_objects[oid] = data
                    repo.lfs[path] = oid
            self.repos[(repo_type, repo_id)] = repo
            return repo

    def path_of(self, oid: str) -> str | None:
        """The path of a file stored as LFS object ``oid`` in any repo (None if none is)."""
        with self.lock:
            for repo in self.repos.values():
                for path, stored in repo.lfs.items():
                    if stored == oid:
                        return path
        return None

    def lfs_paths(self, repo_id: str, repo_type: str = "dataset") -> dict[str, str]:
        """The files of a repo stored in LFS now: path -> sha256 of the content."""
        with self.lock:
            return dict(self.repos[(repo_type, repo_id)].lfs)

    def _sign(self, oid: str) -> str:
        return hashlib.sha256(f"{self._signing_key}{oid}".encode()).hexdigest()[:32]

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
            if "Content-Type" not in (headers or {}):
                self.send_header("Content-Type", "application/json" if raw is None else "application/octet-stream")
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _body(self) -> bytes:
            if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                return self._chunked_body()  # a streamed upload (an LFS PUT of a file object)
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _chunked_body(self) -> bytes:
            chunks = []
            while (size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)) > 0:
                chunks.append(self.rfile.read(size))
                self.rfile.readline()  # the CRLF after each chunk
            while self.rfile.readline().strip():  # trailers, up to the empty line
                pass
            return b"".join(chunks)

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

        do_GET = do_POST = do_HEAD = do_PUT = _dispatch

        # -- routes -----------------------------------------------------------------------------

        def _route(self, path: str, query: dict[str, list[str]]) -> None:
            if self.server is hub._storage:
                self._storage_route(path, query)
                return
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
            m = re.match(r"^/(?:(datasets|spaces)/)?([^/]+/[^/]+)\.git/info/lfs/objects/(batch|verify)$", path)
            if m and self.command == "POST":
                repo = self._repo(m.group(1) or "models", m.group(2), write=True)
                (self._lfs_batch if m.group(3) == "batch" else self._lfs_verify)(repo)
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
                with hub.lock:
                    # Judged from what the client sends: the path, the size and a 512-byte sample.
                    self._send(200, {"files": [
                        {"path": f["path"], "shouldIgnore": False, "oid": _remote_oid(repo, f["path"]),
                         "uploadMode": _mode_from_sample(f["path"], base64.b64decode(f.get("sample") or ""), int(f.get("size") or 0))}
                        for f in files
                    ]})  # fmt: skip
                return
            if re.match(r"^xet-(read|write)-token(/.*)?$", rest):
                raise _Error(400, "the fake Hub has no Xet storage: set HF_HUB_DISABLE_XET=1 so that "
                                  "huggingface_hub uploads through the LFS batch API")
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
            added, deleted, via_lfs = [], [], []
            with hub.lock:
                parent = header.get("parentCommit")
                if parent is not None and parent != repo.sha:
                    # As the Hub answers a commit whose parent is no longer the head
                    # (huggingface_hub's test_create_commit_conflict).
                    raise _Error(412, "A commit has happened since. Please refresh and try again.")
                files, lfs = dict(repo.files), dict(repo.lfs)
                for item in lines:
                    value = item["value"]
                    if item["key"] == "file":
                        data = base64.b64decode(value["content"])
                        if upload_mode(value["path"], data) == "lfs":
                            # The real Hub refuses binary files outside LFS/Xet, and .gitattributes
                            # sends these types there: a client must have asked preupload first.
                            raise _Error(400, f"Your push was rejected: {value['path']} must be stored with LFS/Xet")
                        files[value["path"]] = data
                        lfs.pop(value["path"], None)
                        added.append(value["path"])
                    elif item["key"] == "lfsFile":
                        oid = value["oid"]
                        stored = hub.lfs_objects.get(oid)
                        if value.get("algo", "sha256") != "sha256" or stored is None or len(stored) != value.get("size", len(stored)):
                            raise _Error(422, f"LFS object {oid} of {value['path']} was never uploaded")
                        files[value["path"]] = stored
                        lfs[value["path"]] = oid
                        added.append(value["path"])
                        via_lfs.append(value["path"])
                    elif item["key"] == "deletedFile":
                        if value["path"] not in files:
                            raise _Error(404, "A file with this name doesn't exist", "EntryNotFound")
                        del files[value["path"]]
                        lfs.pop(value["path"], None)
                        deleted.append(value["path"])
                    elif item["key"] != "header":
                        raise _Error(400, f"the fake Hub does not model commit operation {item['key']!r}")
                repo.files, repo.lfs = files, lfs
                repo.sha = hashlib.sha1(f"{repo.sha}{time.time()}{added}{deleted}".encode()).hexdigest()
                hub.commits.append(Commit(repo_id, header["summary"], added, deleted, time.time(), via_lfs))
            prefix = "datasets/" if repo.repo_type == "dataset" else ""
            self._send(200, {"success": True, "commitOid": repo.sha,
                             "commitUrl": f"{hub.url}/{prefix}{repo_id}/commit/{repo.sha}"})

        def _resolve(self, type_plural: str, repo_id: str, file_path: str) -> None:
            repo = self._repo(type_plural, repo_id)
            with hub.lock:
                data = repo.files.get(file_path)
                sha = repo.sha
                lfs_oid = repo.lfs.get(file_path)
            if data is None:
                raise _Error(404, "Entry not found", "EntryNotFound")
            if lfs_oid is not None:
                # As the real Hub: a redirect to signed storage, the file's own etag and size on it
                # (huggingface_hub reads them there and does not follow it to another host).
                self._send(302, headers={
                    "Location": f"{hub.storage_url}/objects/{lfs_oid}?signature={hub._sign(lfs_oid)}",
                    "X-Linked-Etag": f'"{lfs_oid}"', "X-Linked-Size": str(len(data)), "X-Repo-Commit": sha,
                    "ETag": f'"{_oid(_pointer(lfs_oid, len(data)))}"',
                })  # fmt: skip
                return
            self._send_content(data, {"ETag": f'"{_oid(data)}"', "X-Repo-Commit": sha}, count_as=file_path)

        def _send_content(self, data: bytes, headers: dict[str, str], count_as: str | None = None) -> None:
            """``data`` whole (200) or the slice a ``Range`` header asks for (206); the bytes sent
            are counted in ``hub.served`` under ``count_as`` (a file's path in its repo)."""
            headers = {**headers, "Accept-Ranges": "bytes"}
            byte_range = self.headers.get("Range")
            if byte_range and (m := re.match(r"bytes=(\d+)-(\d*)", byte_range)):
                start = int(m.group(1))
                end = int(m.group(2)) if m.group(2) else len(data) - 1
                chunk = data[start : end + 1]
                headers["Content-Range"] = f"bytes {start}-{start + len(chunk) - 1}/{len(data)}"
                self._count(count_as, chunk)
                self._send(206, headers=headers, raw=chunk)
                return
            self._count(count_as, data)
            self._send(200, headers=headers, raw=data)

        def _count(self, file_path: str | None, body: bytes) -> None:
            if file_path is not None and self.command != "HEAD":
                with hub.lock:
                    hub.served[file_path] = hub.served.get(file_path, 0) + len(body)

        # -- Git LFS (batch API on the Hub, objects on the storage server) ------------------------

        def _lfs_batch(self, repo: Repo) -> None:
            request = json.loads(self.body)
            if request.get("operation") != "upload" or "basic" not in request.get("transfers", ["basic"]):
                raise _Error(400, "the fake Hub's LFS batch API only takes basic uploads")
            prefix = "" if repo.repo_type == "model" else f"{repo.repo_type}s/"
            objects = []
            for obj in request["objects"]:
                oid, size = obj["oid"], obj["size"]
                entry: dict[str, Any] = {"oid": oid, "size": size}
                with hub.lock:
                    stored = hub.lfs_objects.get(oid)
                if not re.fullmatch(r"[0-9a-f]{64}", oid):
                    entry["error"] = {"code": 422, "message": f"invalid sha256 oid {oid!r}"}
                elif stored is None or len(stored) != size:  # already stored: no actions, nothing to send
                    entry["authenticated"] = True
                    entry["actions"] = {
                        "upload": {"href": f"{hub.storage_url}/upload/{oid}?size={size}&signature={hub._sign(oid)}",
                                   "expires_in": 900},
                        "verify": {"href": f"{hub.url}/{prefix}{repo.repo_id}.git/info/lfs/objects/verify"},
                    }  # fmt: skip
                objects.append(entry)
            self._send(200, {"transfer": "basic", "objects": objects}, {"Content-Type": "application/vnd.git-lfs+json"})

        def _lfs_verify(self, repo: Repo) -> None:
            request = json.loads(self.body)
            with hub.lock:
                stored = hub.lfs_objects.get(request["oid"])
            if stored is None or len(stored) != request["size"]:
                raise _Error(404, f"LFS object {request['oid']} not found")
            self._send(200, {})

        def _storage_route(self, path: str, query: dict[str, list[str]]) -> None:
            m = re.match(r"^/(upload|objects)/([0-9a-f]{64})$", path)
            if not m or (query.get("signature") or [""])[0] != hub._sign(m.group(2)):
                raise _Error(403, "SignatureDoesNotMatch")
            oid = m.group(2)
            if m.group(1) == "upload" and self.command == "PUT":
                if hashlib.sha256(self.body).hexdigest() != oid or len(self.body) != int(query["size"][0]):
                    raise _Error(400, "BadDigest: the content does not match the oid and size it was uploaded for")
                with hub.lock:
                    hub.lfs_objects[oid] = self.body
                    hub.lfs_uploads.append(oid)
                self._send(200, headers={"ETag": f'"{hashlib.md5(self.body).hexdigest()}"'})  # as S3
                return
            if m.group(1) == "objects" and self.command in ("GET", "HEAD"):
                with hub.lock:
                    data = hub.lfs_objects.get(oid)
                if data is None:
                    raise _Error(404, "NoSuchKey")
                # Counted under the file's path, as a file served by the Hub itself is.
                self._send_content(data, {"ETag": f'"{oid}"'}, count_as=hub.path_of(oid))
                return
            raise _Error(405, f"{self.command} not allowed on {path}")

    return Handler


def _pointer(oid: str, size: int) -> bytes:
    """The Git LFS pointer file that git stores in place of an LFS object."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {size}\n".encode()


def _remote_oid(repo: Repo, path: str) -> str | None:
    """What preupload reports for an existing file: sha256 for LFS files, the git blob id otherwise
    (huggingface_hub compares it with its own to drop unchanged files from a commit)."""
    if path in repo.lfs:
        return repo.lfs[path]
    return _oid(repo.files[path]) if path in repo.files else None


def _mode_from_sample(path: str, sample: bytes, size: int) -> str:
    # upload_mode() on the sample, with the size the client declared (the sample is 512 bytes).
    if size > LFS_SIZE:
        return "lfs"
    return upload_mode(path, sample) if size else "regular"


def _entry(repo: Repo, path: str) -> dict[str, Any] | None:
    if path in repo.lfs:
        data, oid = repo.files[path], repo.lfs[path]
        pointer = _pointer(oid, len(data))
        return {"type": "file", "oid": _oid(pointer), "size": len(data), "path": path,
                "lfs": {"oid": oid, "size": len(data), "pointerSize": len(pointer)}}
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
