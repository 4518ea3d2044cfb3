"""The llm-ocr wheel shipped with a job: built from the code this process runs, byte-stable.

The wheel is assembled directly from the imported ``llm_ocr`` package (every file but caches),
so what a job runs is exactly what the launcher runs, editable installs and uncommitted changes
included, and no build backend or network is needed. Its metadata (name, version, dependencies,
extras, console script) comes from the ``pyproject.toml`` beside the package when there is one
(a source checkout), else from the installed distribution.

The archive is deterministic (sorted entries, fixed timestamps and modes), so the same code gives
the same bytes and the same :attr:`Wheel.digest`: the launcher uploads a wheel only when no
wheel with that digest is stored yet (:func:`upload_wheel`, for the platforms whose jobs fetch it
from a bucket).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import io
import logging
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

import llm_ocr
from llm_ocr.launchers.core.spec import LaunchError, brief_error

log = logging.getLogger("llm_ocr")

DIST_NAME = "llm-ocr"
_SKIP_DIRS = {"__pycache__"}
_SKIP_SUFFIXES = (".pyc", ".pyo", ".tmp", ".swp")
_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can carry


@dataclass(frozen=True)
class Wheel:
    """A built wheel: its file name, bytes and content digest."""

    filename: str
    data: bytes = b""

    @property
    def digest(self) -> str:
        """SHA-256 of the wheel's bytes (hex)."""
        return hashlib.sha256(self.data).hexdigest()


def build_wheel(package_dir: Path | None = None) -> Wheel:
    """A ``py3-none-any`` wheel of the ``llm_ocr`` package this process imported."""
    package_dir = package_dir or Path(llm_ocr.__file__).resolve().parent
    meta = _metadata(package_dir)
    name = re.sub(r"[-_.]+", "_", meta.name).lower()
    dist_info = f"{name}-{meta.version}.dist-info"
    entries: list[tuple[str, bytes]] = []
    for path in sorted(package_dir.rglob("*")):
        rel = path.relative_to(package_dir)
        if path.is_dir() or _SKIP_DIRS & set(rel.parts) or path.name.endswith(_SKIP_SUFFIXES):
            continue
        entries.append((f"{package_dir.name}/{rel.as_posix()}", path.read_bytes()))
    entries.append((f"{dist_info}/METADATA", meta.text.encode()))
    entries.append((f"{dist_info}/WHEEL",
                    b"Wheel-Version: 1.0\nGenerator: llm-ocr launcher\nRoot-Is-Purelib: true\nTag: py3-none-any\n"))
    if meta.entry_points:
        entries.append((f"{dist_info}/entry_points.txt", meta.entry_points.encode()))
    record = "".join(f"{path},sha256={_b64_digest(data)},{len(data)}\n" for path, data in entries)
    entries.append((f"{dist_info}/RECORD", (record + f"{dist_info}/RECORD,,\n").encode()))

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for member, data in entries:
            info = zipfile.ZipInfo(member, date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return Wheel(f"{name}-{meta.version}-py3-none-any.whl", buffer.getvalue())


def read_wheel(path: Path) -> Wheel:
    """A prebuilt wheel file (``--wheel PATH``)."""
    if not path.name.endswith(".whl"):
        raise ValueError(f"{path} is not a wheel (.whl) file")
    return Wheel(path.name, path.read_bytes())


def wheel_to_ship(path: str | Path | None) -> Wheel:
    """The wheel a launch ships: the file ``path`` (``--wheel``), else one built from the code this
    process runs; :class:`~llm_ocr.launchers.core.spec.LaunchError` when neither can be had."""
    try:
        return read_wheel(Path(path)) if path else build_wheel()
    except (OSError, ValueError) as exc:
        raise LaunchError(f"cannot ship llm-ocr: {exc}") from exc


def upload_wheel(wheel: Wheel, folder_url: str, *, hint: str) -> None:
    """Store ``wheel`` as ``folder_url/FILENAME`` (S3, GCS...: any store llm-ocr writes) unless a
    file of that name is there: the folder is named after the wheel's digest, so same name, same
    bytes. :class:`LaunchError` ending with ``hint`` (what to pass instead) when the store refuses."""
    from llm_ocr.storage import Storage  # the stores' libraries load only for a launch that ships code

    folder = Storage(folder_url.rstrip("/"))
    path = folder.path(wheel.filename)
    try:
        if folder.exists(path):
            log.info("llm-ocr wheel %s already at %s: not uploaded again", wheel.digest[:16], folder.url)
            return
        folder.write_atomic(path, wheel.data)
        folder.flush()
    except Exception as exc:
        raise LaunchError(f"could not upload the llm-ocr wheel to {folder.url} ({brief_error(exc)}); {hint}") from exc
    log.info("uploaded the llm-ocr wheel to %s", folder.display(path))


@dataclass(frozen=True)
class _Meta:
    name: str
    version: str
    text: str
    entry_points: str


def _b64_digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _metadata(package_dir: Path) -> _Meta:
    pyproject = package_dir.parent / "pyproject.toml"
    if pyproject.is_file():
        meta = _from_pyproject(pyproject)
        if meta is not None:
            return meta
    try:
        dist = importlib.metadata.distribution(DIST_NAME)
    except importlib.metadata.PackageNotFoundError:
        raise ValueError(
            "cannot build the llm-ocr wheel: no pyproject.toml beside the package and no installed "
            "llm-ocr distribution; build one (pip wheel --no-deps .) and pass --wheel PATH"
        ) from None
    text = dist.read_text("METADATA") or f"Metadata-Version: 2.1\nName: {DIST_NAME}\nVersion: {dist.version}\n"
    return _Meta(DIST_NAME, dist.version, text, dist.read_text("entry_points.txt") or "")


def _from_pyproject(path: Path) -> _Meta | None:
    try:
        import tomllib  # type: ignore[import-not-found]  # mypy checks as Python 3.10, which has none
    except ImportError:  # Python 3.10: use the installed distribution's metadata
        return None
    project = tomllib.loads(path.read_text()).get("project", {})
    if project.get("name") != DIST_NAME:
        return None
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {project['version']}",
    ]
    if "description" in project:
        lines.append(f"Summary: {project['description']}")
    if "requires-python" in project:
        lines.append(f"Requires-Python: {project['requires-python']}")
    lines += [f"Requires-Dist: {req}" for req in project.get("dependencies", [])]
    for extra, reqs in sorted(project.get("optional-dependencies", {}).items()):
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {req}; extra == "{extra}"' for req in reqs]
    scripts = project.get("scripts", {})
    entry_points = ("[console_scripts]\n" + "".join(f"{k} = {v}\n" for k,
                                                    v in sorted(scripts.items()))) if scripts else ""
    return _Meta(project["name"], project["version"], "\n".join(lines) + "\n", entry_points)
