"""The pieces path against a model that is not the project's simulator (issue 47, item 5).

The crop adversary (tests/fakes/crop_adversary.py) answers a crop of a page the ways a real model
goes wrong at a crop's edge: a line the edge cuts completed from memory (``continues``), the
page's header written atop every crop (``header``) or as its second block, after a stray line
(``header_lower``), the first line of the next piece written
at its end (``next_line``), and every crop answered with long unrepeated words that are not the
page's while the whole page is read well (``crops_bad``). Each drives ``llm_ocr.extract`` in
this process on a long page (read in segments) and a dense one (read in tiles: its text is
longer than ``max_tokens``), and checks the page ends whole or bounded:

- **never lost**: the row holds at least 98% of the page's words (``crops_bad``: the row is
  not ``ok``: nothing of what it holds is the page's);
- **honest**: a row that says ``ok`` holds the page's words and nothing else a crop invented
  (at most 2% more words than the page); a join that could not be verified is not ``ok``;
- **bounded**: no text line is shown to the model in more than :data:`MAX_LOOKS` requests when
  every answer fits (the whole page once, then the two pieces whose overlap holds it): a path
  that cut again pieces whose answers fit would show it more. A page whose crops all run out
  costs at most ``cost_bound`` times the requests of its whole-page reading (its first attempt
  and the family's truncation retries), counted by the server, and its row says it reached the
  bound.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import llm_ocr
from llm_ocr.options import DenseOptions
from llm_ocr.vlm.families import family_for
from tests.conftest import read_stage
from tests.fakes.crop_adversary import BOXLESS_MODEL, MODEL, CropAdversary, ServedAdversary, TruthPage, draw_page

#: A line may be shown in the whole page's request and in the two pieces whose overlap holds it.
MAX_LOOKS = 3
#: ``max_tokens`` of the dense page's runs (its text, about 1,100 tokens with markup, does not
#: fit) and of every run whose crops are read badly (each crop's answer runs out of it).
DENSE_MAX_TOKENS = 700
WORDS = ("survey district coastal sample annual report volunteers transect figure table river "
         "harbour lantern orchard meadow copper willow granite saddle ferry quarry beacon").split()


def paragraphs(count: int, lines: int, words: int, seed: int) -> list[list[str]]:
    """``count`` paragraphs of ``lines`` lines each, every line numbered (L001 ...) so that a
    line written twice or lost shows."""
    import random

    rng = random.Random(seed)
    out, n = [], 0
    for _ in range(count):
        block = []
        for _ in range(lines):
            n += 1
            block.append(f"L{n:03d} " + " ".join(rng.choice(WORDS) for _ in range(words)))
        out.append(block)
    return out


def pages() -> dict[str, TruthPage]:
    header = ["THE COASTAL SURVEY QUARTERLY REPORT"]
    return {
        # 440 x ~2,100 px: more than 3 times taller than wide, read in segments.
        "long": draw_page("long", [[header, *paragraphs(10, 5, 5, 1)]], size=16, margin=20, width=440),
        # ~620 x 760 px, 40 lines: more text than DENSE_MAX_TOKENS, read in tiles.
        "dense": draw_page("dense", [[header, *paragraphs(8, 5, 8, 2)]], size=13, margin=20, pitch=1.4),
    }


@pytest.fixture(scope="module")
def adversary(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[CropAdversary, str, dict, Path]]:
    folder = tmp_path_factory.mktemp("adversaries")
    drawn = pages()
    for name, page in drawn.items():
        (folder / f"{name}.png").write_bytes(page.png)
    server = CropAdversary(list(drawn.values()))
    with ServedAdversary(server) as served:
        yield server, served.base_url, drawn, folder


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def recall_and_extra(truth: str, got: str) -> tuple[float, int]:
    """The share of the page's words the row holds, and how many words it holds beyond them."""
    want, have = Counter(_words(truth)), Counter(_words(got))
    found = sum(min(n, have[w]) for w, n in want.items())
    return found / max(1, sum(want.values())), sum(have.values()) - found


#: The readings of ``crops_bad`` runs, shared by the tests that look at them (each costs 30-40 requests).
_BAD: dict[tuple[str, str], tuple[dict, list]] = {}


def run(adversary, behaviour: str, name: str, out: Path, model: str = MODEL,
        bound: float | None = None) -> tuple[dict, list]:
    """The row of ``name`` read by ``model`` played as ``behaviour`` (with the cost bound
    ``bound``, None: the default), and the requests it took."""
    server, url, _, folder = adversary
    server.behaviour = behaviour
    before = len(server.requests_for(name))
    # The dense page's text does not fit DENSE_MAX_TOKENS; a crop read badly runs out of it.
    options: dict = {"max_tokens": DENSE_MAX_TOKENS} if name == "dense" or behaviour == "crops_bad" else {}
    if bound is not None:
        options["dense_option"] = [f"cost_bound={bound:g}"]
    result = llm_ocr.extract([str(folder / f"{name}.png")], output=str(out), endpoint=url, model=model,
                             workers=0, progress="off", **options)
    assert result.exit_code in (0, 1), result
    (row,) = read_stage(out, "extract")
    return row, server.requests_for(name)[before:]


def read_badly(adversary, name: str, model: str, bound: float, tmp_path: Path) -> tuple[dict, list]:
    """:func:`run` of ``crops_bad`` with the cost bound ``bound``, once per page and model for the module."""
    if (name, model) not in _BAD:
        default = bound == DenseOptions().cost_bound
        _BAD[(name, model)] = run(adversary, "crops_bad", name, tmp_path / "bad", model, None if default else bound)
    return _BAD[(name, model)]


def looks(page: TruthPage, seen: list) -> int:
    """The most requests any line of ``page`` was shown in (at least half its height inside)."""
    most = 0
    for line in page.lines:
        shown = sum(1 for s in seen if s.region is not None
                    and min(line.bottom, s.region.y2) - max(line.top, s.region.y1) >= 0.5 * (line.bottom - line.top)
                    and min(line.right, s.region.x2) > max(line.left, s.region.x1))
        most = max(most, shown)
    return most


FAMILIES = {"boxes": MODEL, "boxless": BOXLESS_MODEL}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", ["long", "dense"])
@pytest.mark.parametrize("behaviour", ["honest", "continues", "header", "header_lower", "next_line"])
def test_a_page_ends_whole_and_honest_whatever_the_crops_edges_show(adversary, tmp_path: Path, behaviour: str,
                                                                      name: str, family: str) -> None:
    page = adversary[2][name]
    row, seen = run(adversary, behaviour, name, tmp_path / "out", FAMILIES[family])
    assert all(s.page == name for s in seen) and len(seen) >= 2, seen  # read in pieces, each found
    recall, extra = recall_and_extra(page.text, row["markdown"])
    assert recall >= 0.98, (row["status"], recall, row["markdown"])  # never lost
    if row["status"] == "ok":  # honest: an ok row holds the page, not what a crop invented
        assert extra <= 0.02 * len(_words(page.text)), (extra, row["markdown"])
    else:
        assert "could not be verified" in row["error"], row["error"]
    assert looks(page, seen) <= MAX_LOOKS, [(s.region, s.finish) for s in seen]  # no cutting again


#: The pages read badly: the long one by the family joined by boxes (segments), with the default
#: cost bound; the dense one by the family joined by repeated text (bands), with a bound of 4 set
#: through the Python API (olmOCR-2's whole reading is 8 requests, its first and 7 retries: at the
#: default bound of 16 this page stops at 104 requests, under the bound, before reaching it).
#: Without a bound these reads took 74 and 104 requests, where an honest reading takes 2-3.
BAD_READS = [("long", "boxes", DenseOptions().cost_bound), ("dense", "boxless", 4.0)]


@pytest.mark.parametrize(("name", "family", "bound"), BAD_READS)
def test_a_model_that_reads_every_crop_badly_leaves_the_row_not_ok(adversary, tmp_path: Path, name: str,
                                                                    family: str, bound: float) -> None:
    row, seen = read_badly(adversary, name, FAMILIES[family], bound, tmp_path)
    assert all(s.finish == "length" for s in seen if not s.whole), seen  # every crop ran out
    assert row["status"] == "truncated" and "max_tokens" in row["error"], row["error"]


@pytest.mark.parametrize(("name", "family", "bound"), BAD_READS)
def test_a_model_that_reads_every_crop_badly_costs_at_most_the_bound(adversary, tmp_path: Path, name: str,
                                                                     family: str, bound: float) -> None:
    """The page reads whole in its first attempt and the family's truncation retries: read in
    pieces, it is sent in at most ``bound`` times as many requests (as the server counts them),
    and keeps the text it has, its row saying it reached the bound."""
    model = FAMILIES[family]
    row, seen = read_badly(adversary, name, model, bound, tmp_path)
    whole = 1 + family_for(model).retries.count
    assert len(seen) <= bound * whole, (len(seen), bound, whole)
    assert row["attempts"] == len(seen), (row["attempts"], len(seen))  # the row counts what was sent
    assert row["status"] == "truncated" and "reached its cost bound" in (row["cut_reason"] or ""), row["cut_reason"]
