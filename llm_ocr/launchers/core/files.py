"""Local files a launch's options name (schemas, a classes file), shipped beside the output.

A job cannot read a path on the launching machine, but it can read its own output. So a
``--fields-schema``, ``--describe-schema`` or ``--classes`` that names a local file is copied
under ``OUT/_state/launch-files/DIGEST/NAME`` when the jobs are submitted, and the jobs' command
line names that copy. A classes file's local schema files are shipped too and the copy names
them by URL. The file name is kept: a schema's name (the ``class`` of its rows) comes from it.

Inline JSON, URLs and pydantic models (``package.module:Model``) are passed on unchanged: a
pydantic model must be importable in the image, which nothing here can check.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from fsspec.core import split_protocol

from llm_ocr.storage import Storage

#: fsspec protocols of paths on this machine, which no job can read.
LOCAL_PROTOCOLS = frozenset({None, "file", "local"})
#: Where shipped files live under the output.
FILES_DIR = ("_state", "launch-files")
#: Options whose value may be a schema file, and the flag that names them in errors.
SCHEMA_OPTIONS = {"fields_schema": "--fields-schema", "describe_schema": "--describe-schema"}
CLASSES_OPTION = "classes"


class ShipError(ValueError):
    """A local file an option names cannot be read or used."""


@dataclass(frozen=True)
class ShippedFile:
    """A local file's content and the URL the jobs read it from."""

    url: str
    data: bytes
    source: str


def is_local_file(value: Any) -> TypeGuard[str]:
    """Whether ``value`` names a file on this machine (not a URL, inline JSON or pydantic path)."""
    if not isinstance(value, str) or value.strip().startswith("{"):
        return False
    return split_protocol(value)[0] in LOCAL_PROTOCOLS and os.path.isfile(_local_path(value))


def ship_local_files(stage_options: Mapping[str, Any], output: str) -> tuple[dict[str, Any], list[ShippedFile]]:
    """``stage_options`` with each local schema or classes file replaced by the URL of its copy
    under ``output``, and the copies to upload; :class:`ShipError` if one cannot be read. (The
    jobs check what the files hold, before they start a server.)"""
    options = dict(stage_options)
    shipped: list[ShippedFile] = []
    for name, flag in SCHEMA_OPTIONS.items():
        value = options.get(name)
        if not is_local_file(value):
            continue
        copy = _copy(output, _local_path(value), _read(value, flag))
        shipped.append(copy)
        options[name] = copy.url
    classes = options.get(CLASSES_OPTION)
    if is_local_file(classes):
        copies = _classes_copies(output, _local_path(classes))
        shipped += copies
        options[CLASSES_OPTION] = copies[-1].url
    return options, shipped


def upload(files: list[ShippedFile], output: str, storage_options: dict[str, Any] | None) -> None:
    """Write ``files`` under ``output`` (a copy already there is left: same digest, same bytes)."""
    if not files:
        return
    out = Storage(output, storage_options)
    for file in files:
        path = out.path(*file.url[len(output.rstrip("/")) + 1 :].split("/"))
        if not out.exists(path):
            out.write_atomic(path, file.data)
    out.flush()


def _classes_copies(output: str, path: str) -> list[ShippedFile]:
    """The copies of classes file ``path`` and of the local schema files it names (the classes
    file last), its schemas renamed to their copies' URLs."""
    import yaml

    try:
        data = yaml.safe_load(_read(path, "--classes"))
    except yaml.YAMLError as exc:
        raise ShipError(f"--classes {path!r} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("classes"), dict):
        raise ShipError(f"--classes {path!r}: expected a mapping with a 'classes' mapping (class name -> schema and "
                        "rules)")
    base = os.path.dirname(os.path.abspath(path))
    copies = []
    for spec in data["classes"].values():
        if not isinstance(spec, dict) or not isinstance(spec.get("schema"), str):
            continue  # the job's own check names what is wrong with it
        schema = spec["schema"]
        local = schema if os.path.isabs(schema) else os.path.join(base, schema)
        if is_local_file(local) and "://" not in schema:
            copy = _copy(output, local, _read(local, "--classes"))
            copies.append(copy)
            spec["schema"] = copy.url
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    copies.append(_copy(output, path, text.encode()))
    return copies


def _copy(output: str, path: str, data: bytes) -> ShippedFile:
    digest = hashlib.sha256(data).hexdigest()[:16]
    url = "/".join([output.rstrip("/"), *FILES_DIR, digest, os.path.basename(path)])
    return ShippedFile(url=url, data=data, source=path)


def _local_path(value: str) -> str:
    return value.split("://", 1)[-1]


def _read(value: str, flag: str) -> bytes:
    try:
        with open(_local_path(value), "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise ShipError(f"{flag} {value!r}: cannot read it to ship it to the jobs: {exc}") from exc
