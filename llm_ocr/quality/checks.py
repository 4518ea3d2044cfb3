"""olmOCR-bench's unit tests on one page's Markdown: their fields, their validation, their verdicts.

Each test type follows its definition in allenai/olmocr ``olmocr/bench/tests.py`` (commit
f7cfe4c), field for field, so that a JSONL file of olmOCR-bench loads here unchanged and a
test passes here exactly when it passes there:

- ``present`` / ``absent``: a snippet is (not) in the page, fuzzily: rapidfuzz's
  ``partial_ratio`` against ``1 - max_diffs / len(text)``, optionally within the first or last
  N characters, case-sensitive unless told otherwise;
- ``order``: a ``before`` snippet starts before an ``after`` one, each found with at most
  ``max_diffs`` edits (fuzzysearch's ``find_near_matches``);
- ``table``: a cell exists in some Markdown or HTML table, with the given neighbours
  (up/down/left/right) and headings (top/left);
- ``math``: a LaTeX formula appears between ``$``, ``$$``, ``\\(`` or ``\\[`` delimiters, compared
  as KaTeX renders it (:mod:`llm_ocr.quality.katex`);
- ``baseline``: the page is not empty (or, with ``max_length``, nearly empty as expected), ends
  in no run of more than ``max_repeats`` repeats of a 1-5 character n-gram, and holds no stray
  CJK characters or emoji;
- ``format``: a snippet appears as a heading, in bold or in italics;
- ``footnote``: a marker appears as ``[^N]``, ``<sup>N</sup>`` or a superscript digit, with the
  given text before and/or after it.

All text is compared after :func:`~llm_ocr.quality.text.normalize_text`.
"""

from __future__ import annotations

import json
import re
from dataclasses import MISSING, dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar

from rapidfuzz import fuzz

from llm_ocr.quality.tables import parse_html_tables, parse_markdown_tables
from llm_ocr.quality.text import normalize_text, tail_repeats

if TYPE_CHECKING:
    from llm_ocr.quality.katex import EquationRenderer


class BenchTestError(ValueError):
    """A test definition olmOCR-bench would refuse (the message says which field and why)."""


@dataclass(frozen=True)
class Verdict:
    """A test's outcome on one page: ``passed`` (None: not scored, e.g. math without a
    browser) and, when it did not pass, why."""

    passed: bool | None
    explanation: str = ""


PASS = Verdict(True)


@dataclass(kw_only=True)
class BenchTest:
    """Fields every test has (olmOCR-bench's ``BasePDFTest``)."""

    kind: ClassVar[tuple[str, ...]] = ()

    pdf: str
    page: int
    id: str
    type: str
    max_diffs: int = 0
    checked: str | None = None
    url: str | None = None

    def __post_init__(self) -> None:
        if not self.pdf:
            raise BenchTestError("PDF filename cannot be empty")
        if not self.id:
            raise BenchTestError("Test ID cannot be empty")
        if not isinstance(self.max_diffs, int) or self.max_diffs < 0:
            raise BenchTestError("Max diffs must be positive number or 0")
        if self.type not in self.kind:
            raise BenchTestError(f"Invalid type for {type(self).__name__}: {self.type}")

    def run(self, markdown: str, renderer: EquationRenderer | None = None) -> Verdict:
        """The verdict on ``markdown``, the page's output (``renderer`` is for math tests)."""
        raise NotImplementedError

    def to_json(self) -> dict[str, Any]:
        """The test as a JSONL record (its normalised fields, as olmOCR-bench saves tests)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _threshold(max_diffs: int, text: str) -> float:
    return 1.0 - (max_diffs / (len(text) if len(text) > 0 else 1))


@dataclass(kw_only=True)
class TextPresenceTest(BenchTest):
    """``present`` / ``absent``: a snippet is, or is not, in the page (fuzzily)."""

    kind: ClassVar[tuple[str, ...]] = ("present", "absent")
    text: str
    case_sensitive: bool = True
    first_n: int | None = None
    last_n: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self.text = normalize_text(self.text)
        if not self.text.strip():
            raise BenchTestError("Text field cannot be empty")

    def run(self, markdown: str, renderer: EquationRenderer | None = None) -> Verdict:
        query = self.text
        content = normalize_text(markdown)
        if not self.case_sensitive:
            query, content = query.lower(), content.lower()
        if self.first_n and self.last_n:
            content = content[: self.first_n] + content[-self.last_n :]
        elif self.first_n:
            content = content[: self.first_n]
        elif self.last_n:
            content = content[-self.last_n :]
        threshold = _threshold(self.max_diffs, query)
        ratio = fuzz.partial_ratio(query, content) / 100.0
        if self.type == "present":
            if ratio >= threshold:
                return PASS
            return Verdict(False, f"Expected '{query[:40]}...' with threshold {threshold} but best match ratio was "
                                  f"{ratio:.3f}")
        if ratio < threshold:
            return PASS
        return Verdict(
            False, f"Expected absence of '{query[:40]}...' with threshold {threshold} but best match ratio was "
                   f"{ratio:.3f}"
        )


@dataclass(kw_only=True)
class TextOrderTest(BenchTest):
    """``order``: ``before`` starts before ``after`` somewhere in the page."""

    kind: ClassVar[tuple[str, ...]] = ("order",)
    before: str
    after: str

    def __post_init__(self) -> None:
        super().__post_init__()
        self.before = normalize_text(self.before)
        self.after = normalize_text(self.after)
        if not self.before.strip():
            raise BenchTestError("Before field cannot be empty")
        if not self.after.strip():
            raise BenchTestError("After field cannot be empty")
        if self.max_diffs > len(self.before) // 2 or self.max_diffs > len(self.after) // 2:
            raise BenchTestError("Max diffs is too large for this test, greater than 50% of the search string")

    def run(self, markdown: str, renderer: EquationRenderer | None = None) -> Verdict:
        from fuzzysearch import find_near_matches

        content = normalize_text(markdown)
        before = find_near_matches(self.before, content, max_l_dist=self.max_diffs)
        after = find_near_matches(self.after, content, max_l_dist=self.max_diffs)
        if not before:
            return Verdict(False, f"'before' text '{self.before[:40]}...' not found with max_l_dist {self.max_diffs}")
        if not after:
            return Verdict(False, f"'after' text '{self.after[:40]}...' not found with max_l_dist {self.max_diffs}")
        if any(b.start < a.start for b in before for a in after):
            return PASS
        return Verdict(False, f"Could not find a location where '{self.before[:40]}...' appears before "
                              f"'{self.after[:40]}...'.")


@dataclass(kw_only=True)
class TableTest(BenchTest):
    """``table``: a cell with the given neighbours and headings, in some table of the page."""

    kind: ClassVar[tuple[str, ...]] = ("table",)
    cell: str
    up: str = ""
    down: str = ""
    left: str = ""
    right: str = ""
    top_heading: str = ""
    left_heading: str = ""
    ignore_markdown_tables: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("cell", "up", "down", "left", "right", "top_heading", "left_heading"):
            setattr(self, name, normalize_text(getattr(self, name) or ""))

    def run(self, markdown: str, renderer: EquationRenderer | None = None) -> Verdict:
        threshold = max(0.5, _threshold(self.max_diffs, self.cell))
        tables = [] if self.ignore_markdown_tables else parse_markdown_tables(markdown)
        tables += parse_html_tables(markdown)
        if not tables:
            return Verdict(False, "No tables found in the content")
        failed: list[str] = []
        for table in tables:
            matches = [
                rowcol for rowcol, text in table.cell_text.items()
                if fuzz.ratio(self.cell, normalize_text(text)) / 100.0 >= threshold
            ]  # fmt: skip
            for rowcol in matches:
                reasons: list[str] = []
                relations = (
                    (self.up, table.up_relations.get(rowcol, set())),
                    (self.down, table.down_relations.get(rowcol, set())),
                    (self.left, table.left_relations.get(rowcol, set())),
                    (self.right, table.right_relations.get(rowcol, set())),
                    (self.left_heading, table.left_heading_relations(*rowcol) if self.left_heading else set()),
                    (self.top_heading, table.top_heading_relations(*rowcol) if self.top_heading else set()),
                )
                for expected, neighbours in relations:
                    if expected:
                        reason = self._relation(table.cell_text, expected, neighbours)
                        if reason:
                            reasons.append(reason)
                if not reasons:
                    return PASS
                failed.extend(reasons)
        if not failed:
            return Verdict(False, f"No cell matching '{self.cell}' found in any table with threshold {threshold}")
        return Verdict(False, f"Found cells matching '{self.cell}' but relationships were not satisfied: "
                              f"{'; '.join(failed)}")

    def _relation(self, cell_text: dict[tuple[int, int], str], expected: str, neighbours: set[tuple[int, int]]) -> str:
        """Why none of ``neighbours`` holds ``expected`` ("" when one does)."""
        best, best_text = 0.0, None
        needed = max(0.5, _threshold(self.max_diffs, expected))
        satisfied = False
        for neighbour in neighbours:
            text = normalize_text(cell_text[neighbour])
            similarity = fuzz.ratio(expected, text) / 100.0
            if similarity > best:
                best, best_text = similarity, text
            if similarity >= needed:
                satisfied = True
        if satisfied:
            return ""
        return f"Cell compared to '{best_text}' doesn't match expected '{expected}' (best similarity: {best:.2f})"


#: Characters a page in a Latin script should not produce: CJK ideographs, kana, emoji, flags.
STRAY_CHARACTERS = re.compile(
    "[\u4e00-\u9fff\u3040-\u309f\u30a0-\u30ff\U0001f600-\U0001f64f\U0001f300-\U0001f5ff\U0001f680-\U0001f6ff"
    "\U0001f1e0-\U0001f1ff]"
)


@dataclass(kw_only=True)
class BaselineTest(BenchTest):
    """``baseline``: not empty, no repetition tail, no stray characters (or: as blank as expected)."""

    kind: ClassVar[tuple[str, ...]] = ("baseline",)
    max_length: int | None = None
    max_length_skips_image_alt_tags: bool = False
    max_repeats: int = 30
    check_disallowed_characters: bool = True

    def run(self, markdown: str, renderer: EquationRenderer | None = None) -> Verdict:
        length = len("".join(c for c in markdown if c.isalnum()).strip())
        if self.max_length is not None:
            if self.max_length_skips_image_alt_tags:
                stripped = re.sub(r"!\[.*?\]\(.*?\)", "", markdown)
                length = len("".join(c for c in stripped if c.isalnum()).strip())
            if length > self.max_length:
                return Verdict(False, f"{length} characters were output for a page we expected to be blank")
            return PASS
        if length == 0:
            return Verdict(False, "The text contains no alpha numeric characters")
        for size, count in enumerate(tail_repeats(markdown, 5), start=1):
            if count > self.max_repeats:
                return Verdict(False, f"Text ends with {count} repeating {size}-grams, invalid")
        stray = STRAY_CHARACTERS.findall(markdown)
        if self.check_disallowed_characters and stray:
            return Verdict(False, f"Text contains disallowed characters {stray}")
        return PASS


#: Math delimiters, in the order olmOCR-bench looks for them (each pass removes what it found).
MATH_DELIMITERS = (r"\\\((.+?)\\\)", r"\\\[(.+?)\\\]")
DOLLAR_DELIMITERS = (r"\$\$(.+?)\$\$", r"\$(.+?)\$")


def equations_in(markdown: str, dollars: bool = True) -> list[str]:
    """The LaTeX between math delimiters in ``markdown``, as olmOCR-bench finds them."""
    found: list[str] = []
    rest = markdown
    for pattern in MATH_DELIMITERS + (DOLLAR_DELIMITERS if dollars else ()):
        found.extend(e.strip() for e in re.findall(pattern, rest, re.DOTALL))
        rest = re.sub(pattern, "", rest, flags=re.DOTALL)
    return found


@dataclass(kw_only=True)
class MathTest(BenchTest):
    """``math``: the formula, as KaTeX renders it, appears among the page's formulas."""

    kind: ClassVar[tuple[str, ...]] = ("math",)
    math: str
    ignore_dollar_delimited: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(self.math.strip()) == 0:
            raise BenchTestError("Math test must have non-empty math expression")

    def candidates(self, markdown: str) -> list[str]:
        """The page's formulas in the order they are tried (most similar first), or ``[]``
        when one is literally the reference (no rendering needed)."""
        equations = equations_in(markdown, dollars=not self.ignore_dollar_delimited)
        if any(e == self.math for e in equations):
            return []
        return sorted(equations, key=lambda e: -fuzz.ratio(e, self.math))

    def run(self, markdown: str, renderer: EquationRenderer | None = None) -> Verdict:
        equations = equations_in(markdown, dollars=not self.ignore_dollar_delimited)
        if any(e == self.math for e in equations):
            return PASS
        if renderer is None or not renderer.available:
            why = renderer.unavailable_reason if renderer is not None else "no equation renderer"
            return Verdict(None, f"not scored: {why}")
        reference = renderer.render(self.math)
        if not renderer.available:  # found out while rendering (KaTeX's fonts did not load)
            return Verdict(None, f"not scored: {renderer.unavailable_reason}")
        if reference is None or reference.error:
            return Verdict(None, "not scored: the test's formula does not render in KaTeX "
                                 f"({reference.error if reference else '?'})")
        for hypothesis in self.candidates(markdown):
            rendered = renderer.render(hypothesis)
            if rendered is not None and rendered.matches(reference):
                return PASS
        return Verdict(False, f"No match found for {self.math} anywhere in content")


_SUPERSCRIPTS = {"0": "⁰", "1": "¹", "2": "²", "3": "³", "4": "⁴", "5": "⁵", "6": "⁶", "7": "⁷", "8": "⁸", "9": "⁹"}


@dataclass(kw_only=True)
class FormatTest(BenchTest):
    """``format``: a snippet appears as a heading, in bold, or in italics (Markdown or HTML)."""

    kind: ClassVar[tuple[str, ...]] = ("format",)
    text: str
    format: str
    case_sensitive: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        self.text = normalize_text(self.text)
        if not self.text.strip():
            raise BenchTestError("Text field cannot be empty")
        if self.format not in {"heading", "bold", "italic"}:
            raise BenchTestError(f"Invalid format type: {self.format}. Must be 'heading', 'bold', or 'italic'")

    def _formatted(self, content: str) -> list[str]:
        found: list[str] = []
        if self.format == "heading":
            found += re.findall(r"^#{1,6}\s+(.+?)$", content, re.MULTILINE)
            found += re.findall(r"<h[1-6][^>]*>(.*?)</h[1-6]>", content, re.IGNORECASE | re.DOTALL)
        elif self.format == "bold":
            found += re.findall(r"\*\*(.*?)\*\*", content, re.DOTALL)
            found += re.findall(r"__(.*?)__", content, re.DOTALL)
            for pattern in (r"<b[^>]*>(.*?)</b>", r"<strong[^>]*>(.*?)</strong>"):
                found += re.findall(pattern, content, re.IGNORECASE | re.DOTALL)
        else:
            found += re.findall(r"(?<!\*)\*(?!\*)(.*?)(?<!\*)\*(?!\*)", content, re.DOTALL)
            found += re.findall(r"(?<!_)_(?!_)(.*?)(?<!_)_(?!_)", content, re.DOTALL)
            for pattern in (r"<i[^>]*>(.*?)</i>", r"<em[^>]*>(.*?)</em>"):
                found += re.findall(pattern, content, re.IGNORECASE | re.DOTALL)
        return found

    def run(self, markdown: str, renderer: EquationRenderer | None = None) -> Verdict:
        texts = [normalize_text(t) for t in self._formatted(markdown)]
        search = self.text
        if not self.case_sensitive:
            search = search.lower()
            texts = [t.lower() for t in texts]
        threshold = _threshold(self.max_diffs, search)
        if any(fuzz.partial_ratio(search, t) / 100.0 >= threshold for t in texts):
            return PASS
        if texts:
            sample = ", ".join(f"'{t[:20]}...'" if len(t) > 20 else f"'{t}'" for t in texts[:3])
            found = f"Found {self.format} text: {sample}"
        else:
            found = f"No {self.format} formatted text found"
        return Verdict(False, f"Text '{self.text[:40]}...' not found with {self.format} formatting. {found}")


def _alnum(text: str) -> str:
    return "".join(c for c in normalize_text(text) if c.isalnum()).lower()


@dataclass(kw_only=True)
class FootnoteTest(BenchTest):
    """``footnote``: a footnote marker, with the text expected just before and/or after it."""

    kind: ClassVar[tuple[str, ...]] = ("footnote",)
    marker: str
    appears_before_marker: str | None = None
    appears_after_marker: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.marker:
            raise BenchTestError("marker field is required")
        if " " in self.marker:
            raise BenchTestError("Marker cannot contain whitespace")
        if self.appears_before_marker:
            self.appears_before_marker = normalize_text(self.appears_before_marker)
            if not self.appears_before_marker.strip():
                raise BenchTestError("appears_before_marker field cannot be empty if provided")
        if self.appears_after_marker:
            self.appears_after_marker = normalize_text(self.appears_after_marker)
            if not self.appears_after_marker.strip():
                raise BenchTestError("appears_after_marker field cannot be empty if provided")

    def _markers(self, content: str) -> list[tuple[int, int]]:
        spans = [m.span() for m in re.finditer(rf"\[\^{re.escape(self.marker)}\](?!:)", content)]
        spans += [m.span() for m in re.finditer(rf"<sup[^>]*>{re.escape(self.marker)}</sup>", content, re.IGNORECASE)]
        if all(c in _SUPERSCRIPTS for c in self.marker):
            superscript = "".join(_SUPERSCRIPTS[c] for c in self.marker)
            spans += [m.span() for m in re.finditer(re.escape(superscript), content)]
        return spans

    def run(self, markdown: str, renderer: EquationRenderer | None = None) -> Verdict:
        markers = self._markers(markdown)
        if not markers:
            return Verdict(
                False, f"Footnote marker '{self.marker}' not found as [^{self.marker}], <sup>{self.marker}</sup>, or "
                       "superscript"
            )
        failures = []
        if self.appears_before_marker and not self._near(markdown, markers, self.appears_before_marker, before=True):
            failures.append(f"Text '{self.appears_before_marker[:40]}...' not found before any occurrence of marker "
                            f"'{self.marker}'")
        if self.appears_after_marker and not self._near(markdown, markers, self.appears_after_marker, before=False):
            failures.append(f"Text '{self.appears_after_marker[:40]}...' not found after any occurrence of marker "
                            f"'{self.marker}'")
        return Verdict(False, "; ".join(failures)) if failures else PASS

    def _near(self, content: str, markers: list[tuple[int, int]], expected: str, *, before: bool) -> bool:
        target = _alnum(expected)
        threshold = _threshold(self.max_diffs, expected)
        for start, end in markers:
            window = _alnum(content[max(0, start - 200) : start] if before else content[end : min(len(content),
                                                                                                  end + 200)])
            if not window:
                continue
            length = min(len(window), len(target) * 2)
            piece = (window[-length:] if before else window[:length]) if length > 0 else window
            if fuzz.partial_ratio(target, piece) / 100.0 >= threshold:
                return True
        return False


TEST_CLASSES: dict[str, type[BenchTest]] = {
    name: cls
    for cls in (TextPresenceTest, TextOrderTest, TableTest, MathTest, BaselineTest, FormatTest, FootnoteTest)
    for name in cls.kind
}
TEST_TYPES = tuple(TEST_CLASSES)


def load_test(data: str | dict[str, Any]) -> BenchTest:
    """One test from a JSONL line or its parsed object (:class:`BenchTestError` if invalid)."""
    if isinstance(data, str):
        data = data.strip()
        if not data:
            raise BenchTestError("empty line")
        try:
            data = json.loads(data)
        except json.JSONDecodeError as exc:
            raise BenchTestError(f"not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise BenchTestError(f"a test is a JSON object, not {type(data).__name__}")
    cls = TEST_CLASSES.get(str(data.get("type")))
    if cls is None:
        raise BenchTestError(f"Unknown test type: {data.get('type')}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise BenchTestError(f"unknown field(s) for a {data['type']} test: {', '.join(unknown)}")
    missing = sorted(f.name for f in fields(cls) if f.name not in data and _required(f))
    if missing:
        raise BenchTestError(f"missing field(s) for a {data['type']} test: {', '.join(missing)}")
    try:
        return cls(**data)
    except TypeError as exc:  # a field of the wrong type that the checks above let through
        raise BenchTestError(str(exc)) from exc


def _required(f: Any) -> bool:
    return f.default is MISSING and f.default_factory is MISSING


__all__ = [
    "STRAY_CHARACTERS",
    "TEST_CLASSES",
    "TEST_TYPES",
    "BaselineTest",
    "BenchTest",
    "BenchTestError",
    "FootnoteTest",
    "FormatTest",
    "MathTest",
    "TableTest",
    "TextOrderTest",
    "TextPresenceTest",
    "Verdict",
    "equations_in",
    "load_test",
]  # fmt: skip
