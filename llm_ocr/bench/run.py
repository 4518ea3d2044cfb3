"""One benchmark run: the real Extract pipeline against the simulated vLLM, measured.

The run is :func:`llm_ocr.runners.extract.extract_shard` in this process (one event loop, real worker
processes), pointed with ``--endpoint`` at a simulated server this module launches itself, so
it knows the server's address (to sample ``/metrics``), its request log (for the lower bound)
and its pid (to keep the server's CPU and memory out of the client's numbers).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from llm_ocr.bench.config import BenchConfig
from llm_ocr.bench.lower_bound import LoggedRequest, longest_first_bound, lower_bound, read_request_log, replay_arrivals
from llm_ocr.bench.measure import CpuTimes, Sampler, peak_rss_self
from llm_ocr.gpu_presets import GpuPreset
from llm_ocr.options import ExtractOptions, JobOptions, RenderOptions, StageSpec
from llm_ocr.outcomes import ExitCode
from llm_ocr.runners.extract import extract_shard
from llm_ocr.runners.workers import default_workers
from llm_ocr.serving.command_lines import free_port, sim_command
from llm_ocr.serving.in_flight import AdaptivePolicy
from llm_ocr.serving.vllm.presets import client_in_flight
from llm_ocr.serving.vllm.process import ManagedServer
from llm_ocr.vlm.recipes import DEFAULT_MODEL

log = logging.getLogger("llm_ocr")

MB = 1024 * 1024


def default_in_flight(slots: int) -> int:
    """Requests the runner keeps in flight against vLLM with ``slots`` sequences (its
    ``--max-num-seqs`` plus a queue, :func:`llm_ocr.serving.vllm.presets.client_in_flight`), so the
    benchmark measures the configuration users run."""
    preset = GpuPreset(
        name="bench", gpu_memory_gb=0, max_num_seqs=slots, gpu_memory_utilization=0.9, max_num_batched_tokens=8192
    )
    return client_in_flight(preset)


@dataclass
class RunResult:
    """The report of one run (``to_dict`` is the ``--json`` form)."""

    config: dict[str, Any]
    pages: int
    pages_by_status: dict[str, int]
    exit_code: ExitCode
    requests: int
    completion_tokens: int
    wall_s: float
    pages_per_s: float
    tokens_per_s: float
    lower_bound_s: float | None
    wall_over_lower_bound: float | None
    #: The bound of a perfect client that sends the longest requests first (it knows every
    #: answer's length): the same for any order the run chose.
    longest_first_s: float | None
    breakdown: dict[str, Any]
    server: dict[str, Any]
    client: dict[str, Any]
    machine: dict[str, Any]
    output: str | None = None
    notes: list[str] = field(default_factory=list)
    #: Requests that looped (simulated loop faults): how many, their tokens, tokens per loop
    #: event, their share of all tokens, and requests that did not loop but were cut anyway.
    loops: dict[str, Any] = field(default_factory=dict)
    #: Dense pages (``llm-ocr bench --losses``' dense workloads): each page's status and tokens,
    #: and the word recall of normal and dense pages.
    dense: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


async def _server_stats(root_url: str) -> dict[str, Any]:
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
            async with session.get(f"{root_url}/sim/stats") as response:
                return dict(await response.json())
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
        return {}


async def run_once(config: BenchConfig, corpus: Path, work: Path, *, keep: bool = False) -> RunResult:
    """Run Extract over ``corpus`` against a fresh simulated server; ``work`` holds the output,
    the server log and the request log (the output is deleted unless ``keep``)."""
    work.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - before any request is in flight
    output = work / "out"
    shutil.rmtree(output, ignore_errors=True)  # a leftover output would be resumed, not redone
    logs = [work / f"requests-{i}.jsonl" for i in range(config.servers)]
    for path in logs:
        path.unlink(missing_ok=True)
    workers = config.workers if config.workers is not None else default_workers()
    in_flight = None if config.adaptive else (config.max_in_flight or config.servers * default_in_flight(config.slots))
    model = config.model or DEFAULT_MODEL
    render = {"long_side": config.long_side} if config.long_side else {}
    look_ahead = {"look_ahead": config.look_ahead} if config.look_ahead is not None else {}
    if config.estimate_ahead is not None:
        look_ahead["estimate_ahead"] = config.estimate_ahead
    servers = []
    for i, path in enumerate(logs):
        port = free_port()
        command = sim_command(
            model, host="127.0.0.1", port=port,
            extra_args=[*config.server_args(), "--request-log", str(path)],
        )  # fmt: skip
        servers.append(ManagedServer(
            command, host="127.0.0.1", port=port, log_path=work / f"server-{i}.log",
            # A corpus is indexed before the server is ready (~70 ms a page on a loaded machine).
            startup_timeout=600 if config.sim_corpus else 120, max_restarts=0, name=f"sim {i}",
        ))  # fmt: skip
    spec = StageSpec(
        inputs=[str(corpus)],
        job=JobOptions(
            output=str(output),
            endpoint=",".join(server.base_url for server in servers),
            model=model,
            workers=workers,
            max_in_flight=in_flight,
            progress="off",
        ),
        render=RenderOptions(image_format=config.image_format, dpi=config.dpi, **render),
        extract=ExtractOptions(
            max_tokens=config.max_tokens, truncation_retries=config.truncation_retries, cut_loops=config.cut_loops,
            max_page_aspect=config.max_page_aspect, tile_dense_pages=config.tile_dense_pages,
            pieces=config.pieces, **look_ahead,
        ),
    )
    async with contextlib.AsyncExitStack() as stack:
        for server in servers:
            await stack.enter_async_context(server)
        # /metrics of the first server (with several, the slot use shown is that one's).
        sampler = Sampler(f"{servers[0].root_url}/metrics", config.sample_interval,
                          exclude={pid for s in servers for pid in (s.pid or -1, *s.helper_pids)})
        sampler.start()
        load_before = os.getloadavg()
        await asyncio.sleep(2 * config.sample_interval)  # a sample or two of the idle server
        cpu_start, t_start, epoch_start = CpuTimes.now(), sampler.now(), time.time()
        outcome = await extract_shard(spec)
        # The pool's workers are reaped (counted in RUSAGE_CHILDREN) and the server, though a
        # child too, is still alive (not counted): the delta is the client's own CPU.
        cpu, t_end = CpuTimes.now() - cpu_start, sampler.now()
        sampler.stop()
        # The sampler is the benchmark's, not the client's: its thread's CPU comes off main.
        # (It started before cpu_start, so this slightly over-corrects by its first ~0.2 s.)
        cpu = CpuTimes(max(0.0, cpu.main - sampler.cpu_s), cpu.children)
        load_after = os.getloadavg()
        sim_stats = [await _server_stats(server.root_url) for server in servers]
    shown_in_flight: int | str = in_flight if in_flight is not None else f"auto from {AdaptivePolicy().start}"
    wall = t_end - t_start
    per_server = [read_request_log(path) for path in logs]
    requests = sorted((r for rs in per_server for r in rs), key=lambda r: r.arrival)
    tokens = sum(r.completion_tokens for r in requests)
    stats = outcome.stats
    by_status = {k: int(v) for k, v in (stats.get("pages") or {}).items() if k in ("ok", "truncated", "error")}
    pages = int((stats.get("pages") or {}).get("total", 0))
    # Each server is its own GPU: the perfect client sends each the requests it got, at t=0.
    bounds = [] if config.instant else [lower_bound(config.timing(), rs) for rs in per_server if rs]
    bound = max(bounds, key=lambda b: b.makespan) if bounds else None
    lower = bound.makespan if bound else None
    # Each server's requests, longest first: the slowest server's is the run's.
    longest_first = max((longest_first_bound(config.timing(), rs).makespan for rs in per_server if rs),
                        default=None) if not config.instant else None
    actual = None
    if not config.instant and any(per_server):  # a run may send no request (its pages all failed)
        actual = max((replay_arrivals(config.timing(), rs, epoch_start) for rs in per_server if rs),
                     key=lambda r: r.makespan)
    last_answer = max((r.arrival + r.latency_s for r in requests), default=epoch_start) - epoch_start
    usage = sampler.utilisation(config.slots, t_start, t_end)
    rss = sampler.peak_rss()
    notes = []
    notes.append(f"the /metrics and memory sampler used {sampler.cpu_s:.2f} s of CPU (not counted)")
    if sampler.errors:
        notes.append(f"{sampler.errors} /metrics poll(s) failed")
    seen = sum(int(st.get("requests", 0)) for st in sim_stats)
    if len(requests) != seen:
        notes.append(f"the server saw {seen} requests, {len(requests)} were answered")
    if config.servers > 1:
        notes.append(f"{config.servers} servers; requests each: {[len(rs) for rs in per_server]}; slot use is server "
                     "0's")
    if not keep:
        shutil.rmtree(output, ignore_errors=True)
    return RunResult(
        config={**asdict(config), "workers": workers, "max_in_flight": shown_in_flight},
        pages=pages,
        pages_by_status=by_status,
        exit_code=outcome.exit_code,
        requests=len(requests),
        completion_tokens=tokens,
        wall_s=round(wall, 3),
        pages_per_s=round(pages / wall, 3) if wall > 0 else 0.0,
        tokens_per_s=round(tokens / wall, 1) if wall > 0 else 0.0,
        lower_bound_s=round(lower, 3) if lower is not None else None,
        wall_over_lower_bound=round(wall / lower, 4) if lower else None,
        longest_first_s=round(longest_first, 3) if longest_first is not None else None,
        breakdown={
            # When the first request reached the server (worker start-up, first renders).
            "first_request_s": round(min((r.arrival for r in requests), default=epoch_start) - epoch_start, 3),
            # When an exact server would have finished the requests as they actually arrived:
            # minus the lower bound, it is what the client's sending pattern cost.
            "model_at_actual_arrivals_s": round(actual.makespan, 3) if actual else None,
            "last_answer_s": round(last_answer, 3),
            # The simulator's own lag (timers, CPU) plus the client's work after the last answer.
            "after_last_answer_s": round(wall - last_answer, 3),
            "lower_bound_utilisation": round(bound.mean_running / config.slots, 4) if bound else None,
        },
        server={
            "slots": config.slots,
            "mean_running": round(usage.mean_running, 2) if usage else None,
            "utilisation": round(usage.utilisation, 4) if usage else None,
            "waiting_fraction": round(usage.waiting_fraction, 4) if usage else None,
            "mean_waiting": round(usage.mean_waiting, 2) if usage else None,
            "max_running": usage.max_running if usage else None,
            "samples": usage.samples if usage else 0,
        },
        client={
            "workers": workers,
            "max_in_flight": shown_in_flight,
            "cpu_s": round(cpu.main + cpu.children, 3),
            "cpu_main_s": round(cpu.main, 3),
            "cpu_workers_s": round(cpu.children, 3),
            "cpu_ms_per_page": round(1000 * (cpu.main + cpu.children) / pages, 2) if pages else None,
            # Share of the machine's cores the client kept busy (the server shares them too).
            "cpu_share_of_cores": round((cpu.main + cpu.children) / wall / (os.cpu_count() or 1), 3) if wall else None,
            # Sampled during this run (every sample_interval); the lifetime peak below also covers
            # the corpus generation and earlier runs of the same invocation.
            "peak_rss_main_mb": round(rss["main"] / MB, 1),
            "peak_rss_main_lifetime_mb": round(max(peak_rss_self(), rss["main"]) / MB, 1),
            "peak_rss_worker_mb": round(rss["worker"] / MB, 1),
            "peak_rss_workers_total_mb": round(rss["workers_total"] / MB, 1),
            # The main process's RSS at 10 evenly spaced moments: flat means no leak.
            "rss_main_mb_trace": [round(v / MB) for v in sampler.rss_trace(t_start, t_end, 10)],
            # Rendered pages waiting for a slot: the look-ahead's bounds and the most it held.
            "look_ahead": stats.get("look_ahead"),
        },
        machine={
            "cpus": os.cpu_count(),
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in load_after],
            "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        },
        output=str(output) if keep else None,
        notes=notes,
        loops=loop_stats(requests),
    )


def loop_stats(requests: list[LoggedRequest]) -> dict[str, Any]:
    """What repetition loops cost in a run, from the simulated server's request log."""
    looped = [r for r in requests if r.fault == "loop"]
    tokens = sum(r.completion_tokens for r in requests)
    loop_tokens = sum(r.completion_tokens for r in looped)
    return {
        "events": len(looped),
        "tokens": loop_tokens,
        "tokens_per_event": round(loop_tokens / len(looped)) if looped else None,
        "share_of_tokens": round(loop_tokens / tokens, 4) if tokens else None,
        # A request that did not loop but was closed by the client: a page cut short.
        "finished_pages_cut": sum(1 for r in requests if r.fault != "loop" and r.outcome == "disconnected"),
    }


def format_table(results: list[RunResult], encoding: dict[str, Any] | None = None) -> str:
    """A human-readable table, one column per run."""

    def fmt(value: Any, unit: str = "") -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:,.3g}{unit}" if abs(value) < 100 else f"{value:,.1f}{unit}"
        return f"{value}{unit}"

    rows: list[tuple[str, list[str]]] = [
        ("mode", ["instant" if r.config["instant"] else f"sim {r.config['slots']} slots" for r in results]),
        ("image format", [r.config["image_format"] for r in results]),
        ("workers / in flight", [f"{r.client['workers']} / {r.client['max_in_flight']}" for r in results]),
        ("pages (ok/trunc/err)", [
            f"{r.pages} ({r.pages_by_status.get('ok', 0)}/{r.pages_by_status.get('truncated', 0)}/"
            f"{r.pages_by_status.get('error', 0)})" for r in results
        ]),
        ("requests", [fmt(r.requests) for r in results]),
        ("wall", [fmt(r.wall_s, " s") for r in results]),
        ("pages/s", [fmt(r.pages_per_s) for r in results]),
        ("tokens/s", [fmt(r.tokens_per_s) for r in results]),
        ("lower bound", [fmt(r.lower_bound_s, " s") for r in results]),
        ("wall / lower bound", [f"{r.wall_over_lower_bound:.3f}" if r.wall_over_lower_bound else "-" for r in results]),
        ("  longest-first bound", [fmt(r.longest_first_s, " s") for r in results]),
        ("  first request at", [fmt(r.breakdown["first_request_s"], " s") for r in results]),
        ("  model at real arrivals", [fmt(r.breakdown["model_at_actual_arrivals_s"], " s") for r in results]),
        ("  last answer at", [fmt(r.breakdown["last_answer_s"], " s") for r in results]),
        ("slot utilisation", [fmt(r.server["utilisation"]) for r in results]),
        ("  in the lower bound", [fmt(r.breakdown["lower_bound_utilisation"]) for r in results]),
        ("time with queue > 0", [fmt(r.server["waiting_fraction"]) for r in results]),
        ("client CPU ms/page", [fmt(r.client["cpu_ms_per_page"]) for r in results]),
        ("  main / workers s", [f"{r.client['cpu_main_s']:.1f} / {r.client['cpu_workers_s']:.1f}" for r in results]),
        ("peak RSS main MB", [fmt(r.client["peak_rss_main_mb"]) for r in results]),
        ("peak RSS worker MB", [fmt(r.client["peak_rss_worker_mb"]) for r in results]),
        ("load avg before/after", [
            f"{r.machine['loadavg_before'][0]:.2f} / {r.machine['loadavg_after'][0]:.2f}" for r in results
        ]),
    ]
    width = max(len(label) for label, _ in rows)
    cols = [max(len(v[i]) for _, v in rows) for i in range(len(results))]
    lines = []
    for label, values in rows:
        lines.append(f"{label:<{width}}  " + "  ".join(f"{v:>{c}}" for v, c in zip(values, cols)))
    for i, r in enumerate(results):
        for note in r.notes:
            lines.append(f"note (run {i + 1}): {note}")
        if r.output:
            lines.append(f"output (run {i + 1}): {r.output}")
    if encoding:
        lines.append("")
        lines.append(f"encoding, {encoding['pages']} pages of {encoding['size']}:")
        ms = encoding["encode_ms"]
        lines.append(f"  encode ms/page  jpeg q{encoding['jpeg_quality']} {ms['jpeg']}, png {ms['png']}")
        lines.append(f"  KB/page         jpeg {encoding['kbytes']['jpeg']}, png {encoding['kbytes']['png']}")
        for view, value in encoding["jpeg_psnr_db_min"].items():
            lines.append(
                f"  JPEG PSNR {view:<12} min {value} dB, mean {encoding['jpeg_psnr_db_mean'][view]} dB, "
                f"ink blocks only min {encoding['jpeg_psnr_ink_db_min'][view]} dB"
            )
    return "\n".join(lines)


def dump_json(results: list[RunResult], encoding: dict[str, Any] | None = None) -> str:
    """The ``--json`` output: one object with every run."""
    return json.dumps({"runs": [r.to_dict() for r in results], "encoding": encoding}, indent=2)
