"""The streaming loop detector: real loops are caught early, real pages that look repetitive
(price lists, timetables, blank forms, tables of contents) are never cut."""

from __future__ import annotations

import random

import pytest

from llm_ocr.vlm.loops import Loop, LoopPolicy, LoopWatch


def watch(text: str, chunk: int = 40, policy: LoopPolicy | None = None) -> Loop | None:
    """Feed ``text`` in pieces of ``chunk`` characters, as a stream would, then end it."""
    w = LoopWatch(policy)
    for i in range(0, len(text), chunk):
        if w.feed(text[i : i + chunk]):
            break
    return w.finish()


def det(i: int) -> str:
    return f"<|ref|>table<|/ref|><|det|>[[61, {100 + i}, 938, {180 + i}]]<|/det|>\n"


# -- pages that must never be cut ------------------------------------------------------------


def price_list(rows: int, seed: int = 1) -> str:
    rng = random.Random(seed)
    body = "".join(
        f"<tr><td>Hex bolt M{rng.choice([6, 8, 10, 12])} x {rng.randint(20, 120)}</td>"
        f"<td>{rng.randint(1, 500)}</td><td>{rng.randint(5, 99)}.{rng.randint(0, 99):02d}</td>"
        f"<td>{rng.randint(1, 40)}.{rng.randint(0, 99):02d}</td></tr>"
        for _ in range(rows)
    )
    return f"{det(0)}<table><tr><td>Item</td><td>Qty</td><td>Unit price</td><td>Total</td></tr>{body}</table>\n\n"


def timetable(rows: int) -> str:
    # Rows that differ only in their times: the shape a naive detector calls a loop.
    body = "".join(
        f"<tr><td>{6 + i // 4:02d}:{(i % 4) * 15:02d}</td><td>Central Station</td><td>Platform 4</td>"
        f"<td>{6 + i // 4:02d}:{(i % 4) * 15 + 7:02d}</td><td>Airport Terminal 2</td></tr>"
        for i in range(rows)
    )
    return f"{det(3)}<table><tr><td>Dep.</td><td>From</td><td></td><td>Arr.</td><td>To</td></tr>{body}</table>\n\n"


def table_of_contents(entries: int) -> str:
    return "".join(f"{i}. Chapter {i} " + "." * 60 + f" {i * 7}\n" for i in range(1, entries + 1))


def blank_form(rows: int) -> str:
    return det(9) + "<table>" + "<tr><td></td><td></td><td></td><td></td></tr>" * rows + "</table>\n\n"


@pytest.mark.parametrize(
    "page",
    [
        pytest.param(price_list(400), id="price list, 400 rows"),
        pytest.param(timetable(300), id="timetable, 300 rows differing only in times"),
        pytest.param(table_of_contents(150), id="table of contents with dot leaders"),
        pytest.param(blank_form(60), id="blank form, 60 identical empty rows"),
        pytest.param("".join(f"{i}. Repeat the same step and check the valve.\n" for i in range(1, 300)), id="numbered list"),
        pytest.param(
            "".join(f"<|ref|>text<|/ref|><|det|>[[80, {i * 9}, 920, {i * 9 + 8}]]<|/det|>\nSection {i}: " + "Lorem ipsum dolor sit amet. " * 4 + "\n\n" for i in range(80)),
            id="blocks with the same boilerplate but their own numbers",
        ),
    ],
)
@pytest.mark.parametrize("chunk", [1, 7, 64, 4096])
def test_pages_that_look_repetitive_are_not_loops(page: str, chunk: int) -> None:
    assert len(page) > 2500  # long enough that a loop of this size would have been caught
    assert watch(page, chunk) is None


# -- loops that must be caught ---------------------------------------------------------------


def row_unit(chars: int) -> str:
    """One table row of about ``chars`` characters (a unit longer than vLLM's n-gram window
    at ~3.3 characters a token when ``chars`` > 300)."""
    cells = []
    while sum(len(c) for c in cells) < chars:
        cells.append(f"<td>Northern district annual return {len(cells) * 37 % 1000}</td>")
    return "<tr>" + "".join(cells) + "</tr>"


@pytest.mark.parametrize("unit_chars", [8, 60, 500, 1500])
@pytest.mark.parametrize("chunk", [1, 13, 200])
def test_a_repeated_unit_is_caught_soon_and_the_first_copy_kept(unit_chars: int, chunk: int) -> None:
    lead = price_list(8)
    unit = row_unit(unit_chars) if unit_chars > 20 else "abc def. "[: unit_chars]
    text = lead + unit * 400
    loop = watch(text, chunk)
    assert loop is not None
    assert loop.unit_chars == len(unit)
    assert loop.start <= len(lead) + len(unit)  # found where the repetition really begins
    assert text[: loop.keep_chars].startswith(lead)
    assert len(text[: loop.keep_chars]) == len(lead) + len(unit) or loop.start < len(lead)
    # Seen within the span the policy asks for, plus one check interval and one chunk.
    policy = LoopPolicy()
    span = max(policy.min_span_chars, policy.min_repeats * len(unit)) + len(unit)
    assert loop.seen_chars - len(lead) <= span + policy.check_every + chunk
    assert loop.repeats >= policy.min_repeats


def test_a_block_repeated_with_drifting_boxes_is_a_loop() -> None:
    para = "Results of the survey are given in the table below for every district. " * 3
    text = "# Report\n\n" + "".join(
        f"<|ref|>text<|/ref|><|det|>[[100, {i * 11}, 900, {i * 11 + 9}]]<|/det|>\n{para}\n\n" for i in range(60)
    )
    loop = watch(text, 17)
    assert loop is not None
    kept = text[: loop.keep_chars]
    assert kept.count(para) == 1  # the first copy, not the repeats


def test_empty_cells_repeated_past_the_markup_span_are_a_loop() -> None:
    text = "<table><tr><td>Name</td></tr>" + "<tr><td></td><td></td></tr>" * 400
    loop = watch(text, 50)
    assert loop is not None and loop.unit_chars == len("<tr><td></td><td></td></tr>")
    assert loop.seen_chars >= LoopPolicy().markup_span_chars  # but not before the markup span


def test_a_det_tag_split_across_chunks_maps_offsets_back_to_the_answer() -> None:
    unit = "<|ref|>text<|/ref|><|det|>[[1, 2, 3, 4]]<|/det|>\nThe same line, a loop.\n"
    text = "Intro.\n" + "".join(unit.replace("[[1,", f"[[{i},") for i in range(200))
    for chunk in (1, 3, 5, 8):
        loop = watch(text, chunk)
        assert loop is not None
        assert text[: loop.keep_chars].endswith("The same line, a loop.\n")
        assert text[: loop.keep_chars].count("The same line") == 1


def test_the_watch_costs_microseconds_per_chunk() -> None:
    """Not a timing assertion on the machine: the number of checks is bounded by the text
    length over ``check_every``, whatever the chunking."""
    w = LoopWatch()
    calls = 0
    original = w._check

    def counted() -> Loop | None:
        nonlocal calls
        calls += 1
        return original()

    w._check = counted  # type: ignore[method-assign]
    page = price_list(200)
    for ch in page:
        w.feed(ch)
    assert calls <= len(page) // LoopPolicy().check_every + 1


def test_a_box_list_that_never_closes_is_a_loop_of_boxes() -> None:
    text = "<|ref|>image<|/ref|><|det|>[[10, 20, 30, 40]" + ", [10, 20, 30, 40]" * 2000
    loop = watch(text, 60)
    assert loop is not None and loop.unit_chars == len(", [10, 20, 30, 40]")
    assert loop.seen_chars < 1500 + 1200 + 400  # past the skipped box list, then as any loop
