"""Hugging Face Hub outputs: batched commits, the write check, and the dataset card.

Through ``HfFileSystem`` every written file is one commit, and the Hub limits commits per repo
(~128 per hour: docs/facts.md#hugging-face-datasets-and-the-hub), so N shards writing a part
every few minutes would soon be refused.
:class:`HubCommitter` is the :class:`~llm_ocr.storage.sinks.Committer` behind
:class:`~llm_ocr.storage.sinks.BatchingSink`: one ``HfApi.create_commit`` per batch (regular or
LFS/Xet uploads are huggingface_hub's business), retried with backoff and jitter on commit
conflicts (409/412), throttling (429, honouring ``Retry-After``) and server errors. It only ever
adds or deletes the exact paths it is given: other shards' files are never touched (never
``push_to_hub``, which deletes files it did not push).

``hf://buckets/...`` paths are commit-free storage and are written directly.

:meth:`HubCommitter.create_exclusive` is the Hub's atomic create-if-absent (work claims): it
reads the branch head, checks the name is absent, and commits the file with ``parent_commit``
set to that head. The Hub refuses a commit whose parent is no longer the head (HTTP 412, "A
commit has happened since. Please refresh and try again.": huggingface_hub's
``test_create_commit_conflict``), so a rival that committed first makes it look again.
"""

from __future__ import annotations

import logging
import posixpath
import time
from collections import OrderedDict
from typing import Any

from llm_ocr.backoff import backoff_delay
from llm_ocr.storage.retry import retry_io
from llm_ocr.storage.sinks import Operation
from llm_ocr.storage.stores import StorageError, classify, explain, http_status, retry_after, scrub

log = logging.getLogger(__name__)

#: Folders of the stages whose Parquet parts the dataset card exposes as configs.
STAGE_FOLDERS = ("extract", "describe", "assemble")

CARD_MARKER = "<!-- written by llm-ocr -->"


def _env_number(name: str, default: float) -> float:
    import os

    try:
        return float(os.environ.get(name) or default)
    except ValueError:
        return default


class HubCommitter:
    """Commits batches of operations to Hub repos through ``HfApi.create_commit``."""

    def __init__(self, fs: Any, *, attempts: int | None = None, base_delay: float | None = None,
                 max_delay: float = 120.0) -> None:
        from huggingface_hub import HfApi

        self.fs = fs
        self.api = HfApi(endpoint=fs.endpoint, token=fs.token)
        # Commits wait longer than plain reads: a 429 means "come back in a minute or more".
        self.attempts = int(attempts or _env_number("LLM_OCR_HUB_COMMIT_RETRIES", 8))
        self.base_delay = base_delay if base_delay is not None else _env_number("LLM_OCR_STORAGE_RETRY_DELAY", 2.0)
        self.max_delay = max_delay

    def _resolve(self, path: str) -> Any:
        return self.fs.resolve_path(path)

    def check_output(self, out: Any) -> bool:
        """The start-up check for an output on the Hub (see :func:`check_hub_output`), then
        the dataset card, queued so it costs no commit of its own.

        Returns False, checking nothing, for ``hf://buckets``: they are plain object storage,
        where the caller's probe write costs no commit.
        """
        if _repo_of(out.root)[0] == "bucket":
            return False
        check_hub_output(out)
        ensure_dataset_card(out)
        return True

    def batches(self, path: str) -> bool:
        # Buckets (huggingface_hub >= 1.5) are commit-free object storage.
        return not hasattr(self._resolve(path), "bucket_id")

    def exists(self, path: str) -> bool:
        self.fs.invalidate_cache(path)
        return bool(self.fs.exists(path))

    def commit(self, operations: list[Operation], message: str) -> None:
        groups: OrderedDict[tuple[str, str, str], list[tuple[Operation, str]]] = OrderedDict()
        for op in operations:
            resolved = self._resolve(op.path)
            key = (resolved.repo_type, resolved.repo_id, resolved.revision)
            groups.setdefault(key, []).append((op, resolved.path_in_repo))
        for (repo_type, repo_id, revision), ops in groups.items():
            self._commit_with_retries(repo_type, repo_id, revision, ops, message)
            self.fs.invalidate_cache(f"{repo_type}s/{repo_id}")

    def create_exclusive(self, path: str, data: bytes) -> bool:
        from huggingface_hub import CommitOperationAdd

        resolved = self._resolve(path)
        repo_type, repo_id, revision = resolved.repo_type, resolved.repo_id, resolved.revision
        url = f"hf://{repo_type}s/{repo_id}/{resolved.path_in_repo}"
        attempts = int(_env_number("LLM_OCR_HUB_CONFLICT_RETRIES", 30))
        for attempt in range(1, attempts + 1):
            head = retry_io(lambda: self.api.repo_info(repo_id, repo_type=repo_type, revision=revision).sha,
                            what=f"reading {url}")
            if retry_io(lambda: self.exists(path), what=f"checking {url}"):
                # Taken, or our own commit whose answer was lost: it holds exactly our data then.
                return bool(retry_io(lambda: self.fs.cat_file(path), what=f"reading {url}") == data)
            try:
                self.api.create_commit(
                    repo_id, [CommitOperationAdd(path_in_repo=resolved.path_in_repo, path_or_fileobj=data)],
                    commit_message=f"llm-ocr: claim {posixpath.basename(resolved.path_in_repo)}",
                    repo_type=repo_type, revision=revision, parent_commit=head,
                )
                self.fs.invalidate_cache(f"{repo_type}s/{repo_id}")
                return True
            except Exception as exc:  # classified below
                # 412: another commit came first (it may or may not have created our name: look
                # again); 409/429/5xx and network errors: the commit may have landed, look again.
                if classify(exc) != "transient":
                    raise StorageError(explain(exc, url, "commit to")) from exc
                delay = backoff_delay(attempt, min(self.base_delay, 0.25), 10.0)
                log.debug("conditional commit of %s: %s; looking again in %.1fs", url,
                          scrub(str(exc).splitlines()[0] if str(exc) else type(exc).__name__), delay)
                time.sleep(delay)
        raise StorageError(f"could not commit {url}: the repo's head moved on {attempts} times in a row "
                           "(LLM_OCR_HUB_CONFLICT_RETRIES); other writers commit too often")

    def _commit_with_retries(
        self, repo_type: str, repo_id: str, revision: str, ops: list[tuple[Operation, str]], message: str
    ) -> None:
        from huggingface_hub import CommitOperationAdd, CommitOperationDelete

        url = f"hf://{repo_type}s/{repo_id}"
        for attempt in range(1, self.attempts + 1):
            # Fresh operation objects per attempt: create_commit mutates them.
            operations = [
                CommitOperationAdd(path_in_repo=path, path_or_fileobj=op.data)
                if op.kind == "put"
                else CommitOperationDelete(path_in_repo=path, is_folder=False)
                for op, path in ops
            ]
            try:
                self.api.create_commit(
                    repo_id, operations, commit_message=message, repo_type=repo_type, revision=revision
                )
                log.info("committed %d file(s) to %s", len(ops), url)
                return
            except Exception as exc:  # classified below
                kind = classify(exc)
                if kind != "transient" or attempt == self.attempts:
                    if kind in ("transient", "access"):
                        raise StorageError(explain(exc, url, "commit to")) from exc
                    raise
                delay = backoff_delay(attempt, self.base_delay, self.max_delay)
                hinted = retry_after(exc)
                if hinted is not None:
                    delay = max(delay, min(hinted, self.max_delay * 5))
                log.warning(
                    "commit of %d file(s) to %s failed (%s); retry %d/%d in %.1fs",
                    len(ops), url, scrub(f"HTTP {http_status(exc)}: {exc}".splitlines()[0]), attempt, self.attempts - 1,
                    delay,
                )
                time.sleep(delay)


# --------------------------------------------------------------------------------------------
# The write check and the dataset card


def check_hub_output(out: Any) -> None:
    """Before any GPU time: the repo exists (created private if absent) and the token may write.

    Uses the Hub's ``auth-check/write`` route rather than writing a probe file, which would cost
    two commits per shard start. Raises :class:`StorageError` with what to set.
    """
    fs = out.fs
    repo_type, repo_id, revision = _repo_of(out.root)
    api = _api(fs)
    url = out.url
    what = f"writing {url}"  # retry_io: transient errors retried, denials -> StorageError
    try:
        try:
            retry_io(lambda: _auth_check_write(api, repo_id, repo_type), what=what)
        except FileNotFoundError:
            # Absent, or invisible to this token (the Hub may answer both alike): creating it
            # (private) either works or fails with the access error worth reporting.
            retry_io(lambda: api.create_repo(repo_id, repo_type=repo_type, private=True, exist_ok=True), what=what)
            log.info("created private %s repo %s (or it existed)", repo_type, repo_id)
            retry_io(lambda: _auth_check_write(api, repo_id, repo_type), what=what)
        if revision not in (None, "main"):
            refs = retry_io(lambda: api.list_repo_refs(repo_id, repo_type=repo_type), what=what)
            if revision not in {b.name for b in refs.branches}:
                raise StorageError(
                    f"cannot write to {url}: branch {revision!r} does not exist — create it first "
                    f"(huggingface_hub.create_branch) or write to main"
                )
    except StorageError:
        raise
    except Exception as exc:  # every failure means "cannot write there"
        if isinstance(exc, FileNotFoundError) or "Token is required" in str(exc):
            exc = _as_access(exc)  # still invisible after creating it: this token may not write
        raise StorageError(explain(exc, url, "write to")) from exc
    fs.invalidate_cache()  # HfFileSystem caches "repo does not exist"


def _auth_check_write(api: Any, repo_id: str, repo_type: str) -> None:
    """``GET /api/{type}s/{repo}/auth-check/write``: 200, or 401/403/404 without the right."""
    try:
        api.auth_check(repo_id, repo_type=repo_type, write=True)
    except TypeError:  # an older huggingface_hub without ``write=``: read access at least
        api.auth_check(repo_id, repo_type=repo_type)


def _as_access(exc: Exception) -> Exception:
    """A 404 from the auth check means "not visible to this token": report it as access."""
    if classify(exc) == "access":
        return exc
    wrapped = PermissionError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    wrapped.__cause__ = exc
    return wrapped


def _api(fs: Any) -> Any:
    from huggingface_hub import HfApi

    return HfApi(endpoint=fs.endpoint, token=fs.token)


def _repo_of(root: str) -> tuple[str, str, str | None]:
    """``(repo_type, repo_id, revision)`` of an HfFileSystem path, without any request."""
    parts = root.strip("/").split("/")
    type_prefixes = {"datasets": "dataset", "spaces": "space", "models": "model", "buckets": "bucket",
                     "kernels": "kernel"}
    repo_type = type_prefixes.get(parts[0], "model")
    if parts[0] in type_prefixes:
        parts = parts[1:]
    if len(parts) < 2:
        raise StorageError(f"cannot write to hf://{root}: a Hub output is hf://datasets/OWNER/NAME[/PATH]")
    namespace, name = parts[0], parts[1]
    name, _, revision = name.partition("@")
    return repo_type, f"{namespace}/{name}", revision or None


def dataset_card(prefix: str) -> str:
    """A README.md whose ``configs:`` let ``load_dataset("OWNER/NAME", STAGE)`` read each stage."""
    base = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
    lines = ["---", "configs:"]
    for stage in STAGE_FOLDERS:
        lines += [
            f"- config_name: {stage}",
            "  data_files:",
            "  - split: train",
            f"    path: {base}{stage}/*.parquet",
        ]
        if stage == "extract":
            lines.append("  default: true")
    lines += ["tags:", "- ocr", "- llm-ocr", "---", ""]
    body = f"""{CARD_MARKER}
# OCR output

Written by [llm-ocr](https://github.com/) in Parquet parts, one folder per stage:

- `{base}extract/`: one row per page (Markdown, raw model output, figures, status)
- `{base}describe/`: the same rows with figure descriptions
- `{base}assemble/`: one row per document

```python
from datasets import load_dataset

pages = load_dataset("REPO", "extract", split="train")
documents = load_dataset("REPO", "assemble", split="train")  # once the assemble stage has run
```

Run state (completion markers, per-shard stats) lives in `{base}_state/`, outside the data folders.
"""
    return "\n".join(lines) + "\n" + body


def ensure_dataset_card(out: Any) -> None:
    """Queue the dataset card with the output's first commit, only if the repo has no README.md."""
    root = out.root.strip("/")
    repo_type, repo_id, _ = _repo_of(root)
    if repo_type == "bucket":
        return
    resolved = out.fs.resolve_path(root)
    repo_root = root[: len(root) - len(resolved.path_in_repo)].rstrip("/") if resolved.path_in_repo else root
    readme = posixpath.join(repo_root, "README.md")
    out.fs.invalidate_cache(repo_root)
    if out.fs.exists(readme):
        text = out.fs.cat_file(readme).decode("utf-8", "replace")
        if "configs:" not in text:
            log.warning(
                "%s has a README.md without `configs:`; add them so load_dataset reads each stage:\n%s",
                out.url, dataset_card(resolved.path_in_repo).split("---")[1],
            )
        return
    card = dataset_card(resolved.path_in_repo).replace("REPO", repo_id)
    out.write_atomic(readme, card.encode("utf-8"))
