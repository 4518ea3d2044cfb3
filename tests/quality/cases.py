"""A small bench in olmOCR-bench's format, and Markdown to score against it.

Plain data (no llm_ocr import), so that ``make_olmocr_verdicts.py`` can load it in a virtualenv
that holds olmOCR's own scorer. ``BENCH`` maps each PDF (its path under ``pdfs/``) to the lines
drawn on it (:mod:`tests.quality.benchgen`), its category (the JSONL file its tests go in), its
tests, a good reading and a bad one. Each bad reading has one defect per test type, and
``BAD_FAILS`` names the tests each defect must fail (every other test must pass on it).
``EXTRA`` are single cases on the edges of each test type's definition.
"""

from __future__ import annotations

from typing import Any

LETTER_LINES = [
    "ACME QUARTERLY - CONFIDENTIAL",
    "Annual Meeting Minutes",
    "The committee met on the third of March to review the annual budget.",
    "Members agreed that the library roof must be repaired before winter.",
    "Special thanks to the volunteers who organised the book sale.",
    "The next meeting will be held in the town hall on the first Monday of June.",
    "Page 7",
]
LETTER_GOOD = """# Annual Meeting Minutes

The committee met on the third of March to review the annual budget.[^1]
Members agreed that the library roof must be repaired before winter.
Special thanks to the volunteers who organised the book sale.
The next meeting will be held in the town hall on the first Monday of June.

[^1]: Budget figures are provisional.
"""
# Defects: the header kept (absent), the roof line dropped (present, order), no heading marker
# (format), no footnote marker (footnote), and a repetition tail (baseline).
LETTER_BAD = (
    "ACME QUARTERLY - CONFIDENTIAL\n\nAnnual Meeting Minutes\n\n"
    "The committee met on the third of March to review the annual budget.\n"
    "Special thanks to the volunteers who organised the book sale.\n"
    "The next meeting will be held in the town hall on the first Monday of June.\n"
    + "the " * 60
)

COLUMN_A = [
    "Rivers carry sediment from the mountains",
    "down to the broad plains of the delta.",
    "Farmers have used this rich soil",
    "for thousands of years to grow rice.",
]
COLUMN_B = [
    "Modern dams hold back much of that silt,",
    "so the delta is slowly sinking today.",
    "Engineers now study ways to let",
    "sediment pass through the turbines.",
]
COLUMNS_GOOD = " ".join(COLUMN_A[:2]) + "\n" + " ".join(COLUMN_A[2:]) + "\n\n" + " ".join(COLUMN_B[:2]) + "\n" + " ".join(COLUMN_B[2:]) + "\n"
# Defect: the right column read before the left one.
COLUMNS_BAD = " ".join(COLUMN_B[:2]) + "\n" + " ".join(COLUMN_B[2:]) + "\n\n" + " ".join(COLUMN_A[:2]) + "\n" + " ".join(COLUMN_A[2:]) + "\n"

TABLE_ROWS = [["Region", "2022", "2023"], ["North", "4.5%", "5.1%"], ["South", "3.2%", "2.9%"], ["East", "6.0%", "6.4%"]]
TABLE_GOOD = (
    "Growth by region\n\n<table><tr><td>Region</td><td>2022</td><td>2023</td></tr>"
    "<tr><td>North</td><td>4.5%</td><td>5.1%</td></tr><tr><td>South</td><td>3.2%</td><td>2.9%</td></tr>"
    "<tr><td>East</td><td>6.0%</td><td>6.4%</td></tr></table>\n"
)
# Defect: a broken table: South's first value lost, so 2.9% sits under 2022, and East merged into South.
TABLE_BAD = (
    "Growth by region\n\n<table><tr><td>Region</td><td>2022</td><td>2023</td></tr>"
    "<tr><td>North</td><td>4.5%</td><td>5.1%</td></tr><tr><td>South</td><td>2.9%</td><td>East 6.0% 6.4%</td></tr></table>\n"
)

FORMULA_LINES = ["Einstein wrote E = mc2 in 1905.", "For a right triangle, a2 + b2 = c2."]
FORMULA_GOOD = "Einstein wrote $$E = m c^{2}$$ in 1905.\n\nFor a right triangle, \\(a^{2}+b^{2}=c^{2}\\).\n"
# Defect: the wrong exponent, and the second formula as plain text.
FORMULA_BAD = "Einstein wrote $E = mc^3$ in 1905.\n\nFor a right triangle, a2 + b2 = c2.\n"


def _t(pdf: str, id_: str, type_: str, **fields: Any) -> dict[str, Any]:
    return {"pdf": pdf, "page": 1, "id": id_, "type": type_, **fields}


BENCH: dict[str, dict[str, Any]] = {
    "text/letter.pdf": {
        "category": "text",
        "lines": LETTER_LINES,
        "tests": [
            _t("text/letter.pdf", "letter_present_budget", "present", text="The committee met on the third of March to review the annual budget."),
            _t("text/letter.pdf", "letter_present_roof", "present", text="Members agreed that the library roof must be repaired before winter.", max_diffs=2),
            _t("text/letter.pdf", "letter_present_thanks", "present", text="SPECIAL THANKS TO THE VOLUNTEERS", case_sensitive=False),
            _t("text/letter.pdf", "letter_absent_header", "absent", text="ACME QUARTERLY - CONFIDENTIAL"),
            _t("text/letter.pdf", "letter_absent_folio", "absent", text="Page 7", last_n=40),
            _t("text/letter.pdf", "letter_order", "order", before="third of March", after="library roof must be repaired"),
            _t("text/letter.pdf", "letter_heading", "format", text="Annual Meeting Minutes", format="heading"),
            _t("text/letter.pdf", "letter_footnote", "footnote", marker="1", appears_before_marker="review the annual budget"),
        ],
        "good": LETTER_GOOD,
        "bad": LETTER_BAD,
    },
    "columns/two_columns.pdf": {
        "category": "columns",
        "columns": [COLUMN_A, COLUMN_B],
        "tests": [
            _t("columns/two_columns.pdf", "columns_a", "order", before="Rivers carry sediment", after="Farmers have used this rich soil"),
            _t("columns/two_columns.pdf", "columns_ab", "order", before="grow rice", after="Modern dams hold back", max_diffs=1),
            _t("columns/two_columns.pdf", "columns_b", "order", before="slowly sinking", after="sediment pass through the turbines"),
        ],
        "good": COLUMNS_GOOD,
        "bad": COLUMNS_BAD,
    },
    "tables/growth.pdf": {
        "category": "tables",
        "caption": "Growth by region",
        "table": TABLE_ROWS,
        "tests": [
            _t("tables/growth.pdf", "table_north", "table", cell="5.1%", left="4.5%", top_heading="2023", left_heading="North"),
            _t("tables/growth.pdf", "table_south_down", "table", cell="South", down="East"),
            _t("tables/growth.pdf", "table_south_value", "table", cell="2.9%", up="5.1%", top_heading="2023"),
        ],
        "good": TABLE_GOOD,
        "bad": TABLE_BAD,
    },
    "math/formulas.pdf": {
        "category": "math",
        "lines": FORMULA_LINES,
        "tests": [
            _t("math/formulas.pdf", "math_einstein", "math", math="E = mc^2"),
            _t("math/formulas.pdf", "math_pythagoras", "math", math="a^2 + b^2 = c^2"),
        ],
        "good": FORMULA_GOOD,
        "bad": FORMULA_BAD,
    },
    "text/blank.pdf": {
        "category": "text",
        "lines": [],
        "tests": [_t("text/blank.pdf", "blank_page", "baseline", max_length=10)],
        "good": "",
        "bad": "Lorem ipsum dolor sit amet, a page the model imagined.",
    },
}

#: The tests each bad reading must fail; every other test passes on the bad reading too.
BAD_FAILS = {
    "letter_present_roof", "letter_absent_header", "letter_order", "letter_heading", "letter_footnote",
    "text/letter.pdf_baseline", "columns_ab", "table_south_down", "table_south_value", "math_einstein",
    "math_pythagoras", "blank_page",
}  # fmt: skip


def _e(id_: str, type_: str, markdown: str, **fields: Any) -> dict[str, Any]:
    return {"test": {"pdf": "edge.pdf", "page": 1, "id": id_, "type": type_, **fields}, "markdown": markdown}


#: Cases on the edges of each test type's definition (normalisation, thresholds, spans, markers).
EXTRA: list[dict[str, Any]] = [
    _e("norm_quotes", "present", "He said \u201cit\u2019s fine\u201d \u2014 twice.", text="He said \"it's fine\" - twice."),
    _e("norm_bold", "present", "the **quick** brown _fox_ jumps", text="the quick brown fox jumps"),
    _e("norm_br", "present", "first line<br>second line", text="first line second line"),
    _e("norm_nfc", "present", "cafe\u0301 au lait", text="caf\u00e9 au lait"),
    _e("norm_micro", "present", "a 5 \u00b5m gap", text="a 5 \u03bcm gap"),
    _e("fuzzy_one_typo_ok", "present", "The quick brown fox jumps over the lazy dog", text="The quikc brown fox", max_diffs=2),
    _e("fuzzy_one_typo_exact", "present", "The quick brown fox jumps over the lazy dog", text="The quikc brown fox"),
    _e("case_sensitive_miss", "present", "THE END OF THE STORY", text="the end of the story"),
    _e("first_n_hit", "present", "Chapter 1\n\nLong text follows here and goes on.", text="Chapter 1", first_n=20),
    _e("first_n_miss", "present", "Long text comes first and then at last\n\nChapter 1", text="Chapter 1", first_n=20),
    _e("first_and_last_n", "absent", "3 Header text in the middle of nothing at all 42", text="Header", first_n=5, last_n=5),
    _e("absent_fuzzy", "absent", "Journal of Things, vol. 3", text="Journal of Thing", max_diffs=1),
    _e("order_exact", "order", "alpha beta gamma delta", before="beta", after="delta"),
    _e("order_reversed", "order", "delta gamma beta alpha", before="beta", after="delta"),
    _e("order_fuzzy", "order", "the quick brwn fox then the lazy dog", before="quick brown fox", after="lazy dog", max_diffs=1),
    _e("order_repeated", "order", "after text, before text, after text", before="before text", after="after text"),
    _e("order_missing", "order", "only the first part", before="first part", after="second part"),
    _e("md_table", "table", "| Name | Age |\n|---|---|\n| Ann | 31 |\n| Bob | 45 |\n", cell="31", up="Age", left="Ann", down="45"),
    _e("md_table_heading", "table", "| Name | Age |\n|---|---|\n| Ann | 31 |\n| Bob | 45 |\n", cell="45", top_heading="Age", left_heading="Bob"),
    _e("md_table_ignored", "table", "| Name | Age |\n|---|---|\n| Ann | 31 |\n", cell="31", up="Age", ignore_markdown_tables=True),
    _e("html_colspan", "table",
       "<table><tr><th colspan=\"2\">Sales</th></tr><tr><td>Q1</td><td>Q2</td></tr><tr><td>10</td><td>12</td></tr></table>",
       cell="12", up="Q2", top_heading="Sales"),
    _e("html_rowspan", "table",
       "<table><tr><td rowspan=\"2\">Fruit</td><td>Apple</td></tr><tr><td>Pear</td></tr></table>",
       cell="Pear", left="Fruit"),
    _e("html_thead", "table",
       "<table><thead><tr><td>Item</td><td>Price</td></tr></thead><tbody><tr><td>Tea</td><td>3</td></tr><tr><td>Cake</td><td>5</td></tr></tbody></table>",
       cell="5", top_heading="Price", left="Cake"),
    _e("html_br_cell", "table", "<table><tr><td>Line one<br>line two</td><td>X</td></tr></table>", cell="Line one line two", right="X"),
    _e("html_unclosed_cells", "table", "<table><tr><td>a<td>b</tr><tr><td>c<td>d</tr></table>", cell="d", up="b"),
    _e("html_nested", "table", "<table><tr><td>outer<table><tr><td>in1</td><td>in2</td></tr></table></td></tr></table>", cell="in2", left="in1"),
    _e("table_fuzzy_cell", "table", "| Metric | Value |\n|---|---|\n| Accuracy | 91.25 |\n", cell="91.2", left="Accuracy", max_diffs=1),
    _e("no_table", "table", "just text", cell="x"),
    _e("table_wrong_neighbour", "table", "| A | B |\n|---|---|\n| 1 | 2 |\n", cell="2", left="B"),
    _e("baseline_ok", "baseline", "A normal page of text."),
    _e("baseline_empty", "baseline", "  \n **  ** \n"),
    _e("baseline_repeat_31", "baseline", "Some text " + "ab" * 31),
    _e("baseline_repeat_30", "baseline", "Some text " + "xyz" * 30),
    _e("baseline_cjk", "baseline", "A page with a stray \u4e2d character."),
    _e("baseline_emoji", "baseline", "Nice page \U0001F600"),
    _e("baseline_cjk_allowed", "baseline", "A page with \u4e2d", check_disallowed_characters=False),
    _e("baseline_blank_ok", "baseline", "![a long alternative text for an image](figure:1)", max_length=10, max_length_skips_image_alt_tags=True),
    _e("baseline_blank_too_long", "baseline", "![a long alternative text for an image](figure:1)", max_length=10),
    _e("math_exact", "math", "where $x^2$ holds", math="x^2"),
    _e("math_spacing", "math", "see \\[ \\frac{a}{b} + 1 \\]", math="\\frac{a}{b}+1"),
    _e("math_inside_bigger", "math", "$$\\int_0^1 3x^2 dx$$", math="3x^2"),
    _e("math_wrong", "math", "$$\\frac{a}{c}$$", math="\\frac{a}{b}"),
    _e("math_dollars_ignored", "math", "$x^2$", math="x^2", ignore_dollar_delimited=True),
    _e("math_swapped", "math", "$y^x$", math="x^y"),
    _e("math_no_math", "math", "x squared", math="x^2"),
    _e("math_subscript", "math", "\\(a_{i} + b_{j}\\)", math="a_i+b_j"),
    _e("format_heading_html", "format", "<h2>Results</h2>\nbody", text="Results", format="heading"),
    _e("format_bold", "format", "a **very important** note", text="very important", format="bold"),
    _e("format_italic_not_bold", "format", "a **very important** note", text="very important", format="italic"),
    _e("format_italic", "format", "the *Titanic* sank", text="Titanic", format="italic"),
    _e("footnote_sup", "footnote", "as shown earlier<sup>3</sup> in the text", marker="3", appears_before_marker="shown earlier"),
    _e("footnote_unicode", "footnote", "see the appendix\u00b2 for details", marker="2", appears_after_marker="for details"),
    _e("footnote_definition_only", "footnote", "[^4]: the note itself", marker="4"),
    _e("footnote_wrong_text", "footnote", "apples[^1] and pears", marker="1", appears_before_marker="oranges"),
]
