"""Pins the global row numbers of Parquet dataset inputs: ``doc_id`` and ``doc_index``.

Written against the ``datasets``-streaming listing before the ranged Parquet reader replaced it
(issue 18), and kept so the numbering never changes: reruns, resume and outputs written by
earlier versions rely on it. The expectation is computed independently here, with plain
pyarrow: files in sorted path order, rows in file order, numbered across files from 0 (empty
files and rows without images included), ``doc_id = NAME/CONFIG/SPLIT/{row:08d}``, and
``doc_index`` counting on across the inputs in the order given.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from sources_testdata import make_pdf, write

from llm_ocr.bench.finevision import finevision_schema, write_finevision
from llm_ocr.options import DatasetOptions
from llm_ocr.sources import list_documents


def expected_rows(files: list[Path]) -> list[list[bytes]]:
    """Every row's image bytes, file by file in sorted order, read with pyarrow alone."""
    rows = []
    for path in sorted(files):
        for row in pq.read_table(path, columns=["images"]).column("images").to_pylist():
            rows.append([image["bytes"] for image in row or []])
    return rows


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """Five files of 3 to 9 rows in row groups of 2, an empty file, and rows without images."""
    folder = tmp_path_factory.mktemp("pin") / "fv"
    write_finevision(folder, files=5, rows=(3, 9), row_group_rows=2, images_per_row=(0, 3), image_side=(8, 24), seed=7)
    pq.ParquetWriter(folder / "train-00002-empty.parquet", finevision_schema()).close()  # sorts between files
    (folder / "README.md").write_text("not data")  # ignored beside the Parquet files
    return folder


def test_dataset_folder_rows_are_numbered_in_file_then_row_order(dataset: Path) -> None:
    files = sorted(dataset.glob("*.parquet"))
    rows = expected_rows(files)
    assert any(not images for images in rows) and len(files) == 6  # the cases the pin must cover
    docs = list(list_documents([str(dataset)]))
    assert [d.doc_id for d in docs] == [f"fv/default/train/{i:08d}" for i in range(len(rows))]
    assert [d.index for d in docs] == list(range(len(rows)))
    assert [list(d.images) for d in docs] == rows
    assert {(d.kind, d.source) for d in docs} == {("dataset_row", str(dataset))}


def test_single_file_split_and_numbering_across_inputs(dataset: Path, tmp_path: Path) -> None:
    pdfs = tmp_path / "pdfs"
    for name in ("b.pdf", "a.pdf"):
        write(pdfs / name, make_pdf(pages=1))
    one = sorted(dataset.glob("*.parquet"))[3]
    docs = list(list_documents([str(pdfs), str(one), str(dataset)], dataset=DatasetOptions(split="validation")))
    single, folder = expected_rows([one]), expected_rows(list(dataset.glob("*.parquet")))
    stem = one.name.removesuffix(".parquet")
    assert [d.doc_id for d in docs] == (
        ["a.pdf", "b.pdf"]
        + [f"{stem}/default/validation/{i:08d}" for i in range(len(single))]
        + [f"fv/default/validation/{i:08d}" for i in range(len(folder))]
    )
    assert [d.index for d in docs] == list(range(2 + len(single) + len(folder)))
    assert [list(d.images) for d in docs[2:]] == single + folder


def test_a_row_is_read_again_by_its_doc_id_alone(dataset: Path) -> None:
    """Fields and the report read a dataset row's page images again from its doc_id: the same
    images as listed, the config and split taken from the doc_id; a doc_id of another dataset, a
    row past the end and an image column the dataset lacks are errors that say so."""
    from llm_ocr.sources.listing import InputError, dataset_row

    rows = expected_rows(list(dataset.glob("*.parquet")))
    for number in (0, 5, len(rows) - 1):
        ref = dataset_row(str(dataset), f"fv/default/train/{number:08d}")
        assert (ref.doc_id, ref.kind, list(ref.images)) == (f"fv/default/train/{number:08d}", "dataset_row", rows[number])
    assert list(dataset_row(str(dataset), "fv/default/validation/00000003").images) == rows[3]
    with pytest.raises(InputError, match="not the dataset Extract read"):
        dataset_row(str(dataset), "scans/default/train/00000003")
    with pytest.raises(InputError, match="image column 'pages' not in dataset"):
        dataset_row(str(dataset), "fv/default/train/00000003", image_column="pages")
    with pytest.raises(InputError, match="has no row"):
        dataset_row(str(dataset), f"fv/default/train/{len(rows):08d}")
    with pytest.raises(InputError, match="not the doc_id of a dataset row"):
        dataset_row(str(dataset), "scans/a.pdf")
