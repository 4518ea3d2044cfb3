"""Formulas as KaTeX renders them, in headless Chromium, and olmOCR-bench's way of comparing two.

olmOCR-bench's math tests (allenai/olmocr ``olmocr/bench/katex/render.py``, commit f7cfe4c)
render the test's LaTeX and each formula of the page with KaTeX (display mode, 24 px, errors
raised) and keep two things per formula: its MathML (without the TeX annotation) and the
innermost ``<span>`` elements that hold text, with their boxes. A page's formula matches when
the reference's MathML is a substring of its MathML, or else when every character of the
reference can be mapped to an equal character of the formula such that each character's
nearest neighbour above, below, left and right (centres within 5 px) maps to that character's
neighbour there. Upstream drives Chromium through Playwright; here one ``chromium --headless
--dump-dom`` run renders a whole batch of formulas on one page, each in its own box, which
gives the same relative positions.

Math tests need a Chromium (``chromium`` or ``chromium-browser`` on PATH, or
``LLM_OCR_CHROMIUM``); without one they are reported as *not scored* (never as failed). KaTeX
itself ships with the package: ``katex_dist/`` holds ``katex.min.js`` and ``katex.min.css`` of
KaTeX 0.16.21, the files olmOCR-bench bundles (``olmocr/bench/katex/``), because another KaTeX
gives other verdicts: Debian's 0.16.4 refuses ``\\dddot``, ``\\ddddot``, ``\\emph`` and
``\\mathsfit``, which 0.16.21 renders. ``LLM_OCR_KATEX`` or ``--katex DIR`` points elsewhere (a
warning names the version when it is not 0.16.21).

**Fonts.** Glyph boxes are font metrics, so the font decides the glyph comparison. Upstream's
page loads none of KaTeX's fonts: olmOCR ships no ``fonts/``, and Playwright inlines
``katex.min.css`` into an ``about:blank`` page, where its relative ``@font-face`` URLs
(``fonts/KaTeX_*.woff2``) lead nowhere. Chromium then takes ``KaTeX_Main``, ``KaTeX_Math``...
from the machine's fonts when it has them (Debian's ``fonts-katex`` installs them), else falls
back to ``Times New Roman``/``serif`` (Liberation Serif here): the same formula gets other
boxes, and some verdicts flip, from one machine to the next (docs/quality.md has one). Here the
page loads the fonts KaTeX 0.16.21 ships (``katex_dist/fonts/``, its 20 ``woff2`` files) as
``FontFace`` objects made from their bytes, which shadow any system font of the same name; the
page reports each one's status, and if one did not load the math tests are not scored
(:class:`FontsNotLoaded`). Only a character none of KaTeX's fonts has still falls back to a
system font.
"""

from __future__ import annotations

import base64
import html
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

#: KaTeX's distribution files shipped with the package (olmOCR-bench's version, see the module doc).
SHIPPED_KATEX = Path(__file__).resolve().parent / "katex_dist"
#: The KaTeX version olmOCR-bench renders with (allenai/olmocr ``olmocr/bench/katex/katex.min.js``).
OLMOCR_KATEX_VERSION = "0.16.21"
#: Formulas rendered per browser launch.
BATCH = 400
#: Steps the character-mapping search may take before it gives up (upstream has no bound; a
#: formula of many repeated characters could otherwise take minutes).
SEARCH_BUDGET = 200_000
#: Pixels within which two character centres count as on one row or column (upstream's ``tol``).
TOLERANCE = 5.0

_SPACES = re.compile(r"[\s\u200a-\u200d\u2060\ufeff]+", flags=re.UNICODE)


def _squash(text: str) -> str:
    """Text with every kind of space removed (zero-width ones too), as upstream compares."""
    return _SPACES.sub("", text)


@dataclass(frozen=True)
class Glyph:
    """One character of a rendered formula and its box (a span's box divided evenly)."""

    text: str
    x: float
    y: float
    width: float
    height: float

    @property
    def centre(self) -> tuple[float, float]:
        return self.x + self.width / 2, self.y + self.height / 2


@dataclass(frozen=True)
class RenderedEquation:
    """A formula as KaTeX rendered it: MathML without annotation, and its characters' boxes."""

    mathml: str
    glyphs: tuple[Glyph, ...]
    error: str | None = None

    @classmethod
    def from_browser(cls, record: dict) -> RenderedEquation:
        """From what the page's script recorded: ``{mathml, spans: [[text, x, y, w, h]...], error}``."""
        if record.get("error"):
            return cls(mathml="", glyphs=(), error=str(record["error"]))
        glyphs: list[Glyph] = []
        for text, x, y, width, height in record.get("spans", []):
            text = _squash(text)
            if not text:
                continue
            step = width / len(text)
            glyphs += [Glyph(c, x + step * i, y, step, height) for i, c in enumerate(text)]
        return cls(mathml=_squash(record.get("mathml", "")), glyphs=tuple(glyphs))

    def matches(self, reference: RenderedEquation) -> bool:
        """Whether this (a page's formula) shows ``reference`` (the test's formula)."""
        if reference.mathml in self.mathml:
            return True
        return _maps_onto(reference.glyphs, self.glyphs)


def _neighbours(glyphs: tuple[Glyph, ...]) -> list[dict[str, int | None]]:
    """Each glyph's nearest glyph up, down, left and right (centres within :data:`TOLERANCE`)."""
    centres = [g.centre for g in glyphs]
    found: list[dict[str, int | None]] = []
    for i, (cx, cy) in enumerate(centres):
        best: dict[str, tuple[float, int] | None] = {"up": None, "down": None, "left": None, "right": None}
        for j, (ox, oy) in enumerate(centres):
            if i == j:
                continue
            if abs(ox - cx) <= TOLERANCE:
                if oy < cy and (best["up"] is None or cy - oy < best["up"][0]):
                    best["up"] = (cy - oy, j)
                if oy > cy and (best["down"] is None or oy - cy < best["down"][0]):
                    best["down"] = (oy - cy, j)
            if abs(oy - cy) <= TOLERANCE:
                if ox < cx and (best["left"] is None or cx - ox < best["left"][0]):
                    best["left"] = (cx - ox, j)
                if ox > cx and (best["right"] is None or ox - cx < best["right"][0]):
                    best["right"] = (ox - cx, j)
        found.append({k: (v[1] if v else None) for k, v in best.items()})
    return found


def _maps_onto(reference: tuple[Glyph, ...], page: tuple[Glyph, ...]) -> bool:
    """Upstream's backtracking search, without recursion and with a step budget."""
    candidates: list[list[int]] = []
    for glyph in reference:
        options = [j for j, other in enumerate(page) if other.text == glyph.text]
        if not options:
            return False
        candidates.append(options)
    n = len(reference)
    if n == 0:
        return True
    ref_nb = _neighbours(reference)
    page_nb = _neighbours(page)
    used = [False] * len(page)
    assigned = [-1] * n
    tried = [0] * n
    i, steps = 0, 0

    def fits(i: int, cand: int) -> bool:
        for direction in ("up", "down", "left", "right"):
            mine = ref_nb[i][direction]
            if mine is None:
                continue
            theirs = page_nb[cand][direction]
            if theirs is None:
                return False
            if assigned[mine] != -1:
                if assigned[mine] != theirs:
                    return False
            elif page[theirs].text != reference[mine].text:
                return False
        return True

    while 0 <= i < n:
        advanced = False
        while tried[i] < len(candidates[i]):
            cand = candidates[i][tried[i]]
            tried[i] += 1
            if used[cand]:
                continue
            steps += 1
            if steps > SEARCH_BUDGET:
                log.debug("formula comparison gave up after %d steps", steps)
                return False
            if fits(i, cand):
                assigned[i], used[cand] = cand, True
                i += 1
                if i < n:
                    tried[i] = 0
                advanced = True
                break
        if not advanced:
            tried[i] = 0
            i -= 1
            if i >= 0:
                used[assigned[i]] = False
                assigned[i] = -1
    return i == n


# ============================================================================================
# Finding the tools


def find_chromium() -> str | None:
    """The Chromium to render with: ``LLM_OCR_CHROMIUM``, else ``chromium`` on PATH."""
    explicit = os.environ.get("LLM_OCR_CHROMIUM")
    if explicit:
        return explicit
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def find_katex() -> Path | None:
    """The folder holding ``katex.min.js`` and ``katex.min.css``: ``LLM_OCR_KATEX``, else the
    shipped KaTeX 0.16.21 (None if neither has both files)."""
    explicit = os.environ.get("LLM_OCR_KATEX")
    folder = Path(explicit) if explicit else SHIPPED_KATEX
    if (folder / "katex.min.js").is_file() and (folder / "katex.min.css").is_file():
        return folder
    return None


_VERSION = re.compile(rb'version:"([0-9][0-9A-Za-z.+-]*)"')


def chromium_version(chromium: str) -> str:
    """What ``chromium --version`` prints (``Chromium 156.0.8078.108 built on Debian ...``), with
    the program's path; just the path when it does not answer."""
    try:
        done = subprocess.run([chromium, "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return chromium
    version = done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else ""
    return f"{version} ({chromium})" if version else chromium


@dataclass(frozen=True)
class FontFile:
    """One ``@font-face`` rule of ``katex.min.css`` and the ``woff2`` file it names."""

    family: str
    style: str
    weight: str
    path: Path


_FONT_FACE = re.compile(r"@font-face\s*\{([^}]*)\}")
_DESCRIPTOR = re.compile(r"(font-family|font-style|font-weight)\s*:\s*([^;]+)")
_WOFF2 = re.compile(r"url\(\s*['\"]?([^'\")]+\.woff2)['\"]?\s*\)")


def font_files(folder: str | os.PathLike[str]) -> list[FontFile]:
    """The ``woff2`` fonts ``folder/katex.min.css`` declares, each with its ``@font-face``
    descriptors; only those whose file exists beside the CSS (KaTeX's ``fonts/``)."""
    root = Path(folder)
    try:
        css = (root / "katex.min.css").read_text(encoding="utf-8")
    except OSError:
        return []
    found = []
    for rule in _FONT_FACE.findall(css):
        descriptors = {k: v.strip().strip("'\"") for k, v in _DESCRIPTOR.findall(rule)}
        url = _WOFF2.search(rule)
        if url is None or "font-family" not in descriptors:
            continue
        path = root / url.group(1)
        if path.is_file():
            found.append(FontFile(descriptors["font-family"], descriptors.get("font-style", "normal"),
                                  descriptors.get("font-weight", "400"), path))
    return found


def katex_version(folder: str | os.PathLike[str]) -> str | None:
    """The version a ``katex.min.js`` declares (``version:"0.16.21"`` in its code), if it says."""
    try:
        found = _VERSION.search((Path(folder) / "katex.min.js").read_bytes())
    except OSError:
        return None
    return found.group(1).decode("ascii") if found else None


_PAGE_SCRIPT = r"""
const eqs = JSON.parse(document.getElementById("eqs").textContent);
const stage = document.getElementById("stage");
// KaTeX's fonts from their bytes: a FontFace made from binary data is parsed when made, so each
// one's status is final here and the formulas below are laid out with it (no font loads later).
const fonts = JSON.parse(document.getElementById("fonts").textContent).map((f) => {
  const bytes = Uint8Array.from(atob(f.data), (c) => c.charCodeAt(0));
  const face = new FontFace(f.family, bytes, {style: f.style, weight: f.weight});
  document.fonts.add(face);
  return {name: f.name, status: face.status};
});
// Render every formula first, then measure: one layout for the whole batch, not one per formula.
const boxes = eqs.map((tex) => {
  const box = document.createElement("div");
  box.className = "eq";
  stage.appendChild(box);
  try {
    katex.render(tex, box, {displayMode: true, throwOnError: true});
    return {box};
  } catch (e) {
    return {error: String(e && e.message || e)};
  }
});
const out = boxes.map(({box, error}) => {
  if (error !== undefined) return {error};
  const spans = [];
  for (const span of box.querySelectorAll("span")) {
    if (span.children.length === 0 && /\S/.test(span.textContent)) {
      const r = span.getBoundingClientRect();
      spans.push([span.textContent.trim(), r.x, r.y, r.width, r.height]);
    }
  }
  const sem = box.querySelector(".katex-mathml math semantics");
  const math = box.querySelector(".katex-mathml math");
  const mathml = sem ? [...sem.children].filter((c) => c.localName !== "annotation").map((c) => c.outerHTML).join("")
                     : (math ? math.outerHTML : "");
  return {spans, mathml};
});
stage.remove();
const pre = document.createElement("pre");
pre.id = "llmocr-result";
pre.textContent = JSON.stringify({fonts, formulas: out});
document.body.appendChild(pre);
"""


class FontsNotLoaded(RuntimeError):
    """Chromium did not load KaTeX's fonts: boxes would come from the machine's fonts."""


class EquationRenderer:
    """Renders LaTeX with KaTeX in headless Chromium, in batches, with a cache.

    ``available`` says whether it can render at all (else ``unavailable_reason`` says why);
    :meth:`prefetch` renders many formulas in few browser runs; :meth:`render` returns one;
    :meth:`describe` says what rendered them (Chromium, KaTeX and fonts).
    """

    def __init__(self, katex: str | os.PathLike[str] | None = None, chromium: str | None = None,
                 timeout: float = 300.0):
        self.katex = Path(katex) if katex else find_katex()
        self.chromium = chromium or find_chromium()
        self.timeout = timeout
        self._cache: dict[str, RenderedEquation | None] = {}
        self.unavailable_reason = ""
        if self.chromium is None or shutil.which(self.chromium) is None:
            self.unavailable_reason = f"no Chromium found{f' at {self.chromium}' if self.chromium else ''} (install chromium, or set LLM_OCR_CHROMIUM)"  # noqa: E501 - not wrapped yet
        elif katex is not None and not (Path(katex) / "katex.min.js").is_file():
            self.unavailable_reason = f"no katex.min.js in {katex}"
        elif self.katex is None:
            self.unavailable_reason = (
                f"no katex.min.js and katex.min.css in {os.environ.get('LLM_OCR_KATEX') or SHIPPED_KATEX} "
                "(LLM_OCR_KATEX: a folder holding both)"
            )
        self.version = katex_version(self.katex) if self.katex is not None and self.available else None
        self.fonts = font_files(self.katex) if self.katex is not None and self.available else []
        if self.available and self.version != OLMOCR_KATEX_VERSION:
            log.warning("KaTeX in %s is %s, not %s as olmOCR-bench's: math verdicts may differ from olmOCR's",
                        self.katex, self.version or "of an unknown version", OLMOCR_KATEX_VERSION)  # fmt: skip
        if self.katex is not None and self.available and not self.fonts:
            log.warning("no woff2 fonts beside %s: formulas are laid out in this machine's fonts, and glyph "
                        "comparisons may differ from one machine to another", self.katex / "katex.min.css")

    @property
    def available(self) -> bool:
        """Whether formulas can be rendered here."""
        return not self.unavailable_reason

    def describe(self) -> dict[str, str | None]:
        """What renders the formulas, for ``bench.json``: the browser (``chromium --version``,
        whose user agent hides all but the major version), the KaTeX version and the fonts."""
        if not self.available:
            return {"chromium": None, "katex": None, "fonts": None, "unavailable": self.unavailable_reason}
        assert self.katex is not None and self.chromium is not None
        if not self.fonts:
            fonts = "the machine's fonts (no woff2 fonts beside the KaTeX CSS)"
        elif self.katex == SHIPPED_KATEX:
            fonts = f"bundled KaTeX fonts {self.version} ({len(self.fonts)} woff2)"
        else:
            fonts = f"KaTeX fonts from {self.katex} ({len(self.fonts)} woff2)"
        return {"chromium": chromium_version(self.chromium), "katex": self.version, "fonts": fonts}

    def render(self, latex: str) -> RenderedEquation | None:
        """``latex`` rendered (``error`` set if KaTeX refused it); None if the browser failed."""
        if latex not in self._cache:
            self.prefetch([latex])
        return self._cache.get(latex)

    def prefetch(self, formulas: Iterable[str]) -> None:
        """Render every formula not rendered yet, :data:`BATCH` per browser run."""
        if not self.available:
            return
        todo = list(dict.fromkeys(f for f in formulas if f not in self._cache))
        batches = [todo[start : start + BATCH] for start in range(0, len(todo), BATCH)]

        def run(batch: list[str]) -> list[dict | None]:
            try:
                return self._run(batch)
            except FontsNotLoaded as exc:  # every batch would be laid out in the wrong fonts
                self.unavailable_reason = str(exc)
                log.warning("math tests will not be scored: %s", exc)
                return [None] * len(batch)
            except (OSError, subprocess.SubprocessError, ValueError) as exc:
                log.warning("rendering %d formula(s) in Chromium failed: %s", len(batch), exc)
                return [None] * len(batch)

        # One browser per core at most: each batch is a subprocess of its own.
        with ThreadPoolExecutor(max_workers=max(1, min(len(batches), os.cpu_count() or 1))) as pool:
            for batch, records in zip(batches, pool.map(run, batches), strict=True):
                for latex, record in zip(batch, records, strict=True):
                    self._cache[latex] = RenderedEquation.from_browser(record) if record is not None else None

    def _page(self, formulas: list[str]) -> str:
        assert self.katex is not None
        css = (self.katex / "katex.min.css").read_text(encoding="utf-8")
        # The CSS's @font-face URLs are relative to the CSS, not to this page: the page's script
        # loads the same fonts from their bytes instead (see the module doc).
        css = _FONT_FACE.sub("", css)
        js = (self.katex / "katex.min.js").read_text(encoding="utf-8")
        data = json.dumps(formulas).replace("</", "<\\/")
        fonts = json.dumps([
            {"name": f.path.name, "family": f.family, "style": f.style, "weight": f.weight,
             "data": base64.b64encode(f.path.read_bytes()).decode("ascii")}
            for f in self.fonts
        ])  # fmt: skip
        return (
            "<!DOCTYPE html><html><head><meta charset='utf-8'><style>"
            + css
            + "\nbody{margin:0;background:#fff;color:#000}#stage{width:max-content}"
            ".eq{font-size:24px;padding:0;margin:40px}</style></head><body><div id='stage'></div>"
            f"<script id='eqs' type='application/json'>{data}</script>"
            f"<script id='fonts' type='application/json'>{fonts}</script><script>{js}</script>"
            f"<script>{_PAGE_SCRIPT}</script></body></html>"
        )

    def _run(self, formulas: list[str]) -> list[dict | None]:
        assert self.chromium is not None
        with tempfile.TemporaryDirectory(prefix="llm-ocr-katex-") as tmp:
            page = Path(tmp) / "formulas.html"
            page.write_text(self._page(formulas), encoding="utf-8")
            cmd = [
                self.chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--force-device-scale-factor=1", f"--user-data-dir={Path(tmp) / 'profile'}",
                "--window-size=1200,800", "--dump-dom", page.as_uri(),
            ]  # fmt: skip
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout, check=False)
        match = re.search(r'<pre id="llmocr-result">(.*?)</pre>', done.stdout, re.DOTALL)
        if match is None:
            raise ValueError(f"Chromium exited {done.returncode} without a result: {done.stderr.strip()[-500:]}")
        result = json.loads(html.unescape(match.group(1)))
        failed = [f["name"] for f in result["fonts"] if f["status"] != "loaded"]
        if failed:
            raise FontsNotLoaded(f"Chromium did not load {len(failed)} of KaTeX's {len(result['fonts'])} fonts "
                                 f"({', '.join(failed[:3])}{', ...' if len(failed) > 3 else ''}): glyph boxes would "
                                 "come from this machine's fonts")
        records = result["formulas"]
        if len(records) != len(formulas):
            raise ValueError(f"{len(records)} results for {len(formulas)} formulas")
        return list(records)
