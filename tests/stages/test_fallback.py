"""Fallback text: failed or truncated PDF pages carry their text layer when it reads as English."""

from __future__ import annotations

from pathlib import Path

from llm_ocr.records import PageResult
from llm_ocr.stages.assemble import assemble_document
from llm_ocr.testing import SimulatedServer
from tests.conftest import read_stage
from tests.docs import make_corpus, make_shifted_pdf
from tests.stages.common import stage

ENGLISH = [
    "Proceedings of the International Conference on Document Analysis and Recognition.",
    "We describe a method that reads scanned pages and returns their text with the layout kept.",
    "The results show that the approach works on books, journals and reports alike.",
]


def test_truncated_pages_carry_their_text_layer_and_a_shifted_one_is_refused(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    texts = make_corpus(docs, documents=1, pages=2)
    make_shifted_pdf(docs / "shifted.pdf", [ENGLISH])  # reads right, extracts as "Oqnbddchmfr ne sgd ..."
    out = tmp_path / "out"
    # Every page loops to max_tokens, retries included: every row ends truncated.
    with SimulatedServer("--loop-rate", "1", corpus=docs) as server:
        result = stage("extract", out, server, str(docs), "--max-tokens", "300")
        plain = stage("extract", tmp_path / "plain", server, str(docs), "--max-tokens", "300", "--no-text-layer-fallback")
    assert result.returncode == 0, result.stderr  # truncated is a finished page
    rows = {(r["doc_id"], r["page"]): r for r in read_stage(out, "extract")}
    assert {r["status"] for r in rows.values()} == {"truncated"}
    for number in (1, 2):
        row = rows[("doc000.pdf", number)]
        assert row["markdown"]  # the model's partial text stays where it was
        assert all(line in row["fallback_text"] for line in texts["doc000.pdf"][number - 1])
        assert row["fallback_note"].startswith("PDF text layer: ")
    shifted = rows[("shifted.pdf", 1)]
    assert shifted["fallback_text"] is None
    assert shifted["fallback_note"].startswith("PDF text layer rejected: ") and "dictionary words" in shifted["fallback_note"]
    # Without the fallback, the same pages carry none (the run's own rows: a run that failed and wrote
    # nothing would pass a check over no rows).
    assert plain.returncode == 0, plain.stderr
    plain_rows = read_stage(tmp_path / "plain", "extract")
    assert len(plain_rows) == len(rows)
    assert all(r["fallback_note"] is None and r["fallback_text"] is None for r in plain_rows)

    assembled = stage("assemble", out, None)
    assert assembled.returncode == 0, assembled.stderr
    documents = {d["doc_id"]: d["markdown"] for d in read_stage(out, "assemble")}
    good = documents["doc000.pdf"]
    assert good.count("**Fallback text (page ") == 2 and "cut off" in good
    assert texts["doc000.pdf"][1][1] in good.split("**Fallback text (page 2):**")[1]
    assert "Fallback text" not in documents["shifted.pdf"]


def test_assembled_fallback_text_is_inert_markdown() -> None:
    # A text layer is the PDF's claim, not Markdown: a fence inside it, HTML or a heading must
    # stay literal text inside the fenced block.
    hostile = "# Not a heading\n<script>alert(1)</script>\n```\nnot the end of the block\n````"
    failed = PageResult(doc_id="d", doc_index=0, page=1, source="s", num_pages=2, status="error", error="boom",
                        fallback_text=hostile, fallback_note="PDF text layer: ...")
    fine = PageResult(doc_id="d", doc_index=0, page=2, source="s", num_pages=2, status="ok", markdown="Page two.")
    markdown = assemble_document([failed, fine]).markdown
    note, _, rest = markdown.partition("**Fallback text (page 1):** the model could not read this page")
    assert "<!-- page 1: failed (boom) -->" in note and rest
    fence = "`````"  # longer than the longest backtick run inside
    block = rest.split(f"{fence}text\n", 1)[1]
    assert block.startswith(hostile + f"\n{fence}\n")
    assert markdown.rstrip().endswith("Page two.")
