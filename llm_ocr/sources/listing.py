"""Inputs → an ordered stream of :class:`DocumentRef`.

An INPUT is one of:

- a document file (PDF or image), local or any fsspec URL;
- a folder of document files (listed recursively, sorted);
- a Parquet dataset: a path ending in ``.parquet``, or a folder holding ``.parquet`` files and
  no document files;
- a Hugging Face Hub dataset: ``hf://datasets/OWNER/NAME[@REVISION]`` with no sub-path; when
  :attr:`DatasetOptions.config` is set, plain ``OWNER/NAME`` too (any INPUT that is not an
  existing path). ``hf://datasets/OWNER/NAME/sub/path`` is a file or folder in the repo.

The order is deterministic (inputs in the order given, files sorted, dataset rows in stream
order) and every ref carries its position in it (``index``), which is what sharding uses.
Every input is checked before the first ref is yielded, so a typo fails fast instead of hours
into a run. Images are never decoded here: listing runs in the main process and only moves bytes.
"""

from __future__ import annotations

import copy
import logging
import posixpath
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import fsspec
from fsspec.core import split_protocol
from fsspec.implementations.local import LocalFileSystem
from pydantic import BaseModel, Field

from llm_ocr.storage.stores import classify, explain, store_options

from .base import DocumentKind, DocumentRef

logger = logging.getLogger(__name__)

PDF_EXTENSIONS = frozenset({".pdf"})
IMAGE_EXTENSIONS = frozenset({".png", ".jpg", ".jpeg", ".tif", ".tiff", ".webp", ".gif", ".bmp"})
PARQUET_EXTENSION = ".parquet"


class DatasetOptions(BaseModel):
    """Which part of a dataset INPUT to read (Hub or Parquet)."""

    config: str | None = Field(
        None,
        description="Dataset configuration (subset) name, e.g. olmOCR-mix-0225-documents. When set, an "
        "INPUT that is not an existing path is loaded as a Hub dataset OWNER/NAME.",
    )
    split: str = Field("train", description="Dataset split to read.")
    image_column: str | None = Field(
        None,
        description='Column holding the page image(s). Default: "images", then "image", then the '
        "first column of type Image or list of Image.",
    )


class InputError(Exception):
    """A whole INPUT is unusable (not found, empty, unreadable). The message says what to do."""


def document_kind(name: str) -> DocumentKind | None:
    """The kind of a document file from its extension (case-insensitive), or None if unsupported."""
    ext = posixpath.splitext(name)[1].lower()
    if ext in PDF_EXTENSIONS:
        return "pdf"
    if ext in IMAGE_EXTENSIONS:
        return "image"
    return None


def list_documents(
    inputs: Sequence[str],
    *,
    dataset: DatasetOptions | None = None,
    storage_options: dict | None = None,
) -> Iterator[DocumentRef]:
    """List the documents of ``inputs`` in a deterministic order.

    All inputs are resolved and checked eagerly (existence, folder listings, doc_id collisions,
    dataset loading) when this function is called; an unusable input raises :class:`InputError`
    before anything is yielded. The returned iterator then streams refs, numbered 0, 1, 2, ...
    across all inputs. Dataset rows carry their images as encoded bytes (never decoded here).
    """
    if isinstance(inputs, str):  # a lone string would be iterated character by character
        inputs = [inputs]
    if not inputs:
        raise InputError("no INPUT given: pass at least one file, folder or dataset")
    options = dataset or DatasetOptions()
    so = dict(storage_options or {})
    plans = []
    for url in inputs:
        try:
            plans.append(_resolve(url, options, so))
        except InputError:
            raise
        except Exception as e:  # permissions, network, credentials: the INPUT cannot be read
            if classify(e) == "other" and not isinstance(e, OSError):
                raise
            # explain() names the store and what to set, without secrets (llm_ocr.storage.stores).
            raise InputError(explain(e, url, "read INPUT", so)) from e
    _assign_doc_ids(plans)
    return _stream(plans, so)


def shard_documents(docs: Iterable[DocumentRef], num_shards: int, shard_index: int) -> Iterator[DocumentRef]:
    """Keep the refs of one shard: those with ``index % num_shards == shard_index``.

    Round-robin on the global index balances shards even when one input dominates, and needs no
    knowledge of the total count, so it works on a stream.
    """
    if num_shards < 1 or not 0 <= shard_index < num_shards:
        raise ValueError(f"invalid shard {shard_index} of {num_shards}: need 0 <= shard_index < num_shards")
    return (ref for ref in docs if ref.index % num_shards == shard_index)


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

    def source(self, path: str) -> str:
        return _full_url(self.fs, path)


@dataclass
class _DatasetPlan:
    """A Hub or Parquet dataset INPUT: a streaming dataset and the column holding the images."""

    url: str
    source: str
    prefix: str  # doc_id prefix: NAME/CONFIG/SPLIT
    dataset: Any  # datasets.IterableDataset, cast so images stay encoded
    column: str
    is_list: bool


_Plan = _FilesPlan | _DatasetPlan


def _resolve(url: str, options: DatasetOptions, so: dict) -> _Plan:
    protocol, rest = split_protocol(url)
    hub_parts = rest.strip("/").split("/") if protocol == "hf" else []
    if len(hub_parts) == 3 and hub_parts[0] == "datasets":  # hf://datasets/OWNER/NAME[@REV]
        repo = "/".join(hub_parts[1:])
        return _hub_plan(url, repo, url.rstrip("/"), options, so)

    try:
        fs, path = fsspec.core.url_to_fs(url, **store_options(url, so))
        exists = fs.exists(path)
    except (ImportError, ValueError) as e:  # unknown protocol, missing s3fs/gcsfs, bad options
        raise InputError(f"cannot open INPUT {url!r}: {e}") from e
    if not exists:
        if options.config is not None and protocol is None:
            # "OWNER/NAME" with --config: a Hub dataset named without the hf:// prefix.
            return _hub_plan(url, url.strip("/"), f"hf://datasets/{url.strip('/')}", options, so)
        hint = "; glob patterns are not supported, pass the folder" if any(c in url for c in "*?[") else ""
        raise InputError(
            f"input not found: {url} (check the path or the storage credentials; "
            f"a Hub dataset is written hf://datasets/OWNER/NAME{hint})"
        )
    name = _strip_parquet(posixpath.basename(path.rstrip("/")))
    if not fs.isdir(path):
        if path.lower().endswith(PARQUET_EXTENSION):
            return _parquet_plan(url, fs, path, [path], name, options, so)
        _probe_read(fs, path)
        return _FilesPlan(url, fs, path, False, [(path, document_kind(path) or _sniff_kind(fs, path))])

    found = sorted(fs.find(path, withdirs=False))
    docs = [(p, k) for p in found if (k := document_kind(p)) is not None]
    parquet = [p for p in found if p.lower().endswith(PARQUET_EXTENSION)]
    if parquet and not docs:
        others = len(found) - len(parquet)
        if others:  # e.g. README.md, _SUCCESS, .crc files beside the data
            logger.info("Parquet dataset folder %s: ignoring %d non-Parquet files", url, others)
        return _parquet_plan(url, fs, path, parquet, name, options, so)
    if not found:
        raise InputError(f"input folder is empty: {url}")
    if not docs:
        raise InputError(
            f"no documents in {url}: {len(found)} files, none with a supported extension "
            f"({', '.join(sorted(PDF_EXTENSIONS | IMAGE_EXTENSIONS))})"
        )
    skipped = [p for p in found if document_kind(p) is None]
    if skipped:
        names = ", ".join(posixpath.relpath(p, path) for p in skipped[:5])
        logger.warning(
            "%s: skipping %d file(s) with unsupported extensions (e.g. %s%s)",
            url, len(skipped), names, "" if len(skipped) <= 5 else ", ...",
        )
    _probe_read(fs, docs[0][0])
    return _FilesPlan(url, fs, path, True, docs)


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


def _hub_plan(url: str, name: str, source: str, options: DatasetOptions, so: dict) -> _DatasetPlan:
    import datasets  # heavy import, only needed for dataset inputs

    repo, _, revision = name.partition("@")
    try:
        ds = datasets.load_dataset(
            repo,
            options.config,
            split=options.split,
            streaming=True,
            revision=revision or None,
            storage_options=copy.deepcopy(so) or None,  # load_dataset mutates it (FACTS)
        )
    except Exception as e:  # noqa: BLE001 -- any failure makes the whole INPUT unusable
        raise InputError(
            f"cannot load dataset {url!r} (config={options.config!r}, split={options.split!r}): "
            f"{type(e).__name__}: {e}"
        ) from e
    return _dataset_plan(url, source, repo, ds, options)


def _parquet_plan(
    url: str, fs: Any, root: str, paths: list[str], name: str, options: DatasetOptions, so: dict
) -> _DatasetPlan:
    import datasets

    files = [_full_url(fs, p) for p in paths]
    try:
        ds = datasets.load_dataset(
            "parquet",
            data_files={options.split: files},  # keyed by split so any split name is accepted
            split=options.split,
            streaming=True,
            storage_options=copy.deepcopy(so),  # load_dataset mutates it (FACTS)
        )
    except Exception as e:  # noqa: BLE001
        raise InputError(f"cannot read Parquet dataset {url!r}: {type(e).__name__}: {e}") from e
    return _dataset_plan(url, _full_url(fs, root), name, ds, options)


def _dataset_plan(url: str, source: str, name: str, ds: Any, options: DatasetOptions) -> _DatasetPlan:
    from datasets import Image, LargeList, List

    if ds.features is None:  # untyped streams (e.g. JSON): infer from the first rows
        ds = ds._resolve_features()
    features = ds.features or {}
    column = options.image_column or _find_image_column(features)
    if column is None:
        raise InputError(
            f"no image column in dataset {url!r}: columns are {list(features)}; pass --image-column "
            "NAME (for a repo of PDF or image files, pass its folder: hf://datasets/OWNER/NAME/FOLDER)"
        )
    if column not in features:
        raise InputError(f"image column {column!r} not in dataset {url!r}: columns are {list(features)}")
    feature = features[column]
    # Keep images encoded: Image(decode=False) yields {"bytes", "path"} dicts. In datasets 5.x a
    # list of images is List(Image()) (Sequence(...) now returns a List) or LargeList(Image()).
    if isinstance(feature, List):
        ds, is_list = ds.cast_column(column, List(Image(decode=False))), True
    elif isinstance(feature, LargeList):
        ds, is_list = ds.cast_column(column, LargeList(Image(decode=False))), True
    else:
        ds, is_list = ds.cast_column(column, Image(decode=False)), False
    prefix = f"{name}/{options.config or 'default'}/{options.split}"
    return _DatasetPlan(url, source, prefix, ds.select_columns([column]), column, is_list)


def _find_image_column(features: dict) -> str | None:
    for name in ("images", "image"):
        if name in features:
            return name
    for name, feature in features.items():
        if _is_image_like(feature) or _is_image_like(getattr(feature, "feature", None)):
            return name
    return None


def _is_image_like(feature: Any) -> bool:
    from datasets import Image

    # Plain Parquet without datasets metadata stores images as struct<bytes, path>.
    return isinstance(feature, Image) or (isinstance(feature, dict) and set(feature) == {"bytes", "path"})


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
    for plan in plans:
        if isinstance(plan, _DatasetPlan):
            if plan.prefix in prefixes:
                raise InputError(
                    f"dataset inputs {prefixes[plan.prefix]!r} and {plan.url!r} both give doc_ids "
                    f"{plan.prefix}/...; give each dataset once (rename one Parquet folder)"
                )
            prefixes[plan.prefix] = plan.url
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


def _stream(plans: list[_Plan], so: dict) -> Iterator[DocumentRef]:
    index = 0
    for plan in plans:
        if isinstance(plan, _FilesPlan):
            for doc_id, (path, kind) in zip(plan.doc_ids, plan.files):
                src = plan.source(path)
                yield DocumentRef(doc_id=doc_id, index=index, source=src, kind=kind, location=src)
                index += 1
        else:
            for row, example in enumerate(plan.dataset):
                value = example[plan.column]
                items = (value or []) if plan.is_list else ([value] if value is not None else [])
                images = tuple(_image_bytes(item, so) for item in items if item is not None)
                yield DocumentRef(
                    doc_id=f"{plan.prefix}/{row:08d}",
                    index=index,
                    source=plan.source,
                    kind="dataset_row",
                    location=plan.source,
                    images=images,
                )
                index += 1


def _image_bytes(item: dict, so: dict) -> bytes:
    """The encoded bytes of one ``Image(decode=False)`` value, reading ``path`` if needed."""
    if item.get("bytes") is not None:
        return item["bytes"]
    path = item.get("path")
    if not path:
        return b""  # the renderer reports an empty image for this page
    try:
        with fsspec.open(path, "rb", **store_options(path, so)) as f:
            return f.read()
    except (OSError, ValueError) as e:
        # One unreadable image must not stop the listing; the renderer turns b"" into a page error.
        logger.warning("cannot read dataset image %s: %s", path, e)
        return b""
