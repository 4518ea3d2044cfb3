"""Each distinct document and each distinct page read once (docs/dedup.md), counted in the
simulator's requests: a byte-identical copy of a document, and pages whose images are pixel for
pixel alike (blank pages), cost no request, yet every document has all its rows, each copy
naming what it copies; a rerun on an overlapping collection reads only what is new."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from reportlab.pdfgen import canvas

import llm_ocr
from llm_ocr.testing import SimulatedServer
from tests.conftest import read_stage
from tests.stages.common import DESCRIBE_PROMPT, bodies, prompt_of

FAST = {"workers": 0, "progress": "off"}


def pdf(path: Path, pages: list[str], shifted: bool = False) -> None:
    """A PDF whose pages say ``pages`` (an empty string: a blank page). ``shifted``: the same
    pages drawn 100 pt right and up on a larger sheet, shown through a CropBox moved as far, so
    they render pixel for pixel alike but their boxes in PDF points differ."""
    sheet = canvas.Canvas(str(path), pagesize=(500, 600) if shifted else (300, 400), invariant=1)
    for text in pages:
        if shifted:
            sheet.setCropBox((100, 100, 400, 500))
            sheet.translate(100, 100)
        if text:
            sheet.setFont("Helvetica", 18)
            sheet.drawString(30, 330, text)
        sheet.showPage()
    sheet.save()


@pytest.fixture(scope="module")
def server() -> SimulatedServer:
    with SimulatedServer("--instant") as sim:
        yield sim


def _images(body: object) -> list[str]:
    """The digests of a logged request's images (the log keeps a digest, not the image)."""
    if isinstance(body, dict):
        if "sha256" in body:
            return [str(body["sha256"])[:12]]
        return [d for v in body.values() for d in _images(v)]
    if isinstance(body, list):
        return [d for v in body for d in _images(v)]
    return []


def rows_by_page(out: Path) -> dict[tuple[str, int], dict]:
    return {(r["doc_id"], r["page"]): r for r in read_stage(out, "extract")}


def test_duplicate_documents_and_pages_are_read_once_and_a_rerun_reads_only_what_is_new(
        server: SimulatedServer, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    pdf(docs / "a.pdf", ["Alpha report", "", ""])  # two blank pages
    pdf(docs / "b.pdf", ["Beta memo", ""])  # a third blank page
    shutil.copy(docs / "a.pdf", docs / "c.pdf")  # the same bytes under another name
    out = tmp_path / "out"

    started = time.time()
    result = llm_ocr.extract([docs], out, endpoint=server.base_url, **FAST)
    # Distinct pages: Alpha, Beta and the blank page.
    assert len(server.requests(since=started)) == 3
    assert result.exit_code == 0 and result.pages["ok"] == 8
    rows = rows_by_page(out)
    assert sorted(rows) == [("a.pdf", 1), ("a.pdf", 2), ("a.pdf", 3), ("b.pdf", 1), ("b.pdf", 2),
                            ("c.pdf", 1), ("c.pdf", 2), ("c.pdf", 3)]
    # Documents are read ahead: either of the two copies may be the one read.
    first, copy = ("a.pdf", "c.pdf") if rows[("c.pdf", 1)]["duplicate_of"] else ("c.pdf", "a.pdf")
    read = sorted(k for k, r in rows.items() if r["duplicate_of"] is None)
    blanks = [(first, 2), (first, 3), ("b.pdf", 2)]
    (blank,) = set(read) & set(blanks)  # which blank page goes first is the flow's order too
    assert read == sorted([(first, 1), ("b.pdf", 1), blank])
    for page in (1, 2, 3):  # the copy: the first's rows, page for page
        copied, original = rows[(copy, page)], rows[(first, page)]
        assert (copied["duplicate_of"], copied["duplicate_page"]) == (first, page)
        assert copied["markdown"] == original["markdown"] and copied["num_pages"] == 3
        assert copied["completion_tokens"] is None  # no request of its own
    for other in set(blanks) - {blank}:  # the other blank pages: the first blank page's reading
        assert (rows[other]["duplicate_of"], rows[other]["duplicate_page"]) == blank
        assert rows[other]["markdown"] == rows[blank]["markdown"]
    assert rows[(first, 1)]["markdown"] != rows[blank]["markdown"]

    # The same OUT again, its run not finished (no completion marker) and the folder grown: a.pdf
    # under a third name, and a new document. Only the new one's page is read: OUT's hash
    # records say where a.pdf's reading is.
    for marker in (out / "_state" / "extract").glob("done-*.json"):
        marker.unlink()
    shutil.copy(docs / "a.pdf", docs / "f.pdf")
    pdf(docs / "g.pdf", ["Delta note"])
    started = time.time()
    assert llm_ocr.extract([docs], out, endpoint=server.base_url, **FAST).exit_code == 0
    assert len(server.requests(since=started)) == 1
    grown = rows_by_page(out)
    assert [grown[("f.pdf", p)]["duplicate_of"] for p in (1, 2, 3)] == [first] * 3
    assert grown[("g.pdf", 1)]["duplicate_of"] is None and len(grown) == 12

    # A later run on an overlapping collection (a finished OUT takes no new INPUT, so into a new
    # one, naming what the first read): a.pdf again under a new name, and one new document. Only
    # the new one's page is read; the copy's rows are read from the first OUT.
    second = tmp_path / "second"
    second.mkdir()
    shutil.copy(docs / "a.pdf", second / "d.pdf")
    pdf(second / "e.pdf", ["Gamma letter"])
    started = time.time()
    again = llm_ocr.extract([second], tmp_path / "out2", endpoint=server.base_url,
                            dedup_index=str(out / "_state" / "hashes"), **FAST)
    assert again.exit_code == 0 and again.pages["ok"] == 4
    assert len(server.requests(since=started)) == 1
    later = rows_by_page(tmp_path / "out2")
    assert [later[("d.pdf", p)]["duplicate_of"] for p in (1, 2, 3)] == [first] * 3
    assert [later[("d.pdf", p)]["markdown"] for p in (1, 2, 3)] == [rows[(first, p)]["markdown"] for p in (1, 2, 3)]
    assert later[("e.pdf", 1)]["duplicate_of"] is None


def test_with_dedup_off_every_page_is_read(server: SimulatedServer, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    pdf(docs / "a.pdf", ["Alpha", ""])
    shutil.copy(docs / "a.pdf", docs / "c.pdf")
    started = time.time()
    llm_ocr.extract([docs], tmp_path / "out", endpoint=server.base_url, dedup=False, **FAST)
    assert len(server.requests(since=started)) == 4


def test_run_copies_both_stages_rows(server: SimulatedServer, tmp_path: Path) -> None:
    # llm-ocr run writes Extract and Describe rows: a copied document gets both, and assembles.
    docs = tmp_path / "docs"
    docs.mkdir()
    pdf(docs / "a.pdf", ["Alpha", "", ""])
    shutil.copy(docs / "a.pdf", docs / "c.pdf")
    started = time.time()
    result = llm_ocr.run(docs, tmp_path / "out", endpoint=server.base_url, **FAST)
    prompts = [prompt_of(b) for b in bodies(server, since=started)]
    described = {(r["doc_id"], r["page"]): r for r in read_stage(tmp_path / "out", "describe")}
    figures = sum(len(r["figures"]) for r in described.values() if not r["duplicate_of"])  # the simulator's
    assert prompts.count(DESCRIBE_PROMPT) == figures and len(prompts) - figures == 2  # Alpha, and the blank page
    assert result.exit_code == 0 and result.documents["ok"] == 2
    assert sorted(described) == [(d, p) for d in ("a.pdf", "c.pdf") for p in (1, 2, 3)]
    # Documents are read ahead, so either may be the one read.
    first, copy = ("a.pdf", "c.pdf") if described[("c.pdf", 1)]["duplicate_of"] else ("c.pdf", "a.pdf")
    assert [(described[(copy, p)]["duplicate_of"], described[(copy, p)]["duplicate_page"]) for p in (1, 2, 3)] \
        == [(first, 1), (first, 2), (first, 3)]
    assert sorted(described[(first, p)]["duplicate_page"] or 0 for p in (2, 3)) in ([0, 2], [0, 3])  # a blank copied
    assert described[(copy, 1)]["figures"] == described[(first, 1)]["figures"]


def test_a_manifest_s_sha256_decides_without_hashing(server: SimulatedServer, tmp_path: Path) -> None:
    # The manifest's hashes are taken as given: two different files said to be the same bytes
    # are read once (which is why a wrong hash is the user's to avoid), and a hash that is not
    # one is the row's error.
    pdf(tmp_path / "a.pdf", ["Alpha"])
    pdf(tmp_path / "b.pdf", ["Beta"])
    digest = "ab" * 32
    (tmp_path / "m.jsonl").write_text(f'{{"url": "a.pdf", "sha256": "{digest}"}}\n'
                                      f'{{"url": "b.pdf", "sha256": "{digest.upper()}"}}\n'
                                      '{"url": "a.pdf", "id": "bad", "sha256": "xyz"}\n')
    started = time.time()
    llm_ocr.extract([tmp_path / "m.jsonl"], tmp_path / "out", endpoint=server.base_url, **FAST)
    assert len(server.requests(since=started)) == 1
    rows = rows_by_page(tmp_path / "out")
    read, copy = ("a.pdf", "b.pdf") if rows[("b.pdf", 1)]["duplicate_of"] else ("b.pdf", "a.pdf")
    assert rows[(copy, 1)]["duplicate_of"] == read and rows[(copy, 1)]["markdown"] == rows[(read, 1)]["markdown"]
    assert rows[("bad", 0)]["error"] == "manifest row 2: sha256 'xyz' is not 64 hex digits"


def test_a_copy_of_a_failed_reading_is_read_and_a_moved_out_is_not_its_own_copy(tmp_path: Path) -> None:
    """A document whose first reading failed is read again, not copied as an error; an OUT copied
    elsewhere and rerun retries its own failed page, not as a copy of itself (its hash records
    name the folder it was first written in)."""
    docs = tmp_path / "docs"
    docs.mkdir()
    pdf(docs / "a.pdf", ["Alpha report"])
    shutil.copy(docs / "a.pdf", docs / "b.pdf")
    out = tmp_path / "out"
    with SimulatedServer("--instant") as sim:
        sim.inject("error", count=1, status=400)  # the first request: the first copy's one page
        result = llm_ocr.extract([docs], out, endpoint=sim.base_url, max_in_flight=1, **FAST)
        rows = rows_by_page(out)
        assert sorted(r["status"] for r in rows.values()) == ["error", "ok"], rows
        (read,) = [r for r in rows.values() if r["status"] == "ok"]
        assert read["duplicate_of"] is None  # read itself, not a copy of the failed reading
        assert result.exit_code == 1
        moved = tmp_path / "moved"
        shutil.copytree(out, moved)
        llm_ocr.extract([docs], moved, endpoint=sim.base_url, **FAST)
    again = rows_by_page(moved)
    assert sorted(r["status"] for r in again.values()) == ["ok", "ok"]
    assert all(r["duplicate_of"] in (None, "a.pdf", "b.pdf") and r["duplicate_of"] != k[0] for k, r in again.items())


# -- across the shards of a run read in work groups (llm_ocr.runners.shared_dedup) ----------------


@pytest.fixture
def quick_looks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy waiting for its first is looked at again often (the looks decide from storage;
    their pace only sets how soon)."""
    from llm_ocr.runners import shared_dedup

    monkeypatch.setattr(shared_dedup, "POLL_SECONDS", 0.05)


def shard_of(docs: Path, num_shards: int) -> dict[str, int]:
    from llm_ocr.sources import plan_inputs

    plan = plan_inputs([str(docs)])
    return {ref.doc_id: s for s in range(num_shards) for ref in plan.documents(num_shards, s)}


def begin_work_groups(out: Path, docs: Path, folders: list[str]) -> None:
    """Record OUT's work groups of one document for two shards, as the first shard to start
    does (a shard run with ``steal=False`` then reads its own groups only)."""
    from llm_ocr.options import StealOptions
    from llm_ocr.runners.groups import resolve_layout
    from llm_ocr.sources import plan_inputs
    from llm_ocr.storage import Storage

    layout = resolve_layout(Storage(str(out)), plan_inputs([str(docs)]), False, 2, StealOptions(group_docs=1), folders)
    assert layout is not None and layout.group_docs == 1


def test_copies_in_different_shards_read_side_by_side_are_read_once(
        server: SimulatedServer, tmp_path: Path, quick_looks: None) -> None:
    import threading

    docs = tmp_path / "docs"
    docs.mkdir()
    pdf(docs / "a.pdf", ["Alpha report", "", ""])  # two blank pages
    pdf(docs / "c.pdf", ["Beta memo"])
    pdf(docs / "d.pdf", ["Delta note"])
    for copy, of in (("b.pdf", "a.pdf"), ("e.pdf", "c.pdf"), ("f.pdf", "a.pdf")):
        shutil.copy(docs / of, docs / copy)
    shards = shard_of(docs, 3)  # every copy in a shard of its own
    assert len({shards[d] for d in ("a.pdf", "b.pdf", "f.pdf")}) == 3 and shards["c.pdf"] != shards["e.pdf"]
    out = tmp_path / "out"
    started = time.time()  # requests counted by arrival (SimulatedServer.requests; r100, at load 12)
    results: dict[int, object] = {}

    def shard(index: int) -> None:  # each shard its own process as far as the run can tell: its own loop
        # No second readers: a shard left with nothing to take reads a slow group's pages in flight
        # again, by design (docs/stragglers.md); under load that was the fifth request (r100, r106,
        # r118: the logs said "reading group 0 of shard 2 beside its holder"), not a copy read twice.
        results[index] = llm_ocr.extract([docs], out, endpoint=server.base_url, num_shards=3, shard_index=index,
                                         group_docs=1, second_readers=False, **FAST)

    threads = [threading.Thread(target=shard, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(240)
    assert [getattr(results.get(i), "exit_code", None) for i in range(3)] == [0, 0, 0]
    # Distinct pages: Alpha, Beta, Delta and the blank page.
    sent = server.requests(since=started)
    rows = rows_by_page(out)
    # Say which image went twice and which rows were read, in full (an assertion's message is cut
    # short): a page read twice and a request no row kept look alike in a count.
    if len(sent) != 4:
        requests = [(round(r["time"] - started, 3), r["outcome"], _images(r.get("body"))) for r in sent]
        readings = sorted((key, r["completion_tokens"], r["duplicate_of"], r["duplicate_page"]) for key, r in rows.items())
        pytest.fail(f"{len(sent)} requests, 4 expected\nrequests (s after the start, outcome, images):\n"
                    + "\n".join(map(str, requests)) + "\nrows ((doc, page), completion tokens, duplicate of, its page):\n"
                    + "\n".join(map(str, readings)), pytrace=False)
    assert sorted(rows) == sorted([(d, p) for d in ("a.pdf", "b.pdf", "f.pdf") for p in (1, 2, 3)]
                                  + [(d, 1) for d in ("c.pdf", "d.pdf", "e.pdf")])
    for family in (("a.pdf", "b.pdf", "f.pdf"), ("c.pdf", "e.pdf")):
        (first,) = [d for d in family if rows[(d, 1)]["duplicate_of"] is None]
        for copy in set(family) - {first}:  # every copy names the first, and holds its text
            assert rows[(copy, 1)]["duplicate_of"] == first and rows[(copy, 1)]["completion_tokens"] is None
            assert rows[(copy, 1)]["markdown"] == rows[(first, 1)]["markdown"]
    assert sum(r["completion_tokens"] is not None for r in rows.values()) == 4

    # A later run in work groups on an overlapping collection, naming what this one read: only
    # the new document's page is read; the copy's rows come from the first OUT.
    later = tmp_path / "later"
    later.mkdir()
    shutil.copy(docs / "a.pdf", later / "g.pdf")
    pdf(later / "h.pdf", ["Gamma letter"])
    started = time.time()
    for index in (0, 1):  # shard 0 reads both groups (its own, then shard 1's); shard 1 finds them done
        again = llm_ocr.extract([later], tmp_path / "out2", endpoint=server.base_url, num_shards=2,
                                shard_index=index, group_docs=1, dedup_index=str(out / "_state" / "hashes"), **FAST)
        assert again.exit_code == 0
    assert len(server.requests(since=started)) == 1
    grown = rows_by_page(tmp_path / "out2")
    (first,) = [d for d in ("a.pdf", "b.pdf", "f.pdf") if rows[(d, 1)]["duplicate_of"] is None]
    assert [grown[("g.pdf", p)]["duplicate_of"] for p in (1, 2, 3)] == [first] * 3
    assert grown[("h.pdf", 1)]["duplicate_of"] is None and len(grown) == 4


def died_holding_a_pdf(docs: Path, out: Path) -> tuple[Any, Any]:
    """What a shard 0 of 2 that died leaves: the work-group record, and a started claim on the
    group holding a.pdf whose lease has run out (written with a clock an hour back). Returns the
    store and that group."""
    import time

    from llm_ocr.sources import plan_inputs
    from llm_ocr.storage import Storage
    from llm_ocr.storage.claims import ClaimBook, GroupId

    store = Storage(str(out))
    begin_work_groups(out, docs, ["extract"])
    group = GroupId(0, 2, [r.doc_id for r in plan_inputs([str(docs)]).documents(2, 0)].index("a.pdf"))
    dead = ClaimBook(store, "extract", 2, holder="dead", shard=0, lease=60, clock=lambda: time.time() - 3600)
    assert dead.take(group, None) is not None
    return store, group


def test_a_copy_whose_first_was_claimed_by_a_shard_that_died_is_read_once(
        server: SimulatedServer, tmp_path: Path, quick_looks: None) -> None:
    """Shard 0 claimed the group holding a.pdf and a.pdf's hash, then died (its lease ran out)
    before storing a row. Shard 1 finds the group free, names its own copy (b.pdf) the first and
    reads it; shard 0's rerun then copies a.pdf from it: one reading of those bytes in all."""
    from llm_ocr.sources.fingerprint import file_sha256
    from llm_ocr.storage.hash_claims import HashClaims

    docs = tmp_path / "docs"
    docs.mkdir()
    pdf(docs / "a.pdf", ["Alpha report", ""])
    shutil.copy(docs / "a.pdf", docs / "b.pdf")
    pdf(docs / "c.pdf", ["Beta memo"])
    pdf(docs / "d.pdf", ["Delta note"])
    shards = shard_of(docs, 2)
    assert shards["a.pdf"] == 0 and shards["b.pdf"] == 1
    out = tmp_path / "out"
    # What shard 0 left: a started claim on a.pdf's group whose lease has run out, and a.pdf
    # named the first of its bytes.
    store, group = died_holding_a_pdf(docs, out)
    HashClaims(store, "extract", "dead").claim(file_sha256(str(docs / "a.pdf")), "a.pdf", group)

    started = time.time()
    one = llm_ocr.extract([docs], out, endpoint=server.base_url, num_shards=2, shard_index=1, steal=False, **FAST)
    zero = llm_ocr.extract([docs], out, endpoint=server.base_url, num_shards=2, shard_index=0, **FAST)
    assert (one.exit_code, zero.exit_code) == (0, 0)
    # Distinct pages: Alpha, the blank page, Beta, Delta; the copy's two pages were read once.
    assert len(server.requests(since=started)) == 4
    rows = rows_by_page(out)
    assert sorted(rows) == [("a.pdf", 1), ("a.pdf", 2), ("b.pdf", 1), ("b.pdf", 2), ("c.pdf", 1), ("d.pdf", 1)]
    assert [rows[("b.pdf", p)]["duplicate_of"] for p in (1, 2)] == [None, None]  # read by shard 1
    assert [(rows[("a.pdf", p)]["duplicate_of"], rows[("a.pdf", p)]["duplicate_page"]) for p in (1, 2)] \
        == [("b.pdf", 1), ("b.pdf", 2)]
    assert rows[("a.pdf", 1)]["markdown"] == rows[("b.pdf", 1)]["markdown"]


def test_run_in_work_groups_copies_both_stages_rows_from_another_shard(
        server: SimulatedServer, tmp_path: Path, quick_looks: None) -> None:
    # llm-ocr run in work groups: shard 1 reads b.pdf (its hash's first), shard 0 then finds its
    # a.pdf claimed by it and copies its Extract and Describe rows: no request of its own.
    docs = tmp_path / "docs"
    docs.mkdir()
    pdf(docs / "a.pdf", ["Alpha report"])
    shutil.copy(docs / "a.pdf", docs / "b.pdf")
    assert shard_of(docs, 2) == {"a.pdf": 0, "b.pdf": 1}
    out = tmp_path / "out"
    begin_work_groups(out, docs, ["extract", "describe"])  # so that shard 1 alone reads its own groups
    started = time.time()
    one = llm_ocr.run(docs, out, endpoint=server.base_url, num_shards=2, shard_index=1, steal=False, **FAST)
    second = time.time()
    zero = llm_ocr.run(docs, out, endpoint=server.base_url, num_shards=2, shard_index=0, **FAST)
    assert (one.exit_code, zero.exit_code) == (0, 0)
    assert server.requests(since=started) and not server.requests(since=second)  # shard 0 sent nothing
    for stage in ("extract", "describe"):
        rows = {(r["doc_id"], r["page"]): r for r in read_stage(out, stage)}
        assert sorted(rows) == [("a.pdf", 1), ("b.pdf", 1)]
        assert (rows[("a.pdf", 1)]["duplicate_of"], rows[("b.pdf", 1)]["duplicate_of"]) == ("b.pdf", None)
    described = {r["doc_id"]: r for r in read_stage(out, "describe")}
    assert described["a.pdf"]["figures"] == described["b.pdf"]["figures"]


def test_two_groups_each_holding_the_others_first_both_end(
        server: SimulatedServer, tmp_path: Path, quick_looks: None) -> None:
    """Shard 0's one group holds a.pdf (Alpha's first) and c.pdf (a copy of Beta); shard 1's
    holds b.pdf (Beta's first) and d.pdf (a copy of Alpha). Each copy keeps its group open, so
    the firsts' rows must be stored before their groups end (with parts written only every hour,
    the shards would wait on each other for that hour)."""
    import threading

    from llm_ocr.sources.fingerprint import file_sha256
    from llm_ocr.storage import Storage
    from llm_ocr.storage.claims import GroupId
    from llm_ocr.storage.hash_claims import HashClaims

    docs = tmp_path / "docs"
    docs.mkdir()
    pdf(docs / "a.pdf", ["Alpha report"])
    pdf(docs / "b.pdf", ["Beta memo"])
    shutil.copy(docs / "b.pdf", docs / "c.pdf")
    shutil.copy(docs / "a.pdf", docs / "d.pdf")
    assert shard_of(docs, 2) == {"a.pdf": 0, "c.pdf": 0, "b.pdf": 1, "d.pdf": 1}
    out = tmp_path / "out"
    # Which copy each shard reaches first is the machine's: the claims they would make are made
    # here, so that each group holds the other's first.
    claims = HashClaims(Storage(str(out)), "extract", "test")
    claims.claim(file_sha256(str(docs / "a.pdf")), "a.pdf", GroupId(0, 2, 0))
    claims.claim(file_sha256(str(docs / "b.pdf")), "b.pdf", GroupId(1, 2, 0))
    started = time.time()
    results: dict[int, object] = {}

    def shard(index: int) -> None:
        results[index] = llm_ocr.extract([docs], out, endpoint=server.base_url, num_shards=2, shard_index=index,
                                         group_docs=2, steal=True, flush_interval=3600, second_readers=False,
                                         **FAST)  # a second reader's requests are not copies read twice

    threads = [threading.Thread(target=shard, args=(i,), daemon=True) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)  # a bound on a hang, not a wait: they end in about a second
    assert [getattr(results.get(i), "exit_code", None) for i in range(2)] == [0, 0]
    assert len(server.requests(since=started)) == 2
    rows = rows_by_page(out)
    # Each pair read once, its other copy pointing at it. Which of a pair is read is the machine's:
    # a copy that finds its first's group not yet taken (that shard's thread not started, as
    # under load) takes the first's place (HashClaims.take_over), and the first is then the copy.
    copies = {d: rows[(d, 1)]["duplicate_of"] for d in ("a.pdf", "b.pdf", "c.pdf", "d.pdf")}
    for pair in (("a.pdf", "d.pdf"), ("b.pdf", "c.pdf")):
        read = [d for d in pair if copies[d] is None]
        assert len(read) == 1 and copies[next(d for d in pair if d not in read)] == read[0], copies


def test_a_page_copied_from_another_pdf_keeps_its_own_page_geometry(server: SimulatedServer, tmp_path: Path) -> None:
    """A page pixel for pixel like a page of another PDF gets a copy of that page's reading, but
    its boxes in PDF points are on its own page: here the same drawing, moved 100 pt right and up
    in user space and shown through a CropBox moved as far, so the two pages render alike."""
    docs = tmp_path / "docs"
    docs.mkdir()
    pdf(docs / "a.pdf", ["Alpha report"])
    sheet = canvas.Canvas(str(docs / "b.pdf"), pagesize=(500, 600), invariant=1)
    sheet.setCropBox((100, 100, 400, 500))
    sheet.translate(100, 100)
    sheet.setFont("Helvetica", 18)
    sheet.drawString(30, 330, "Alpha report")
    sheet.showPage()
    sheet.save()
    out = tmp_path / "out"
    result = llm_ocr.extract([docs], out, endpoint=server.base_url, **FAST)
    assert result.exit_code == 0
    rows = rows_by_page(out)
    first, copy = sorted((rows[("a.pdf", 1)], rows[("b.pdf", 1)]), key=lambda r: r["duplicate_of"] is not None)
    assert copy["duplicate_of"] == first["doc_id"]  # a copy, not a second request
    own = {"a.pdf": (0.0, 0.0, 300.0, 400.0), "b.pdf": (100.0, 100.0, 400.0, 500.0)}
    for row in (first, copy):
        page = row["pdf_page"]
        assert (page["left"], page["bottom"], page["right"], page["top"], page["rotation"]) == (*own[row["doc_id"]], 0)
    shift = 100.0 if copy["doc_id"] == "b.pdf" else -100.0
    assert copy["blocks"] and [b["boxes"] for b in copy["blocks"]] == [b["boxes"] for b in first["blocks"]]
    moved = [v - shift for b in copy["blocks"] for box in b["pdf_boxes"] for v in box]
    assert moved == pytest.approx([v for b in first["blocks"] for box in b["pdf_boxes"] for v in box], abs=0.02)


# -- pages across the processes of a run read in work groups (llm_ocr.runners.shared_pages) -------


@pytest.fixture
def quick_page_looks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A page waiting for another process's reading is looked at again often (storage decides)."""
    from llm_ocr.runners import shared_pages

    monkeypatch.setattr(shared_pages, "POLL_SECONDS", 0.05)


def test_a_page_repeated_in_documents_other_processes_read_is_read_once(
        server: SimulatedServer, tmp_path: Path, quick_page_looks: None) -> None:
    """The same cover in a.pdf (twice) and b.pdf, read side by side by two processes (threads,
    each its own loop): one request for the cover in all, and every page has its row."""
    import threading

    docs = tmp_path / "docs"
    docs.mkdir()
    pdf(docs / "a.pdf", ["Annual cover", "Alpha report", "Annual cover"])
    pdf(docs / "b.pdf", ["Annual cover", "Beta memo"], shifted=True)  # the same pixels, other PDF points
    assert shard_of(docs, 2) == {"a.pdf": 0, "b.pdf": 1}
    out = tmp_path / "out"
    begin_work_groups(out, docs, ["extract"])  # each shard reads its own group (steal=False)
    started = time.time()
    results: dict[int, object] = {}

    def shard(index: int) -> None:
        results[index] = llm_ocr.extract([docs], out, endpoint=server.base_url, num_shards=2, shard_index=index,
                                         steal=False, **FAST)

    threads = [threading.Thread(target=shard, args=(i,), daemon=True) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)  # a bound on a hang, not a wait
    assert [getattr(results.get(i), "exit_code", None) for i in range(2)] == [0, 0]
    # Distinct pages: the cover, Alpha, Beta.
    assert len(server.requests(since=started)) == 3
    rows = rows_by_page(out)
    assert sorted(rows) == [("a.pdf", 1), ("a.pdf", 2), ("a.pdf", 3), ("b.pdf", 1), ("b.pdf", 2)]
    covers = [("a.pdf", 1), ("a.pdf", 3), ("b.pdf", 1)]
    (read,) = [c for c in covers if rows[c]["duplicate_of"] is None]
    for copy in set(covers) - {read}:  # a copy names a cover read (here or by the other process)
        source = (rows[copy]["duplicate_of"], rows[copy]["duplicate_page"])
        assert source in covers and source != copy and rows[copy]["completion_tokens"] is None
        assert rows[copy]["markdown"] == rows[read]["markdown"]
    assert rows[read]["markdown"] != rows[("a.pdf", 2)]["markdown"]
    assert sum(r["completion_tokens"] is not None for r in rows.values()) == 3
    # Each cover, copy or not, is placed on its own PDF's page box (b.pdf's is shifted 100 pt).
    own = {"a.pdf": (0.0, 0.0, 300.0, 400.0), "b.pdf": (100.0, 100.0, 400.0, 500.0)}
    for doc_id, page in covers:
        box = rows[(doc_id, page)]["pdf_page"]
        assert (box["left"], box["bottom"], box["right"], box["top"]) == own[doc_id], (doc_id, page)


def test_a_page_whose_first_s_process_died_is_read_once_and_nothing_is_missing(
        server: SimulatedServer, tmp_path: Path, quick_page_looks: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Shard 0 took the group of a.pdf and claimed its cover's pixels, then died (its lease ran
    out) before storing a row. Shard 1 finds the cover claimed, the claim's group free: it names
    its own cover the first and reads it; shard 0's rerun copies its cover from it."""
    from llm_ocr.runners import shared_pages
    from llm_ocr.storage.hash_claims import PAGES_DIR, HashClaims

    docs = tmp_path / "docs"
    docs.mkdir()
    pdf(docs / "a.pdf", ["Annual cover", "Alpha report"])
    pdf(docs / "b.pdf", ["Annual cover"])
    assert shard_of(docs, 2) == {"a.pdf": 0, "b.pdf": 1}
    out = tmp_path / "out"
    store, group = died_holding_a_pdf(docs, out)
    # The dead process's claim on the cover's pixels, made as shard 1 reaches its one page (the
    # cover) and before shard 1 claims it: the hash is the run's own.
    real = shared_pages.pixel_sha256

    def claimed_by_the_dead(data: bytes) -> str:
        sha256 = real(data)
        HashClaims(store, "extract", "dead", kind=PAGES_DIR).claim(sha256, "a.pdf", group, 1)
        return sha256

    monkeypatch.setattr(shared_pages, "pixel_sha256", claimed_by_the_dead)
    started = time.time()
    one = llm_ocr.extract([docs], out, endpoint=server.base_url, num_shards=2, shard_index=1, steal=False, **FAST)
    monkeypatch.setattr(shared_pages, "pixel_sha256", real)
    zero = llm_ocr.extract([docs], out, endpoint=server.base_url, num_shards=2, shard_index=0, **FAST)
    assert (one.exit_code, zero.exit_code) == (0, 0)
    # Distinct pages: the cover (read by shard 1) and Alpha.
    assert len(server.requests(since=started)) == 2
    rows = rows_by_page(out)
    assert sorted(rows) == [("a.pdf", 1), ("a.pdf", 2), ("b.pdf", 1)]
    assert rows[("b.pdf", 1)]["duplicate_of"] is None
    assert (rows[("a.pdf", 1)]["duplicate_of"], rows[("a.pdf", 1)]["duplicate_page"]) == ("b.pdf", 1)
    assert rows[("a.pdf", 1)]["markdown"] == rows[("b.pdf", 1)]["markdown"]
    assert rows[("a.pdf", 2)]["duplicate_of"] is None


def test_pages_that_only_look_alike_cost_a_bounded_number_of_pixel_comparisons(
        server: SimulatedServer, tmp_path: Path) -> None:
    """Numbered forms share their difference hash but not their pixels: each is compared with at
    most PIXEL_COMPARES kept pages (it was every kept one: N²/2 decodings), each is read, and a
    page rendered twice is still found by its bytes and copied."""
    from llm_ocr.runners.dedup import PIXEL_COMPARES

    docs = tmp_path / "docs"
    docs.mkdir()
    forms = 16
    for n in range(forms):
        pdf(docs / f"form-{n:02d}.pdf", [f"Claim form {101 + n}"])
    pdf(docs / "zz-again.pdf", ["Cover note", "Claim form 101"])  # form-00's page again, in another document
    started = time.time()
    result = llm_ocr.extract([docs], tmp_path / "out", endpoint=server.base_url, **FAST)
    assert result.exit_code == 0
    stats = result.stats["dedup"]
    assert len(server.requests(since=started)) == forms + 1 and stats["pages_reused"] == 1  # + the cover note
    # The forms did share a fingerprint (else nothing was compared), and the comparisons are bounded.
    assert forms <= stats["candidates_rejected"] <= PIXEL_COMPARES * forms, stats
