"""``--chunker hybrid --chunk-tokenizer NAME --chunk-max-tokens N``: docling-core's HybridChunker
with a tokenizer the user names (here one the test trains and saves, so nothing is downloaded):
every chunk within the budget by that tokenizer, and each keeping its headings, pages and boxes;
the hierarchical default as it was; a tokenizer that is not there stopped before any page."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from llm_ocr.records import Block, PageResult
from tests.stages.common import run_in_process


@pytest.fixture(autouse=True, scope="module")
def _chunking_installed() -> None:
    """Skips where docling-core's chunking or transformers is missing: checked when the module's
    first test runs, not when it is collected (their import takes about 2 CPU-seconds, which
    every test worker would pay at collection)."""
    pytest.importorskip("docling_core.transforms.chunker.hybrid_chunker")
    pytest.importorskip("transformers")


MAX_TOKENS = 16
#: Each paragraph's words are its own (``alpha0 alpha1 ...``), so a chunk's text says which
#: paragraphs it holds: alpha is long (split by the hybrid chunker), the others short (merged).
PARAGRAPHS = {"alpha": 40, "beta": 4, "gamma": 4, "delta": 4, "epsilon": 5}


def _words(name: str) -> str:
    return " ".join(f"{name}{i}" for i in range(PARAGRAPHS[name]))


def _pages() -> list[PageResult]:
    """Two image pages: ``## Results`` over alpha, beta, gamma on page 1 and delta on page 2 (the
    section goes on), then ``## Methods`` over epsilon. A box per paragraph, all different."""
    def para(name: str, top: int) -> Block:
        return Block("text", [[100, top, 900, top + 40]], _words(name))

    page = {"doc_id": "doc.png", "doc_index": 0, "source": "doc.png", "width": 1000, "height": 1400, "status": "ok"}
    return [
        PageResult(**page, page=1, blocks=[Block("sub_title", [[100, 50, 600, 90]], "## Results"),
                                           para("alpha", 100), para("beta", 200), para("gamma", 300)]),
        PageResult(**page, page=2, blocks=[para("delta", 100), Block("sub_title", [[100, 200, 600, 240]],
                                                                     "## Methods"), para("epsilon", 300)]),
    ]


def _tokenizer(folder: Path) -> Path:
    """A word-level tokenizer trained on the document's words, saved as transformers saves one."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator([_words(n) for n in PARAGRAPHS] + ["Results Methods"],
                                  trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]").save_pretrained(str(folder))
    return folder


def _write_rows(out: Path, pages: list[PageResult]) -> None:
    from llm_ocr.records import page_schema
    from llm_ocr.storage import Storage
    from llm_ocr.storage.parts import PartWriter
    from llm_ocr.storage.state import write_marker

    async def write() -> None:
        writer = PartWriter(Storage(str(out / "extract")), page_schema(), 0, 1)
        for row in pages:
            await writer.add(row.to_row())
        await writer.close()

    asyncio.run(write())
    write_marker(Storage(str(out)), "extract", 0, 1, {"stage": "extract", "shard": 0, "num_shards": 1})


def test_hybrid_chunks_fit_the_named_tokenizer_and_keep_headings_pages_and_boxes(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from llm_ocr.stages.docling_export import build_document, chunk_rows
    from llm_ocr.storage import Storage
    from llm_ocr.storage.state import read_marker

    pages = _pages()
    folder = _tokenizer(tmp_path / "tokenizer")
    _write_rows(tmp_path / "out", pages)
    result = run_in_process("export", str(tmp_path / "out"), "--chunks", "--chunker", "hybrid",
                            "--chunk-tokenizer", str(folder), "--chunk-max-tokens", str(MAX_TOKENS))
    assert result.returncode == 0, result.stderr
    chunks = pq.read_table(tmp_path / "out" / "chunks").to_pylist()

    count = AutoTokenizer.from_pretrained(str(folder))
    # Where each paragraph is: its page, box and heading, as the test laid them out.
    where = {b.text.split()[0].rstrip("0"): (p.page, b.boxes[0]) for p in pages for b in p.blocks
             if b.label == "text"}
    heading = {"alpha": "Results", "beta": "Results", "gamma": "Results", "delta": "Results", "epsilon": "Methods"}
    for chunk in chunks:
        # The budget holds for what docling embeds (headings, then text), so for the text too.
        assert len(count.tokenize("\n".join([*chunk["headings"], chunk["text"]]))) <= MAX_TOKENS, chunk
        held = [n for n in PARAGRAPHS if f"{n}0" in chunk["text"].split() or f" {n}" in f" {chunk['text']}"]
        assert chunk["headings"] == [heading[held[0]]] and {heading[n] for n in held} == {heading[held[0]]}
        assert chunk["pages"] == sorted({where[n][0] for n in held})
        assert [(b["page"], [b["x1"], b["y1"], b["x2"], b["y2"]]) for b in chunk["boxes"]] == [where[n] for n in held]
    # Every word is in the chunks, in order: alpha split over chunks, short paragraphs merged,
    # one chunk across the page break.
    assert " ".join(c["text"] for c in chunks).split() == " ".join(_words(n) for n in PARAGRAPHS).split()
    assert sum(any(w.startswith("alpha") for w in c["text"].split()) for c in chunks) >= 2
    assert any(len(c["boxes"]) > 1 for c in chunks) and any(c["pages"] == [1, 2] for c in chunks)
    assert [c["chunk_id"] for c in chunks] == [f"doc.png#{i}" for i in range(len(chunks))]

    # assemble --chunks (run's last stage) takes the same options and writes the same chunks.
    (tmp_path / "out" / "chunks" / "chunks-00000-of-00001.parquet").unlink()
    assembled = run_in_process("assemble", "--output", str(tmp_path / "out"), "--chunks", "--chunker", "hybrid",
                               "--chunk-tokenizer", str(folder), "--chunk-max-tokens", str(MAX_TOKENS))
    assert assembled.returncode == 0, assembled.stderr
    assert pq.read_table(tmp_path / "out" / "chunks").to_pylist() == chunks
    marker = read_marker(Storage(str(tmp_path / "out")), "assemble", 0, 1) or {}
    assert marker["chunker"] == f"hybrid:{folder}:{MAX_TOKENS}" and marker["chunked"]

    # The default is the hierarchical chunker, as before: one chunk per paragraph, whole.
    default = chunk_rows("doc.png", build_document("doc.png", pages))
    assert [(c["text"], c["headings"], c["pages"]) for c in default] == [
        (_words(n), [heading[n]], [where[n][0]]) for n in PARAGRAPHS]


def test_a_tokenizer_that_is_not_there_stops_export_and_run_before_any_page(tmp_path: Path) -> None:
    from pydantic import ValidationError

    from llm_ocr.options import AssembleOptions
    from llm_ocr.outcomes import RunError
    from llm_ocr.runners.assemble import assemble_finished, need_docling

    _write_rows(tmp_path / "out", _pages())
    missing = str(tmp_path / "no-such-tokenizer")
    result = run_in_process("export", str(tmp_path / "out"), "--chunks", "--chunker", "hybrid",
                            "--chunk-tokenizer", missing, "--chunk-max-tokens", "16")
    assert result.returncode == 2
    assert f"--chunk-tokenizer {missing}: no such folder" in result.stderr
    assert not (tmp_path / "out" / "docling").exists() and not (tmp_path / "out" / "chunks").exists()
    # run and assemble: the same words from the check that comes before any page is read.
    options = AssembleOptions(chunks=True, chunker="hybrid", chunk_tokenizer=missing)
    with pytest.raises(RunError, match="no such folder"):
        need_docling(options)
    with pytest.raises(ValidationError, match="--chunker hybrid needs --chunk-tokenizer"):
        AssembleOptions(chunks=True, chunker="hybrid")
    # A rerun with another chunker chunks again; the same one is done (an old marker: hierarchical).
    old = {"documents": {"ok": 1}, "chunked": True}
    assert assemble_finished(old, AssembleOptions(chunks=True))
    assert not assemble_finished(old, options)
    assert assemble_finished({**old, "chunker": f"hybrid:{missing}:stated"}, options)
