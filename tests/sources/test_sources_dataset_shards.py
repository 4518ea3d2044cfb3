"""Each shard of a Parquet dataset reads only its share (issue 18), counted by the server.

A FineVision-shaped dataset (16 files of very different sizes, row groups of 2 rows, 1 to 3 page
images a row) is served over HTTP by a server that counts every byte it sends
(llm_ocr.bench.file_server); the shards list their documents through the real fsspec HTTP
filesystem. The bar is the issue's: shard i of N sends at most 1.5 x (dataset / N) plus the
footers, one shard of 1 at most 1.2 x the dataset; and the shards together give every row
exactly once, with the global numbers of a full listing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from llm_ocr.bench.file_server import CountingFileServer
from llm_ocr.bench.finevision import GeneratedDataset, write_finevision
from llm_ocr.sources import list_documents, parquet, plan_inputs
from llm_ocr.sources.parquet import FOOTER_GUESS
from llm_ocr.storage.stores import StorageError
from tests.storage_servers import CuttableProxy

FILES = 16


@pytest.fixture(scope="module")
def fv(tmp_path_factory: pytest.TempPathFactory) -> GeneratedDataset:
    root = tmp_path_factory.mktemp("served")
    return write_finevision(root / "fv", files=FILES, rows=(6, 30), row_group_rows=2, image_side=(40, 140), seed=0)


@pytest.fixture(scope="module")
def served(fv: GeneratedDataset) -> Iterator[CountingFileServer]:
    with CountingFileServer(fv.folder.parent) as server:
        yield server


def footer_allowance(fv: GeneratedDataset) -> int:
    """What reading every footer may cost: the 64 KiB tail of each file (the whole of a small one)."""
    return sum(min(FOOTER_GUESS, p.stat().st_size) for p in fv.files)


def test_sizes_differ_enough_to_matter(fv: GeneratedDataset) -> None:
    sizes = sorted(p.stat().st_size for p in fv.files)
    assert len(sizes) == FILES and sizes[-1] > 10 * sizes[0]
    assert sum(fv.rows_per_file) == len(fv.images) and {len(i) for i in fv.images} == {1, 2, 3}


@pytest.mark.parametrize("num_shards, shards", [(1, [0]), (8, [0, 5, 7])])
def test_a_shard_reads_its_share_plus_footers_over_http(
    fv: GeneratedDataset, served: CountingFileServer, num_shards: int, shards: list[int]
) -> None:
    url = served.url + "fv/"
    dataset = fv.total_bytes
    for shard in shards:
        served.reset()
        plan = plan_inputs([url])
        planned = served.counts().bytes  # the footers (and the folder's listing page)
        docs = list(plan.documents(num_shards, shard))
        sent = served.counts()
        assert docs, "every shard of 8 has rows here"
        if num_shards == 1:
            assert sent.bytes <= 1.2 * dataset, (sent.bytes, dataset)
            assert len(docs) == len(fv.images)
        else:
            assert sent.bytes <= 1.5 * dataset / num_shards + footer_allowance(fv), (shard, sent.bytes, dataset)
            # Past the footers, the bytes are the shard's own row groups, each sent once.
            assert sent.bytes - planned <= 1.5 * dataset / num_shards, (shard, sent.bytes - planned, dataset)
        # The reader's own count is what the server saw (the listing page aside).
        assert plan.stats.bytes == sum(v for k, v in sent.by_path.items() if k.endswith(".parquet"))
        assert [list(d.images) for d in docs] == [fv.images[d.index] for d in docs]


@pytest.mark.parametrize("num_shards", [1, 3, 8, 64])
def test_shards_give_every_row_once_with_its_global_number(fv: GeneratedDataset, num_shards: int) -> None:
    folder = str(fv.folder)
    everything = list(list_documents([folder]))
    plan = plan_inputs([folder])
    shards = [list(plan.documents(num_shards, s)) for s in range(num_shards)]
    assert sorted((d for shard in shards for d in shard), key=lambda d: d.index) == everything
    for shard in shards:  # each shard holds one run of consecutive rows
        assert [d.index for d in shard] == list(range(shard[0].index, shard[0].index + len(shard))) if shard else True
    if num_shards == 64:  # more shards than files: the row groups still spread over nearly all
        assert sum(1 for shard in shards if shard) >= 60


def test_shares_stay_balanced_by_bytes_with_files_of_very_different_sizes(fv: GeneratedDataset) -> None:
    plan = plan_inputs([str(fv.folder)])
    read = sum(g.weight for g in plan.plans[0].groups)
    for num_shards in (2, 8, 16):
        shares = plan.dataset_shares(num_shards)
        assert sum(s.bytes for s in shares) == read and sum(s.rows for s in shares) == len(fv.images)
        assert max(s.bytes for s in shares) <= 1.5 * read / num_shards, [s.bytes for s in shares]
        assert min(s.bytes for s in shares) >= 0.5 * read / num_shards, [s.bytes for s in shares]


@pytest.mark.parametrize("read_ahead", [parquet.READ_AHEAD, 0])  # spans fetched whole, or read by pyarrow
def test_a_store_that_goes_away_mid_shard_is_named_not_blamed_on_the_data(
    fv: GeneratedDataset, monkeypatch: pytest.MonkeyPatch, read_ahead: int
) -> None:
    monkeypatch.setattr(parquet, "READ_AHEAD", read_ahead)
    monkeypatch.setenv("LLM_OCR_STORAGE_RETRIES", "2")
    monkeypatch.setenv("LLM_OCR_STORAGE_RETRY_DELAY", "0.01")
    with CountingFileServer(fv.folder.parent) as server:
        proxy = CuttableProxy(int(server.url.rsplit(":", 1)[1].strip("/")))
        try:
            docs = plan_inputs([proxy.url + "/fv/"]).documents(2, 1)
            proxy.cut()  # after the footers, before the rows
            with pytest.raises(StorageError, match=re.escape("127.0.0.1")) as failure:
                list(docs)
        finally:
            proxy.close()
    assert "corrupt" not in str(failure.value)


def test_a_work_group_of_a_shard_reads_only_the_row_groups_holding_its_rows(
    fv: GeneratedDataset, served: CountingFileServer
) -> None:
    plan = plan_inputs([served.url + "fv/"])
    served.reset()
    whole = list(plan.documents(8, 5))
    shard_bytes = served.counts().bytes
    size = plan.shard_size(8, 5)
    assert size == len(whole) > 6
    # Groups of 3 documents (docs/stragglers.md) partition the shard, in order.
    groups = [list(plan.documents(8, 5, start=start, stop=start + 3)) for start in range(0, size, 3)]
    assert [doc for group in groups for doc in group] == whole
    served.reset()
    last = list(plan.documents(8, 5, start=size - 1, stop=size))
    assert last == whole[-1:]
    # The row groups before the last one's are skipped unread: one row group of 2 rows is read.
    assert served.counts().bytes <= shard_bytes / 3, (served.counts().bytes, shard_bytes)
