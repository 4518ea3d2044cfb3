"""Tests of the DeepSeek-OCR grounding parser: realistic pages, malformed and adversarial input."""

from __future__ import annotations

import ast
import builtins
import random

import pytest

from llm_ocr.vlm.grounding import FIGURE_LINK, PageLayout, clean_markdown, parse_layout, scale_box
from llm_ocr.vlm.layout import PageBlock as Block
from tests.scaling import FACTOR, scaling

EOS = "<｜end▁of▁sentence｜>"
TAGS = ("<|ref|>", "<|/ref|>", "<|det|>", "<|/det|>")
W, H = 1224, 1584  # a Letter page rendered at 144 DPI


def px(box, width=W, height=H):
    """The documented formula (docs/facts.md#deepseek-ocr), written out independently of the
    module."""
    x1, y1, x2, y2 = box
    return (int(x1 / 999 * width), int(y1 / 999 * height), int(x2 / 999 * width), int(y2 / 999 * height))


def block(label, boxes, text):
    return f"<|ref|>{label}<|/ref|><|det|>{boxes}<|/det|>\n{text}\n\n"


def figures(layout) -> list[tuple[str, tuple[int, ...]]]:
    """``(id, bbox)`` of each figure; each figure points at its own ``image`` block."""
    for figure in layout.figures:
        block = layout.blocks[figure.block]
        assert block.label == "image" and figure.bbox in block.boxes
    return [(f.id, f.bbox) for f in layout.figures]


def parse(raw, **kw) -> PageLayout:
    kw.setdefault("width", W)
    kw.setdefault("height", H)
    kw.setdefault("page", 1)
    return parse_layout(raw, **kw)


def assert_clean(layout: PageLayout, width=W, height=H):
    for tag in TAGS:
        assert tag not in layout.markdown
    for fig in layout.figures:
        x1, y1, x2, y2 = fig.bbox
        assert 0 <= x1 < x2 <= width and 0 <= y1 < y2 <= height


TABLE = "<table><tr><td>Region</td><td>Q1</td></tr><tr><td>North</td><td>10</td></tr></table>"
SAMPLE = (
    block("title", "[[62, 40, 937, 80]]", "# Annual Report 2023")
    + block("text", "[[62, 100, 937, 200]]", "Revenue grew by 12% in all regions.")
    + "<|ref|>image<|/ref|><|det|>[[62, 220, 480, 500], [520, 220, 937, 500]]<|/det|>\n\n"
    + block("image_caption", "[[62, 510, 937, 540]]", "<center>Figure 1: Sales by region</center>")
    + block("table", "[[62, 560, 937, 760]]", TABLE)
    + "<|ref|>equation<|/ref|><|det|>[[200, 780, 800, 830]]<|/det|>\n\\[f(x) \\coloneqq x^2\\]\n"
    + EOS
)


def test_realistic_page():
    layout = parse(SAMPLE, page=3)
    assert layout.warnings == []
    assert layout.blocks == [
        Block("title", [px([62, 40, 937, 80])], "# Annual Report 2023"),
        Block("text", [px([62, 100, 937, 200])], "Revenue grew by 12% in all regions."),
        Block("image", [px([62, 220, 480, 500]), px([520, 220, 937, 500])], ""),
        Block("image_caption", [px([62, 510, 937, 540])], "<center>Figure 1: Sales by region</center>"),
        Block("table", [px([62, 560, 937, 760])], TABLE),
        Block("equation", [px([200, 780, 800, 830])], "\\[f(x) \\coloneqq x^2\\]"),
    ]
    assert figures(layout) == [
        ("p3-f1", px([62, 220, 480, 500])),
        ("p3-f2", px([520, 220, 937, 500])),
    ]
    assert layout.markdown == (
        "# Annual Report 2023\n\n"
        "Revenue grew by 12% in all regions.\n\n"
        "![](figure:p3-f1)\n![](figure:p3-f2)\n\n"
        "<center>Figure 1: Sales by region</center>\n\n"
        f"{TABLE}\n\n"
        "\\[f(x) := x^2\\]"
    )
    # Every block's text in order, links in place, nothing of the tags left.
    md = layout.markdown
    parts = ["# Annual Report 2023", "Revenue grew", "![](figure:p3-f1)", "![](figure:p3-f2)",
             "<center>Figure 1", TABLE, "\\[f(x) := x^2\\]"]
    offsets = [md.index(p) for p in parts]
    assert offsets == sorted(offsets)
    assert "[[" not in md and "EOS" not in md and "end▁of" not in md
    assert_clean(layout)
    assert [m.group(1) for m in FIGURE_LINK.finditer(md)] == ["p3-f1", "p3-f2"]


def test_figures_numbered_across_image_blocks():
    raw = block("image", "[[0, 0, 100, 100]]", "") + block("text", "[[0, 200, 999, 300]]", "x") + block(
        "image", "[[0, 400, 500, 500], [500, 400, 999, 500]]", ""
    )
    layout = parse(raw, page=12)
    assert [f.id for f in layout.figures] == ["p12-f1", "p12-f2", "p12-f3"]
    assert [m.group(1) for m in FIGURE_LINK.finditer(layout.markdown)] == ["p12-f1", "p12-f2", "p12-f3"]


def test_eos_token_removed():
    layout = parse("Hello world." + EOS)
    assert layout.markdown == "Hello world."
    assert layout.blocks == [Block("text", [], "Hello world.")]
    tagged = parse(block("text", "[[1, 2, 300, 400]]", "Body") + EOS)
    assert tagged.blocks[-1].text == "Body" and EOS not in tagged.markdown


def test_untagged_text_is_one_text_block():
    raw = "Free OCR output\n\n\n\n\nsecond paragraph with a \\eqqcolon b\n"
    layout = parse(raw)
    assert layout.blocks == [Block("text", [], raw.strip())]
    assert figures(layout) == []
    assert layout.markdown == "Free OCR output\n\nsecond paragraph with a =: b"
    assert layout.warnings == []


def test_empty_output():
    for raw in ("", "   \n", EOS):
        layout = parse(raw)
        assert layout.blocks == [] and layout.figures == [] and layout.markdown == ""


def test_text_before_first_tag_is_kept():
    layout = parse("Preamble\n" + block("title", "[[10, 10, 500, 50]]", "# T"))
    assert [b.label for b in layout.blocks] == ["text", "title"]
    assert layout.markdown == "Preamble\n\n# T"


def test_image_block_text_kept_after_link():
    raw = "<|ref|>image<|/ref|><|det|>[[100, 100, 500, 500]]<|/det|>\nA bar chart\n"
    layout = parse(raw)
    assert layout.blocks == [Block("image", [px([100, 100, 500, 500])], "A bar chart")]
    assert layout.markdown == "![](figure:p1-f1)\n\nA bar chart"


def test_unclosed_ref():
    raw = block("title", "[[10, 10, 500, 50]]", "# Title") + "<|ref|>text more words"
    layout = parse(raw)
    assert layout.blocks[0] == Block("title", [px([10, 10, 500, 50])], "# Title")
    assert layout.blocks[1] == Block("text", [], "text more words")
    assert any("unclosed <|ref|>" in w for w in layout.warnings)
    assert_clean(layout)
    # A ref whose <|/ref|> only comes after the next block's ref is unclosed too.
    layout = parse("<|ref|>title\n# T\n" + block("text", "[[1, 1, 900, 900]]", "B"))
    assert [b.label for b in layout.blocks] == ["text", "text"]
    assert layout.blocks[1].boxes == [px([1, 1, 900, 900])]
    assert any("unclosed" in w for w in layout.warnings)
    assert_clean(layout)


def test_unclosed_det():
    layout = parse("<|ref|>text<|/ref|><|det|>[[10, 20, 300, 400]]\nBody text")
    assert layout.blocks == [Block("text", [px([10, 20, 300, 400])], "Body text")]
    assert any("unclosed <|det|>" in w for w in layout.warnings)
    # Content that starts with numbers is not swallowed into the box list.
    layout = parse("<|ref|>text<|/ref|><|det|>[[10, 20, 300, 400]]\n2023, 2024 [1] results")
    assert layout.blocks == [Block("text", [px([10, 20, 300, 400])], "2023, 2024 [1] results")]
    # Truncated in the middle of the box list (the usual max_tokens cut).
    layout = parse("<|ref|>image<|/ref|><|det|>[[10, 20, 300, 400], [50, 6")
    assert figures(layout) == [("p1-f1", px([10, 20, 300, 400]))]
    assert any("incomplete box" in w for w in layout.warnings)
    assert_clean(layout)


def test_missing_det_means_no_boxes():
    layout = parse("<|ref|>text<|/ref|>Hello\n" + "<|ref|>image<|/ref|>\nCaption-like text")
    assert layout.blocks == [Block("text", [], "Hello"), Block("image", [], "Caption-like text")]
    assert figures(layout) == [] and "figure:" not in layout.markdown
    assert sum("no <|det|>" in w for w in layout.warnings) == 2
    assert layout.markdown == "Hello\n\nCaption-like text"


def test_non_numeric_boxes():
    layout = parse(block("text", "[[a, b, c, d]]", "X"))
    assert layout.blocks == [Block("text", [], "X")]
    assert any("no numeric box" in w for w in layout.warnings)
    # One bad box does not shift the numbers of the next one.
    layout = parse(block("image", "[[1, x, 300, 400], [500, 600, 700, 800]]", ""))
    assert figures(layout) == [("p1-f1", px([500, 600, 700, 800]))]
    assert any("incomplete box" in w for w in layout.warnings)


def test_boxes_are_never_evaluated(monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("model output must not be evaluated")

    monkeypatch.setattr(builtins, "eval", boom)
    monkeypatch.setattr(ast, "literal_eval", boom)
    layout = parse(block("image", "[[10, 20, 30, 40]] + __import__('os').getpid()", ""))
    assert figures(layout) == [("p1-f1", px([10, 20, 30, 40]))]


def test_out_of_range_boxes_are_clamped():
    layout = parse(block("image", "[[-50, 100, 1500, 5000]]", ""))
    assert figures(layout) == [("p1-f1", (0, px([0, 100, 0, 0])[1], W, H))]
    assert any("outside 0..999" in w for w in layout.warnings)
    assert_clean(layout)


def test_inverted_boxes_are_swapped():
    layout = parse(block("table", "[[800, 900, 100, 200]]", "<table></table>"))
    assert layout.blocks[0].boxes == [px([100, 200, 800, 900])]
    assert any("inverted" in w for w in layout.warnings)


def test_degenerate_boxes_are_dropped():
    raw = block("text", "[[100, 100, 100, 500], [10, 10, 20, 20]]", "T")
    layout = parse(raw)
    assert layout.blocks == [Block("text", [px([10, 10, 20, 20])], "T")]
    assert any("dropped" in w for w in layout.warnings)
    # Zero width only after scaling: on a 5-pixel-wide image, 100..150 maps to 0..0.
    raw = block("image", "[[100, 0, 150, 999]]", "") + block("image_caption", "[[0, 0, 999, 999]]", "Cap")
    layout = parse(raw, width=5, height=5)
    assert figures(layout) == [] and "figure:" not in layout.markdown
    assert layout.blocks[0] == Block("image", [], "")
    assert layout.markdown == "Cap"
    assert any("no usable box" in w for w in layout.warnings)


def test_too_many_boxes_capped():
    boxes = ", ".join(f"[{i}, 0, {i + 1}, 999]" for i in range(100))
    layout = parse(block("image", f"[{boxes}]", ""), max_boxes_per_block=64)
    assert len(layout.figures) == 64 and layout.figures[-1].id == "p1-f64"
    assert layout.markdown.count("figure:") == 64
    assert any("more than 64 boxes" in w for w in layout.warnings)


def test_too_many_blocks_capped():
    raw = "".join(block("text", "[[0, 0, 999, 999]]", f"b{i}") for i in range(5000))
    layout = parse(raw, max_blocks=4000)
    assert len(layout.blocks) == 4000 and layout.blocks[-1].text == "b3999"
    assert "b3999" in layout.markdown and "b4000" not in layout.markdown
    assert any("more than 4000 blocks" in w for w in layout.warnings)


def test_long_output_truncated():
    raw = "word " * 1000
    layout = parse(raw, max_chars=100)
    assert layout.markdown == raw[:100].strip()
    assert any("truncated" in w for w in layout.warnings)


def test_warnings_are_bounded():
    raw = block("text", ", ".join(["[1, 2]"] * 60), "x") * 50
    layout = parse(raw)
    assert len(layout.warnings) <= 51 and "more warnings" in layout.warnings[-1]


@pytest.mark.parametrize(
    "raw",
    [
        "a <|/det|> b <|/ref|> c <|det|> d",
        "<|re<|/det|>f|>text",
        "<|/r<|det|>ef|><|de<|/det|>t|>",
        "<|re" * 10 + "<|/det|>" + "f|>" * 10,
        block("text", "[[1, 2, 3, 4]]", "A <|/det|> B <|re"),
    ],
)
def test_stray_tag_fragments_never_reach_markdown(raw):
    layout = parse(raw)
    assert_clean(layout)
    assert any("stray tag" in w for w in layout.warnings)


def test_tags_recombined_across_blocks_are_removed():
    # Deleting the tags between "<|re" and "f|>" would join them into "<|ref|>".
    layout = parse("<|re<|ref|>text<|/ref|><|det|>[[1, 1, 9, 9]]<|/det|>f|>")
    assert [b.text for b in layout.blocks] == ["<|re", "f|>"]
    assert_clean(layout)


def test_label_with_tag_inside_is_not_a_label():
    layout = parse("<|ref|>ti<|det|>tle<|/ref|><|det|>[[1, 1, 900, 900]]<|/det|>\nX")
    assert all("<|" not in b.label for b in layout.blocks)
    assert any("unclosed <|ref|>" in w for w in layout.warnings)
    assert_clean(layout)


# name -> a builder of hostile model output of n units (the full size is FULL_UNITS units).
ADVERSARIAL = {
    "refs": lambda n: "<|ref|>" * (2 * n),
    "ref_closes": lambda n: "<|ref|>a<|/ref|>" * n,
    "unclosed_dets": lambda n: "<|ref|>image<|/ref|><|det|>[[" * (7 * n // 10),
    "brackets": lambda n: "<|ref|>image<|/ref|><|det|>" + "[1]" * (6 * n),
    "digits": lambda n: "<|ref|>image<|/ref|><|det|>" + "1" * (19 * n),
    "nested": lambda n: "<|re" * (2 * n) + "<|/det|>" + "f|>" * (2 * n),
    "links": lambda n: "![" * (5 * n),
}
FULL_UNITS = 100_000


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
@pytest.mark.parametrize("max_blocks", [4000, 10**9])
def test_adversarial_input_is_linear(name, max_blocks):
    build = ADVERSARIAL[name]
    small, big = build(FULL_UNITS // FACTOR), build(FULL_UNITS)
    last: list[PageLayout] = []

    def parse_only(raw):
        def run():
            last[:] = [parse(raw, max_blocks=max_blocks, max_chars=3_000_000)]
            return FIGURE_LINK.findall(last[0].markdown)
        return run

    # Eight parses of an eighth of the input against one of the whole, in CPU time with the
    # garbage collector off (tests/scaling.py): the same work if the parser is linear, 8x if
    # quadratic. The absolute ceiling (about 17x the slowest case's idle time) catches a parser
    # that is linear but absurdly slow on megabytes.
    measured = scaling(parse_only(small), parse_only(big))
    assert measured.big < 5.0, f"{name}: {measured.big:.2f}s of CPU for {len(big):,} characters"
    assert measured.linear, (
        f"{name}: {FACTOR} parses of {len(small):,} characters took {measured.small:.3f}s of CPU, one of "
        f"{len(big):,} took {measured.big:.3f}s ({measured.ratio:.1f}x, least of {measured.rounds} rounds)"
    )
    layout = last[0]  # the big input's (the last parse)
    assert len(FIGURE_LINK.findall(layout.markdown)) == len(layout.figures)
    assert_clean(layout)


FRAGMENTS = [
    "<|ref|>", "<|/ref|>", "<|det|>", "<|/det|>", "<|", "|>", "<|re", "f|>", "/det", "image", "text",
    "title", "[[", "]]", "[", "]", ",", " ", "\n", "\n\n\n", "-", ".", "0", "999", "1500", "-3", "12.5",
    "abc", "é", "表格", "∑", "\u2581", "｜", EOS, "<table>", "\\coloneqq", "![](figure:x)", "\x00",
]


def random_raw(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(0, 40)):
        if rng.random() < 0.2:
            parts.append(str(rng.randint(-2000, 3000)))
        elif rng.random() < 0.1:
            parts.append(chr(rng.randint(0x20, 0x2FFF)))
        else:
            parts.append(rng.choice(FRAGMENTS))
    return "".join(parts)


def test_random_garbage_never_breaks_invariants():
    rng = random.Random(20240601)
    for i in range(3000):
        raw = random_raw(rng)
        width, height = rng.choice([(1, 1), (7, 3), (W, H), (2000, 50)])
        layout = parse_layout(raw, width=width, height=height, page=i,
                              max_blocks=rng.choice([1, 5, 4000]), max_boxes_per_block=rng.choice([1, 64]))
        assert_clean(layout, width, height)
        ids = [f.id for f in layout.figures]
        assert ids == [f"p{i}-f{k}" for k in range(1, len(ids) + 1)]
        for b in layout.blocks:
            assert b.text == b.text.strip()
            for x1, y1, x2, y2 in b.boxes:
                assert 0 <= x1 < x2 <= width and 0 <= y1 < y2 <= height
        for tag in TAGS:
            assert all(tag not in b.text and tag not in b.label for b in layout.blocks)


def test_scale_box():
    assert scale_box([0, 0, 999, 999], W, H) == (0, 0, W, H)
    assert scale_box([100, 200, 300, 400], W, H) == px([100, 200, 300, 400])
    assert scale_box([300, 400, 100, 200], W, H) == px([100, 200, 300, 400])  # swapped
    assert scale_box([-10, -10, 5000, 5000], 100, 50) == (0, 0, 100, 50)  # clamped
    assert scale_box([100, 100, 100, 200], W, H) is None  # zero width
    assert scale_box([100, 100, 101, 200], 5, 5) is None  # zero width in pixels
    assert scale_box([1, 2, 3], W, H) is None
    assert scale_box([0, 0, 10, float("nan")], W, H) is None
    assert scale_box([0, 0, 10, float("inf")], W, H) is None
    assert scale_box([0, 0, 500, 500], 0, H) is None
    assert scale_box(["a", 0, 500, 500], W, H) is None  # type: ignore[list-item]


def test_clean_markdown():
    assert clean_markdown("  a \\coloneqq b\\eqqcolon c  ") == "a := b=: c"
    assert clean_markdown("a\n\n\nb\n\n\n\n\n\n\nc\n\nd\ne") == "a\n\nb\n\nc\n\nd\ne"
    assert clean_markdown("\n\n\n") == ""


def test_figure_link_pattern():
    md = "see ![](figure:p2-f1) and ![alt](figure:p2-f10)\n![](images/0_0.jpg)"
    assert [m.group(1) for m in FIGURE_LINK.finditer(md)] == ["p2-f1", "p2-f10"]
