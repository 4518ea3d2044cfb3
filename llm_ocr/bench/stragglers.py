"""``llm-ocr bench --stragglers``: N shards, one or more of them on a GPU several times slower,
with and without work groups (docs/stragglers.md), against the even-split bound.

Each shard is the plain CLI (``llm-ocr extract``) in a process of its own, against a simulated
server of its own (its GPU): ``--slow-shards`` servers ``--slow-factor`` times slower (prefill and
per-token time), the others fast. Every request decodes the same number of tokens and the
per-token time does not grow with the batch (``--load-slowdown 0``), so a request's service time
on a server is exact and the bound is exact too:

- **even-split bound**: the work (every answered request's service time on a fast server, from
  the servers' request logs) spread over all servers in proportion to their speed, every slot
  busy from the first moment to the last: ``work / (slots * (fast servers + slow servers / slow
  factor))``;
- **static bound**: what static shards can do at best, the slowest shard's own work on its
  server with every slot busy.

Three workloads: the default (3,840 one-page documents, many groups per shard), the held-out
shape of issue 46 (:data:`HELD_OUT`: 8 shards of eight 4-page documents, one group per document)
and a sweep of the shape (:func:`sweep`: groups per shard, slow factor, slow shards).

The wall time counts from the moment the shards are started to the moment the last one exits
(process start-up and the first renders included: the benchmark says how long those took).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from llm_ocr.bench.corpus import vector_pdf
from llm_ocr.bench.lower_bound import LoggedRequest, read_request_log
from llm_ocr.serving.command_lines import free_port, sim_command
from llm_ocr.serving.vllm.process import ManagedServer
from llm_ocr.vlm.recipes import DEFAULT_MODEL


@dataclass
class StragglerConfig:
    """The workload and the servers. The defaults keep the slow shard's pipeline (requests in
    flight and pages rendered ahead, a few pages) small against its share, as in a real run of
    many thousand pages."""

    shards: int = 8
    slow_factor: float = 5.0
    #: How many shards (the first ones) are on a slow server.
    slow_shards: int = 1
    #: Pages in all, in documents of ``pages_per_doc`` pages.
    pages: int = 3840
    pages_per_doc: int = 1
    slots: int = 4
    prefill_ms: float = 100.0
    decode_ms_per_token: float = 5.0
    output_tokens: int = 400
    #: Shard processes' options. Pages are rendered small (a Letter page at 50 DPI comes out 640
    #: pixels long, the family's least): the benchmark measures scheduling, and 8 clients and 8
    #: servers on a small machine must not make the client's CPU the bottleneck.
    dpi: float = 50.0
    lease: float = 120.0
    group_docs: int | None = None

    @property
    def docs(self) -> int:
        """Documents in all."""
        return self.pages // self.pages_per_doc

    def groups_per_shard(self) -> int:
        """How many work groups the largest shard has (llm-ocr's default: its documents / 128)."""
        largest = -(-self.docs // self.shards)
        group_docs = self.group_docs or max(1, -(-largest // 128))
        return -(-largest // group_docs)

    def service_s(self, slow: bool) -> float:
        """Seconds one request holds a slot on a fast (or the slow) server."""
        factor = self.slow_factor if slow else 1.0
        return factor * (self.prefill_ms + self.output_tokens * self.decode_ms_per_token) / 1000.0

    def server_args(self, slow: bool) -> list[str]:
        factor = self.slow_factor if slow else 1.0
        return [
            "--slots", str(self.slots), "--prefill-ms", str(self.prefill_ms * factor),
            "--decode-ms-per-token", str(self.decode_ms_per_token * factor), "--load-slowdown", "0",
            "--output-tokens-mean", str(self.output_tokens), "--output-tokens-sigma", "0", "--loop-rate", "0",
        ]  # fmt: skip


@dataclass
class StragglerRun:
    """One run of every shard (static or with work groups), measured."""

    mode: str
    wall_s: float
    exit_codes: list[int]
    #: Requests each shard's server answered, and when each shard's process exited (s after start).
    requests: list[int]
    exits_s: list[float]
    first_request_s: float
    last_answer_s: float
    #: When each server answered its last request (s after start): with no straggler they end
    #: together; the gap from the fast servers' ends to the last one is the run's idle tail.
    last_answers_s: list[float]
    even_split_bound_s: float
    static_bound_s: float
    rows: int
    duplicates: int
    groups_taken: dict[str, int] = field(default_factory=dict)
    #: Pages each shard sent as a second reader of another's group, and pages whose request it
    #: stopped (or never sent) because the group's other reader stored them first (the markers).
    second_pages: dict[str, int] = field(default_factory=dict)
    pages_left: dict[str, int] = field(default_factory=dict)
    #: Fast-server seconds of the requests stopped (their tokens decoded before the stop), over
    #: the pages' own work: what the second readings spent beyond one reading a page.
    stopped_share: float = 0.0

    @property
    def extra_requests(self) -> int:
        """Requests the servers answered (or began) beyond one a page: the second readings' spend."""
        return sum(self.requests) - self.rows

    @property
    def over_bound(self) -> float:
        """The wall time over the even-split bound."""
        return self.wall_s / self.even_split_bound_s if self.even_split_bound_s else 0.0

    @property
    def serving_over_bound(self) -> float:
        """From the first request to the last answer, over the bound: the start-up of the shard
        processes (imports, first renders) left out."""
        span = self.last_answer_s - self.first_request_s
        return span / self.even_split_bound_s if self.even_split_bound_s else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "wall_over_even_split_bound": round(self.over_bound, 3),
                "first_request_to_last_answer_over_bound": round(self.serving_over_bound, 3)}


#: Issue 46's held-out shape: 8 shards of eight 4-page documents, one server 5 times slower, each
#: request 8.66 s on a fast server (an even-split bound near 77 s, as the issue measured it).
HELD_OUT = StragglerConfig(pages=256, pages_per_doc=4, decode_ms_per_token=21.4)


def sweep() -> list[StragglerConfig]:
    """The shape swept: 1, 2, 8, 64 and 800 groups per shard (llm-ocr's default group size:
    documents of 64, 32, 8 and 1 pages, 64 pages a shard; then 800 one-page documents a shard,
    ``--group-docs 1``), each with one and two slow shards, 2 and 5 times slower. Requests are
    sized for an even-split bound of about a minute with one shard 5 times slower (the 800-group
    shape is longer: 8 clients cannot keep up with much more than 14 pages a second here)."""
    shapes = [(64, 64, 9.5, None), (64, 32, 9.5, None), (64, 8, 9.5, None), (64, 1, 9.5, None), (800, 1, 5.0, 1)]
    return [StragglerConfig(pages=8 * per_shard, pages_per_doc=per_doc, decode_ms_per_token=decode, group_docs=docs,
                            slow_factor=factor, slow_shards=slow)
            for per_shard, per_doc, decode, docs in shapes for slow in (1, 2) for factor in (2.0, 5.0)]


def write_corpus(folder: Path, docs: int, pages_per_doc: int = 1) -> Path:
    """``docs`` PDFs of ``pages_per_doc`` pages each (reused when already there)."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(docs):
        path = folder / f"doc-{i:05d}.pdf"
        if not path.exists():
            path.write_bytes(vector_pdf(pages_per_doc, random.Random(i), f"document {i}"))
    return folder


def _work_s(config: StragglerConfig, requests: list[LoggedRequest]) -> float:
    """The fast-server seconds of ``requests`` (each decodes exactly its tokens)."""
    return sum((config.prefill_ms + r.completion_tokens * config.decode_ms_per_token) / 1000.0 for r in requests)


async def run_shards(config: StragglerConfig, corpus: Path, work: Path, *, steal: bool) -> StragglerRun:
    """Every shard against its own simulated server, all started at once; the slow one is shard 0."""
    mode = "work groups" if steal else "static shards"
    folder = work / ("steal" if steal else "static")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    out = folder / "out"
    logs = [folder / f"requests-{i}.jsonl" for i in range(config.shards)]
    servers = []
    ports: set[int] = set()
    for i, log in enumerate(logs):
        # Every port is chosen before any server binds one: the same free port could come twice.
        while (port := free_port()) in ports:
            pass
        ports.add(port)
        servers.append(ManagedServer(
            sim_command(DEFAULT_MODEL, host="127.0.0.1", port=port,
                        extra_args=[*config.server_args(slow=i < config.slow_shards), "--request-log", str(log)]),
            host="127.0.0.1", port=port, log_path=folder / f"server-{i}.log", startup_timeout=300, max_restarts=0,
            name=f"sim {i}",
        ))  # fmt: skip
    async with contextlib.AsyncExitStack() as stack:
        for server in servers:
            await stack.enter_async_context(server)
        start_epoch, start = time.time(), time.monotonic()
        procs = []
        for i, server in enumerate(servers):
            command = [
                sys.executable, "-m", "llm_ocr.cli", "extract", str(corpus), "--output", str(out),
                "--endpoint", server.base_url, "--num-shards", str(config.shards), "--shard-index", str(i),
                "--workers", "0", "--progress", "off", "--max-in-flight", str(config.slots), "--dpi", str(config.dpi),
                "--steal" if steal else "--no-steal", "--lease", str(config.lease),
                *(["--group-docs", str(config.group_docs)] if config.group_docs else []),
            ]  # fmt: skip
            stderr = (folder / f"shard-{i}.log").open("w")
            stack.callback(stderr.close)
            procs.append(await asyncio.create_subprocess_exec(*command, stdout=asyncio.subprocess.DEVNULL,
                                                              stderr=stderr))
        exits: list[float] = [0.0] * len(procs)

        async def wait(i: int) -> int:
            code = await procs[i].wait()
            exits[i] = time.monotonic() - start
            return code

        try:
            codes = await asyncio.gather(*(wait(i) for i in range(len(procs))))
        finally:  # the benchmark stopped (Ctrl-C): its shards stop too
            for proc in procs:
                if proc.returncode is None:
                    proc.terminate()
        wall = time.monotonic() - start
    per_server = [read_request_log(log) for log in logs]
    every = [r for rs in per_server for r in rs]
    # The bound is the pages' work, one answer each: a request stopped because another reader
    # stored its page first (outcome "disconnected") is spend, not work the bound must hold.
    work_s = _work_s(config, [r for r in every if r.outcome != "disconnected"])
    stopped_s = _work_s(config, [r for r in every if r.outcome == "disconnected"])
    speed = config.shards - config.slow_shards + config.slow_shards / config.slow_factor
    # Static shards: each shard's own pages (one request each, files go round-robin) on its own server.
    per_request = work_s / max(1, len(every))
    shares = [len(range(i, config.docs, config.shards)) * config.pages_per_doc for i in range(config.shards)]
    static = max(n * per_request * (config.slow_factor if i < config.slow_shards else 1.0)
                 for i, n in enumerate(shares))
    rows, duplicates = _count_rows(out)
    second_pages, pages_left = _second_reads(out, config.shards)
    return StragglerRun(
        mode=mode, wall_s=round(wall, 2), exit_codes=list(codes), requests=[len(rs) for rs in per_server],
        exits_s=[round(e, 2) for e in exits],
        first_request_s=round(min((r.arrival for r in every), default=start_epoch) - start_epoch, 2),
        last_answer_s=round(max((r.arrival + r.latency_s for r in every), default=start_epoch) - start_epoch, 2),
        last_answers_s=[round(max((r.arrival + r.latency_s for r in rs), default=start_epoch) - start_epoch, 1)
                        for rs in per_server],
        even_split_bound_s=round(work_s / (config.slots * speed), 2),
        static_bound_s=round(static / config.slots, 2), rows=rows, duplicates=duplicates,
        groups_taken=_groups_taken(out, config.shards), second_pages=second_pages, pages_left=pages_left,
        stopped_share=round(stopped_s / work_s, 4) if work_s else 0.0,
    )


def _count_rows(out: Path) -> tuple[int, int]:
    import pyarrow.parquet as pq

    keys: dict[tuple[str, int], int] = {}
    for path in sorted((out / "extract").glob("*.parquet")):
        for row in pq.read_table(path, columns=["doc_id", "page"]).to_pylist():
            key = (row["doc_id"], row["page"])
            keys[key] = keys.get(key, 0) + 1
    return len(keys), sum(n - 1 for n in keys.values())


def _groups_taken(out: Path, shards: int) -> dict[str, int]:
    """Groups of other shards each shard read (its completion marker)."""
    return {shard: sum((groups.get("taken_from_other_shards") or {}).values())
            for shard, groups in _marker_groups(out, shards).items()}


def _second_reads(out: Path, shards: int) -> tuple[dict[str, int], dict[str, int]]:
    """Pages each shard sent as a second reader, and pages it left to the other reader (its marker)."""
    groups = _marker_groups(out, shards)
    return ({shard: int((g.get("second_reader") or {}).get("pages_sent", 0)) for shard, g in groups.items()},
            {shard: int((g.get("second_reader") or {}).get("pages_left_to_the_other_reader", 0))
             for shard, g in groups.items()})


def _marker_groups(out: Path, shards: int) -> dict[str, dict[str, Any]]:
    """Each shard's completion marker's ``groups`` entry, by shard (``"00003"``)."""
    import json

    found = {}
    for shard in range(shards):
        path = out / "_state" / "extract" / f"done-{shard:05d}-of-{shards:05d}.json"
        if path.exists():
            found[f"{shard:05d}"] = json.loads(path.read_text()).get("groups") or {}
    return found


def run_stragglers(config: StragglerConfig, work: Path, *, static: bool = True) -> list[StragglerRun]:
    """The workload with work groups, and (``static``) without."""
    corpus = write_corpus(work / f"corpus-{config.docs}x{config.pages_per_doc}", config.docs, config.pages_per_doc)
    runs = []
    if static:
        runs.append(asyncio.run(run_shards(config, corpus, work, steal=False)))
    runs.append(asyncio.run(run_shards(config, corpus, work, steal=True)))
    return runs


def format_stragglers(config: StragglerConfig, runs: list[StragglerRun]) -> str:
    """A table, one column per run."""
    fast, slow = config.service_s(False), config.service_s(True)
    which = "shard 0's server is" if config.slow_shards == 1 else f"shards 0-{config.slow_shards - 1}'s servers are"
    lines = [(
        f"{config.shards} shards, {config.docs} documents of {config.pages_per_doc} page(s) "
        f"({config.groups_per_shard()} work group(s) per shard); {which} {config.slow_factor:g}x slower "
        f"({slow:.2f} s a request vs {fast:.2f} s; {config.slots} slots each, one request per page)"
    )]
    rows: list[tuple[str, list[str]]] = [
        ("", [r.mode for r in runs]),
        ("wall (start to last exit)", [f"{r.wall_s:.1f} s" for r in runs]),
        ("even-split bound", [f"{r.even_split_bound_s:.1f} s" for r in runs]),
        ("wall / even-split bound", [f"{r.over_bound:.2f}" for r in runs]),
        ("  first request to last answer / bound", [f"{r.serving_over_bound:.2f}" for r in runs]),
        ("static-shards bound", [f"{r.static_bound_s:.1f} s" for r in runs]),
        ("first request at", [f"{r.first_request_s:.1f} s" for r in runs]),
        ("last answer at", [f"{r.last_answer_s:.1f} s" for r in runs]),
        ("shard exits (s)", [" ".join(f"{e:.0f}" for e in r.exits_s) for r in runs]),
        ("servers' last answers (s)", [" ".join(f"{e:.0f}" for e in r.last_answers_s) for r in runs]),
        ("requests per server", [" ".join(str(n) for n in r.requests) for r in runs]),
        ("groups taken from others", [" ".join(str(n) for n in r.groups_taken.values()) or "-" for r in runs]),
        ("pages sent as a second reader", [" ".join(str(n) for n in r.second_pages.values()) or "-" for r in runs]),
        ("pages left to the other reader", [" ".join(str(n) for n in r.pages_left.values()) or "-" for r in runs]),
        ("requests beyond one a page", [f"{r.extra_requests} ({r.extra_requests / max(1, r.rows):.1%})"
                                        for r in runs]),
        ("work of the stopped requests / pages' work", [f"{r.stopped_share:.1%}" for r in runs]),
        ("rows / duplicates", [f"{r.rows} / {r.duplicates}" for r in runs]),
        ("exit codes", [" ".join(str(c) for c in r.exit_codes) for r in runs]),
    ]
    width = max(len(label) for label, _ in rows)
    cols = [max(len(values[i]) for _, values in rows) for i in range(len(runs))]
    for label, values in rows:
        lines.append(f"{label:<{width}}  " + "  ".join(f"{v:>{c}}" for v, c in zip(values, cols)))
    return "\n".join(lines)


def format_sweep(results: list[tuple[StragglerConfig, StragglerRun]]) -> str:
    """One line per shape of the sweep, then the worst case."""
    lines = [("groups/shard  pages/doc  slow  factor  bound     wall      wall/bound  serving/bound  rows/dup  "
             "extra requests  stopped work  exits")]
    for config, run in results:
        lines.append(
            f"{config.groups_per_shard():>12}  {config.pages_per_doc:>9}  {config.slow_shards:>4}  "
            f"{config.slow_factor:>5g}x  {run.even_split_bound_s:>6.1f} s  {run.wall_s:>6.1f} s  "
            f"{run.over_bound:>10.2f}  {run.serving_over_bound:>13.2f}  {run.rows}/{run.duplicates:<4}  "
            f"{run.extra_requests:>6} ({run.extra_requests / max(1, run.rows):>5.1%})  {run.stopped_share:>12.1%}  "
            f"{' '.join(str(c) for c in run.exit_codes)}"
        )
    if results:
        config, run = max(results, key=lambda r: r[1].over_bound)
        lines.append(f"worst: {run.over_bound:.2f} x the even-split bound ({config.groups_per_shard()} group(s) per "
                     f"shard, {config.slow_shards} shard(s) {config.slow_factor:g}x slower; "
                     f"{run.serving_over_bound:.2f} from the first request to the last answer)")
    return "\n".join(lines)
