"""Listing inputs: order, doc_ids, kinds, datasets, remote (memory://) filesystems, sharding."""

from __future__ import annotations

import logging
import uuid

import fsspec
import pytest
from sources_testdata import finevision_parquet, make_pdf, png, write

from llm_ocr.options import DatasetOptions
from llm_ocr.sources import DocumentRef, InputError, list_documents, plan_inputs


@pytest.fixture(scope="module")
def pdf_bytes() -> bytes:
    return make_pdf(pages=1)


@pytest.fixture
def tree(tmp_path, pdf_bytes):
    """docs/ with nested documents, mixed-case extensions and files to skip."""
    root = tmp_path / "docs"
    for rel in ["b.pdf", "a/z.PNG", "a/y.jpg", "a-b.pdf", "c/d/e.TIFF"]:
        write(root / rel, pdf_bytes if rel.lower().endswith(".pdf") else png())
    for rel in ["notes.txt", "a/.DS_Store", "c/data.json"]:
        write(root / rel, b"not a document")
    return root


def refs(*inputs, **kw) -> list[DocumentRef]:
    return list(list_documents([str(i) for i in inputs], **kw))


def test_folder_order_doc_ids_kinds_and_skip_warning(tree, caplog):
    with caplog.at_level(logging.WARNING, logger="llm_ocr.sources.listing"):
        docs = refs(tree)
    assert [d.doc_id for d in docs] == ["a-b.pdf", "a/y.jpg", "a/z.PNG", "b.pdf", "c/d/e.TIFF"]
    assert [d.index for d in docs] == [0, 1, 2, 3, 4]
    assert [d.kind for d in docs] == ["pdf", "image", "image", "pdf", "image"]
    assert docs[1].source == docs[1].location == str(tree / "a/y.jpg")
    assert all(d.images == () for d in docs)
    warning = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert "skipping 3 file" in warning and "notes.txt" in warning
    assert refs(tree) == docs  # deterministic


def test_single_file_input_and_sniffed_unknown_extension(tmp_path, pdf_bytes):
    f = write(tmp_path / "sub" / "report.pdf", pdf_bytes)
    (doc,) = refs(f)
    assert (doc.doc_id, doc.kind, doc.location) == ("report.pdf", "pdf", str(f))
    # An explicitly given file is listed whatever its extension; its kind comes from its bytes.
    assert refs(write(tmp_path / "scan.bin", pdf_bytes))[0].kind == "pdf"
    assert refs(write(tmp_path / "notes.txt", b"hello"))[0].kind == "image"


def test_several_inputs(tree, tmp_path, pdf_bytes):
    other = write(tmp_path / "more" / "x.pdf", pdf_bytes)
    docs = refs(tree, other)
    assert [d.doc_id for d in docs] == [
        "docs/a-b.pdf", "docs/a/y.jpg", "docs/a/z.PNG", "docs/b.pdf", "docs/c/d/e.TIFF", "more/x.pdf",
    ]
    assert [d.index for d in docs] == list(range(6))
    # Inputs keep the order given.
    assert refs(other, tree)[0].doc_id == "more/x.pdf"


@pytest.mark.parametrize("second", ["docs/b.pdf", "docs", "docs/a"])
def test_collisions_raise_before_anything_is_listed(tree, second):
    with pytest.raises(InputError, match="same doc_id"):
        list_documents([str(tree), str(tree.parent / second)])


def test_missing_input_raises_up_front(tree):
    with pytest.raises(InputError, match=r"input not found: .*nope"):
        list_documents([str(tree), str(tree / "nope")])  # raises at call time, nothing yielded


def test_empty_and_useless_folders(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="empty"):
        list_documents([str(tmp_path / "empty")])
    write(tmp_path / "junk" / "a.txt", b"x")
    with pytest.raises(InputError, match=r"no documents in .*supported extension"):
        list_documents([str(tmp_path / "junk")])
    with pytest.raises(InputError, match="no INPUT"):
        list_documents([])


def test_symlinked_folders_and_files_are_read_and_each_folder_once(tmp_path, pdf_bytes, caplog):
    """A symlinked folder was skipped as "a file with an unsupported extension" (fsspec's local
    find lists a link as a file), its documents silently left out."""
    elsewhere = tmp_path / "elsewhere"
    write(elsewhere / "scan.png", png())
    write(elsewhere / "deep" / "memo.pdf", pdf_bytes)
    root = tmp_path / "docs"
    write(root / "own.pdf", pdf_bytes)
    (root / "linked").symlink_to(elsewhere, target_is_directory=True)
    (root / "twice").symlink_to(elsewhere, target_is_directory=True)  # the same folder again: listed once
    (root / "sub").mkdir()
    (root / "sub" / "up").symlink_to(root, target_is_directory=True)  # a cycle
    (root / "page.jpg").symlink_to(elsewhere / "scan.png")
    (root / "gone.pdf").symlink_to(tmp_path / "nowhere.pdf")  # broken: listed, its read gets the error row
    with caplog.at_level(logging.WARNING, logger="llm_ocr.sources.listing"):
        docs = refs(root)
    assert [(d.doc_id, d.kind) for d in docs] == [
        ("gone.pdf", "pdf"), ("linked/deep/memo.pdf", "pdf"), ("linked/scan.png", "image"), ("own.pdf", "pdf"),
        ("page.jpg", "image"),
    ]
    said = [r.getMessage() for r in caplog.records]
    assert any(f"{root / 'twice'}: not listed again" in m and str(root / "linked") in m for m in said), said
    assert any(f"{root / 'sub' / 'up'}: not listed again" in m for m in said), said
    assert not any("skipping" in m for m in said), said


def test_every_file_a_folder_skips_is_named_once(tmp_path, caplog):
    root = tmp_path / "docs"
    write(root / "a.pdf", make_pdf(pages=1))
    for name in ["notes.txt", "b/table.csv", "b/slides.pptx"]:
        write(root / name, b"x")
    with caplog.at_level(logging.WARNING, logger="llm_ocr.sources.listing"):
        assert [d.doc_id for d in refs(root)] == ["a.pdf"]
    (said,) = [r.getMessage() for r in caplog.records]
    assert said.endswith("skipping 3 file(s) that are not documents (no PDF or image extension): b/slides.pptx, "
                         "b/table.csv, notes.txt")


@pytest.mark.parametrize("name", ["photo.heic", "photo.HEIF", "shot.avif", "scan.jp2", "page.jxl", "book.djvu"])
def test_page_formats_are_listed_as_images_whether_or_not_they_can_be_read(tmp_path, name):
    """A .heic was skipped with a warning and the run exited 0: now it is read, or gets an error row
    that says what reads it (tests/sources/test_sources_render.py)."""
    write(tmp_path / "in" / name, b"whatever")
    assert [(d.doc_id, d.kind) for d in refs(tmp_path / "in")] == [(name, "image")]


def test_memory_filesystem(pdf_bytes):
    fs = fsspec.filesystem("memory")
    base = f"/t-{uuid.uuid4().hex}"
    fs.pipe(f"{base}/in/b/2.png", png())
    fs.pipe(f"{base}/in/1.pdf", pdf_bytes)
    fs.pipe(f"{base}/in/skip.csv", b"a,b")
    docs = refs(f"memory://{base}/in")
    assert [(d.doc_id, d.kind) for d in docs] == [("1.pdf", "pdf"), ("b/2.png", "image")]
    assert docs[0].location == f"memory://{base}/in/1.pdf"
    with fsspec.open(docs[1].location, "rb") as f:
        assert f.read() == png()
    with pytest.raises(InputError, match="input not found"):
        list_documents([f"memory://{base}/missing"])


@pytest.fixture(scope="module")
def fv_rows() -> list[list[bytes]]:
    return [[png("red")], [], [png("blue"), png("green", (8, 8))], [png("white")]]


@pytest.fixture
def fv_file(tmp_path, fv_rows):
    return finevision_parquet(tmp_path / "fv" / "olmocr.parquet", fv_rows)


def test_parquet_dataset_rows_keep_encoded_bytes(fv_file, fv_rows):
    docs = refs(fv_file)
    assert [d.doc_id for d in docs] == [f"olmocr/default/train/{i:08d}" for i in range(4)]
    assert all(d.kind == "dataset_row" and d.source == str(fv_file) for d in docs)
    # Exact bytes: nothing was decoded and re-encoded; the zero-image row is still listed.
    assert [list(d.images) for d in docs] == fv_rows
    assert docs[1].images == ()


def test_parquet_folder_split_column_and_mixed_inputs(fv_file, fv_rows, tree):
    opts = DatasetOptions(split="validation", image_column="images")
    docs = refs(tree, fv_file.parent, dataset=opts)
    assert [d.index for d in docs] == list(range(9))
    assert docs[5].doc_id == "fv/default/validation/00000000"
    assert docs[7].images == tuple(fv_rows[2])
    with pytest.raises(InputError, match="'nope' not in dataset"):
        list_documents([str(fv_file)], dataset=DatasetOptions(image_column="nope"))
    with pytest.raises(InputError, match="both give doc_ids"):
        list_documents([str(fv_file), str(fv_file)])


def test_parquet_without_image_column_and_auto_detection(tmp_path):
    # datasets imported in the tests that use it: every pytest worker collects this module, and
    # datasets (with pandas) costs about 0.8 CPU-seconds to import.
    import datasets

    ds = datasets.Dataset.from_dict(
        {"text": ["a"], "scan": [{"bytes": png(), "path": None}]},
        features=datasets.Features({"text": datasets.Value("string"), "scan": datasets.Image()}),
    )
    ds.to_parquet(str(tmp_path / "scans.parquet"))
    (doc,) = refs(tmp_path / "scans.parquet")
    assert doc.images == (png(),)
    datasets.Dataset.from_dict({"text": ["a"]}).to_parquet(str(tmp_path / "t.parquet"))
    with pytest.raises(InputError, match="no image column"):
        list_documents([str(tmp_path / "t.parquet")])


def test_image_read_through_path_when_bytes_missing(tmp_path):
    import datasets

    img = write(tmp_path / "page.png", png("blue"))
    ds = datasets.Dataset.from_dict(
        {"image": [{"bytes": None, "path": str(img)}]}, features=datasets.Features({"image": datasets.Image()})
    )
    # Dataset.to_parquet would embed the file's bytes; write the path-only table directly.
    import pyarrow.parquet as pq

    pq.write_table(ds.data.table, tmp_path / "p.parquet")
    (doc,) = refs(tmp_path / "p.parquet")
    assert doc.images == (png("blue"),)


def test_parquet_on_memory_filesystem(fv_file, fv_rows):
    url = f"memory://fv-{uuid.uuid4().hex}/data/part-0.parquet"
    with fsspec.open(url, "wb") as f:
        f.write(fv_file.read_bytes())
    docs = refs(url.rsplit("/", 1)[0])
    assert [d.doc_id for d in docs][:2] == ["data/default/train/00000000", "data/default/train/00000001"]
    assert [list(d.images) for d in docs] == fv_rows


@pytest.mark.parametrize("num_shards", [1, 2, 3, 4])
def test_sharding_is_a_partition(tree, fv_file, num_shards):
    docs = refs(tree, fv_file)
    shards = [refs(tree, fv_file, num_shards=num_shards, shard_index=i) for i in range(num_shards)]
    ids = [d.doc_id for shard in shards for d in shard]
    assert sorted(ids) == sorted(d.doc_id for d in docs)
    assert len(ids) == len(set(ids)) == len(docs)
    by_id = {d.doc_id: d for d in docs}
    assert all(d == by_id[d.doc_id] for shard in shards for d in shard)  # global numbers kept
    # Files go round-robin, as they always have.
    assert all(d.index % num_shards == i for i, shard in enumerate(shards) for d in shard if d.kind != "dataset_row")


def test_sharding_rejects_bad_arguments(tree):
    with pytest.raises(ValueError):
        refs(tree, num_shards=2, shard_index=2)
    with pytest.raises(ValueError):
        refs(tree, num_shards=0, shard_index=0)


@pytest.mark.parametrize("num_shards", [1, 3])
def test_work_groups_partition_each_shard_and_its_size_is_known_ahead(tree, fv_file, num_shards):
    plan = plan_inputs([str(tree), str(fv_file)])
    for shard in range(num_shards):
        whole = list(plan.documents(num_shards, shard))
        size = plan.shard_size(num_shards, shard)
        assert size == len(whole)
        groups = [list(plan.documents(num_shards, shard, start=s, stop=s + 2)) for s in range(0, size, 2)]
        assert [d for g in groups for d in g] == whole
        assert list(plan.documents(num_shards, shard, start=size)) == []
