"""The knobs of reading a page in pieces, declared once: :class:`DenseOptions`, and the values
in force (:func:`dense`, :func:`using_dense`).

Every knob is a field with a description, its unit and its provenance (where its value comes
from). They sit below every layer that reads them (``vlm/`` for a cut stream's tokens, ``sources/``
for the ink of a page, ``stages/`` for the pieces path and the Fields stage's request sizes), so
this module imports nothing of the package: pydantic only. :mod:`llm_ocr.options` re-exports them
beside the run's other options; a run sets them with ``--dense-option NAME=VALUE`` (repeatable),
``LLM_OCR_DENSE_<NAME>`` or ``dense_option=[...]`` of the Python API.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# -- the knobs of a page read in pieces ------------------------------------------------------

#: Where a knob's value comes from: ``reasoned`` from geometry or a recipe, ``measured`` on a
#: named real model's published answers, ``simulator`` fitted to the project's simulator. A
#: ``simulator`` value is changed only with a reason that is not the simulator's score
#: (docs/gpu-time.md, "Tuning in the open").
Provenance = Literal["reasoned", "measured", "simulator"]


def _knob(default: Any, unit: str, provenance: Provenance, description: str, **bounds: Any) -> Any:
    """A field of :class:`DenseOptions`: its default, unit, provenance and description."""
    return Field(default, description=description, json_schema_extra={"unit": unit, "provenance": provenance},
                 **bounds)


class DenseOptions(BaseModel):
    """Every knob of reading a page in pieces (:mod:`llm_ocr.stages.pieces`): segments of a long
    page, tiles or bands of a dense one, halves cut again. Set one with ``--dense-option
    NAME=VALUE`` (repeatable), ``LLM_OCR_DENSE_<NAME>``, or ``llm_ocr.run(...,
    dense_option=["NAME=VALUE"])``; the values in force are written in the run's marker and
    listed by ``llm-ocr models --json`` with their provenance."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # When a page is read in pieces, and into how many (stages/pieces/plan.py).
    tile_at: float = _knob(0.9, "share of max_tokens", "reasoned",
                           "A page whose estimated text needs this share of max_tokens or more is read in pieces "
                           "at once, before any request.", gt=0)
    tile_share: float = _knob(0.2, "share of max_tokens", "reasoned",
                              "Each piece is planned to need at most this share of max_tokens (1,434 of 7,168: a "
                              "long normal page).", gt=0, le=1)
    tile_tokens: int = _knob(1434, "tokens", "simulator",
                             "Where tile_share of max_tokens is less (a small context), a piece is planned at this "
                             "many tokens (af0af62: set to lower the simulated newspaper's tokens).", gt=0)
    tile_max_share: float = _knob(0.5, "share of max_tokens", "simulator",
                                  "A piece is never planned above this share of max_tokens (af0af62, with "
                                  "tile_tokens).", gt=0, le=1)
    long_factor: float = _knob(2.0, "times max_tokens", "reasoned",
                               "After an answer that ran to max_tokens, the page is taken to hold at least this many "
                               "times max_tokens (unless its estimate says more).", gt=0)
    long_agrees: float = _knob(0.7, "share of max_tokens", "reasoned",
                               "An answer that ran out is long whatever it says when the page's estimate needs at "
                               "least this share of max_tokens (the ink estimate is within 0.65-1.35 of the truth).",
                               gt=0)
    image_share: float = _knob(0.6, "share of the context beside max_tokens", "reasoned",
                               "A piece's image may take this share of the context left beside max_tokens (the rest: "
                               "the prompt, the chat template, uneven cuts).", gt=0, le=1)
    prompt_text_tokens: int = _knob(256, "tokens", "reasoned",
                                    "Prompt tokens kept for a request's text and chat template beside its image "
                                    "(olmOCR-2's prompt, the longest, is about 200).", ge=0)
    max_pieces: int = _knob(64, "requests", "reasoned",
                            "The most pieces one page is read in, cuts again included.", ge=2)
    cost_bound: float = _knob(16.0, "times a whole-page reading's tokens and requests", "simulator",
                              "A page read in pieces is cut again only while it costs at most this many times the "
                              "tokens and the requests reading it whole could (its first attempt and truncation "
                              "retries, each its prompt and max_tokens); then it keeps the text it has, truncated. "
                              "16: above the heaviest reading the project's dense tests need on the simulator (11.5x "
                              "the requests, 10.3x the tokens; docs/gpu-time.md).", ge=1)
    segment_aspect: float = _knob(2.0, "times the page's short side", "reasoned",
                                  "A long page's segment is at most this many times as long as the page is wide "
                                  "(a shape every family reads).", gt=1)
    segment_overlap: float = _knob(0.12, "share of a segment", "reasoned",
                                   "Consecutive segments of a long page overlap by this much, so that a line cut by "
                                   "one segment's edge is whole in its neighbour ...", ge=0, lt=0.5)
    segment_min_overlap_px: int = _knob(64, "pixels", "reasoned", "... and by at least this many pixels.", ge=0)
    # Where a page is cut (stages/pieces/cuts.py, columns.py).
    analysis_side: int = _knob(1300, "pixels", "reasoned",
                               "The longer side of the grey copy a page's ink is measured on (whitespace, lines, "
                               "columns, the ink estimate of its text).", ge=100)
    blank: float = _knob(0.02, "share of the busiest row or column", "reasoned",
                         "A row or column of the ink is blank under this share of the busiest one.", gt=0, lt=1)
    min_gutter: float = _knob(0.006, "share of the page's width", "reasoned",
                              "A gutter between columns is a run of blank columns at least this wide.", gt=0)
    wide_gutter_lines: float = _knob(1.0, "text-line heights", "reasoned",
                                     "A page wider than --max-page-aspect times its height is cut only at gutters "
                                     "(columns blank from its top to its bottom) at least this wide: a word space "
                                     "is about a third of one, the space between a table's or a form's columns one "
                                     "and more (llm_ocr/sources/wide.py).", gt=0)
    line_reach: float = _knob(1.5, "line pitches", "simulator",
                              "Bands (joined by the text their overlap repeats) reach this far past a cut "
                              "(fca5c52: chosen on the simulator's denser-answers workload).", gt=0)
    tile_line_reach: float = _knob(0.75, "line pitches", "simulator",
                                   "Tiles (joined by their boxes) reach this far past a cut (af0af62: lowered from "
                                   "1.5 to meet the simulated newspaper's token target).", gt=0)
    overlap: float = _knob(0.08, "share of a band's height", "reasoned",
                           "A band reaches this far past its cut when the page's line pitch cannot be measured.",
                           ge=0, lt=1)
    min_overlap: float = _knob(0.02, "share of the page's height", "reasoned",
                               "... and at least this far (two lines of 10 pt text on a Letter page).", ge=0, lt=1)
    gutter_margin: float = _knob(0.006, "share of the page's width", "reasoned",
                                 "A piece reaches this far past a gutter it was cut at (a drop cap, a crooked scan).",
                                 ge=0, lt=1)
    snap: float = _knob(0.5, "share of a tile's width", "reasoned",
                        "A gutter this near an even split replaces it.", ge=0, le=1)
    max_tiles: int = _knob(36, "pieces", "reasoned", "The most tiles a page is planned in.", ge=2)
    min_cut_side: int = _knob(32, "pixels of the piece", "reasoned",
                              "A piece whose answer ran out is cut in two while each half is at least this tall (or "
                              "wide, cut at a gutter), and the family's smallest readable side: a 12 pt text line at "
                              "144 DPI is about 29 px from ascender to descender.", ge=1)
    max_pitch_share: float = _knob(0.25, "share of the piece's width", "reasoned",
                                   "Text lines counted in a piece's ink are believed only while their pitch (its "
                                   "height over their count) is at most this share of its width: a text line holds "
                                   "a few words, each about as wide as the line is tall. Fewer lines than that say "
                                   "the count failed (a scan's noise, merged lines): the piece is cut by pixels.",
                                   gt=0)
    line_strips: int = _knob(8, "strips", "reasoned",
                             "Vertical strips a piece's lines are counted in (neighbouring columns' lines need not "
                             "line up).", ge=1)
    min_tall_lines: int = _knob(5, "line pitches", "reasoned",
                                "A region has columns only when it is at least this tall (a headline's word spaces "
                                "are no gutter).", ge=1)
    min_column_lines: int = _knob(8, "line pitches", "reasoned",
                                  "A column of text is at least this wide (about 20 characters); a narrower one is "
                                  "part of a table, read with its neighbour.", ge=1)
    channel: float = _knob(0.6, "share of the widest gutter", "reasoned",
                           "A blank run narrower than this is a channel between words, not a gutter.", gt=0, le=1)
    columns_depth: int = _knob(6, "levels", "reasoned", "Deepest recursion of the columns' XY-cut.", ge=0)
    gap_tolerance: float = _knob(0.004, "share of the page", "reasoned",
                                 "Blocks whose boxes overlap by at most this much are still apart when a tiled "
                                 "page's reading order looks for gaps.", ge=0)
    paper_percentile: float = _knob(95.0, "percentile of the grey copy's pixels", "reasoned",
                                    "A page's paper is the grey level at this percentile of its pixels, and its ink "
                                    "what is darker (llm_ocr/sources/wide.py ink_of, which every cut and gutter is "
                                    "measured on): text covers far less than 95% of a page, and up to 5% brighter "
                                    "than the paper (a scan's glare, a highlight) does not lift it.", ge=0, le=100)
    strip_floor_percentile: float = _knob(5.0, "percentile of a strip's rows", "reasoned",
                                          "Text lines are counted in a strip's rows inked above this percentile of "
                                          "them: a scan's paper is grey with noise in every row, which would leave "
                                          "no row blank and every line merged into one.", ge=0, le=100)
    min_strip_px: int = _knob(16, "pixels of the grey copy", "reasoned",
                              "A vertical strip text lines are counted in is at least this wide (a few letters: "
                              "fewer strips on a narrow piece).", ge=1)
    pitch_min_lines: int = _knob(8, "text lines", "reasoned",
                                 "A strip gives a line pitch (the distance between text lines) only when it holds at "
                                 "least this many lines (a picture's or a few lines' gaps are no pitch).", ge=2)
    cut_window: float = _knob(0.25, "share of a band's height", "reasoned",
                              "A cut between text lines is looked for this far either side of an even split (the "
                              "blankest row within it): a quarter band moves no cut into the next.", gt=0, le=0.5)
    max_half_reach: float = _knob(0.25, "share of the piece's height", "reasoned",
                                  "A half of a piece cut again reaches at most this far past the cut into the other "
                                  "half (two believed lines: a line's pitch is half the piece).", gt=0, le=0.5)
    min_believed_share: float = _knob(0.5, "share of the lines the rows' pitch fits", "reasoned",
                                      "Text lines counted in a piece are believed only when they are at least this "
                                      "share of the lines its rows' period fits in its height (fewer: lines merged "
                                      "or noise between them, the piece cut by pixels).", ge=0, le=1)
    min_margin_px: int = _knob(2, "pixels", "reasoned",
                               "A piece cut again at a gutter reaches at least this far past it (gutter_margin of a "
                               "narrow piece rounds to nothing: a glyph's antialiased edge).", ge=0)
    min_wide_gutter_px: float = _knob(2.0, "pixels of the grey copy", "reasoned",
                                      "A wide page's gutter is at least this wide whatever its line height (one "
                                      "blank column of the grey copy is a letter's spacing).", ge=1)
    fit_search: int = _knob(16, "bands", "reasoned",
                            "A column's number of bands that each fit a request is looked for this far either side "
                            "of the number its share of the ink asks.", ge=0)
    gutter_samples: int = _knob(4, "parts of the page's height", "reasoned",
                                "A page's gutter width is the median of the widest gutter of each of this many "
                                "parts of its height (a headline's channel, a figure's margin is in one part at "
                                "most).", ge=1)
    order_depth: int = _knob(64, "levels", "reasoned",
                             "Deepest recursion of the XY-cut that puts a tiled page's blocks in reading order (a "
                             "guard: a page's blocks nest a few levels).", ge=1)
    replan_attempts: int = _knob(4, "plans", "reasoned",
                                 "Times a dense page is planned again with fewer pieces asked when its plan holds "
                                 "more pieces than its cost bound leaves room for (columns and grids add pieces).",
                                 ge=0)
    # The rest of a tile whose answer ran out (stages/pieces/rest.py).
    rest_min_share: float = _knob(0.04, "share of the piece", "reasoned",
                                  "The rest of a piece is not read where it is thinner than this (its margin).", ge=0)
    rest_strips: int = _knob(64, "strips", "reasoned",
                             "Strips a piece is cut across into to find how far down its answer read each part.",
                             ge=1)
    rest_depth_share: float = _knob(0.03, "share of the piece's height", "reasoned",
                                    "Strips read to depths this close are read again as one piece.", ge=0)
    rest_min_width: float = _knob(0.5, "share of the piece's width", "reasoned",
                                  "A piece of the rest is joined with its neighbours until this wide.", ge=0, le=1)
    rest_max_reach: float = _knob(0.5, "share of the piece's height", "reasoned",
                                  "... but not two whose tops are further apart than this.", ge=0, le=1)
    rest_min_side: float = _knob(0.25, "share of the piece", "simulator",
                                 "A piece of the rest smaller than this a side grows to it (6915fb9: \"the simulator "
                                 "did not find such crops\").", ge=0, le=1)
    rest_fits: float = _knob(0.8, "answers", "reasoned",
                             "A piece of the rest holding more than this share of what the answer that ran out read "
                             "is cut in two before it is read.", gt=0)
    rest_max_share: float = _knob(0.75, "share of the piece", "reasoned",
                                  "When the rest is more than this, the piece's halves are read instead.", gt=0, le=1)
    # The tokens a page will need (stages/pieces/rate.py, sources/density.py).
    tokens_per_char: float = _knob(0.35, "tokens per character", "simulator",
                                   "The one first guess of answer tokens per character of a page's text, markup "
                                   "included, before a run's answers show the real figure: the dense-page planner "
                                   "(how many pieces a page needs), a stream cut before the server reported its "
                                   "usage (llm_ocr/vlm/streaming.py) and the Fields stage sizing its requests "
                                   "(llm_ocr/stages/fields/chunks.py) all read it, and each corrects it from the "
                                   "run's answers where it can. 0.35 is DeepSeek-OCR's grounding output as the "
                                   "project's simulator writes it for its 7-column newspaper page (29,274 characters "
                                   "of markup for 24,883 of text layer, at 0.3 tokens a character): no fact about "
                                   "any model. It errs high (markup counted), the safe side in all three places: "
                                   "more, smaller pieces; a cut stream counted a little long; smaller Fields "
                                   "requests.", gt=0)
    rate_quantile: float = _knob(0.9, "quantile", "reasoned",
                                 "Bands are planned at this quantile of the tokens per character the run's answers "
                                 "showed.", ge=0, le=1)
    keeps_complete_quantile: float = _knob(0.5, "quantile", "reasoned",
                                           "Tiles (which keep the complete part of an answer that runs out) are "
                                           "planned at this quantile.", ge=0, le=1)
    min_observed_chars: int = _knob(1000, "characters", "reasoned",
                                    "A page whose estimate holds fewer characters is no observation of the rate.",
                                    ge=0)
    max_rate_factor: float = _knob(8.0, "times tokens_per_char", "reasoned",
                                   "The run's rate is never taken above this many times the first guess.", ge=1)
    page_words_share: float = _knob(0.8, "share of the answer's words", "reasoned",
                                    "An answer that ran out reads its page when this share of its words are the text "
                                    "layer's.", ge=0, le=1)
    min_answer_words: int = _knob(20, "words", "reasoned",
                                  "Fewest words an answer that ran out must hold to be reading its page.", ge=0)
    ink_slack: float = _knob(1.0 / 0.65, "times the ink estimate", "reasoned",
                             "Without a text layer, an answer reads its page while its letters are at most this many "
                             "times the ink estimate (0.65-1.35 of the truth).", ge=1)
    min_letter_share: float = _knob(0.5, "share of visible characters", "reasoned",
                                    "... and make at least this share of its visible characters (a loop that "
                                    "counts is digits).", ge=0, le=1)
    min_layer_chars: int = _knob(200, "characters", "reasoned",
                                 "A text layer with fewer characters says nothing of a page's density (a scan's "
                                 "page number).", ge=0)
    min_alnum_share: float = _knob(0.5, "share of characters", "reasoned",
                                   "Share of a text layer's non-space characters that must be letters or digits for "
                                   "it to be counted.",
                                   ge=0, le=1)
    min_pitch: int = _knob(5, "pixels of the grey copy", "reasoned",
                           "Fewest pixels between two text lines for the ink estimate (closer, glyphs blur "
                           "together).", ge=1)
    edge_per_char: float = _knob(0.05, "ink edge per character per squared line pitch", "reasoned",
                                 "How much ink edge a character makes (0.037-0.066 on the benchmark's generated "
                                 "pages, not on any model's answers).", gt=0)
    min_periodicity: float = _knob(0.3, "autocorrelation", "reasoned",
                                   "The rows' ink must repeat at the line pitch at least this strongly for the ink "
                                   "estimate.", ge=0, le=1)
    min_estimate_pitches: int = _knob(4, "min_pitch", "reasoned",
                                      "A page is at least this many times min_pitch tall for the ink estimate.",
                                      ge=1)
    pitch_search_share: float = _knob(0.125, "share of the page's rows", "reasoned",
                                      "The line pitch is looked for up to this share of the page's height (at "
                                      "least 8 lines: a period seen fewer times is no text's).", gt=0, le=0.5)
    # Joining pieces by the text their overlap repeats (stages/pieces/join.py).
    max_overlap_tokens: int = _knob(400, "words", "reasoned",
                                    "Words compared when looking for the lines two pieces both show.", ge=1)
    anchor_agrees: float = _knob(0.6, "share of the words removed", "reasoned",
                                 "A repeat found by its first four words (the line an edge cut read differently) "
                                 "is removed only when this share of the words removed are those the piece before "
                                 "holds there: a re-read of the same lines differs in a few words, a line a model "
                                 "writes atop every piece (a running header) is followed by other text "
                                 "(issue 47).", gt=0, le=1)
    min_repeat_tokens: int = _knob(4, "words", "reasoned",
                                   "Fewest words a band's block must repeat from the band above to be cut there "
                                   "(four words: a line's start, rarer than two pieces sharing a phrase).", ge=1)
    min_tail_tokens: int = _knob(2, "words", "reasoned",
                                 "Fewest words that must both end a piece and start the next to be removed as their "
                                 "overlap's repeat (one word alone is a coincidence).", ge=1)
    anchor_words: int = _knob(4, "words", "reasoned",
                              "A repeat the edge read differently is found by this many words starting the next "
                              "piece, looked for near the end of the piece before.", ge=1)
    same_start_words: int = _knob(4, "words", "reasoned",
                                  "Two pieces whose blocks start with this many same words, no repeat removed, are "
                                  "a join that cannot be verified (a line a model writes atop every crop).", ge=1)
    header_reach: int = _knob(3, "blocks", "reasoned",
                              "A running header is looked for in this many first blocks of a piece's share: a "
                              "model may write a stray line first and the header second or third (issue 47).",
                              ge=1)
    twin_lookback: int = _knob(50, "blocks", "reasoned",
                               "A segment's block is looked for as another copy among this many blocks kept last "
                               "(the segment before's: a segment holds a few dozen blocks at most).", ge=1)

    @classmethod
    def knobs(cls) -> list[dict[str, Any]]:
        """Every knob: name, default, unit, provenance and description (``llm-ocr models --json``)."""
        out = []
        for name, info in cls.model_fields.items():
            extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
            out.append({"name": name, "default": info.default, "unit": extra.get("unit"),
                        "provenance": extra.get("provenance"), "description": info.description})
        return out


#: The environment variables a knob is set with: ``LLM_OCR_DENSE_<NAME>``.
DENSE_ENV_PREFIX = "LLM_OCR_DENSE_"


def dense_options(overrides: list[str] | dict[str, Any] | None = None,
                  environ: dict[str, str] | None = None) -> DenseOptions:
    """The knobs in force: the defaults, then ``LLM_OCR_DENSE_<NAME>`` variables of ``environ``
    (None: none), then ``overrides`` (``["NAME=VALUE", ...]`` or a mapping). A name no knob has,
    or a value out of its bounds, raises ``ValueError`` naming it."""
    values: dict[str, Any] = {}
    fields = DenseOptions.model_fields
    for key, value in (environ or {}).items():
        if key.startswith(DENSE_ENV_PREFIX) and key != DENSE_ENV_PREFIX + "OPTION":  # --dense-option's own
            values[key[len(DENSE_ENV_PREFIX):].lower()] = value
    items = overrides.items() if isinstance(overrides, dict) else (_pair(o) for o in overrides or [])
    values.update(items)
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ValueError(f"no dense option {', '.join(unknown)} (llm-ocr models --json lists them)")
    return DenseOptions(**values)


def _pair(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` as ``(name, value)``."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"--dense-option {text!r}: expected NAME=VALUE")
    return name.strip().lower().replace("-", "_"), value.strip()


_IN_FORCE: ContextVar[DenseOptions | None] = ContextVar("llm_ocr_dense_options", default=None)
_DEFAULT: list[DenseOptions] = []


def dense() -> DenseOptions:
    """The knobs in force here: those a run set (:func:`using_dense`), else the defaults with the
    process's ``LLM_OCR_DENSE_*`` variables (a render worker process inherits its run's)."""
    chosen = _IN_FORCE.get()
    if chosen is not None:
        return chosen
    if not _DEFAULT:
        _DEFAULT.append(dense_options(environ=dict(os.environ)))
    return _DEFAULT[0]


@contextmanager
def using_dense(options: DenseOptions) -> Iterator[DenseOptions]:
    """Run the block (and the tasks and threads it starts) with ``options`` in force."""
    token = _IN_FORCE.set(options)
    try:
        yield options
    finally:
        _IN_FORCE.reset(token)
