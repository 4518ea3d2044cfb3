"""Record olmOCR's own verdicts on the cases of :mod:`tests.quality.cases` (run by hand).

The test suite compares llm-ocr's scorer with these verdicts (tests/quality/test_parity.py).
They come from olmOCR's scorer itself, at the commit named in the file's first line, run on
exactly the Markdown llm-ocr is scored on. It is not run in the suite because the scorer the
verdicts must come from, allenai/olmocr's main branch, is newer than its latest PyPI release
(0.4.27, whose table parser, normalisation order and test types differ), and the suite has no
network to fetch it. To regenerate::

    git clone https://github.com/allenai/olmocr /tmp/olmocr
    python -m venv /tmp/olmvenv && /tmp/olmvenv/bin/pip install fuzzysearch rapidfuzz beautifulsoup4 lxml \\
        tqdm numpy pypdf playwright
    /tmp/olmvenv/bin/python tests/quality/make_olmocr_verdicts.py /tmp/olmocr [--chromium /usr/bin/chromium]

Math tests render with olmOCR's Playwright code, pointed at the given Chromium (Playwright's own
browser download is not needed).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUTPUT = HERE / "data" / "olmocr_verdicts.jsonl"


def cases() -> list[dict]:
    """Every (case, test, markdown) the verdicts are recorded for."""
    sys.path.insert(0, str(HERE.parent.parent))
    from tests.quality.cases import BENCH, EXTRA

    found = []
    for pdf, spec in BENCH.items():
        tests = list(spec["tests"])
        if not any(t["type"] == "baseline" for t in tests):
            tests.append({"pdf": pdf, "page": 1, "id": f"{pdf}_baseline", "type": "baseline"})
        for reading in ("good", "bad"):
            for test in tests:
                found.append({"case": f"{test['id']}@{reading}", "test": test, "markdown": spec[reading]})
    for extra in EXTRA:
        found.append({"case": extra["test"]["id"], "test": extra["test"], "markdown": extra["markdown"]})
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("olmocr", type=Path, help="a checkout of allenai/olmocr")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    sys.path.insert(0, str(args.olmocr))
    from olmocr.bench.katex import render
    from playwright.sync_api import sync_playwright

    class Owner:  # olmOCR's browser, launched from the given Chromium
        def __init__(self) -> None:
            self.p = sync_playwright().start()
            self.browser = self.p.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])

    render._BrowserOwner = Owner
    from olmocr.bench.tests import load_single_test

    commit = subprocess.run(["git", "-C", str(args.olmocr), "rev-parse", "HEAD"], capture_output=True, text=True, check=False).stdout.strip()
    records = [{"olmocr_commit": commit or "unknown", "katex": "olmocr/bench/katex/katex.min.js (bundled)"}]
    for case in cases():
        test = load_single_test(dict(case["test"]))
        passed, explanation = test.run(case["markdown"])
        records.append({**case, "passed": bool(passed), "explanation": explanation})
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    print(f"{len(records) - 1} verdicts from olmocr {commit[:7]} -> {OUTPUT}")


if __name__ == "__main__":
    main()
