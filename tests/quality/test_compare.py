"""`llm-ocr compare`: runs side by side, differences highlighted, numbers from the markers;
rendered in headless Chromium and looked at."""

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

from llm_ocr.quality import compare_runs, score_output
from llm_ocr.quality.diff import diff_columns
from tests.conftest import run_cli
from tests.quality.cases import BENCH
from tests.quality.conftest import write_run
from tests.waiting import HANG_GUARD_S

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WINDOW = (1400, 1800)


def runs(tmp: Path, bench: Path) -> tuple[Path, Path]:
    def pages(reading: str) -> list[dict[str, Any]]:
        return [{"doc_id": pdf, "source": str(bench / "pdfs" / pdf), "markdown": spec[reading]} for pdf, spec in BENCH.items()]

    good = write_run(tmp / "good", pages("good"), model="vendor/good-ocr", wall_time_s=10.0,
                     gpu={"preset": "l4", "gpus": 1, "gpu_seconds": 10.0, "price_per_gpu_hour": 0.8, "estimated_cost_usd": 0.0022})
    bad = write_run(tmp / "bad", pages("bad"), model="vendor/bad-ocr", wall_time_s=2.5)
    return good, bad


def test_diff_marks_what_each_run_lacks() -> None:
    base, other = diff_columns(["one two three four", "one three four five"])
    assert base == 'one <mark class="llmocr-del">two</mark> three four'
    assert other == 'one three four <mark class="llmocr-ins">five</mark>'
    assert diff_columns(["<b>x</b>", "<b>y</b>"])[1] == '<mark class="llmocr-ins">&lt;b&gt;y&lt;/b&gt;</mark>'


def test_compare_page_holds_scores_numbers_and_differences(tmp_path: Path, bench_dir: Path) -> None:
    good, bad = runs(tmp_path, bench_dir)
    score_output(str(good), bench_dir, katex=str(tmp_path))  # math not scored: no KaTeX there
    result = compare_runs([str(good), str(bad)], str(tmp_path / "compare.html"))
    page = (tmp_path / "compare.html").read_text()
    assert result.pages_compared == result.pages_shown == len(BENCH)
    # The runs' table: models, the bench score of the scored run, numbers from the markers.
    assert "vendor/good-ocr" in page and "vendor/bad-ocr" in page
    assert "100.0% &plusmn; 0.0" in page and "not run" in page
    assert "$0.44" in page  # $0.0022 for 5 pages: $0.44 per 1,000 pages; the other run has no price
    good_stats, bad_stats = result.runs
    assert good_stats["pages_per_s"] == 0.5 and bad_stats["pages_per_s"] == 2.0
    assert bad_stats["cost_per_1000_pages_usd"] is None and good_stats["gpu_seconds_per_1000_pages"] == 2000.0
    # Pages in order of disagreement: the blank page (nothing against a sentence) first.
    order = re.findall(r'<section class="llmocr-page" id="[^"]*"><h3>([^&]+) &middot;', page)
    assert order[0] == "text/blank.pdf" and sorted(order) == sorted(BENCH)
    # The letter: the bad run kept the header (marked as added), and lost the roof line (marked
    # in the first run as missing from another).
    assert '<mark class="llmocr-ins">ACME</mark>' in page
    assert '<mark class="llmocr-del">Members</mark>' in page
    # Each run's flags from the no-truth checks are shown on its page.
    assert '<span class="llmocr-flag">repetition</span>' in page


def test_cli_refuses_one_run(tmp_path: Path) -> None:
    done = run_cli("compare", str(tmp_path))
    assert done.returncode == 2


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not on PATH (Debian: apt-get install -y chromium)")
def test_compare_page_in_a_browser(tmp_path: Path, bench_dir: Path) -> None:
    """Chromium renders the page: the page images load, the highlights are visible in their colours."""
    good, bad = runs(tmp_path, bench_dir)
    done = run_cli("compare", str(good), str(bad), "--html", str(tmp_path / "compare.html"), "--labels", "good,bad", timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["pages_shown"] == len(BENCH)
    target = tmp_path / "compare.html"
    text = target.read_text()
    text, policies = re.subn(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", text)
    assert policies == 1
    probe = """<script>addEventListener("load", () => {
      const box = (e) => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
      const images = [...document.images].map((i) => ({natural: i.naturalWidth, box: box(i)}));
      const marks = [...document.querySelectorAll("mark")].map((m) => ({css: m.className, bg: getComputedStyle(m).backgroundColor, box: box(m)}));
      document.body.setAttribute("data-check", JSON.stringify({images, marks}));
    });</script>"""
    checked = tmp_path / "checked.html"
    checked.write_text(text.replace("</body>", probe + "</body>"))
    common = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
              "--force-device-scale-factor=1", f"--window-size={WINDOW[0]},{WINDOW[1]}"]  # fmt: skip
    dom = subprocess.run([*common, f"--user-data-dir={tmp_path / 'p1'}", "--virtual-time-budget=10000", "--dump-dom",
                          checked.as_uri()], capture_output=True, text=True, timeout=HANG_GUARD_S, check=False)  # fmt: skip
    match = re.search(r'data-check="([^"]*)"', dom.stdout)
    assert match, dom.stderr[-2000:]
    check = json.loads(html.unescape(match.group(1)))
    assert len(check["images"]) == len(BENCH) and all(i["natural"] > 0 for i in check["images"])
    colours = {m["css"]: m["bg"] for m in check["marks"]}
    assert colours == {"llmocr-ins": "rgb(200, 240, 200)", "llmocr-del": "rgb(248, 204, 204)"}
    visible = [m for m in check["marks"] if m["box"][2] > m["box"][0] and 0 <= m["box"][1] < WINDOW[1]]
    assert visible, "no highlighted word on the first screen"

    shot = tmp_path / "compare.png"
    subprocess.run([*common, f"--user-data-dir={tmp_path / 'p2'}", f"--screenshot={shot}", target.as_uri()],
                   capture_output=True, timeout=HANG_GUARD_S, check=True)  # fmt: skip
    picture = Image.open(shot).convert("RGB")
    left, top, right, bottom = (round(v) for v in visible[0]["box"])
    pixels = [picture.getpixel((x, y)) for x in range(left, right) for y in range(top, bottom)]
    target_colour = (200, 240, 200) if visible[0]["css"] == "llmocr-ins" else (248, 204, 204)
    assert sum(1 for p in pixels if sum(abs(a - b) for a, b in zip(p, target_colour)) < 30) > len(pixels) / 3
