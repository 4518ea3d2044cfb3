"""Record olmOCR's own scores of the candidate folders of :mod:`tests.quality.candidates` (run by hand).

tests/quality/test_markdown_dir.py scores the same folders with ``llm-ocr bench-quality --markdown``
and requires the same outcome. Each candidate is scored by olmOCR's scorer itself
(``olmocr/bench/benchmark.py``, at the commit named in the file's first line): its
``evaluate_candidate`` gives every test's share of readings passed and its verdict, and its
``main()``, run on the bench with the candidates beside ``pdfs/``, prints the score, the pass
rate per test type and whether the candidate failed with errors; those lines are kept as printed.
Why olmOCR is not installed in the suite, and how to set it up: make_olmocr_verdicts.py. Then::

    /tmp/olmvenv/bin/python tests/quality/make_olmocr_repeats.py /tmp/olmocr [--chromium /usr/bin/chromium]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUTPUT = HERE / "data" / "olmocr_repeats.jsonl"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("olmocr", type=Path, help="a checkout of allenai/olmocr")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    sys.path.insert(0, str(args.olmocr))
    sys.path.insert(0, str(HERE.parent.parent))  # first: olmocr's checkout has a tests package too
    from olmocr.bench.katex import render
    from playwright.sync_api import sync_playwright

    class Owner:  # olmOCR's browser, launched from the given Chromium
        def __init__(self) -> None:
            self.p = sync_playwright().start()
            self.browser = self.p.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])

    render._BrowserOwner = Owner
    import bs4
    from olmocr.bench import benchmark
    from olmocr.bench.tests import BaselineTest, load_tests

    from tests.quality.benchgen import write_bench
    from tests.quality.candidates import CANDIDATES, write_candidate

    git = ["git", "-C", str(args.olmocr), "rev-parse", "HEAD"]
    commit = subprocess.run(git, capture_output=True, text=True, check=False).stdout.strip()
    records: list[dict] = [{"olmocr_commit": commit or "unknown", "python": platform.python_version(),
                            "bs4": bs4.__version__}]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        bench = write_bench(Path(tmp) / "bench_data")
        for name, readings in CANDIDATES.items():
            write_candidate(bench / name, readings)
        pdfs = sorted(p.relative_to(bench / "pdfs").as_posix() for p in (bench / "pdfs").rglob("*.pdf"))
        tests = [t for jsonl in sorted(bench.glob("*.jsonl")) for t in load_tests(str(jsonl))]
        tests += [BaselineTest(id=f"{pdf}_baseline", pdf=pdf, page=1, type="baseline") for pdf in pdfs
                  if not any(t.type == "baseline" and t.pdf == pdf for t in tests)]  # fmt: skip
        printed = io.StringIO()
        sys.argv = ["benchmark", "--dir", str(bench)]
        with contextlib.redirect_stdout(printed):
            benchmark.main()
        summary = printed.getvalue().split("Final Summary")[-1]
        for name in CANDIDATES:
            _, _, errors, failures, breakdown, _, results = benchmark.evaluate_candidate(str(bench / name), tests, pdfs)
            verdicts = {}
            for by_page in results.values():
                for outcomes in by_page.values():
                    for test, passed, explanation in outcomes:
                        verdicts[test.id] = {"passed": bool(passed), "explanation": explanation, "average": 1.0}
            for line in failures:  # "Test ID on BASE page N average pass ratio: 0.500 (1/2 repeats passed). Ex: ..."
                found = re.match(r"Test (\S+) on .* average pass ratio: [0-9.]+ \((\d+)/(\d+) repeats passed\)", line)
                verdicts[found[1]]["average"] = int(found[2]) / int(found[3])
            block = summary.split(f"{name:20s} : ")[1].split("\n\n")[0]
            records.append({
                "candidate": name, "readings": {pdf: len(texts) for pdf, texts in CANDIDATES[name].items()},
                "errors": [e.replace(f"{bench}/", "") for e in errors], "printed": block.strip(),
                "score": _number(re.search(r"Average Score: ([0-9.]+)%", block)),
                "failed": "FAILED (errors)" in block,
                "types": {t: sum(v) / len(v) for t, v in sorted(breakdown.items())},
                "tests": dict(sorted(verdicts.items())),
            })  # fmt: skip
    OUTPUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    print(f"{len(records) - 1} candidates scored by olmocr {commit[:7]} -> {OUTPUT}")


def _number(match: re.Match[str] | None) -> float | None:
    return float(match.group(1)) if match else None


if __name__ == "__main__":
    main()
