"""Escalation end to end (docs/routes.md): a page whose first reading comes out badly is read again
by a stronger model, in one ``llm-ocr run --escalate-to`` and as a stage of its own
(``llm-ocr escalate``), against two simulated models, as users run them.

The weak model garbles one named page (``--garble-page``: the simulator misreads it letter by
letter); the strong one reads every page right. The garbled page is escalated, the good ones are
not, Describe and Assemble use the escalated reading, and a rerun sends nothing to either model.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

import llm_ocr
from llm_ocr.testing import SimulatedServer
from tests.conftest import read_stage, run_cli
from tests.docs import make_corpus

STRONG = "allenai/olmOCR-2-7B-1025"
WEAK = "deepseek-ai/DeepSeek-OCR"
GARBLED = ("doc000.pdf", 2)
FAST = ("--workers", "0", "--progress", "log")


def _words(text: str) -> list[str]:
    return [w.lower() for w in re.findall(r"\w+", text)]


def _recall(lines: list[str], text: str) -> float:
    want, have = _words(" ".join(lines)), set(_words(text))
    return sum(w in have for w in want) / len(want)


def _pages(server: SimulatedServer) -> list[tuple[str, int]]:
    """The corpus pages a server was sent (page requests it answered)."""
    return [(Path(r["known_page"]["source"]).name, r["known_page"]["page"])
            for r in server.requests() if r.get("status") == 200 and r.get("known_page")]


@pytest.fixture
def corpus(tmp_path: Path) -> tuple[Path, dict[str, list[list[str]]]]:
    docs = tmp_path / "docs"
    return docs, make_corpus(docs, documents=2, pages=2)


def _check_escalated(out: Path, truth: dict[str, list[list[str]]], stage: str = "escalate") -> None:
    rows = {(r["doc_id"], r["page"]): r for r in read_stage(out, stage)}
    assert sorted(rows) == [(d, p) for d in ("doc000.pdf", "doc001.pdf") for p in (1, 2)]  # each page once
    bad = rows[GARBLED]
    assert bad["route"] == "escalated" and bad["model"] == STRONG and bad["escalated_from"] == WEAK, bad
    assert "garbled" in bad["escalation_reason"] and "missing-text" in bad["escalation_reason"]
    assert _recall(truth["doc000.pdf"][1], bad["markdown"]) > 0.99  # the strong model's reading is kept
    first = bad["other_reading"]
    assert first["model"] == WEAK and _recall(truth["doc000.pdf"][1], first["markdown"]) < 0.8  # garbled
    for key, row in rows.items():
        if key != GARBLED:
            assert row["route"] == "model" and row["escalated_from"] is None and row["model"] == WEAK, row
            assert row["escalation_reason"] is None and row["other_reading"] is None


def test_run_escalates_the_garbled_page_only_and_a_rerun_sends_nothing(corpus, tmp_path: Path) -> None:
    docs, truth = corpus
    out = tmp_path / "out"
    with SimulatedServer("--garble-page", "doc000.pdf:2", corpus=docs, request_log=True) as weak, \
            SimulatedServer("--served-model-name", STRONG, corpus=docs, request_log=True) as strong:
        args = ("run", str(docs), "--output", str(out), "--endpoint", weak.base_url, "--escalate-to", STRONG,
                "--escalate-endpoint", strong.base_url, *FAST)
        first = run_cli(*args, timeout=300)
        assert first.returncode == 0, first.stderr
        assert _pages(strong) == [GARBLED]  # the strong model read the garbled page, and only it
        assert sorted(_pages(weak)) == [(d, p) for d in ("doc000.pdf", "doc001.pdf") for p in (1, 2)]
        sent = (len(weak.requests()), len(strong.requests()))
        again = run_cli(*args, timeout=300)
        assert again.returncode == 0, again.stderr
        assert (len(weak.requests()), len(strong.requests())) == sent  # a rerun sends nothing
    _check_escalated(out, truth)
    # Describe and Assemble use the escalated reading.
    described = {(r["doc_id"], r["page"]): r for r in read_stage(out, "describe")}
    assert described[GARBLED]["model"] == STRONG and described[GARBLED]["route"] == "escalated"
    document = next(d for d in read_stage(out, "assemble") if d["doc_id"] == "doc000.pdf")
    assert _recall(truth["doc000.pdf"][1], document["markdown"]) > 0.99
    # The markers split pages and GPU time by route and model; the result line names the routes.
    escalate = json.loads(next((out / "_state" / "escalate").glob("done-*.json")).read_text())
    assert escalate["routes"] == {"escalated": 1, "model": 3}
    assert escalate["models"][STRONG]["pages"] == 1 and escalate["models"][STRONG]["busy_s"] > 0
    assert escalate["escalation"]["signals"]["garbled"] == 1
    extract = json.loads(next((out / "_state" / "extract").glob("done-*.json")).read_text())
    assert extract["models"][WEAK]["pages"] == 4
    status = run_cli("status", str(out))
    assert "routes (finished shards): escalated 1, model 3" in status.stdout, status.stdout


def test_the_escalate_stage_reads_only_the_flagged_pages_later(corpus, tmp_path: Path) -> None:
    docs, truth = corpus
    out = tmp_path / "out"
    with SimulatedServer("--garble-page", "doc000.pdf:2", corpus=docs) as weak:
        extracted = run_cli("extract", str(docs), "--output", str(out), "--endpoint", weak.base_url, *FAST)
    assert extracted.returncode == 0, extracted.stderr
    shutil.copytree(out, tmp_path / "weak-only")
    # Later, elsewhere: the strong model reads what the first pass flagged, and only that.
    with SimulatedServer("--served-model-name", STRONG, corpus=docs, request_log=True) as strong:
        args = ("escalate", "--output", str(out), "--endpoint", strong.base_url, "--model", STRONG, *FAST)
        first = run_cli(*args, timeout=300)
        assert first.returncode == 0, first.stderr
        assert _pages(strong) == [GARBLED]
        sent = len(strong.requests())
        # Again, from Python: nothing is sent, and the result says how the pages were read.
        again = llm_ocr.escalate(out, endpoint=strong.base_url, model=STRONG, workers=0, progress="off")
        assert again.ok and len(strong.requests()) == sent
        assert again.routes == {"escalated": 1, "model": 3} and again.models[STRONG]["pages"] == 1
    _check_escalated(out, truth)
    # llm-ocr compare puts the single-model run beside the cascade: pages per route, GPU time.
    page = tmp_path / "compare.html"
    compared = run_cli("compare", str(tmp_path / "weak-only"), str(out), "--html", str(page))
    assert compared.returncode == 0, compared.stderr
    table = page.read_text().split("</table>")[0]
    row = table[table.index("Pages per route"):].split("</tr>")[0]
    assert re.findall(r"<td[^>]*>([^<]*)</td>", row) == ["0 / 4 / 0", "0 / 3 / 1"]
    # Assemble reads the escalated rows (there is no Describe here).
    assembled = run_cli("assemble", "--output", str(out))
    assert assembled.returncode == 0, assembled.stderr
    document = next(d for d in read_stage(out, "assemble") if d["doc_id"] == "doc000.pdf")
    assert _recall(truth["doc000.pdf"][1], document["markdown"]) > 0.99


def test_escalation_after_describe_is_refused_with_what_to_do(corpus, tmp_path: Path) -> None:
    docs, _ = corpus
    out = tmp_path / "out"
    with SimulatedServer("--garble-page", "doc000.pdf:2", corpus=docs) as weak:
        assert run_cli("run", str(docs), "--output", str(out), "--endpoint", weak.base_url, *FAST).returncode == 0
    with SimulatedServer("--served-model-name", STRONG, corpus=docs, request_log=True) as strong:
        refused = run_cli("escalate", "--output", str(out), "--endpoint", strong.base_url, "--model", STRONG, *FAST)
        assert strong.requests() == []
    assert refused.returncode == 2
    assert "escalation goes between Extract and Describe" in refused.stderr, refused.stderr


def test_the_escalate_stage_launches_from_the_stage_table() -> None:
    plan = run_cli("launch", "hf-jobs", "--stage", "escalate", "--output", "hf://datasets/me/out", "--model", STRONG,
                   "--num-shards", "2", "--dry-run", "--offline")
    assert plan.returncode == 0, plan.stderr
    jobs = json.loads(plan.stdout)["jobs"]
    assert len(jobs) == 2
    for job in jobs:
        command = job["command"]
        assert command[command.index("llm-ocr"):] == ["llm-ocr", "escalate", "--model", STRONG, "--output",
                                                      "hf://datasets/me/out"]


def test_a_verifier_can_be_the_signal(corpus, tmp_path: Path) -> None:
    """The verifier interface end to end, with the simulator playing a verifier (``/sim/verify``:
    an oracle that knows the corpus, labelled as such; no real verifier model is served here)."""
    docs, _ = corpus
    out = tmp_path / "out"
    with SimulatedServer("--garble-page", "doc000.pdf:2", corpus=docs) as weak:
        assert run_cli("extract", str(docs), "--output", str(out), "--endpoint", weak.base_url, *FAST).returncode == 0
    with SimulatedServer("--served-model-name", STRONG, corpus=docs, request_log=True) as strong:
        escalated = run_cli("escalate", "--output", str(out), "--endpoint", strong.base_url, "--model", STRONG,
                            "--escalate-on", "verifier", "--escalate-verifier", f"{strong.url}/sim/verify", *FAST)
        assert escalated.returncode == 0, escalated.stderr
        assert _pages(strong) == [GARBLED]
        categories = strong.stats()["verify_categories"]
    # Scored region by region, as Jev scores (a block of the reading each, with its category),
    # not a page at a time: more requests than pages, every one with a category Jev knows.
    extracted = read_stage(out, "extract")
    regions = sum(1 for r in extracted for b in r["blocks"] if b["boxes"] and b["text"] and b["label"] != "image")
    assert sum(categories.values()) == regions > len(extracted), (categories, regions)
    assert set(categories) <= {"text", "formula", "table"} and categories.get("text")
    rows = {(r["doc_id"], r["page"]): r for r in read_stage(out, "escalate")}
    assert rows[GARBLED]["route"] == "escalated"
    assert rows[GARBLED]["escalation_reason"].startswith("verifier (the verifier gave it 0.")
    assert [k for k, r in rows.items() if r["route"] == "escalated"] == [GARBLED]
