"""The report as a browser shows it: headless Chromium renders a report of a real run.

Two checks, each able to fail on its own:

- ``--dump-dom`` of a copy of the report with a tiny script that, after ``load``, records
  every ``<img>``'s ``naturalWidth`` and the on-screen boxes of the page image and of its
  layout rectangles (the report itself has no script, and its Content-Security-Policy would
  block one; the copy drops that policy). Broken data URIs give ``naturalWidth == 0``; a
  negative control with a corrupted page image proves the check notices.
- ``--screenshot`` of the unmodified report (policy included): inside the page image's box
  there must be black text pixels (no box or label is drawn in black), and along the top edge
  of the largest layout rectangle its stroke colour.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from llm_ocr.report import write_report
from llm_ocr.testing import SimulatedServer
from tests.conftest import run_cli
from tests.docs import make_pdf

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not on PATH (Debian: apt-get install -y chromium; scripts/test installs it when root)",
)

WINDOW = (1200, 2000)

CHECK_SCRIPT = """<script>
addEventListener("load", () => {
  const box = (e) => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const images = [...document.images].map((i) => ({
    page: !!i.closest(".llmocr-view"), complete: i.complete, natural: [i.naturalWidth, i.naturalHeight], box: box(i),
  }));
  const view = document.querySelector(".llmocr-view");
  const rects = view ? [...view.querySelectorAll("svg rect")].map((r) => ({stroke: r.getAttribute("stroke"), box: box(r)})) : [];
  document.body.setAttribute("data-check", JSON.stringify({images, rects, dpr: devicePixelRatio}));
});
</script>"""


def chromium(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    cmd = [
        str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--hide-scrollbars", "--force-device-scale-factor=1", f"--user-data-dir={profile}",
        f"--window-size={WINDOW[0]},{WINDOW[1]}", *args,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def dom_check(report: Path, tmp: Path, name: str) -> dict[str, Any]:
    """Load a scripted copy of ``report`` and return what the script measured."""
    text = report.read_text()
    text, policies = re.subn(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", text)
    assert policies == 1
    copy = tmp / name
    copy.write_text(text.replace("</body>", CHECK_SCRIPT + "</body>"))
    done = chromium(
        "--run-all-compositor-stages-before-draw", "--virtual-time-budget=10000", "--dump-dom",
        copy.as_uri(), tmp=tmp,
    )
    match = re.search(r'data-check="([^"]*)"', done.stdout)
    assert match, f"the check script did not run:\n{done.stdout[:500]}\n{done.stderr[-2000:]}"
    return json.loads(html.unescape(match.group(1)))


def near(pixel: tuple[int, ...], colour: tuple[int, int, int], tolerance: int = 60) -> bool:
    return sum(abs(a - b) for a, b in zip(pixel[:3], colour, strict=True)) <= tolerance


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A report of a real run: simulator + extract on a generated PDF with an embedded chart."""
    tmp = tmp_path_factory.mktemp("browser")
    (tmp / "docs").mkdir()
    make_pdf(tmp / "docs" / "chart.pdf", pages=1, seed=3)
    out = tmp / "out"
    with SimulatedServer(corpus=tmp / "docs") as server:
        done = run_cli("extract", str(tmp / "docs"), "--output", str(out), "--endpoint", server.base_url, "--workers", "0")
    assert done.returncode == 0, done.stderr
    return Path(write_report(str(out)).path)


def test_images_load_and_boxes_are_drawn_in_a_browser(report: Path, tmp_path: Path) -> None:
    check = dom_check(report, tmp_path, "checked.html")
    assert check["dpr"] == 1
    images = check["images"]
    pages = [i for i in images if i["page"]]
    assert len(pages) == 1 and len(images) >= 2  # the page and its figure crop
    for image in images:
        assert image["complete"] and image["natural"][0] > 0 and image["natural"][1] > 0, image
    assert check["rects"], "no layout boxes drawn"

    shot = tmp_path / "shot.png"
    chromium(f"--screenshot={shot}", report.as_uri(), tmp=tmp_path)
    picture = Image.open(shot).convert("RGB")
    assert picture.size == WINDOW

    # The page image is on screen and shows the page: black text pixels inside its box.
    left, top, right, bottom = (round(v) for v in pages[0]["box"])
    assert 0 <= left < right <= WINDOW[0] and 0 <= top < bottom <= WINDOW[1], pages[0]
    dark = sum(
        1
        for y in range(top, bottom)
        for x in range(left, right)
        if max(picture.getpixel((x, y))) < 80
    )
    # A real page gives thousands (about 5000 here); a broken image (icon and alt text) about 200.
    assert dark > 1500, f"only {dark} dark pixels where the page image should be"

    # The largest layout box is outlined in its label's colour along its top edge.
    rect = max(check["rects"], key=lambda r: (r["box"][2] - r["box"][0]) * (r["box"][3] - r["box"][1]))
    x1, y1, x2, _ = (round(v) for v in rect["box"])
    colour = tuple(int(rect["stroke"][i : i + 2], 16) for i in (1, 3, 5))
    columns = range(x1 + 4, x2 - 4)
    hits = sum(1 for x in columns if any(near(picture.getpixel((x, y)), colour) for y in range(y1 - 2, y1 + 3)))
    assert hits > 0.8 * len(columns), f"box edge colour {rect['stroke']} found in {hits}/{len(columns)} columns"


def test_broken_data_uri_is_detected(report: Path, tmp_path: Path) -> None:
    """Negative control: the same check fails when a page image's data URI is corrupt."""
    text = report.read_text()
    page_image = r'(<div class="llmocr-view"><img src="data:image/jpeg;base64,)([A-Za-z0-9+/]{64})'
    broken = re.sub(page_image, r"\1" + "A" * 64, text, count=1)
    assert broken != text
    corrupt = tmp_path / "corrupt.html"
    corrupt.write_text(broken)
    check = dom_check(corrupt, tmp_path, "corrupt-checked.html")
    assert [i["natural"][0] for i in check["images"] if i["page"]] == [0]
