"""No stragglers: shards as real CLI processes, each against its own simulated server, one of them
stuck, killed or frozen; the others read its page groups, and every page is written once
(docs/stragglers.md).

Each test waits for events (a request held by the simulator, a claim file, a process's exit),
never for a stretch of time: a shard is made slow by holding its requests, not by a slower
clock. Leases are short (2 s) where a test needs one to run out; waiting for that is waiting
for the lease's own event (the wall clock passing the claim's ``expires_at``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from llm_ocr.testing import SimulatedServer
from tests.conftest import REPO, run_cli
from tests.docs import make_corpus
from tests.waiting import hangs_applied, hold_request, wait_until, wait_until_held


def shard_command(docs: Path, out: Path, server: Any, shard: int, shards: int, *extra: str) -> list[str]:
    """``llm-ocr extract`` of one shard against ``server`` (its ``base_url``), in groups of 2
    documents unless ``extra`` says otherwise (a later flag wins)."""
    return [sys.executable, "-m", "llm_ocr.cli", "extract", str(docs), "--output", str(out), "--endpoint",
            server.base_url, "--workers", "0", "--progress", "log", "--num-shards", str(shards), "--shard-index",
            str(shard), "--group-docs", "2", *extra]


def start(command: list[str]) -> subprocess.Popen[str]:
    """A shard in the background, in a session of its own (signals reach it alone)."""
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(REPO),
                            start_new_session=True)


def finish(proc: subprocess.Popen[str], timeout: float = 300) -> tuple[int, str]:
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


def run_shard(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=str(REPO))


@contextmanager
def stuck_shard(server: Any, command: list[str]) -> Iterator[subprocess.Popen[str]]:
    """``command`` started against ``server``, which holds every request it sends until the shard
    goes away; yields once the first is held, and kills the shard at the end if it still runs."""
    held_at = hold_request(server, after=0, count=1000)
    shard = start(command)
    try:
        wait_until_held(server, held_at, process=shard)
        yield shard
    finally:
        if shard.poll() is None:
            os.killpg(shard.pid, signal.SIGKILL)


def begin_groups(out: Path, shards: int) -> None:
    """Begin ``out`` in work groups of 2 documents, as the first shard to start would: a shard
    started with ``--no-steal`` then claims its own groups (and takes no one else's)."""
    (out / "_state").mkdir(parents=True)
    (out / "_state" / f"groups-of-{shards:05d}.json").write_text(json.dumps({"num_shards": shards, "group_docs": 2}))


def rows(out: Path) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for path in sorted((out / "extract").glob("*.parquet")):
        found += pq.read_table(path, columns=["doc_id", "page", "status"]).to_pylist()
    return found


def assert_every_page_once(out: Path, docs: Path) -> None:
    keys = Counter((r["doc_id"], r["page"]) for r in rows(out))
    assert {k: n for k, n in keys.items() if n > 1} == {}, "pages written twice"
    assert sorted(keys) == sorted((p.name, 1) for p in docs.glob("*.pdf"))
    assert {r["status"] for r in rows(out)} == {"ok"}


def marker(out: Path, shard: int, shards: int) -> dict[str, Any]:
    return json.loads((out / "_state/extract" / f"done-{shard:05d}-of-{shards:05d}.json").read_text())


def claims(out: Path, shard: int, shards: int) -> list[Path]:
    return sorted((out / "_state/claims/extract" / f"{shard:05d}-of-{shards:05d}").glob("*.json"))


def readers(out: Path, shard: int, shards: int) -> Counter[int]:
    """Which shard read each done group of ``shard`` (its latest epoch's ``done`` record)."""
    latest: dict[str, Path] = {}
    for path in claims(out, shard, shards):
        if path.name.endswith(".done.json"):
            group = path.name.split("-")[0]
            if group not in latest or path.name > latest[group].name:
                latest[group] = path
    return Counter(json.loads(p.read_text())["by_shard"] for p in latest.values())


def test_a_stuck_shards_groups_are_read_by_the_others_then_its_rerun_reads_what_it_let_go(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    make_corpus(docs, documents=48, pages=1)  # 16 documents, 8 groups per shard
    out = tmp_path / "out"
    with SimulatedServer(corpus=docs) as stuck, SimulatedServer(corpus=docs) as fast:
        # Shard 2 reads nothing: every request it sends is held until it goes away. Its intake
        # claims the next group while its one slot reads the first, but only reserved: the others
        # take every group but the one whose page it sent.
        with stuck_shard(stuck, shard_command(docs, out, stuck, 2, 3, "--max-in-flight", "1",
                                              "--grace-period", "1")) as slow:
            for shard in (0, 1):  # no second reader of the one group it began: what it let go is the test
                done = run_shard(shard_command(docs, out, fast, shard, 3, "--no-second-readers"))
                assert done.returncode == 0, done.stderr[-3000:]
            taken = sum(marker(out, s, 3)["groups"]["taken_from_other_shards"].get("00002", 0) for s in (0, 1))
            assert taken == 7  # the others read every group of the stuck shard but the one it began
            assert marker(out, 0, 3)["groups"]["own_read_here"] == 8
            # SIGTERM: the stuck shard abandons its held requests and releases its groups.
            os.killpg(slow.pid, signal.SIGTERM)
            code, err = finish(slow)
            assert code == 3, err[-3000:]
        assert not (out / "_state/extract/done-00002-of-00003.json").exists()
        stuck.clear_faults()
        requests_before = len(fast.requests())
        again = run_shard(shard_command(docs, out, fast, 2, 3))
        assert again.returncode == 0, again.stderr[-3000:]
        # The rerun read only the groups it had let go: the others' groups were left alone.
        assert len(fast.requests()) - requests_before == 2 * (8 - taken)
    assert_every_page_once(out, docs)
    assert readers(out, 2, 3)[2] == 8 - taken
    assert marker(out, 2, 3)["groups"]["read_by_other_shards"] == {
        f"{s:05d}": n for s, n in sorted(readers(out, 2, 3).items()) if s != 2
    }
    status = run_cli("status", str(out))
    assert "shard 00002-of-00003: 8 done" in status.stdout, status.stdout
    # Everything is done: rerunning every shard sends nothing.
    with SimulatedServer(corpus=docs) as idle:
        for shard in range(3):
            assert run_shard(shard_command(docs, out, idle, shard, 3)).returncode == 0
        assert idle.requests() == []


def test_a_stuck_shards_started_group_is_read_beside_it_and_its_request_is_stopped(tmp_path: Path) -> None:
    """Second readers: every request of shard 1 is held for ever (it started first, and reserves
    and begins groups of shard 0 too). Shard 0 takes what is free or only reserved, and joins each
    group shard 1 began as its second reader and stores its page; shard 1 sees the page stored,
    stops its request (the simulator sees its client leave), ends the group, and begins its next,
    until nothing is left: both exit 0 with their completion markers, no rerun needed."""
    docs = tmp_path / "docs"
    make_corpus(docs, documents=4, pages=1)  # 2 documents a shard, groups of one
    out = tmp_path / "out"
    with SimulatedServer(corpus=docs) as stuck, SimulatedServer(corpus=docs) as fast:
        with stuck_shard(stuck, shard_command(docs, out, stuck, 1, 2, "--max-in-flight", "1", "--group-docs", "1")) as slow:
            done = run_shard(shard_command(docs, out, fast, 0, 2, "--group-docs", "1"))
            assert done.returncode == 0, done.stderr[-3000:]
            code, err = finish(slow)
            assert code == 0, err[-3000:]
        # Each request shard 1 stopped is a page it left to the other reader; the simulator logs
        # a held request once it notices its client gone.
        left = marker(out, 1, 2)["groups"]["second_reader"]["pages_left_to_the_other_reader"]
        wait_until(lambda: len(stuck.requests()) >= left, "the simulator logged every request shard 1 stopped")
        assert left >= 1 and [r["outcome"] for r in stuck.requests()] == ["hang"] * left  # none answered
    assert_every_page_once(out, docs)
    # Shard 0 joined each group shard 1 began and read its page; shard 1 ended each itself.
    second = marker(out, 0, 2)["groups"]["second_reader"]
    assert second["groups_joined"] == second["pages_sent"] == left
    assert readers(out, 0, 2)[1] + readers(out, 1, 2)[1] == left


def test_a_killed_shards_groups_are_finished_by_the_others_once_its_lease_runs_out(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    make_corpus(docs, documents=24, pages=1)  # 8 documents, 4 groups per shard
    out = tmp_path / "out"
    begin_groups(out, 3)
    with SimulatedServer(corpus=docs) as held, SimulatedServer(corpus=docs) as fast:
        held_at = hold_request(held, after=0, count=1000)
        victim = start(shard_command(docs, out, held, 2, 3, "--lease", "2", "--max-in-flight", "1", "--no-steal"))
        try:
            wait_until_held(held, held_at, process=victim)
            wait_until(lambda: claims(out, 2, 3), "the shard claimed a group", process=victim)
        finally:
            os.killpg(victim.pid, signal.SIGKILL)  # no release: its end (seen on this machine) or the lease frees its groups
            victim.wait()
        expiry = max(json.loads(p.read_text())["expires_at"] for p in claims(out, 2, 3) if p.name.count(".") == 1)
        wait_until(lambda: time.time() > expiry + 0.5, "the dead shard's lease ran out")
        for shard in (0, 1):
            done = run_shard(shard_command(docs, out, fast, shard, 3))
            assert done.returncode == 0, done.stderr[-3000:]
        assert_every_page_once(out, docs)
        assert readers(out, 2, 3)[2] == 0 and sum(readers(out, 2, 3).values()) == 4
        # The dead shard's rerun finds every group done: it sends nothing and marks the shard.
        requests_before = len(fast.requests())
        again = run_shard(shard_command(docs, out, fast, 2, 3))
        assert again.returncode == 0, again.stderr[-3000:]
        assert len(fast.requests()) == requests_before
    assert marker(out, 2, 3)["groups"]["own_found_done"] == 4


def test_a_lease_that_runs_out_while_its_holder_lives_costs_work_never_a_second_row(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    make_corpus(docs, documents=4, pages=1)  # shard 1: documents 1 and 3, one group of 2
    out = tmp_path / "out"
    begin_groups(out, 2)
    with SimulatedServer(corpus=docs) as slow_server, SimulatedServer(corpus=docs) as fast:
        # Shard 1's answers come 6 s after each request: it is frozen (SIGSTOP) meanwhile, so
        # it cannot renew its claim, and its lease runs out while it is alive. (6 s: both
        # requests must be out, and neither answered, when the freeze lands, on a busy machine too.)
        slow_server.inject("hang", count=1000, seconds=6)
        frozen = start(shard_command(docs, out, slow_server, 1, 2, "--lease", "2", "--no-steal"))
        try:
            # Both of its pages sent before the freeze (its two rows are the ones left out below):
            # on a loaded machine the second request could still be on its way after the first.
            wait_until(lambda: hangs_applied(slow_server) >= 2, "shard 1 sent both its requests", process=frozen)
            os.kill(frozen.pid, signal.SIGSTOP)
            expiry = max(json.loads(p.read_text())["expires_at"] for p in claims(out, 1, 2)
                         if p.name.count(".") == 1)
            wait_until(lambda: time.time() > expiry + 0.5, "shard 1's lease ran out")
            # Shard 0 reads its own group, then takes shard 1's (its lease ran out) and reads it.
            thief = run_shard(shard_command(docs, out, fast, 0, 2))
            assert thief.returncode == 0, thief.stderr[-3000:]
            assert marker(out, 0, 2)["groups"]["taken_from_other_shards"] == {"00001": 1}
            assert_every_page_once(out, docs)
            # Shard 1 wakes up, gets its answers and stores them: the group's parts hold those
            # pages already, so its rows are left out; it sees its claim was taken over.
            os.kill(frozen.pid, signal.SIGCONT)
            code, err = finish(frozen)
        finally:
            if frozen.poll() is None:
                os.kill(frozen.pid, signal.SIGCONT)
                os.killpg(frozen.pid, signal.SIGKILL)
    assert code == 0, err[-3000:]
    assert_every_page_once(out, docs)
    assert marker(out, 1, 2)["groups"]["rows_already_written"] == 2
    assert "taken over" in err


def test_errors_in_groups_another_shard_read_are_retried_by_their_owner_and_a_shard_left_nothing_opens_no_endpoint(
    tmp_path: Path,
) -> None:
    docs = tmp_path / "docs"
    make_corpus(docs, documents=4, pages=1)  # shard 0: documents 0 and 2; shard 1: 1 and 3
    out = tmp_path / "out"
    with SimulatedServer(corpus=docs) as server:
        # Shard 0 reads its own two pages, then shard 1's two (no one else is running): the
        # server refuses those two for good (HTTP 400), so they get error rows.
        server.inject("hang", count=2, seconds=0)
        server.inject("error", count=2, status=400)
        # In input order (--look-ahead 0): longest first could send a claimed page of shard 1
        # before shard 0's own second page, and the faults would land on other pages.
        first = run_shard(shard_command(docs, out, server, 0, 2, "--group-docs", "1", "--max-in-flight", "1",
                                        "--look-ahead", "0"))
        assert first.returncode == 1, first.stderr[-3000:]  # pages failed (shard 1's)
        assert marker(out, 0, 2)["groups"]["taken_from_other_shards"] == {"00001": 2}
        # Shard 1's run retries them: its groups were done by another shard, with error rows.
        before = len(server.requests())
        owner = run_shard(shard_command(docs, out, server, 1, 2, "--group-docs", "1"))
        assert owner.returncode == 0, owner.stderr[-3000:]
        assert len(server.requests()) - before == 2
    assert_every_page_once(out, docs)
    # Shard 0's marker recorded the failed pages it read, so its rerun is not settled by it; every
    # group is done and no other shard has one free: it ends without opening its endpoint.
    again = run_shard(shard_command(docs, out, _Dead(), 0, 2, "--group-docs", "1", "--dead-after", "5"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "no endpoint opened" in again.stderr
    # It still ends with its accounting line, as every run does (a platform's log shows the end).
    assert "[extract shard 1/2] pages seen 0 = ok 0" in again.stderr, again.stderr[-3000:]


class _Dead:
    """An endpoint nothing listens on (port 9, discard): a run that opened it would fail."""

    base_url = "http://127.0.0.1:9/v1"


def test_a_shard_whose_groups_another_shard_failed_is_not_marked_clean_and_its_rerun_retries_them(
    tmp_path: Path,
) -> None:
    docs = tmp_path / "docs"
    make_corpus(docs, documents=16, pages=1)  # 8 documents each, groups of 1
    out = tmp_path / "out"
    with SimulatedServer(corpus=docs) as slow_server, SimulatedServer(corpus=docs) as fast:
        # Shard 1 claims its first groups and is frozen while they are read (its lease holds);
        # shard 0 reads its own pages, then shard 1's free groups, and one of those fails for good.
        slow_server.inject("hang", count=1000, seconds=2)
        owner = start(shard_command(docs, out, slow_server, 1, 2, "--group-docs", "1", "--max-in-flight", "1"))
        try:
            wait_until(lambda: hangs_applied(slow_server) >= 1, "shard 1 sent a request", process=owner)
            os.kill(owner.pid, signal.SIGSTOP)
            fast.inject("hang", count=8, seconds=0)
            fast.inject("error", count=1, status=400)
            # In input order (--look-ahead 0), so that the failure lands on a page of shard 1.
            thief = run_shard(shard_command(docs, out, fast, 0, 2, "--group-docs", "1", "--max-in-flight", "1",
                                            "--look-ahead", "0"))
            assert thief.returncode == 1, thief.stderr[-3000:]
            os.kill(owner.pid, signal.SIGCONT)
            code, err = finish(owner)
        finally:
            if owner.poll() is None:
                os.kill(owner.pid, signal.SIGCONT)
                os.killpg(owner.pid, signal.SIGKILL)
        # Shard 1's own pages were fine, but one of its groups holds an error row another shard
        # wrote: its marker says so and it exits 1, as it would with an error row of its own.
        assert code == 1, err[-3000:]
        assert marker(out, 1, 2)["pages"]["error_read_elsewhere"] == 1
        before = len(fast.requests())
        again = run_shard(shard_command(docs, out, fast, 1, 2, "--group-docs", "1"))
        assert again.returncode == 0, again.stderr[-3000:]
        assert len(fast.requests()) - before == 1  # the rerun retried that page
    assert_every_page_once(out, docs)
