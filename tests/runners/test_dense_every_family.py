"""A dense newspaper page read whole by every family, at a small context, with the adaptive split.

``llm-ocr extract`` against the simulated server playing each family (its own request, its own
answer format), on a five-column page of ~20,000 characters with two figures: the page is cut
in tiles (families whose answers box every block) or bands (the others) and joined into one row,
``ok``, with at least 98% of its words (MinerU2.5, which asks for the layout and then for each
block on its own, reads it whole: no answer of its holds the page's text); where the family boxes figures, every figure is found
where it is on the page. Then the adaptive split: a server whose answers carry more tokens per
character than the planner's first guess makes pieces run out, and they are cut again until they
fit (a tile keeping its answer's complete blocks, only the rest of it read again); a server so
verbose that a piece a few lines tall still runs out leaves the page ``truncated``, saying so;
an ordinary page costs one request, as before. An ordinary page whose answer runs out because
the model writes more per character than guessed is read in pieces (its answer is its text
layer's words), while a page that loops is still a loop.

Every run reads through the Python API in this process; the every-family sweep shares one server
per context (tests/sweeps.py). ``tests/e2e/runners/test_dense_command.py`` reads the page once
through ``llm-ocr extract``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from reportlab.lib.pagesizes import letter
from reportlab.pdfgen import canvas

from llm_ocr.bench.accuracy import word_recall
from llm_ocr.stages.pieces.plan import reads_columns
from llm_ocr.testing import SimulatedServer
from llm_ocr.vlm.box import Box
from llm_ocr.vlm.families import FAMILIES, Family
from tests.conftest import read_stage
from tests.docs import make_pdf, paragraph
from tests.newspaper import Newspaper, newspaper_pdf, order_kept
from tests.sweeps import Counters, by_shape, families_server
from tests.sweeps import extract as extract_in_process

#: The share of the page's text lines the Markdown must hold in the page's reading order (the
#: masthead, then each column top to bottom). Read band by band, a five-column page keeps about
#: a third at most (the top of every column comes before the rest of the first).
ORDER_KEPT = 0.9

def context(family: Family) -> str:
    """The context the page is read at: 4,096 (answers of 1,536 to 3,072 tokens, for ~7,500
    tokens of text; each piece's image must fit beside them, so the 200 and 300 DPI families
    read more, smaller pieces), 8,192 for Unlimited-OCR, whose recipe keeps 4,096 tokens for its
    image alone and would leave 256 for the answer."""
    return "4096" if family.max_tokens(None, 4096) >= 1024 else "8192"


@pytest.fixture(scope="module")
def paper(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Newspaper]:
    folder = tmp_path_factory.mktemp("newspaper")
    return folder, newspaper_pdf(folder / "courier.pdf", seed=3)


def served(family: Family) -> str:
    return family.models[0] if family.models else "acme/some-vlm"


def extract(docs: Path, out: Path, server: SimulatedServer, family: Family, model: str | None = None, **options):
    """Extract ``docs`` as ``family`` (served as ``model``, by default its own name), in this process."""
    return extract_in_process(docs, out, server, model or served(family), family.name, **options)


def server_for(family: Family, folder: Path, *extra: str, small: bool = True) -> SimulatedServer:
    size = context(family) if small else str(family.serving.context)
    return SimulatedServer("--instant", "--max-model-len", size, "--served-model-name", served(family),
                           "--recipe", family.name, *extra, corpus=folder)  # fmt: skip


#: The family read at 8,192 tokens beside the sweep's (test_a_family_sized_by_its_longer_side...).
OLMOCR = next(f for f in FAMILIES if f.name == "olmocr")


@pytest.fixture(scope="module")
def sweep_servers(paper) -> Iterator[Callable[[str], tuple[SimulatedServer, dict[str, str]]]]:
    """The newspaper's servers by context, started when first asked for: each plays every family
    read at that context (and olmOCR-2 at 8,192), under their served names."""
    folder, _ = paper
    started: dict[str, tuple[SimulatedServer, dict[str, str]]] = {}
    with ExitStack() as stack:

        def at(size: str) -> tuple[SimulatedServer, dict[str, str]]:
            if size not in started:
                listed = [f for f in FAMILIES if context(f) == size] + ([OLMOCR] if size == "8192" else [])
                server, names = families_server(listed, "--instant", "--max-model-len", size, corpus=folder)
                started[size] = (stack.enter_context(server), names)
            return started[size]

        yield at


def only_row(out: Path, doc: str) -> dict:
    rows = [r for r in read_stage(out, "extract") if r["doc_id"] == doc]
    assert len(rows) == 1
    return rows[0]


def overlap(a: Box, b: Box) -> float:
    """Intersection over the smaller box's area."""
    inside = a.clipped(b)
    return inside.area / max(1e-9, min(a.area, b.area)) if inside.width > 0 and inside.height > 0 else 0.0


@pytest.mark.parametrize("family", by_shape(FAMILIES))
def test_every_family_reads_a_dense_page_whole_at_a_small_context(tmp_path: Path, paper, sweep_servers,
                                                                 family: Family) -> None:
    folder, truth = paper
    server, names = sweep_servers(context(family))
    counters = Counters(server)
    result = extract(folder, tmp_path / "out", server, family, names[family.name])
    stats, requests = counters.since(), counters.requests()
    assert result.exit_code == 0, result
    check_dense_read(tmp_path / "out", truth, family, stats, requests)


def check_dense_read(out: Path, truth: Newspaper, family: Family, stats: dict, requests: list[dict]) -> None:
    """The newspaper's one row, read by ``family`` at :func:`context` (``stats``: the server's
    counters over the run, ``requests`` its log entries): whole, in the family's pieces, in
    reading order where the pieces allow it, every figure found where the family boxes them."""
    assert stats["recipe_refused"] == 0
    row = only_row(out, "courier.pdf")
    assert row["status"] == "ok", (row["error"], row["cut_reason"])
    assert word_recall(truth.text, row["markdown"]) >= 0.98
    if family.dense == "blocks":
        # Read whole (MinerU2.5): the layout pass on the page, then a request per block, each
        # answer short; none ran out, and the page was not cut.
        assert row["segments"] is None and "<--- block 2 " in row["raw"], row["raw"][:200]
        (layout,) = [r for r in requests if r.get("known_page")]
        assert "region" not in layout["known_page"] and len(requests) > 20
        assert all(r["finish_reason"] == "stop" for r in requests)
    else:
        kept = order_kept(truth.line_texts, row["markdown"])
        context_size = int(context(family))
        if family.dense == "tiles" or reads_columns(family, context_size - family.max_tokens(None, context_size)):
            assert kept >= ORDER_KEPT, f"{kept:.0%} of the page's lines in reading order"
        else:
            # olmOCR-2 and LightOnOCR at this small a context: a column's pieces, squarer, would
            # not fit at the family's resolution; full-width bands, the bands' order (as the docs say).
            assert kept < ORDER_KEPT and "band" in row["cut_reason"]
        kind = "tile" if family.dense == "tiles" else "band"
        assert f"<--- {kind} 1/" in row["raw"] and row["segments"] >= 2, row["raw"][:200]
        # Every request the page cost was a piece the server found on the page, and each fitted.
        pieces = [r for r in requests if (r.get("known_page") or {}).get("source", "").endswith("courier.pdf")]
        assert pieces and all("region" in r["known_page"] for r in pieces), [r.get("known_page") for r in requests]
    if family.outputs.boxes:  # the families that box figures (olmOCR-2 reads in bands, but boxes them)
        found = [Box(*f["bbox"]) for f in row["figures"]]
        for x1, y1, x2, y2 in truth.figures:
            where = Box(x1 * row["width"], y1 * row["height"], x2 * row["width"], y2 * row["height"])
            assert any(overlap(where, box) >= 0.8 for box in found), (where, found)


@pytest.fixture(scope="module")
def verbose(paper) -> Iterator[tuple[SimulatedServer, dict[str, str]]]:
    """A server writing 1.2 tokens a character (the planner guesses 0.35), at 4,096 tokens,
    playing olmOCR-2 and DeepSeek-OCR."""
    listed = [f for f in FAMILIES if f.name in ("olmocr", "deepseek-ocr")]
    assert {context(f) for f in listed} == {"4096"}
    server, names = families_server(listed, "--instant", "--max-model-len", "4096", "--tokens-per-char", "1.2",
                                    corpus=paper[0])
    with server:
        yield server, names


def read_denser_than_guessed(tmp_path: Path, paper: tuple[Path, Newspaper], verbose, family: Family,
                             ) -> tuple[dict, list]:
    """The newspaper read by ``family`` from a server writing 1.2 tokens a character (the
    planner guesses 0.35): its row, checked ``ok`` with 98% of its words, and the requests."""
    folder, truth = paper
    server, names = verbose
    counters = Counters(server)
    result = extract(folder, tmp_path / "out", server, family, names[family.name])
    requests = counters.requests()
    assert result.exit_code == 0, result
    row = only_row(tmp_path / "out", "courier.pdf")
    assert row["status"] == "ok", (row["error"], row["cut_reason"])
    assert word_recall(truth.text, row["markdown"]) >= 0.98
    return row, requests


def test_answers_denser_than_the_first_guess_are_cut_again_until_they_fit(tmp_path: Path, paper, verbose) -> None:
    """The planner guesses 0.35 tokens a character; this server writes 1.2 (four times the
    simulator's default): the planned pieces run to max_tokens, unrepeated, and are cut in two,
    some again, until every answer fits. No piece is retried hotter."""
    family = next(f for f in FAMILIES if f.name == "olmocr")
    row, requests = read_denser_than_guessed(tmp_path, paper, verbose, family)
    long = [r for r in requests if r.get("finish_reason") == "length"]
    fitted = [r for r in requests if r.get("finish_reason") == "stop"]
    assert long and "without repeating itself: cut in two between text lines" in row["cut_reason"]
    assert row["segments"] == len(fitted) > len(long)  # every piece finally read, and it fitted
    assert all(r["body"]["temperature"] == family.retries.temperatures[0] for r in requests)  # none retried hotter
    assert row["completion_tokens"] == sum(r["completion_tokens"] for r in requests)  # the runs-out count too


def test_a_piece_a_few_lines_tall_that_still_runs_out_leaves_the_page_truncated(tmp_path: Path) -> None:
    """A server that writes 7 tokens a character: three lines of a page-wide column (~480
    characters) overflow 3,072 tokens. The planned bands (about 10 lines each) are cut again and
    again while their answers run out, until a piece's halves would be too small to read
    (``min_cut_side``) or the page is read in ``max_pieces`` (32 here, for the test's cost): the
    page is truncated, and says why. (The page's cost bound is lifted: this is the floor of
    cutting, which the bound would reach first.)"""
    folder = tmp_path / "docs"
    folder.mkdir()
    newspaper_pdf(folder / "courier.pdf", seed=5, columns=1, figures=False)
    family = next(f for f in FAMILIES if f.name == "lightonocr")  # the image alone: no prompt text to inflate
    with server_for(family, folder, "--tokens-per-char", "7") as server:
        result = extract(folder, tmp_path / "out", server, family, dense_option=["cost_bound=1000", "max_pieces=32"])
        requests = server.requests()
    assert result.exit_code == 0, result
    row = only_row(tmp_path / "out", "courier.pdf")
    assert row["status"] == "truncated"
    # Which floor a page reaches first is the order its pieces come back in (a race): either says so.
    assert ("px tall, too small to cut: a half would be under" in row["error"]
            or "the page is already read in 32 pieces" in row["error"]), row["error"]
    assert row["segments"] <= 32, row["segments"]
    assert "cut in two between text lines" in row["cut_reason"]
    assert len(requests) == row["segments"] + row["cut_reason"].count("both read again")
    # The pieces that were cut again ran out, and so did most of those finally read.
    long = sum(r["finish_reason"] == "length" for r in requests)
    assert long >= row["cut_reason"].count("both read again") + row["segments"] // 2


@pytest.mark.parametrize("family", [f for f in FAMILIES if f.name in ("deepseek-ocr", "olmocr", "lightonocr-3")],
                         ids=lambda f: f.name)
def test_an_ordinary_page_costs_no_extra_request(tmp_path: Path, family: Family) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    make_pdf(folder / "report.pdf", pages=2)
    with server_for(family, folder, small=False) as server:
        result = extract(folder, tmp_path / "out", server, family)
        requests = server.requests()
    assert result.exit_code == 0, result
    rows = read_stage(tmp_path / "out", "extract")
    assert [r["status"] for r in rows] == ["ok", "ok"]
    assert all(r["segments"] is None and r["cut_reason"] is None for r in rows)
    pages = [r for r in requests if r.get("known_page")]
    assert len(pages) == len(requests) == sum(r["attempts"] for r in rows)


def test_a_family_sized_by_its_longer_side_reads_the_columns_in_order_at_a_larger_context(tmp_path: Path, paper,
                                                                                         sweep_servers) -> None:
    """olmOCR-2 at 8,192 tokens (answers of up to 4,096): the page is still dense, and a column's
    pieces fit at the family's resolution, so it is read column by column, in reading order."""
    folder, truth = paper
    family = OLMOCR
    server, names = sweep_servers("8192")
    counters = Counters(server)
    result = extract(folder, tmp_path / "out", server, family, names[family.name])
    stats = counters.since()
    assert result.exit_code == 0, result
    assert stats["recipe_refused"] == 0 and stats.get("unreadable_refused", 0) == 0
    row = only_row(tmp_path / "out", "courier.pdf")
    assert row["status"] == "ok", (row["error"], row["cut_reason"])
    assert word_recall(truth.text, row["markdown"]) >= 0.98
    assert order_kept(truth.line_texts, row["markdown"]) >= ORDER_KEPT


def _letter_page(path: Path, lines: int, seed: int = 11) -> str:
    """A one-page PDF of ``lines`` lines of 14 words (11 pt Helvetica, ~90 characters a line);
    returns its text."""
    rng = random.Random(seed)
    texts = [paragraph(rng) for _ in range(lines)]
    pdf = canvas.Canvas(str(path), pagesize=letter)
    pdf.setFont("Helvetica", 9)
    for i, line in enumerate(texts):
        pdf.drawString(54, 750 - i * 14, line)
    pdf.showPage()
    pdf.save()
    return "\n".join(texts)


#: (family, context, lines): DeepSeek-OCR at 4,096 (answers of 3,072 tokens), olmOCR-2 at 8,192
#: (4,096; at 4,096 its whole page's image does not fit beside the answer).
DENSER_THAN_ESTIMATE = [("deepseek-ocr", "4096", 36), ("olmocr", "8192", 48)]


@pytest.mark.parametrize(("name", "size", "lines"), DENSER_THAN_ESTIMATE, ids=[n for n, _, _ in DENSER_THAN_ESTIMATE])
def test_an_ordinary_page_whose_answer_is_denser_than_its_estimate_is_read_in_pieces_not_taken_for_a_loop(
    tmp_path: Path, name: str, size: str, lines: int
) -> None:
    """A page of ~90 characters a line: at the first guess (0.35 tokens a character) it needs
    ~40% of max_tokens, too few to fill an answer by the estimate alone. A model writing 1.2
    tokens a character fills it. The answer that ran out is the page's own text (its text layer's
    words, none repeated): the page is long, read in pieces, ``ok`` with its words; not retried
    hotter as a loop and kept ``truncated``."""
    folder = tmp_path / "docs"
    folder.mkdir()
    text = _letter_page(folder / "letter.pdf", lines)
    family = next(f for f in FAMILIES if f.name == name)
    max_tokens = family.max_tokens(None, int(size))
    assert 0.3 <= len(text) * 0.35 / max_tokens <= 0.5
    with SimulatedServer("--instant", "--max-model-len", size, "--served-model-name", served(family),
                         "--recipe", family.name, "--tokens-per-char", "1.2", corpus=folder) as server:  # fmt: skip
        result = extract(folder, tmp_path / "out", server, family)
        requests = server.requests()
    assert result.exit_code == 0, result
    row = only_row(tmp_path / "out", "letter.pdf")
    assert row["status"] == "ok", (row["error"], row["cut_reason"])
    assert word_recall(text, row["markdown"]) >= 0.98
    assert row["segments"] >= 2 and "the whole page's answer ran to max_tokens" in row["cut_reason"]
    assert all(r["body"]["temperature"] == family.retries.temperatures[0] for r in requests)  # none retried hotter
    whole = [r for r in requests if "region" not in (r.get("known_page") or {})]
    assert len(whole) == 1 and whole[0]["finish_reason"] == "length"


def test_a_page_that_loops_is_still_a_loop(tmp_path: Path) -> None:
    """The same page on a server whose answers loop after the page's text (the simulator's
    --loop-rate): the loop watch cuts each attempt, the page is retried hotter and kept
    ``truncated`` as a loop, not cut in pieces."""
    folder = tmp_path / "docs"
    folder.mkdir()
    _letter_page(folder / "letter.pdf", 36)
    family = next(f for f in FAMILIES if f.name == "deepseek-ocr")
    with server_for(family, folder, "--loop-rate", "1") as server:
        result = extract(folder, tmp_path / "out", server, family)
        requests = server.requests()
    assert result.exit_code == 0, result
    row = only_row(tmp_path / "out", "letter.pdf")
    assert row["status"] == "truncated" and "repetition loop" in row["error"], row["error"]
    assert row["segments"] is None and len(requests) == row["attempts"] > 1
    assert not any("region" in (r.get("known_page") or {}) for r in requests)


def test_a_piece_that_ran_out_keeps_its_complete_blocks_and_only_the_rest_is_read_again(tmp_path: Path, paper,
                                                                                        verbose) -> None:
    """DeepSeek-OCR (its answers box every block) on a server writing 1.2 tokens a character:
    planned tiles run out. Each keeps the blocks its answer completed, and only what lies below
    them (column by column) is read again, not both halves of the tile: the page is ``ok`` with
    its words."""
    family = next(f for f in FAMILIES if f.name == "deepseek-ocr")
    row, requests = read_denser_than_guessed(tmp_path, paper, verbose, family)
    assert "complete blocks kept, the rest of it read again" in row["cut_reason"]
    assert row["completion_tokens"] == sum(r["completion_tokens"] for r in requests)
    # Every piece of the rest lies inside the tile it is the rest of, below the blocks kept there.
    located = [r for r in requests if "region" in (r.get("known_page") or {})]
    regions = [Box(*r["known_page"]["region"]) for r in located]
    ran_out = [b for b, r in zip(regions, located) if r["finish_reason"] == "length"]
    rest = [b for b in regions if any(b != tile and b.clipped(tile).area >= 0.99 * b.area for tile in ran_out)]
    assert rest and all(b.area < 0.75 * max(t.area for t in ran_out if b.clipped(t).area >= 0.99 * b.area)
                        for b in rest)
