"""Inputs → an ordered stream of :class:`DocumentRef`.

An INPUT is one of:

- a document file (PDF or image), local or any fsspec URL;
- a folder of document files (listed recursively, sorted; a local folder through its symlinks,
  each real folder once); other files in it are skipped and named in the log;
- a Parquet dataset: a path ending in ``.parquet``, or a folder holding ``.parquet`` files and
  no document files;
- a manifest, a list of documents (:mod:`.manifest`): a ``.jsonl`` or ``.csv`` file, a folder
  with ``_manifest.json``, or a Parquet file or folder with a ``url``/``path`` column and no
  image column;
- a Hugging Face Hub dataset: ``hf://datasets/OWNER/NAME[@REVISION]`` with no sub-path; when
  :attr:`DatasetOptions.config` is set, plain ``OWNER/NAME`` too (any INPUT that is not an
  existing path). ``hf://datasets/OWNER/NAME/sub/path`` is a file or folder in the repo.

The order is deterministic (inputs in the order given, files sorted, dataset rows in stream
order) and every ref carries its position in it (``index``, the ``doc_index`` of the outputs).
A shard is listed by itself (:meth:`InputPlan.documents`, rules in :mod:`llm_ocr.sharding`):
files round-robin, dataset rows in whole Parquet row groups balanced by bytes, so a shard
reads only its own row groups (plus every footer, to number the rows), manifest rows in
contiguous runs (:mod:`.manifest`).
Every input is checked before the first ref is yielded, so a typo fails fast instead of hours
into a run. Images are never decoded here: listing runs in the main process and only moves bytes.
"""

from __future__ import annotations

import logging
import os
import posixpath
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import fsspec
import pyarrow as pa
from fsspec.core import split_protocol
from fsspec.implementations.local import LocalFileSystem

from llm_ocr.options import DatasetOptions
from llm_ocr.sharding import check_shard, round_robin_owner
from llm_ocr.storage.stores import classify, explain, store_options

from .base import DocumentKind, DocumentRef
from .dataset_inputs import DatasetInputError, DatasetPlan, ParquetPlan, StreamPlan, hub_plan, parquet_plan, row_images
from .kinds import IMAGE_EXTENSIONS, PDF_EXTENSIONS, document_kind
from .manifest import (
    MANIFEST_INDEX,
    ManifestError,
    ManifestPlan,
    indexed_table,
    line_format,
    line_table,
    looks_like_manifest,
    parquet_table,
)
from .parquet import ParquetFooterError, ReadStats, open_parquet_files

logger = logging.getLogger(__name__)

PARQUET_EXTENSION = ".parquet"
#: Files skipped in a folder are named in the log up to this many (``-v``: every one).
NAMED_SKIPS = 50
#: Sub-folders of a remote folder listed at once (each a paginated listing of its own).
LIST_THREADS = 16


class InputError(Exception):
    """A whole INPUT is unusable (not found, empty, unreadable). The message says what to do."""


def plan_inputs(
    inputs: Sequence[str],
    *,
    dataset: DatasetOptions | None = None,
    storage_options: dict | None = None,
) -> InputPlan:
    """Resolve and check ``inputs`` now; list their documents later with :meth:`InputPlan.documents`.

    Everything that can be checked up front is (existence, folder listings, doc_id collisions,
    dataset footers and image columns): an unusable input raises :class:`InputError` here,
    before any document is read.
    """
    if isinstance(inputs, str):  # a lone string would be iterated character by character
        inputs = [inputs]
    if not inputs:
        raise InputError("no INPUT given: pass at least one file, folder or dataset")
    options = dataset or DatasetOptions()
    so = dict(storage_options or {})
    stats = ReadStats()
    plans = []
    for url in inputs:
        try:
            plans.append(_resolve(url, options, so, stats))
        except InputError:
            raise
        except (DatasetInputError, ManifestError) as e:
            raise InputError(f"{url}: {e}" if isinstance(e, ManifestError) else str(e)) from e
        except Exception as e:  # permissions, network, credentials: the INPUT cannot be read
            if classify(e) == "other" and not isinstance(e, OSError):
                raise
            # explain() names the store and what to set, without secrets (llm_ocr.storage.stores).
            raise InputError(explain(e, url, "read INPUT", so)) from e
    _assign_doc_ids(plans)
    return InputPlan(plans, so, stats)


def list_documents(
    inputs: Sequence[str],
    *,
    dataset: DatasetOptions | None = None,
    storage_options: dict | None = None,
    num_shards: int = 1,
    shard_index: int = 0,
) -> Iterator[DocumentRef]:
    """The documents of ``inputs`` (of one shard of them), in a deterministic order.

    All inputs are resolved and checked when this function is called (:func:`plan_inputs`); the
    returned iterator then streams refs, numbered 0, 1, 2, ... across all inputs (a shard's refs
    keep their global numbers). Dataset rows carry their images as encoded bytes.
    """
    check_shard(num_shards, shard_index)
    plan = plan_inputs(inputs, dataset=dataset, storage_options=storage_options)
    return plan.documents(num_shards, shard_index)


@dataclass
class ShardShare:
    """What one shard of the dataset inputs reads: rows, row groups and bytes of its row groups."""

    shard: int
    rows: int = 0
    row_groups: int = 0
    bytes: int = 0


@dataclass
class InputPlan:
    """Resolved inputs: what :func:`plan_inputs` checked, ready to list any shard."""

    plans: list[_Plan]
    storage_options: dict
    #: Requests and bytes the Parquet reader made: every footer at planning, then row groups.
    stats: ReadStats

    def documents(
        self, num_shards: int = 1, shard_index: int = 0, *, by_rows: bool = False, start: int = 0,
        stop: int | None = None,
    ) -> Iterator[DocumentRef]:
        """The refs of one shard, in input order, with their global ``index``.

        ``by_rows`` shards dataset rows round-robin like files (``index % num_shards``), the rule
        of outputs begun before row-group sharding (each shard then reads every row group).
        ``start``/``stop``: only the shard's documents at those positions of its own list (a work
        group, docs/stragglers.md); files before ``start`` are skipped by name, dataset row groups
        wholly before it without reading them.
        """
        check_shard(num_shards, shard_index)
        refs = _stream(self.plans, self.storage_options, num_shards, shard_index, by_rows, start)
        return refs if stop is None else islice(refs, max(0, stop - start))

    def shard_size(self, num_shards: int, shard_index: int, *, by_rows: bool = False) -> int | None:
        """How many documents shard ``shard_index`` holds, from the listing and the Parquet footers
        alone; None when a dataset can only be streamed (its rows are not counted ahead)."""
        check_shard(num_shards, shard_index)
        total = 0
        offset = 0
        for plan in self.plans:
            if isinstance(plan, _FilesPlan):
                total += _residues(offset, len(plan.files), num_shards, shard_index)
                offset += len(plan.files)
            elif isinstance(plan, ManifestPlan):
                if by_rows:
                    total += _residues(offset, plan.num_rows, num_shards, shard_index)
                else:
                    total += plan.shard_rows(num_shards, shard_index)
                if plan is not self.plans[-1]:  # a line manifest counts all its rows only when asked
                    offset += plan.num_rows
            elif isinstance(plan, ParquetPlan):
                if by_rows:
                    total += _residues(offset, plan.num_rows, num_shards, shard_index)
                else:
                    total += sum(g.num_rows for g, owner in zip(plan.groups, plan.owners(num_shards))
                                 if owner == shard_index)
                offset += plan.num_rows
            else:
                return None
        return total

    @property
    def has_datasets(self) -> bool:
        """Whether any input is a dataset (the rule :attr:`documents`' ``by_rows`` changes)."""
        return any(not isinstance(p, _FilesPlan) for p in self.plans)

    def dataset_shares(self, num_shards: int) -> list[ShardShare]:
        """Each shard's share of the Parquet dataset inputs, from the footers alone."""
        shares = [ShardShare(s) for s in range(num_shards)]
        for plan in self.plans:
            if isinstance(plan, ParquetPlan):
                for group, owner in zip(plan.groups, plan.owners(num_shards)):
                    shares[owner].rows += group.num_rows
                    shares[owner].row_groups += 1
                    shares[owner].bytes += group.weight
        return shares


# --------------------------------------------------------------------------------------------
# Resolution: one plan per INPUT, built before streaming.


@dataclass
class _FilesPlan:
    """A file or folder INPUT: the document files it stands for, in order."""

    url: str
    fs: Any
    root: str  # the input's path as the filesystem spells it
    is_dir: bool
    files: list[tuple[str, DocumentKind]]  # (fs path, kind), sorted
    doc_ids: list[str] = field(default_factory=list)
    #: Each file's size in bytes, from the listing (None: not listed, e.g. a lone file).
    sizes: list[int | None] = field(default_factory=list)

    def source(self, path: str) -> str:
        return _full_url(self.fs, path)


_Plan = _FilesPlan | DatasetPlan | ManifestPlan


def _resolve(url: str, options: DatasetOptions, so: dict, stats: ReadStats) -> _Plan:
    protocol, rest = split_protocol(url)
    hub_parts = rest.strip("/").split("/") if protocol == "hf" else []
    if len(hub_parts) == 3 and hub_parts[0] == "datasets":  # hf://datasets/OWNER/NAME[@REV]
        repo = "/".join(hub_parts[1:])
        return hub_plan(url, repo, url.rstrip("/"), options, so, stats)

    try:
        fs, path = fsspec.core.url_to_fs(url, **store_options(url, so))
        exists = fs.exists(path)
    except (ImportError, ValueError) as e:  # unknown protocol, missing s3fs/gcsfs, bad options
        raise InputError(f"cannot open INPUT {url!r}: {e}") from e
    if not exists:
        if options.config is not None and protocol is None:
            # "OWNER/NAME" with --config: a Hub dataset named without the hf:// prefix.
            return hub_plan(url, url.strip("/"), f"hf://datasets/{url.strip('/')}", options, so, stats)
        hint = "; glob patterns are not supported, pass the folder" if any(c in url for c in "*?[") else ""
        raise InputError(
            f"input not found: {url} (check the path or the storage credentials; "
            f"a Hub dataset is written hf://datasets/OWNER/NAME{hint})"
        )
    name = _strip_parquet(posixpath.basename(path.rstrip("/")))
    is_dir = fs.isdir(path)
    if not is_dir and (fmt := line_format(path)) is not None:
        table = line_table(fs, path, int(fs.size(path)), fmt)
        return ManifestPlan(url, fs, posixpath.dirname(path), table)
    if is_dir and fs.exists(posixpath.join(path, MANIFEST_INDEX)):
        return ManifestPlan(url, fs, path.rstrip("/"), indexed_table(fs, path.rstrip("/"), stats))
    if not is_dir:
        if path.lower().endswith(PARQUET_EXTENSION):
            return _parquet_input(url, fs, path, [path], [None], name, options, stats, posixpath.dirname(path))
        _probe_read(fs, path)
        return _FilesPlan(url, fs, path, False, [(path, document_kind(path) or _sniff_kind(fs, path))])

    # Sizes too: no request per file later. A local folder through its symlinks, which fsspec's
    # local find lists as files (a link's type is "other").
    local = isinstance(fs, LocalFileSystem)
    details = _local_find(path) if local else _find(fs, path)
    found = sorted(details)
    docs = [(p, k) for p in found if (k := document_kind(p)) is not None]
    parquet = [p for p in found if p.lower().endswith(PARQUET_EXTENSION)]
    if parquet and not docs:
        others = len(found) - len(parquet)
        if others:  # e.g. README.md, _SUCCESS, .crc files beside the data
            logger.info("Parquet dataset folder %s: ignoring %d non-Parquet files", url, others)
        sizes = [details[p].get("size") for p in parquet]
        return _parquet_input(url, fs, path, parquet, sizes, name, options, stats, path.rstrip("/"))
    if not found:
        raise InputError(f"input folder is empty: {url}")
    if not docs:
        raise InputError(
            f"no documents in {url}: {len(found)} files, none with a supported extension "
            f"({', '.join(sorted(PDF_EXTENSIONS | IMAGE_EXTENSIONS))})"
        )
    skipped = [posixpath.relpath(p, path) for p in found if document_kind(p) is None]
    if skipped:
        more = len(skipped) - NAMED_SKIPS
        logger.warning(
            "%s: skipping %d file(s) that are not documents (no PDF or image extension): %s%s",
            url, len(skipped), ", ".join(skipped[:NAMED_SKIPS]),
            f" and {more} more (-v lists them)" if more > 0 else "",
        )
        if more > 0:
            logger.debug("%s: every file skipped: %s", url, ", ".join(skipped))
    _probe_read(fs, docs[0][0])
    return _FilesPlan(url, fs, path, True, docs, sizes=[details[p].get("size") for p, _ in docs])


def _parquet_input(
    url: str, fs: Any, path: str, paths: list[str], sizes: list[int | None], name: str, options: DatasetOptions,
    stats: ReadStats, base: str,
) -> _Plan:
    """A Parquet file or folder INPUT: a manifest when its columns say so (and no
    ``--image-column`` is given), else a dataset; its footers read once either way."""
    try:
        files = open_parquet_files(fs, paths, sizes, stats)
    except ParquetFooterError as exc:
        raise DatasetInputError(f"cannot read Parquet dataset {url!r}: {exc}") from exc
    if files.files and options.image_column is None and looks_like_manifest(files.schema):
        return ManifestPlan(url, fs, base, parquet_table(fs, files))
    return parquet_plan(url, fs, _full_url(fs, path), paths, sizes, name, options, stats, files=files)


def _find(fs: Any, root: str) -> dict[str, dict[str, Any]]:
    """Every file under the remote folder ``root`` with its details, as ``fs.find(detail=True)``
    gives them, its sub-folders listed at once (one paginated listing each, instead of one
    listing of the whole tree page after page)."""
    top = fs.ls(root, detail=True)
    found = {e["name"]: e for e in top if e.get("type") != "directory"}
    folders = [e["name"] for e in top if e.get("type") == "directory" and e["name"].rstrip("/") != root.rstrip("/")]
    if not folders:
        return found if found else fs.find(root, withdirs=False, detail=True)
    with ThreadPoolExecutor(min(LIST_THREADS, len(folders)), thread_name_prefix="llm-ocr-list") as pool:
        for listed in pool.map(lambda folder: fs.find(folder, withdirs=False, detail=True), folders):
            found.update(listed)
    return found


def _local_find(root: str) -> dict[str, dict[str, Any]]:
    """Every file under the local folder ``root``, with its size (None for a broken link), in
    the shape of fsspec's ``find(detail=True)``. Symlinks are followed, to files and to folders
    alike; each real folder is listed once, so a link back up the tree (a cycle) or a second link
    to a folder already listed is logged and not listed again."""
    found: dict[str, dict[str, Any]] = {}
    seen: dict[tuple[int, int], str] = {}
    stack = [root.rstrip("/") or "/"]
    while stack:
        folder = stack.pop()
        st = os.stat(folder)  # through a link: the folder itself
        listed = seen.setdefault((st.st_dev, st.st_ino), folder)
        if listed != folder:
            logger.warning("%s: not listed again: it is a link to the folder %s, listed already", folder, listed)
            continue
        with os.scandir(folder) as entries:
            ordered = sorted(entries, key=lambda entry: entry.name)
        subfolders = []
        for entry in ordered:
            path = posixpath.join(folder, entry.name)
            try:
                is_folder = entry.is_dir()  # follows a symlink
            except OSError:
                is_folder = False
            if is_folder:
                subfolders.append(path)
                continue
            try:
                size: int | None = entry.stat().st_size
            except OSError:  # a broken link: listed all the same, its read fails with an error row
                size = None
            found[path] = {"name": path, "size": size, "type": "file"}
        stack.extend(reversed(subfolders))  # depth first, in name order
    return found


def _probe_read(fs: Any, path: str) -> None:
    """Read one byte of a remote input file now: listing rights do not imply read rights (S3
    ``ListBucket`` vs ``GetObject``), and a denial must surface before any GPU time. (Local
    permissions are per file: an unreadable local file gets its error row instead.)"""
    if not isinstance(fs, LocalFileSystem):
        fs.cat_file(path, start=0, end=1)


def _strip_parquet(name: str) -> str:
    return name[: -len(PARQUET_EXTENSION)] if name.lower().endswith(PARQUET_EXTENSION) else name


def _sniff_kind(fs: Any, path: str) -> DocumentKind:
    """Kind of an explicitly given file with an unknown extension, from its first bytes.

    It is listed anyway (not skipped) so that it gets an error row if it is neither.
    """
    with fs.open(path, "rb") as f:
        head = f.read(1024)
    return "pdf" if b"%PDF" in head else "image"  # the PDF header may follow some junk bytes


def _full_url(fs: Any, path: str) -> str:
    # Local files keep their plain path: that is what users recognise and what renderers open.
    if isinstance(fs, LocalFileSystem):
        return path
    return fs.unstrip_protocol(path)


# --------------------------------------------------------------------------------------------
# doc_ids


def _assign_doc_ids(plans: list[_Plan]) -> None:
    """Fill the doc_ids of file plans and refuse any collision, all before streaming.

    One file INPUT: ids are relative to it (a lone file: its base name). Several: relative to
    the common parent folder of the inputs, so the folder names tell them apart.
    """
    file_plans = [p for p in plans if isinstance(p, _FilesPlan)]
    if len(file_plans) == 1:
        plan = file_plans[0]
        base = plan.root.rstrip("/") if plan.is_dir else posixpath.dirname(plan.root)
        plan.doc_ids = [_relative(path, base) for path, _ in plan.files]
    elif file_plans:
        parents = [_components(p.fs, posixpath.dirname(p.root.rstrip("/"))) for p in file_plans]
        common = len(posixpath.commonprefix(parents))  # works on lists component by component
        for plan in file_plans:
            plan.doc_ids = ["/".join(_components(plan.fs, path)[common:]) for path, _ in plan.files]

    seen: dict[str, str] = {}
    for plan in file_plans:
        for doc_id, (path, _) in zip(plan.doc_ids, plan.files):
            if doc_id in seen:
                raise InputError(
                    f"two input files get the same doc_id {doc_id!r}: {seen[doc_id]} and "
                    f"{plan.source(path)}; give each file once (no input inside another)"
                )
            seen[doc_id] = plan.source(path)
    prefixes: dict[str, str] = {}
    for dataset in plans:
        if isinstance(dataset, (ParquetPlan, StreamPlan)):
            if dataset.prefix in prefixes:
                raise InputError(
                    f"dataset inputs {prefixes[dataset.prefix]!r} and {dataset.url!r} both give doc_ids "
                    f"{dataset.prefix}/...; give each dataset once (rename one Parquet folder)"
                )
            prefixes[dataset.prefix] = dataset.url
    for doc_id, src in seen.items():
        for prefix, url in prefixes.items():
            if doc_id.startswith(prefix + "/"):
                raise InputError(f"file {src} and dataset {url!r} would share doc_id {doc_id!r}")


def _relative(path: str, base: str) -> str:
    return posixpath.relpath(path, base) if base else path.lstrip("/")


def _components(fs: Any, path: str) -> list[str]:
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    # The protocol comes first so inputs on different filesystems never share a parent.
    return [protocol] + [c for c in path.split("/") if c]


# --------------------------------------------------------------------------------------------
# Streaming


def _residues(first: int, count: int, num_shards: int, shard: int) -> int:
    """How many of ``first .. first + count - 1`` are ``== shard (mod num_shards)``."""
    return len(range((shard - first) % num_shards, count, num_shards))


def _stream(
    plans: list[_Plan], so: dict, num_shards: int, shard: int, by_rows: bool, start: int = 0
) -> Iterator[DocumentRef]:
    index = 0  # the global number of the first document of each input
    position = 0  # how many of the shard's documents came before (its own list's numbering)
    for plan in plans:
        if isinstance(plan, _FilesPlan):
            for doc_id, (path, kind) in zip(plan.doc_ids, plan.files):
                if round_robin_owner(index, num_shards) == shard:
                    if position >= start:
                        src = plan.source(path)
                        yield DocumentRef(doc_id=doc_id, index=index, source=src, kind=kind, location=src)
                    position += 1
                index += 1
        elif isinstance(plan, ManifestPlan):
            if by_rows:  # round-robin, the rule of an output begun by listing the folder itself
                for entry in plan.all_rows():
                    if round_robin_owner(index + entry.row, num_shards) == shard:
                        if position >= start:
                            yield plan.ref(index, entry)
                        position += 1
            else:
                skip = max(0, start - position)
                yield from plan.shard_refs(index, num_shards, shard, skip)
                position += plan.shard_rows(num_shards, shard) if plan is not plans[-1] else 0
            if plan is not plans[-1]:  # a line manifest counts all its rows only when asked
                index += plan.num_rows
        elif isinstance(plan, ParquetPlan):
            skipped = [0]
            for ref in _parquet_rows(plan, so, index, num_shards, shard, by_rows, start - position, skipped):
                position += 1
                yield ref
            position += skipped[0]
            index += plan.num_rows
        else:  # streamed by datasets: every row is read, ours are kept
            rows = 0
            for row, example in enumerate(plan.dataset):
                if round_robin_owner(index + row, num_shards) == shard:
                    if position >= start:
                        yield _row_ref(plan, index + row, row, example[plan.column], so)
                    position += 1
                rows = row + 1
            index += rows


def _parquet_rows(
    plan: ParquetPlan, so: dict, offset: int, num_shards: int, shard: int, by_rows: bool, skip: int = 0,
    skipped: list[int] | None = None,
) -> Iterator[DocumentRef]:
    """The rows of one Parquet dataset that belong to ``shard``, reading only their row groups;
    the first ``skip`` of them are not yielded, and row groups holding only those are not read
    (their count is added to ``skipped[0]``)."""
    if by_rows:  # round-robin rows: every row group holding one of ours
        groups = [g for g in plan.groups if _holds_residue(offset + g.first_row, g.num_rows, num_shards, shard)]
    else:
        groups = [g for g, owner in zip(plan.groups, plan.owners(num_shards)) if owner == shard]
        while groups and 0 < groups[0].num_rows <= skip:  # every row of a group we own is ours
            skip -= groups[0].num_rows
            if skipped is not None:
                skipped[0] += groups[0].num_rows
            groups = groups[1:]
    try:
        for row, value in plan.files.iter_rows(groups, plan.column):
            if not by_rows or round_robin_owner(offset + row, num_shards) == shard:
                if skip > 0:
                    skip -= 1
                    if skipped is not None:
                        skipped[0] += 1
                    continue
                yield _row_ref(plan, offset + row, row, value, so)
    except (pa.ArrowException, OSError) as exc:
        if classify(exc) == "transient":  # the store, not the data: StorageError says rerun
            raise
        raise InputError(f"cannot read dataset {plan.url!r}: {type(exc).__name__}: {exc}") from exc


def _holds_residue(first: int, count: int, num_shards: int, shard: int) -> bool:
    """Whether ``first .. first + count - 1`` holds a number ``== shard (mod num_shards)``."""
    return count >= num_shards or (shard - first) % num_shards < count


def _row_ref(plan: DatasetPlan, index: int, row: int, value: Any, so: dict) -> DocumentRef:
    return DocumentRef(
        doc_id=f"{plan.prefix}/{row:08d}",
        index=index,
        source=plan.source,
        kind="dataset_row",
        location=plan.source,
        images=row_images(value, plan.is_list, so),
    )


# --------------------------------------------------------------------------------------------
# One dataset row, read again (page images for Fields and the report)

#: Datasets resolved for :func:`dataset_row`, by (source, options): their footers are read once.
_ROW_PLANS: dict[tuple[str, str, str, str | None, str], DatasetPlan] = {}
_ROW_PLANS_KEPT = 4


def dataset_row(
    source: str, doc_id: str, image_column: str | None = None, storage_options: dict | None = None
) -> DocumentRef:
    """The row ``doc_id`` of dataset INPUT ``source`` (as Extract listed it), with its page images.

    The config and split are those the doc_id names (``NAME/CONFIG/SPLIT/ROW``, which Extract
    built from them); the image column is ``image_column``, else found as Extract finds it. Only
    the row group holding the row is read. Raises :class:`InputError` when the row cannot be found.
    """
    prefix, _, number = doc_id.rpartition("/")
    if not number.isdigit() or prefix.count("/") < 2:
        raise InputError(f"{doc_id!r} is not the doc_id of a dataset row (NAME/CONFIG/SPLIT/ROW)")
    config, split = prefix.split("/")[-2:]
    dataset = DatasetOptions(config=None if config == "default" else config, split=split, image_column=image_column)
    so = dict(storage_options or {})
    key = (source, config, split, image_column, repr(sorted(so.items())))
    plan = _ROW_PLANS.get(key)
    if plan is None:
        try:
            resolved = _resolve(source, dataset, so, ReadStats())
        except DatasetInputError as exc:
            raise InputError(str(exc)) from exc
        if isinstance(resolved, (_FilesPlan, ManifestPlan)):
            raise InputError(f"{source!r} is not a dataset: {doc_id!r} cannot be one of its rows")
        plan = _ROW_PLANS[key] = resolved
        while len(_ROW_PLANS) > _ROW_PLANS_KEPT:
            _ROW_PLANS.pop(next(iter(_ROW_PLANS)))
    if plan.prefix != prefix:  # the dataset was renamed or moved since Extract read it
        raise InputError(f"{source!r} gives doc_ids {plan.prefix}/..., not {prefix}/...: it is not the dataset "
                         "Extract read")
    row = int(number)
    if isinstance(plan, ParquetPlan):
        groups = [g for g in plan.groups if g.first_row <= row < g.first_row + g.num_rows]
        values = (value for found, value in plan.files.iter_rows(groups, plan.column) if found == row)
    else:  # streamed by datasets: read up to the row
        values = (example[plan.column] for found, example in enumerate(plan.dataset) if found == row)
    for value in values:
        return _row_ref(plan, row, row, value, so)
    raise InputError(f"dataset {source!r} has no row {row} ({doc_id!r}): it changed since it was read")
