"""Dataset INPUTs: Parquet files or folders and Hugging Face Hub datasets, as rows of page images.

A Parquet dataset is read directly (:mod:`.parquet`): footers first, then only the row groups a
shard owns, only the image column, by byte ranges. A Hub dataset is resolved by ``datasets``
into the very file list its streaming reader would use (``load_dataset_builder``: metadata
only), and read the same way when those files are Parquet, which is the Hub's usual format (and
FineVision's). Rows are numbered as ``datasets`` streams them (files in order, rows in file
order), which is what ``doc_id`` and ``doc_index`` are built from. Any other Hub dataset
(JSON, image folders, scripts) is streamed by ``datasets`` as before: every shard then reads
everything and keeps its rows (:class:`StreamPlan`).

Images stay encoded: a row yields the bytes of its images, never pixels.
"""

from __future__ import annotations

import copy
import io
import logging
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import fsspec
import pyarrow as pa

from llm_ocr.sharding import weighted_owners
from llm_ocr.storage.stores import store_options

from .parquet import ParquetFiles, ParquetFooterError, ReadStats, RowGroup, open_parquet_files

logger = logging.getLogger(__name__)


class DatasetInputError(Exception):
    """A dataset INPUT is unusable; the message says what to do (listing raises it as InputError)."""


@dataclass
class ParquetPlan:
    """A dataset read by byte ranges: its files with footers and the image column."""

    url: str
    source: str
    prefix: str  # doc_id prefix: NAME/CONFIG/SPLIT
    files: ParquetFiles
    column: str
    is_list: bool

    @cached_property
    def groups(self) -> list[RowGroup]:
        """The row groups, weighed by the bytes of the image column."""
        return self.files.row_groups(self.column)

    @property
    def num_rows(self) -> int:
        """Rows (documents) of the dataset."""
        return self.files.num_rows

    def owners(self, num_shards: int) -> list[int]:
        """The shard of each row group (:func:`llm_ocr.sharding.weighted_owners`)."""
        return weighted_owners([g.weight for g in self.groups], num_shards)


@dataclass
class StreamPlan:
    """A dataset only ``datasets`` can read: streamed whole, rows kept by the caller."""

    url: str
    source: str
    prefix: str
    dataset: Any  # datasets.IterableDataset, cast so images stay encoded
    column: str
    is_list: bool
    stats: ReadStats = field(default_factory=ReadStats)  # stays empty: datasets does the reading


DatasetPlan = ParquetPlan | StreamPlan


def parquet_plan(
    url: str, fs: Any, source: str, paths: list[str], sizes: list[int | None], name: str, options: Any,
    stats: ReadStats,
    *, files: ParquetFiles | None = None,
) -> ParquetPlan:
    """A Parquet file or folder INPUT (``paths`` sorted), its footers read now (``files``: read already)."""
    if files is None:
        try:
            files = open_parquet_files(fs, paths, sizes, stats)
        except ParquetFooterError as exc:
            raise DatasetInputError(f"cannot read Parquet dataset {url!r}: {exc}") from exc
    return _checked(url, source, name, files, options)


def hub_plan(url: str, name: str, source: str, options: Any, so: dict, stats: ReadStats) -> DatasetPlan:
    """A Hub dataset ``OWNER/NAME[@REVISION]``: its Parquet files read by ranges when it has them."""
    import datasets  # heavy import, only needed for dataset inputs
    from datasets.packaged_modules.parquet.parquet import Parquet

    repo, _, revision = name.partition("@")
    what = f"dataset {url!r} (config={options.config!r}, split={options.split!r})"
    try:
        builder = datasets.load_dataset_builder(
            repo,
            options.config,
            revision=revision or None,
            storage_options=copy.deepcopy(so) or None,  # datasets mutates it (FACTS)
        )
    except Exception as e:  # any failure makes the whole INPUT unusable
        raise DatasetInputError(f"cannot load {what}: {type(e).__name__}: {e}") from e
    data_files = builder.config.data_files or {}
    if options.split not in data_files:
        raise DatasetInputError(f"cannot load {what}: no split {options.split!r}; splits are {sorted(data_files)}")
    config = builder.config
    if not isinstance(builder, Parquet) or getattr(config, "filters", None) or getattr(config, "columns", None):
        logger.warning("%s is not plain Parquet: streaming it whole with datasets (every shard reads all of it)", url)
        return _stream_plan(url, source, repo, builder, options)
    urls = list(data_files[options.split])
    fs, _ = fsspec.core.url_to_fs(urls[0], **store_options(urls[0], so))
    paths = [fs._strip_protocol(u) for u in urls]
    try:
        files = open_parquet_files(fs, paths, _sizes(fs, paths), stats)
    except ParquetFooterError as exc:
        raise DatasetInputError(f"cannot read {what}: {exc}") from exc
    return _checked(url, source, repo, files, options)


def _sizes(fs: Any, paths: list[str]) -> list[int | None]:
    """File sizes from one listing per folder (one paginated call on the Hub, not one per file)."""
    known: dict[str, int] = {}
    for folder in sorted({p.rsplit("/", 1)[0] for p in paths}):
        try:
            for entry in fs.ls(folder, detail=True):
                if entry.get("size") is not None:
                    known[fs._strip_protocol(entry["name"])] = int(entry["size"])
        except (OSError, ValueError):  # the footer reader asks file by file instead
            continue
    return [known.get(p) for p in paths]


def _stream_plan(url: str, source: str, repo: str, builder: Any, options: Any) -> StreamPlan:
    from datasets import Image, LargeList, List

    try:
        ds = builder.as_streaming_dataset(split=options.split)
    except Exception as e:
        raise DatasetInputError(f"cannot load dataset {url!r}: {type(e).__name__}: {e}") from e
    if ds.features is None:  # untyped streams (e.g. JSON): infer from the first rows
        ds = ds._resolve_features()
    features = ds.features or {}
    column = _image_column(url, features, options)
    feature = features[column]
    # Keep images encoded: Image(decode=False) yields {"bytes", "path"} dicts. In datasets 5.x a
    # list of images is List(Image()) (Sequence(...) now returns a List) or LargeList(Image()).
    if isinstance(feature, List):
        ds, is_list = ds.cast_column(column, List(Image(decode=False))), True
    elif isinstance(feature, LargeList):
        ds, is_list = ds.cast_column(column, LargeList(Image(decode=False))), True
    else:
        ds, is_list = ds.cast_column(column, Image(decode=False)), False
    return StreamPlan(url, source, _prefix(repo, options), ds.select_columns([column]), column, is_list)


def _checked(url: str, source: str, name: str, files: ParquetFiles, options: Any) -> ParquetPlan:
    """Find the image column and check every file has it, before any row is read."""
    from datasets import Features

    if not files.files:
        raise DatasetInputError(f"no Parquet files in dataset {url!r}")
    schema = files.schema
    column = _image_column(url, Features.from_arrow_schema(schema), options)
    kind = schema.field(column).type
    is_list = pa.types.is_list(kind) or pa.types.is_large_list(kind)
    item = kind.value_type if is_list else kind
    if not (pa.types.is_struct(item) or pa.types.is_binary(item) or pa.types.is_large_binary(item)):
        raise DatasetInputError(
            f"column {column!r} of dataset {url!r} does not hold images (type {kind}); pass --image-column NAME"
        )
    for f in files.files:
        if column not in f.metadata.schema.to_arrow_schema().names:
            raise DatasetInputError(f"file {f.path} of dataset {url!r} has no column {column!r}")
    return ParquetPlan(url, source, _prefix(name, options), files, column, is_list)


def _prefix(name: str, options: Any) -> str:
    return f"{name}/{options.config or 'default'}/{options.split}"


def _image_column(url: str, features: Any, options: Any) -> str:
    column = options.image_column or _find_image_column(features)
    if column is None:
        raise DatasetInputError(
            f"no image column in dataset {url!r}: columns are {list(features)}; pass --image-column "
            "NAME (for a repo of PDF or image files, pass its folder: hf://datasets/OWNER/NAME/FOLDER)"
        )
    if column not in features:
        raise DatasetInputError(f"image column {column!r} not in dataset {url!r}: columns are {list(features)}")
    return column


def _find_image_column(features: Any) -> str | None:
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


def row_images(value: Any, is_list: bool, so: dict) -> tuple[bytes, ...]:
    """The encoded page images of one row's image value (a list of images, or one image)."""
    items = (value or []) if is_list else ([value] if value is not None else [])
    return tuple(_image_bytes(item, so) for item in items if item is not None)


def _image_bytes(item: Any, so: dict) -> bytes:
    """The encoded bytes of one image value (``{"bytes", "path"}`` or raw bytes), reading
    ``path`` if needed."""
    if isinstance(item, (bytes, bytearray)):
        return bytes(item)
    if hasattr(item, "save"):  # a PIL image: streamed image folders decode despite decode=False
        buffer = io.BytesIO()
        item.save(buffer, format="PNG")  # lossless, whatever the original format
        return buffer.getvalue()
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
