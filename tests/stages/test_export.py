"""Export for humans: OUT/markdown/NAME.md with figure files beside it, names safe from any doc_id."""

from __future__ import annotations

import io
import posixpath
import re
from pathlib import Path

import fsspec
from PIL import Image

from llm_ocr.records import Figure, PageResult
from llm_ocr.stages.assemble import assemble_document
from llm_ocr.stages.export import EXPORT_DIR, export_document, safe_name
from llm_ocr.storage import Storage
from llm_ocr.testing import SimulatedServer
from tests.conftest import read_stage
from tests.docs import make_corpus
from tests.stages.common import stage

HOSTILE = [
    "../../etc/passwd",
    "/etc/passwd",
    "..",
    ".",
    "",
    ".hidden",
    "a/b",
    "a_b",
    "a\\b",
    "A_B",
    "a:b",
    "a\x00b",
    "a\nb\tc\x1b[31m",
    "CON",
    "con.pdf",
    "Überblick – 報告書.pdf",
    "uberblick_.pdf",
    "x" * 5000,
    "x" * 5000 + "y",
    "report.pdf-0123456789abcdef",
    "report.pdf",
    "C:\\Windows\\system32",
    "hf://datasets/owner/name/00000001",
]
SAFE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
LINK = re.compile(r"!\[[^\]]*\]\(([^)]+)\)")


def test_safe_names_are_plain_bounded_distinct_and_stable() -> None:
    names = [safe_name(doc_id) for doc_id in HOSTILE]
    for doc_id, name in zip(HOSTILE, names):
        assert SAFE.match(name), (doc_id, name)
        assert len(name) <= 100 and ".." not in name and name.split(".")[0] not in {"con", "nul", "aux", "prn"}
        assert safe_name(doc_id) == name  # deterministic: a rerun overwrites, never duplicates
    assert len(set(names)) == len(names)
    assert len({n.lower() for n in names}) == len(names)  # distinct on case-insensitive disks too
    assert safe_name("report.pdf") == "report.pdf" and safe_name("a_b") == "a_b"  # plain ids stay readable


def hostile_documents() -> list:
    """One assembled document per hostile id, each with a figure (its id hostile on odd indexes),
    a figure whose crop failed, and a fake link a model could write."""
    image = io.BytesIO()
    Image.new("RGB", (30, 20), "red").save(image, format="PNG")
    docs = []
    for index, doc_id in enumerate(HOSTILE):
        figure = Figure(id="../p1-f1" if index % 2 else "p1-f1", bbox=[0, 0, 30, 20], image=image.getvalue(),
                        description=f"A red box for {doc_id[:20]!r}. More.")
        lost = Figure(id="p1-f2", bbox=[0, 0, 1, 1], error="crop failed")
        markdown = f"Text of {index}.\n\n![](figure:{figure.id})\n\n![](figure:p1-f2)\n\n![](figure:../../../etc/shadow)"
        page = PageResult(doc_id=doc_id, doc_index=index, page=1, source=doc_id, num_pages=1, markdown=markdown,
                          figures=[figure, lost], status="ok")
        docs.append(assemble_document([page]))
    return docs


def test_hostile_doc_ids_stay_inside_the_export_folder(tmp_path: Path) -> None:
    out = Storage(str(tmp_path / "out"))
    written = [export_document(out, doc) for doc in hostile_documents()]
    root = (tmp_path / "out" / EXPORT_DIR).resolve()
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert all(p.resolve().is_relative_to(root) for p in files), files
    assert len({Path(p) for p in written}) == len(HOSTILE)  # no document overwrote another
    assert len(list(root.glob("*.md"))) == len(HOSTILE)
    for path in written:
        text = Path(path).read_text(encoding="utf-8")
        (target,) = LINK.findall(text)  # the fake link is text; the failed crop is no image
        assert not target.startswith(("/", "figure:")) and ".." not in target
        image = (Path(path).parent / target).resolve()
        assert image.is_relative_to(root / "figures") and Image.open(image).size == (30, 20)
        assert "*[figure unavailable]*" in text and "!\\[\\](figure:../../../etc/shadow)" in text


def test_export_works_on_any_fsspec_output() -> None:
    out = Storage("memory://export-test/out")
    doc = hostile_documents()[6]  # "a/b"
    path = export_document(out, doc)
    fs = fsspec.filesystem("memory")
    assert path == f"/export-test/out/{EXPORT_DIR}/{safe_name('a/b')}.md"
    (target,) = LINK.findall(fs.cat_file(path).decode())
    assert fs.exists(posixpath.join(posixpath.dirname(path), target))


def test_assemble_exports_documents_of_an_earlier_run(tmp_path: Path) -> None:
    make_corpus(tmp_path / "docs", documents=2, pages=3)
    out = tmp_path / "out"
    with SimulatedServer("--instant", corpus=tmp_path / "docs") as server:
        assert stage("run", out, server, str(tmp_path / "docs")).returncode == 0
    assert not (out / EXPORT_DIR).exists()
    # Asked later, on its own: the documents assembled earlier are exported, nothing reassembled.
    result = stage("assemble", out, None, "--export-markdown")
    assert result.returncode == 0, result.stderr
    assert len(list((out / "assemble").glob("*.parquet"))) == 1
    documents = {d["doc_id"]: d for d in read_stage(out, "assemble")}
    for doc_id, document in documents.items():
        path = out / EXPORT_DIR / f"{doc_id}.md"
        text = path.read_text(encoding="utf-8")
        targets = LINK.findall(text)
        assert targets == [f"figures/{doc_id}/{f['id']}.png" for f in document["figures"]]
        for target, figure in zip(targets, document["figures"]):
            assert (path.parent / target).read_bytes() == figure["image"]["bytes"]
            assert figure["description"] in text
        assert text.count("<--- Page Split --->") == 2
    again = stage("assemble", out, None, "--export-markdown")
    assert again.returncode == 0 and "already complete" in again.stderr
