"""Export for humans: ``OUT/markdown/NAME.md`` with figures in ``OUT/markdown/figures/NAME/``.

Links are relative, so the folder opens in any Markdown viewer wherever it is copied. NAME comes
from the document id, which is untrusted (file names, dataset ids, anything), so it is made safe:

* only ``a-z 0-9 . _ -`` survive (lower case: two ids differing in case must not collide on the
  case-insensitive file systems of macOS and Windows); everything else becomes ``_``;
* no leading dot (no ``..``, no hidden files), at most :data:`MAX_STEM` characters, never a
  Windows device name (``con``, ``nul``...);
* whenever anything had to change — or the id already looks like a changed name — a hash of the
  full id is appended, so two ids never share a name: an unchanged name never ends in a hash
  suffix, and two changed ones differ in their hashes.

Everything is written through :class:`~llm_ocr.storage.Storage`, so ``s3://`` or ``hf://``
outputs work the same; figures are written before the ``.md`` that links them.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from llm_ocr.records import DocumentResult
from llm_ocr.stages.assemble import FIGURE_LINK_ALT
from llm_ocr.storage import Storage
from llm_ocr.storage.parts import remove_stale_temp_files

EXPORT_DIR = "markdown"
FIGURES_DIR = "figures"
MAX_STEM = 80
HASH_CHARS = 16  # 64 bits: collisions among ids with the same stem stay negligible at any scale
_UNSAFE = re.compile(r"[^a-z0-9._-]+")
_HASHED = re.compile(rf"-[0-9a-f]{{{HASH_CHARS}}}$")
# Windows refuses these as a file's base name whatever the extension.
_RESERVED = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))}


def safe_name(identifier: str, max_stem: int = MAX_STEM) -> str:
    """A file-name-safe, collision-free name for ``identifier`` (see the module docstring)."""
    stem = _UNSAFE.sub("_", identifier.lower()).lstrip("._-")[:max_stem].rstrip(".")
    base, dot, rest = stem.partition(".")
    if base in _RESERVED:
        stem = f"{base}_{dot}{rest}"  # "con.pdf" -> "con_.pdf": no longer a device name
    if stem and stem == identifier and _HASHED.search(stem) is None:
        return stem
    digest = hashlib.sha256(identifier.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_CHARS]
    return f"{stem or 'doc'}-{digest}"


def _extension(image: bytes) -> str:
    return ".jpg" if image.startswith(b"\xff\xd8") else ".png"  # Extract crops are PNG


def _image_bytes(figure: dict[str, Any]) -> bytes | None:
    image = figure.get("image")
    if isinstance(image, dict):
        image = image.get("bytes")
    return bytes(image) if isinstance(image, (bytes, bytearray)) else None


def markdown_path(out: Storage, doc_id: str) -> str:
    """Where the exported Markdown of a document goes."""
    return out.path(EXPORT_DIR, safe_name(doc_id) + ".md")


def export_markdown(doc: DocumentResult) -> tuple[str, dict[str, bytes]]:
    """The exported Markdown of a document and its figure files (relative path → bytes)."""
    name = safe_name(doc.doc_id)
    files: dict[str, bytes] = {}
    targets: dict[str, str | None] = {}
    for figure in doc.figures:
        image = _image_bytes(figure)
        if image is None:
            targets[figure["id"]] = None
            continue
        relative = f"{FIGURES_DIR}/{name}/{safe_name(figure['id'])}{_extension(image)}"
        files[relative] = bytes(image)
        targets[figure["id"]] = relative

    def replace(match: re.Match[str]) -> str:
        alt, figure_id = match.group(1), match.group(2)
        if figure_id not in targets:
            return match.group(0)  # not a figure of this document: leave the text alone
        target = targets[figure_id]
        if target is None:  # the crop failed: say so rather than show a broken image
            return f"*[figure unavailable{': ' + alt if alt else ''}]*"
        return f"![{alt}]({target})"

    return FIGURE_LINK_ALT.sub(replace, doc.markdown), files


def export_document(out: Storage, doc: DocumentResult) -> str:
    """Write one document's ``.md`` and figure files under ``OUT/markdown``; the ``.md`` path."""
    markdown, files = export_markdown(doc)
    folder = out.path(EXPORT_DIR)
    # A kill -9 during an earlier export of this document may have left temporary files
    # (only this document's names: its figure folder and its .md), which would litter the folder.
    name = safe_name(doc.doc_id)
    remove_stale_temp_files(out, f"{EXPORT_DIR}/{FIGURES_DIR}/{name}/*")
    remove_stale_temp_files(out, f"{EXPORT_DIR}/{name}.md")
    for relative, data in files.items():
        out.write_atomic(f"{folder}/{relative}", data)
    path = markdown_path(out, doc.doc_id)
    out.write_atomic(path, markdown.encode("utf-8"))
    return path
