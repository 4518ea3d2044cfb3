"""Fault injection through the command: server faults, degenerate answers, interruption,
hostile input, secrets. Every page must be accounted for exactly once, whatever happens.

The in-process fault tests are in tests/runners/test_faults_units.py, a 5,000-page run in
tests/runners/test_many_pages.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pypdfium2
import pytest
from PIL import Image

from llm_ocr.testing import SimulatedServer
from tests.conftest import REPO, read_stage, run_cli
from tests.docs import make_corpus, make_pdf
from tests.stages.common import page_keys, run_in_process
from tests.waiting import HANG_GUARD_S, hold_request, wait_until, wait_until_held


def extract(inputs, out: Path, server: SimulatedServer, *extra: str, env=None, timeout: float = HANG_GUARD_S):
    return run_cli(
        "extract", *[str(i) for i in inputs], "--output", str(out), "--endpoint", server.base_url,
        "--workers", "0", "--progress", "log", "--backoff-base", "0.05", *extra, env=env, timeout=timeout,
    )


def extract_here(inputs, out: Path, server: SimulatedServer, *extra: str):
    """``extract`` in this process (:func:`tests.stages.common.run_in_process`), for a run whose
    command line is not what the test is about (a first success, a rerun that heals): a
    subprocess would add an interpreter start (about 1 CPU-second) and nothing to check."""
    return run_in_process(
        "extract", *[str(i) for i in inputs], "--output", str(out), "--endpoint", server.base_url,
        "--workers", "0", "--progress", "log", "--backoff-base", "0.05", *extra,
    )


def corpus_keys(documents: int, pages: int) -> list[tuple[str, int]]:
    """Every (doc_id, page) of a make_corpus corpus, sorted: the exactly-once target."""
    return [(f"doc{d:03d}.pdf", p) for d in range(documents) for p in range(1, pages + 1)]


SEEN = re.compile(
    r"\[extract shard (\d+)/(\d+)\] pages seen (\d+) = ok (\d+) \+ truncated (\d+) \+ error (\d+)"
    r" \+ quarantined (\d+) \+ done earlier (\d+)(?: \+ left for the rerun (\d+))?;"
)


def summary_lines(stderr: str) -> list[dict[str, int]]:
    """The end-of-run accounting lines of a run's stderr, as numbers."""
    names = ("shard", "num_shards", "seen", "ok", "truncated", "error", "quarantined", "earlier", "left")
    return [dict(zip(names, (int(g or 0) for g in m.groups()))) for m in SEEN.finditer(stderr)]


@pytest.mark.parametrize("kind", ["error", "reset", "hang"])
def test_transient_server_faults_are_retried_and_attempts_recorded(tmp_path: Path, kind: str) -> None:
    make_corpus(tmp_path / "docs", documents=3, pages=1)
    with SimulatedServer(corpus=tmp_path / "docs") as server:
        warm = extract_here([tmp_path / "docs/doc000.pdf"], tmp_path / "warm", server)  # a success first
        assert warm.returncode == 0
        server.inject(kind, count=2, status=503, seconds=30)
        result = extract([tmp_path / "docs"], tmp_path / "out", server, "--request-timeout", "1.5", "--max-in-flight", "1")
        applied = server.stats()["faults_applied"]
    assert result.returncode == 0, result.stderr
    assert applied == {kind: 2}  # the simulator's fault option really fired, twice
    rows = read_stage(tmp_path / "out", "extract")
    assert [(r["doc_id"], r["page"]) for r in rows] == corpus_keys(3, 1)  # each page once, in order
    assert [r["status"] for r in rows] == ["ok"] * 3
    # The first page sent (one at a time; the longest expected goes first, not the first listed)
    # absorbed both faults: three attempts, recorded on its row.
    assert sorted(r["attempts"] for r in rows) == [1, 1, 3]


def test_timeouts_count_from_sending_not_from_queueing(tmp_path: Path) -> None:
    make_corpus(tmp_path / "docs", documents=6, pages=1)
    with SimulatedServer("--prefill-ms", "600", "--slots", "1", corpus=tmp_path / "docs") as server:
        # Six pages of 0.6 s through one slot take 3.6 s, far over the 1.2 s timeout; each page
        # waits in our queue, not on the wire, so none may time out.
        result = extract([tmp_path / "docs"], tmp_path / "out", server, "--request-timeout", "1.2", "--max-in-flight", "1")
    assert result.returncode == 0, result.stderr
    rows = read_stage(tmp_path / "out", "extract")
    assert page_keys(rows) == corpus_keys(6, 1)  # every page once
    assert [(r["status"], r["attempts"]) for r in rows] == [("ok", 1)] * 6


def test_retries_are_bounded_and_the_page_gets_an_error_row(tmp_path: Path) -> None:
    make_corpus(tmp_path / "docs", documents=2, pages=1)
    with SimulatedServer(corpus=tmp_path / "docs") as server:
        assert extract_here([tmp_path / "docs/doc000.pdf"], tmp_path / "warm", server).returncode == 0
        server.inject("hang", count=10, seconds=30)
        result = extract([tmp_path / "docs/doc001.pdf"], tmp_path / "out", server, "--request-timeout", "0.5", "--max-attempts", "3")
    assert result.returncode == 1
    (row,) = read_stage(tmp_path / "out", "extract")
    assert row["status"] == "error" and row["attempts"] == 3 and "timed out" in row["error"]


def test_dead_external_endpoint_stops_the_run_instead_of_failing_every_page(tmp_path: Path) -> None:
    make_corpus(tmp_path / "docs", documents=12, pages=2)
    server = SimulatedServer("--prefill-ms", "250", "--slots", "2", corpus=tmp_path / "docs").start()
    args = [
        sys.executable, "-m", "llm_ocr.cli", "extract", str(tmp_path / "docs"), "--output", str(tmp_path / "out"),
        "--endpoint", server.base_url, "--workers", "0", "--progress", "off", "--max-in-flight", "2",
        "--dead-after", "3", "--backoff-base", "0.2", "--backoff-max", "1", "--flush-interval", "0.3",
    ]
    hold_request(server, after=4)  # the run cannot finish before the server stops, however slow the machine
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    wait_until(lambda: list((tmp_path / "out").glob("extract/*.parquet")), "a part was stored", process=process)
    server.stop()
    # A run that did not stop would meet the hang guard: no stopwatch for load to stretch.
    _, stderr = process.communicate(timeout=HANG_GUARD_S)
    assert process.returncode == 2, stderr
    assert "answered nothing successfully" in stderr and "rerun to resume" in stderr
    saved = read_stage(tmp_path / "out", "extract")
    assert saved and all(r["status"] == "ok" for r in saved)  # no page was burnt as an error
    # A stopped run still ends with its accounting line; what it did not do is named.
    (line,) = summary_lines(stderr)
    assert line["ok"] == len(saved) and line["error"] == 0 and line["left"] == line["seen"] - len(saved) > 0
    with SimulatedServer(corpus=tmp_path / "docs") as again:
        assert extract_here([tmp_path / "docs"], tmp_path / "out", again).returncode == 0
    rows = read_stage(tmp_path / "out", "extract")
    assert page_keys(rows) == corpus_keys(12, 2)  # 24 pages, each exactly once


def test_summary_lines_reconcile_every_shard_and_status_reports_the_same(tmp_path: Path) -> None:
    make_corpus(tmp_path / "docs", documents=6, pages=2)
    (tmp_path / "docs/zz-broken.pdf").write_bytes(b"%PDF-1.7\n" + b"\x00" * 100)  # one error row, page 0
    out = tmp_path / "out"
    # --loop-rate: some pages loop to max_tokens on every attempt (truncated rows); two
    # permanent HTTP 400s give error rows: all three outcomes in the accounting.
    with SimulatedServer("--loop-rate", "0.3", "--seed", "5", corpus=tmp_path / "docs") as server:
        server.inject("error", count=2, status=400)
        # Static shards: each process's line is its own shard's. (With work groups, a process's
        # line counts the groups it read, whatever their shard: tests/e2e/runners/test_stragglers_e2e.py.)
        shards = [extract([tmp_path / "docs"], out, server, "--num-shards", "2", "--shard-index", str(i),
                          "--max-tokens", "300", "--no-steal", "--json") for i in range(2)]
        # `status` in this process: tests/e2e/storage/test_status_exit.py runs it as a command.
        status = json.loads(run_in_process("status", str(out), "--json").stdout)
        text = run_in_process("status", str(out)).stdout
        (out / "_state/extract/done-00000-of-00002.json").unlink()
        again = extract([tmp_path / "docs"], out, server, "--num-shards", "2", "--shard-index", "0", "--max-tokens", "300",
                        "--no-steal")
    (extract_status,) = status
    total = {"ok": 0, "truncated": 0, "error": 0}
    for index, result in enumerate(shards):
        (line,) = summary_lines(result.stderr)
        stats = json.loads(result.stdout.strip().splitlines()[-1])
        assert line["shard"] == index + 1 and line["earlier"] == line["left"] == 0
        assert line["seen"] == line["ok"] + line["truncated"] + line["error"] == stats["pages"]["seen"]
        assert stats["reconciled"] is True
        counts = {k: line[k] for k in total}
        # The run's own line and `status` (which reads only the parts) agree, shard by shard.
        assert extract_status["shards"][f"{index:05d}-of-00002"] == {k: v for k, v in counts.items() if v}
        total = {k: total[k] + counts[k] for k in total}
    assert sum(total.values()) == 13 == extract_status["rows"]  # 6 x 2 pages + the broken file
    assert total["ok"] and total["truncated"] and total["error"] == 3
    assert extract_status["by_status"] == {k: v for k, v in total.items() if v} and extract_status["duplicates"] == 0
    assert f"extract: 13 pages = error 3, ok {total['ok']}, truncated {total['truncated']}; shards finished: 2" in text
    # A rerun of shard 0: it sees the same pages; what was done is "done earlier", the failed
    # pages are tried again (the broken file fails again).
    (first,) = summary_lines(shards[0].stderr)
    (line,) = summary_lines(again.stderr)
    assert line["seen"] == first["seen"] and line["earlier"] == first["ok"] + first["truncated"]
    assert line["seen"] == line["ok"] + line["truncated"] + line["error"] + line["earlier"] and line["left"] == 0
    rows = read_stage(out, "extract")
    assert len(rows) == 13 == len(set(page_keys(rows)))


def test_random_server_faults_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    # The simulator's random fault options all at once: HTTP 500s, connection resets, hangs
    # and repetition loops, reproducible with --seed.
    make_corpus(tmp_path / "docs", documents=10, pages=3)
    with SimulatedServer("--error-rate", "0.2", "--reset-rate", "0.15", "--hang-rate", "0.1", "--loop-rate", "0.1",
                         "--seed", "11", corpus=tmp_path / "docs") as server:
        result = extract([tmp_path / "docs"], tmp_path / "out", server, "--max-in-flight", "4", "--request-timeout", "1",
                         "--max-attempts", "4", "--max-tokens", "300", timeout=240)
        applied = server.stats()["faults_applied"]
    assert result.returncode in (0, 1), result.stderr
    assert {"error", "reset", "hang", "loop"} <= set(applied), applied
    rows = read_stage(tmp_path / "out", "extract")
    assert page_keys(rows) == corpus_keys(10, 3)  # 30 pages, each exactly once
    for row in rows:
        assert row["status"] in ("ok", "truncated", "error") and 1 <= row["attempts"]
        if row["status"] == "error":  # only after the whole attempt budget, with the reason
            assert row["attempts"] >= 4 and row["error"].split(":")[0] in ("HTTP 500", "connection error", "request timed out")
    assert sum(r["attempts"] for r in rows) > 30  # faults were retried on the pages that met them
    (line,) = summary_lines(result.stderr)
    by_status = {s: sum(r["status"] == s for r in rows) for s in ("ok", "truncated", "error")}
    assert (line["seen"], line["ok"], line["truncated"], line["error"], line["left"]) == (
        30, by_status["ok"], by_status["truncated"], by_status["error"], 0)


def test_hung_external_endpoint_stops_the_run_instead_of_failing_every_page(tmp_path: Path) -> None:
    # A wedged server: it accepts every request and never answers (--hang-rate 1). Only
    # timeouts come back; after --dead-after of nothing succeeding the run must stop, not give
    # all 24 pages an error row after their attempts.
    make_corpus(tmp_path / "docs", documents=12, pages=2)
    with SimulatedServer("--hang-rate", "1", corpus=tmp_path / "docs") as wedged:
        result = extract(
            [tmp_path / "docs"], tmp_path / "out", wedged, "--max-in-flight", "2", "--request-timeout", "0.5",
            "--max-attempts", "2", "--dead-after", "2",
        )
    assert result.returncode == 2, result.stderr
    assert "has answered nothing successfully" in result.stderr and "last error: request timed out" in result.stderr
    burnt = read_stage(tmp_path / "out", "extract")
    # At most the pages in flight before --dead-after passed got an error row.
    assert len(burnt) <= 4 and {r["status"] for r in burnt} <= {"error"}
    assert not (tmp_path / "out/_state/extract/done-00000-of-00001.json").exists()
    with SimulatedServer(corpus=tmp_path / "docs") as healthy:
        assert extract_here([tmp_path / "docs"], tmp_path / "out", healthy).returncode == 0
    rows = read_stage(tmp_path / "out", "extract")
    assert page_keys(rows) == corpus_keys(12, 2) and {r["status"] for r in rows} == {"ok"}  # errors retried, once


def test_slow_starting_external_endpoint_gets_backoff_then_a_clean_stop_or_the_run(tmp_path: Path) -> None:
    # The simulator's --startup-delay: it listens and lists its model, but answers 503 to
    # chat requests until it is ready (like a server still loading weights behind a proxy).
    make_corpus(tmp_path / "docs", documents=3, pages=2)
    with SimulatedServer("--startup-delay", "600", corpus=tmp_path / "docs", wait_ready=False) as never_ready:
        # At load 10 and more (r20) the run's first request went out after --dead-after had
        # passed since it started: the endpoint is down only after two failed attempts, counted
        # from the first one's sending, so the 1 s holds on any machine.
        impatient = extract([tmp_path / "docs"], tmp_path / "out", never_ready, "--dead-after", "1", "--backoff-max", "0.2")
        tried = never_ready.stats()["responses"].get("503", 0)  # chat requests refused while starting
    assert impatient.returncode == 2 and "has answered nothing successfully" in impatient.stderr
    assert read_stage(tmp_path / "out", "extract") == []  # a clean stop: no page burnt
    assert 1 < tried < 100  # retried with backoff for --dead-after, not in a tight loop
    # The server starts only once the run has met it starting (a 503), whatever the machine's
    # load: the test ends the startup delay, not a clock.
    with SimulatedServer("--startup-delay", "600", corpus=tmp_path / "docs", wait_ready=False) as slow:
        with ThreadPoolExecutor(1) as pool:
            run = pool.submit(
                extract, [tmp_path / "docs"], tmp_path / "out", slow, "--dead-after", "3600", "--backoff-max", "0.5"
            )
            while not slow.stats()["responses"].get("503") and not run.done():
                time.sleep(0.1)
            time.sleep(1)  # a few retries with backoff against the starting server
            slow.end_startup()
            patient = run.result()
        refused = slow.stats()["responses"].get("503", 0)
    assert patient.returncode == 0, patient.stderr
    rows = read_stage(tmp_path / "out", "extract")
    assert page_keys(rows) == corpus_keys(3, 2) and {r["status"] for r in rows} == {"ok"}
    # The 503s were retried on their pages, and recorded. Which pages: those sent before the
    # first failure's probe found /health failing too; the others waited for it, unsent.
    assert max(r["attempts"] for r in rows) > 1
    assert 0 < refused < 100  # with backoff, not in a tight loop


def test_external_endpoint_not_listening_yet_is_waited_for(tmp_path: Path) -> None:
    # A real vLLM only listens once its weights are loaded: an endpoint started beside the job
    # (a sidecar container) refuses connections at first. The run waits, then does every page.
    from llm_ocr.serving.command_lines import free_port

    make_corpus(tmp_path / "docs", documents=2, pages=2)
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "llm_ocr.cli", "extract", str(tmp_path / "docs"), "--output", str(tmp_path / "out"),
         "--endpoint", f"http://127.0.0.1:{port}/v1", "--workers", "0", "--progress", "off", "--dead-after", "60"],
        cwd=str(REPO), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        # Start the server only once the run has found nothing listening and said it waits.
        seen: list[str] = []
        assert process.stderr is not None
        for line in process.stderr:
            seen.append(line)
            if "retrying for up to" in line:
                break
        assert process.poll() is None, "".join(seen)  # still waiting, not given up
        with SimulatedServer(corpus=tmp_path / "docs", port=port) as server:
            _, rest = process.communicate(timeout=60)
            # The simulator listens (and lists its model) while it still indexes its corpus, and
            # answers chat 503 until then; a run that gets there first retries those on the page.
            refused = server.stats()["responses"].get("503", 0)
        stderr = "".join(seen) + rest
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    assert "is not answering" in stderr and "retrying for up to" in stderr
    rows = read_stage(tmp_path / "out", "extract")
    assert page_keys(rows) == corpus_keys(2, 2) and {r["status"] for r in rows} == {"ok"}
    # The wait for the listener spent no page's attempts: only the 503s the server sent did.
    assert sum(r["attempts"] for r in rows) == 4 + refused


def test_slow_starting_managed_server_is_waited_for(tmp_path: Path) -> None:
    from tests.e2e.serving.test_managed_server_e2e import fake_env

    make_corpus(tmp_path / "docs", documents=2, pages=2)
    started = time.monotonic()
    result = run_cli(
        "extract", str(tmp_path / "docs"), "--output", str(tmp_path / "out"), "--engine", "vllm", "--workers", "0",
        env=fake_env(tmp_path, FAKE_VLLM_SIM_ARGS=f"--corpus {tmp_path / 'docs'} --startup-delay 4"),
    )
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started >= 4
    rows = read_stage(tmp_path / "out", "extract")
    assert page_keys(rows) == corpus_keys(2, 2) and [r["attempts"] for r in rows] == [1] * 4  # waited, not retried


@pytest.mark.parametrize("kind", ["empty", "untagged", "bad_boxes"])
def test_degenerate_answers_still_give_valid_rows(tmp_path: Path, kind: str) -> None:
    make_pdf(tmp_path / "a.pdf", pages=1)
    # bad_boxes is ~7,800 tokens long: a context with room for all of it, so it is not cut.
    with SimulatedServer("--max-model-len", "16384", corpus=tmp_path / "a.pdf") as server:
        server.inject(kind, count=1)
        result = extract([tmp_path / "a.pdf"], tmp_path / "out", server)
    assert result.returncode == 0, result.stderr
    (row,) = read_stage(tmp_path / "out", "extract")  # exactly one row for the one page
    assert (row["doc_id"], row["page"], row["status"], row["attempts"]) == ("a.pdf", 1, "ok", 1)
    assert "<|ref|>" not in row["markdown"] and "<|det|>" not in row["markdown"]
    boxes = [f["bbox"] for f in row["figures"]] + [b for block in row["blocks"] for b in block["boxes"]]
    for x1, y1, x2, y2 in boxes:  # no box out of range, inverted or without area survives
        assert 0 <= x1 < x2 <= row["width"] and 0 <= y1 < y2 <= row["height"]
    if kind == "empty":
        assert row["markdown"] == "" and row["error"] == "model returned no text"
    if kind == "untagged":
        assert row["markdown"].strip() and row["blocks"][0]["boxes"] == []
    if kind == "bad_boxes":
        assert row["error"].startswith("output repaired: ") and "outside 0..999, clamped" in row["error"]
        by_text = {b["text"]: b for b in row["blocks"]}
        page = [0, 0, row["width"], row["height"]]
        assert by_text["# Out of range"]["boxes"] == [[int(120 / 999 * row["width"]), 0, row["width"], row["height"]]]
        assert len(by_text["A thousand boxes."]["boxes"]) == 64  # capped per block
        # Absurdly many figures: capped at 256 per page and at 4 page areas of pixels in all
        # (3 full-page boxes + 253 small ones); the two boxes without area are dropped.
        area = sum((x2 - x1) * (y2 - y1) for x1, y1, x2, y2 in (f["bbox"] for f in row["figures"]))
        assert len(row["figures"]) == 256 and area <= 4 * row["width"] * row["height"]
        assert [f["bbox"] for f in row["figures"][:3]] == [page] * 3
        assert all(f["image"] for f in row["figures"])  # every figure kept was cropped
        assert len(row["markdown"].split("](figure:")) - 1 == 256


def start_two_slot_extract(tmp_path: Path, server: SimulatedServer, *extra: str) -> subprocess.Popen[str]:
    """Extract of tmp_path/docs in the background, 2 pages in flight and no timed flush (so
    only a shutdown flushes rows), to be signalled by the test."""
    args = [
        sys.executable, "-m", "llm_ocr.cli", "extract", str(tmp_path / "docs"), "--output", str(tmp_path / "out"),
        "--endpoint", server.base_url, "--workers", "0", "--progress", "off", "--max-in-flight", "2",
        "--flush-interval", "600", *extra,
    ]  # fmt: skip
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)


def test_sigterm_flushes_completed_rows_exits_3_and_the_rerun_completes(tmp_path: Path) -> None:
    make_corpus(tmp_path / "docs", documents=8, pages=2)
    with SimulatedServer("--prefill-ms", "300", "--slots", "2", corpus=tmp_path / "docs") as server:
        # The fifth request is held: the run cannot finish before the signal, however slow the
        # machine; the grace period abandons it (the pages answered before it are flushed).
        held_at = hold_request(server, after=4)
        process = start_two_slot_extract(tmp_path, server, "--grace-period", "1")
        wait_until_held(server, held_at, process)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=HANG_GUARD_S)
        assert process.returncode == 3, stderr
        assert "stopping intake" in stderr
        # Nothing was flushed on the timer (600 s): these rows were flushed by the shutdown.
        saved = read_stage(tmp_path / "out", "extract")
        assert 2 <= len(saved) < 16 and {r["status"] for r in saved} == {"ok"}
        assert len(set(page_keys(saved))) == len(saved)
        (line,) = summary_lines(stderr)
        assert line["ok"] == len(saved) and line["left"] == line["seen"] - len(saved)
        assert not (tmp_path / "out/_state/extract/done-00000-of-00001.json").exists()
        rerun = extract([tmp_path / "docs"], tmp_path / "out", server)
        assert rerun.returncode == 0
    (line,) = summary_lines(rerun.stderr)
    assert (line["seen"], line["earlier"], line["ok"], line["left"]) == (16, len(saved), 16 - len(saved), 0)
    rows = read_stage(tmp_path / "out", "extract")
    assert page_keys(rows) == corpus_keys(8, 2)  # 16 pages, each exactly once


def test_sigterm_with_every_slot_hung_abandons_them_after_the_grace_period(tmp_path: Path) -> None:
    make_corpus(tmp_path / "docs", documents=8, pages=2)
    with SimulatedServer("--prefill-ms", "300", "--slots", "2", corpus=tmp_path / "docs") as server:
        # A request timeout beyond the test's own (300 s): a shutdown that waited for it instead
        # of the 1 s grace period fails the test, with no stopwatch for load to stretch.
        process = start_two_slot_extract(tmp_path, server, "--grace-period", "1", "--request-timeout", "3600")
        try:
            deadline = time.monotonic() + HANG_GUARD_S
            while server.stats().get("requests", 0) < 3:
                assert process.poll() is None and time.monotonic() < deadline
                time.sleep(0.02)
            # From now on every request hangs (a wedged server): both slots end up on one.
            server.inject("hang", count=100, seconds=600)
            while server.stats().get("faults_applied", {}).get("hang", 0) < 2:
                assert process.poll() is None and time.monotonic() < deadline
                time.sleep(0.02)
            sent = server.stats()["requests"]
            process.send_signal(signal.SIGTERM)
            _, stderr = process.communicate(timeout=HANG_GUARD_S)
        finally:
            if process.poll() is None:
                process.kill()
        assert process.returncode == 3, stderr
        assert "abandoned 2 page(s) still in flight after the 1s grace period" in stderr
        # Intake stopped at the signal: not one more page was sent.
        assert server.stats()["requests"] == sent
        saved = read_stage(tmp_path / "out", "extract")  # flushed at shutdown (timer: 600 s)
        assert len(saved) == sent - 2 and {r["status"] for r in saved} == {"ok"}
        (line,) = summary_lines(stderr)
        assert line["ok"] == len(saved) and line["left"] == line["seen"] - len(saved)
        server.clear_faults()
        assert extract([tmp_path / "docs"], tmp_path / "out", server).returncode == 0
    rows = read_stage(tmp_path / "out", "extract")
    assert page_keys(rows) == corpus_keys(8, 2)  # the abandoned pages were redone, nothing twice


def test_a_cut_off_part_is_detected_removed_and_redone(tmp_path: Path) -> None:
    make_corpus(tmp_path / "docs", documents=3, pages=2)
    with SimulatedServer(corpus=tmp_path / "docs") as server:
        assert extract([tmp_path / "docs"], tmp_path / "out", server, "--part-rows", "2").returncode == 0
        parts = sorted((tmp_path / "out/extract").glob("*.parquet"))
        assert len(parts) == 3
        # As if a store without atomic writes kept half a file, and the shard never finished.
        parts[1].write_bytes(parts[1].read_bytes()[:300])
        (tmp_path / "out/_state/extract/done-00000-of-00001.json").unlink()
        status = run_in_process("status", str(tmp_path / "out"))
        assert "unreadable parts: 1" in status.stdout
        result = extract([tmp_path / "docs"], tmp_path / "out", server)
        assert result.returncode == 0, result.stderr
        assert "unreadable part" in result.stderr
        assert len(server.requests()) == 6 + 2
    rows = read_stage(tmp_path / "out", "extract")
    assert page_keys(rows) == corpus_keys(3, 2)  # the cut part's 2 pages redone, each page once


def _hostile_corpus(folder: Path) -> dict[str, str]:
    """Hostile files and the message (or status) each must produce."""
    folder.mkdir(parents=True)
    make_pdf(folder / "good.pdf", pages=1)
    good = (folder / "good.pdf").read_bytes()
    (folder / "truncated.pdf").write_bytes(good[: len(good) // 2])
    (folder / "corrupt.pdf").write_bytes(b"%PDF-1.7\n" + os.urandom(2000) + b"\n%%EOF\n")
    (folder / "not-a-pdf.pdf").write_bytes(b"<html>an error page saved as .pdf</html>\n")
    (folder / "empty.pdf").write_bytes(b"")
    zero = pypdfium2.PdfDocument.new()
    zero.save(str(folder / "zero-pages.pdf"))
    from reportlab.pdfgen import canvas

    locked = canvas.Canvas(str(folder / "encrypted.pdf"), encrypt="s3cret")
    locked.drawString(72, 720, "hidden")
    locked.save()
    poster = pypdfium2.PdfDocument.new()
    poster.new_page(2384, 3370)  # A0 in points
    poster.save(str(folder / "a0-poster.pdf"))
    Image.new("1", (30000, 30000)).save(folder / "bomb.png", optimize=True)
    Image.new("CMYK", (400, 300), (0, 128, 255, 0)).save(folder / "cmyk.jpg")
    Image.new("I;16", (400, 300), 40000).save(folder / "sixteen-bit.png")
    Image.new("P", (400, 300), 3).save(folder / "palette.png")
    Image.new("RGBA", (400, 300), (10, 20, 30, 0)).save(folder / "alpha.png")
    frames = [Image.new("RGB", (200, 100), c) for c in ("red", "green", "blue")]
    frames[0].save(folder / "animated.gif", save_all=True, append_images=frames[1:], duration=100)
    (folder / "text.png").write_bytes(b"this is plain text, not a PNG at all\n" * 10)
    (folder / "name with spaces.png").write_bytes((REPO / "samples/notes.png").read_bytes())
    (folder / "ünïcødé-文件.png").write_bytes((REPO / "samples/notes.png").read_bytes())
    (folder / "..dots..png").write_bytes((REPO / "samples/notes.png").read_bytes())
    # The exact message of each bad file ("=" prefix: the whole message; otherwise its start),
    # or "ok" with the page size the model was sent.
    return {
        "good.pdf": "ok 1224x1584",
        "truncated.pdf": "=truncated PDF: it ends before its %%EOF trailer (an interrupted download or copy?)"
        " (PDFium: data format error)",
        "corrupt.pdf": "=corrupt PDF (PDFium: data format error)",
        "not-a-pdf.pdf": "=not a PDF: the file does not start with %PDF- (it starts with b'<html>an error p')"
        " (PDFium: data format error)",
        "empty.pdf": "=empty file (0 bytes)",
        "zero-pages.pdf": "=PDF has no pages",
        "encrypted.pdf": "=encrypted PDF: a password is required",
        "a0-poster.pdf": "ok 2911x4115",  # scaled down to the page-pixel budget
        "bomb.png": "=image is 30000x30000 = 900000000 pixels, over the limit of 120000000 (max_image_pixels); "
        "likely a decompression bomb",
        "cmyk.jpg": "ok 400x300",
        "sixteen-bit.png": "ok 400x300",
        "palette.png": "ok 400x300",
        "alpha.png": "ok 400x300",
        "animated.gif": "ok 200x100",  # the first frame is the page
        "text.png": "=not a readable image: no image format recognises the data",
        "name with spaces.png": "ok 1200x900",
        "ünïcødé-文件.png": "ok 1200x900",
        "..dots..png": "ok 1200x900",
    }


def test_hostile_corpus_runs_to_completion_with_specific_errors(tmp_path: Path) -> None:
    expected = _hostile_corpus(tmp_path / "hostile")
    with SimulatedServer() as server:
        result = extract([tmp_path / "hostile"], tmp_path / "out", server)
    assert result.returncode == 1, result.stderr
    rows = read_stage(tmp_path / "out", "extract")
    assert sorted(r["doc_id"] for r in rows) == sorted(expected)  # one row per file: none lost, none twice
    for row in rows:
        outcome = expected[row["doc_id"]]
        if outcome.startswith("ok"):
            got = f"{row['status']} {row['width']}x{row['height']}"
            assert got == outcome and row["page"] == 1 and row["error"] is None, (row["doc_id"], got, row["error"])
        else:
            message = row["error"] or ""
            specific = message == outcome[1:] if outcome.startswith("=") else message.startswith(outcome)
            assert row["status"] == "error" and row["page"] == 0 and specific, (row["doc_id"], message)
    poster = next(r for r in rows if r["doc_id"] == "a0-poster.pdf")
    assert poster["width"] * poster["height"] <= 12_000_000 and poster["height"] > 3000
    (line,) = summary_lines(result.stderr)
    assert (line["seen"], line["ok"], line["truncated"], line["error"], line["left"]) == (18, 10, 0, 8, 0)
    status = run_in_process("status", str(tmp_path / "out"), "--json")
    (extract_status,) = json.loads(status.stdout)
    assert extract_status["rows"] == len(expected) and extract_status["duplicates"] == 0
    assert extract_status["shards"] == {"00000-of-00001": {"ok": 10, "error": 8}}


def test_finevision_row_without_images_and_traversal_ids_stay_inside(tmp_path: Path) -> None:
    import datasets

    notes = (REPO / "samples/notes.png").read_bytes()
    inputs = tmp_path / "in"
    (inputs / "sub dir").mkdir(parents=True)
    for name in ("name with spaces.png", "ünïcødé-文件.png", "..dots..png", "sub dir/x..png"):
        (inputs / name).write_bytes(notes)
    ds = datasets.Dataset.from_dict(
        {"images": [[], [{"bytes": notes, "path": "../../escape.png"}]]},
        features=datasets.Features({"images": datasets.List(datasets.Image())}),
    )
    ds.to_parquet(str(tmp_path / "rows.parquet"))
    # Output and working directory nested, so that anything written "../.." of either (or
    # relative to the working directory at all) lands inside tmp_path, where it is seen.
    out, cwd = tmp_path / "o1/o2/out", tmp_path / "w1/w2/cwd"
    cwd.mkdir(parents=True)
    with SimulatedServer("--instant") as server:
        result = subprocess.run(
            [sys.executable, "-m", "llm_ocr.cli", "run", str(inputs), str(tmp_path / "rows.parquet"), "--output", str(out),
             "--endpoint", server.base_url, "--workers", "0", "--progress", "off", "--export-markdown"],
            capture_output=True, text=True, timeout=180, cwd=cwd, env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    assert result.returncode == 1, result.stderr  # the row without images is an error row
    rows = read_stage(out, "extract")
    assert sorted((r["doc_id"], r["page"], r["status"]) for r in rows) == [
        ("..dots..png", 1, "ok"), ("name with spaces.png", 1, "ok"), ("rows/default/train/00000000", 0, "error"),
        ("rows/default/train/00000001", 1, "ok"), ("sub dir/x..png", 1, "ok"), ("ünïcødé-文件.png", 1, "ok"),
    ]
    assert next(r for r in rows if r["page"] == 0)["error"] == "dataset row has no images"
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    outside = [p for p in written if not any(p.is_relative_to(root) for root in (inputs, out, tmp_path / "rows.parquet"))]
    assert outside == [] and not list(cwd.iterdir())
    assert not (tmp_path.parent / "escape.png").exists()
    exported = sorted(p.name for p in (out / "markdown").glob("*.md"))  # one per document, safe names
    assert len(exported) == 6 and all(re.fullmatch(r"[a-z0-9][a-z0-9._-]*\.md", n) for n in exported), exported


def test_planted_secrets_never_reach_logs_stats_or_outputs(tmp_path: Path) -> None:
    from tests.e2e.serving.test_managed_server_e2e import fake_env

    secret = "sk-PLANTED-secret-0123456789abcdef"
    make_pdf(tmp_path / "a.pdf", pages=1)
    runs = []
    with SimulatedServer(corpus=tmp_path / "a.pdf") as server:
        server.inject("error", count=1, status=503)
        runs.append(extract(  # secrets in the environment; progress lines; a retried fault
            [tmp_path / "a.pdf"], tmp_path / "out", server, "--progress-interval", "0.2",
            env={"LLM_OCR_API_KEY": secret, "HF_TOKEN": secret, "AWS_SECRET_ACCESS_KEY": secret},
        ))
        runs.append(run_cli("-v", "extract", str(tmp_path / "a.pdf"), "--output", str(tmp_path / "out2"),
                            "--endpoint", server.base_url, "--workers", "0", env={"LLM_OCR_API_KEY": secret}))
        # On the command line, and as credentials in the endpoint URL, through the error
        # messages of an endpoint that stops answering (they name the endpoint).
        with_credentials = server.base_url.replace("http://", f"http://user:{secret}@")
        runs.append(run_cli("-v", "extract", str(tmp_path / "a.pdf"), "--output", str(tmp_path / "out3"),
                            "--endpoint", with_credentials, "--api-key", secret, "--workers", "0", "--progress", "log",
                            "--progress-interval", "0.2"))
        server.inject("error", count=1000, status=503)
        runs.append(run_cli("extract", str(tmp_path / "a.pdf"), "--output", str(tmp_path / "out4"), "--endpoint",
                            with_credentials, "--api-key", secret, "--workers", "0", "--dead-after", "1",
                            "--backoff-base", "0.05"))
    # A launched server given a key: its logged command line and its log file (in OUT/_state),
    # where the fake vllm, like vLLM, prints the arguments it was started with.
    key_file = tmp_path / "server-key.sha256"
    runs.append(run_cli("extract", str(tmp_path / "a.pdf"), "--output", str(tmp_path / "out5"), "--engine", "vllm",
                        "--workers", "0", "--server-args", f"--api-key {secret} --enforce-eager",
                        env=fake_env(tmp_path, HF_TOKEN=secret, LLM_OCR_API_KEY=secret, FAKE_VLLM_API_KEY_FILE=str(key_file),
                                     FAKE_VLLM_SIM_ARGS=f"--corpus {tmp_path / 'a.pdf'}")))
    assert [r.returncode for r in runs] == [0, 0, 0, 2, 0], [r.stderr[-2000:] for r in runs]
    assert "endpoint http://***@127.0.0.1:" in runs[3].stderr  # the URL is named, masked
    # The server got the key (in its environment, not on its command line), yet printed nothing of it.
    assert key_file.read_text() == hashlib.sha256(secret.encode()).hexdigest()
    launch = next(line for line in runs[4].stderr.splitlines() if "starting vllm server" in line)
    assert "--enforce-eager" in launch and "--api-key" not in launch
    assert "non-default args" in (tmp_path / "out5/_state/logs/server-00000-of-00001.log").read_text()
    haystacks = [text for r in runs for text in (r.stdout, r.stderr)]
    for out in ("out", "out2", "out3", "out4", "out5"):
        for path in (tmp_path / out).rglob("*"):
            if path.is_file():
                haystacks.append(path.read_bytes().decode("latin-1"))
    assert not any(secret in text for text in haystacks)
    assert not any("PLANTED" in text for text in haystacks)
