"""``llm-ocr bench-cascade``: the cascade (text-layer route, a cheap model, escalation to a strong
one) against each model alone, on a mixed corpus, with known truth (docs/routes.md, "Measured").

The corpus is the benchmark's born-digital PDFs (:mod:`.corpus`): half of the documents as they
are, half as scans (their pages rendered at 144 DPI and saved as image-only PDFs, no text layer).
Two simulated servers play the models, both knowing the born-digital originals (``--corpus``),
so that they answer scans with the original's text, and each page's truth is its original's text
layer:

- the **weak** model plays a 1B model: per-token and prefill time a seventh of the strong one's
  (decoding is bound by the weights a step reads, 2 GB against 14 GB in bf16, and prefill by the
  FLOPs, which scale alike), LightOnOCR-2-1B's family and context; it garbles ``garble_rate``
  and drops most of the text of ``drop_rate`` of the pages and loops on ``loop_rate``, each
  decided per page image; with ``ramble_rate`` it also answers that share of images (pages and
  their crops, each by its own hash) with plausible text that is not theirs, never repeating,
  until ``max_tokens``: the weak model whose answers are long, unrepeated and wrong;
- the **strong** model plays olmOCR-2-7B: its family and context, seven times the time.

Each configuration runs the real stages in this process (Extract, then Escalate) against those
servers; quality is the mean word recall of the readings kept against the truth; GPU-seconds are
the seconds each model's server had a request in flight (``busy_s`` in the completion markers),
summed over the models; held GPU-seconds the stages' wall time with their server held.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import shutil
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llm_ocr.bench.corpus import CORPUS_VERSION, SCAN_DPI, vector_pdf

if TYPE_CHECKING:  # the runners and servers are imported when the benchmark runs, not by --help
    from llm_ocr.engines.sim.timing import TimingModel
    from llm_ocr.serving.vllm.process import ManagedServer

WEAK_MODEL = "lightonai/LightOnOCR-2-1B"
STRONG_MODEL = "allenai/olmOCR-2-7B-1025"
#: The CPU engine the text-layer route lays pages out with serves this name (its default).
LAYOUT_MODEL = "deepseek-ai/DeepSeek-OCR"


@dataclass
class CascadeConfig:
    """The workload and the two simulated models."""

    documents: int = 24
    pages_per_document: int = 4
    #: Share of the documents that are scans.
    scan_share: float = 0.5
    seed: int = 0
    #: The strong model's time per output token of one sequence and per request before its first.
    strong_decode_ms: float = 14.0
    strong_prefill_ms: float = 140.0
    #: How many times slower the strong model is than the weak one (7B / 1B parameters).
    speed_ratio: float = 7.0
    slots: int = 64
    garble_rate: float = 0.1
    drop_rate: float = 0.1
    loop_rate: float = 0.05
    ramble_rate: float = 0.0
    gpu_price_per_hour: float = 2.5
    workers: int | None = None

    def timing(self, strong: bool) -> TimingModel:
        """The timing model of the strong (or weak) simulated server."""
        from llm_ocr.engines.sim.timing import TimingModel

        ratio = 1.0 if strong else self.speed_ratio
        return TimingModel(slots=self.slots, prefill_ms=self.strong_prefill_ms / ratio,
                           decode_ms_per_token=self.strong_decode_ms / ratio)

    def weak_args(self) -> list[str]:
        return [
            "--slots", str(self.slots), "--prefill-ms", str(self.strong_prefill_ms / self.speed_ratio),
            "--decode-ms-per-token", str(self.strong_decode_ms / self.speed_ratio), "--seed", str(self.seed),
            "--garble-rate", str(self.garble_rate), "--drop-rate", str(self.drop_rate),
            "--loop-rate", str(self.loop_rate), "--ramble-rate", str(self.ramble_rate),
        ]  # fmt: skip

    def strong_args(self) -> list[str]:
        return [
            "--slots", str(self.slots), "--prefill-ms", str(self.strong_prefill_ms),
            "--decode-ms-per-token", str(self.strong_decode_ms), "--seed", str(self.seed),
        ]  # fmt: skip


@dataclass
class Outcome:
    """One configuration's figures."""

    name: str
    pages: int
    recall: float
    pages_under_90: int
    routes: dict[str, int]
    #: GPU-seconds of work per model: its requests replayed through its server's timing model by a
    #: perfect client (:mod:`.lower_bound`): what the GPU needs, whatever the client machine.
    work_s: dict[str, float]
    busy_s: dict[str, float]
    held_s: float
    layout_s: float
    wall_s: float
    price_per_hour: float
    #: The first model's requests for one page, at most (its Extract rows' attempts), and the
    #: most the cost bound allows: ``cost_bound`` times a whole-page reading's requests.
    max_requests: int = 0
    request_bound: int = 0
    #: Decisions the truth shows wrong: pages whose kept reading is under 90% recall and ``ok``
    #: (kept on the first model, or escalated, with bad text and no flag), and pages escalated
    #: whose first reading was already at least 99%.
    kept_bad: int = 0
    needless: int = 0
    #: Pages whose kept reading is flagged (not ``ok``) or escalated, of those under 90% at first.
    caught: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def gpu_s(self) -> float:
        """GPU-seconds: the work of the models' servers, summed."""
        return sum(self.work_s.values())

    def per_thousand(self, seconds: float) -> float:
        return seconds / self.pages * 1000 if self.pages else 0.0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["gpu_s"] = round(self.gpu_s, 2)
        data["cost_per_1000_pages_usd"] = round(self.per_thousand(self.gpu_s) / 3600 * self.price_per_hour, 4)
        return data


def make_cascade_corpus(folder: Path, config: CascadeConfig) -> tuple[Path, Path]:
    """``(inputs, originals)``: the run's PDFs (born-digital and scans) and every document's
    born-digital original (the simulators' ``--corpus``, and the truth). Reused when there."""
    inputs, originals = folder / "inputs", folder / "originals"
    manifest = folder / "corpus.json"
    wanted = {"version": CORPUS_VERSION, "cascade": 1, **{k: getattr(config, k) for k in
                                                          ("documents", "pages_per_document", "scan_share", "seed")}}
    if manifest.exists() and json.loads(manifest.read_text()) == wanted:
        return inputs, originals
    shutil.rmtree(folder, ignore_errors=True)
    inputs.mkdir(parents=True)
    originals.mkdir(parents=True)
    for i in range(config.documents):
        rng = random.Random(hashlib.sha256(f"cascade|{config.seed}|{i}".encode()).digest())
        name = f"doc-{i:04d}.pdf"
        data = vector_pdf(config.pages_per_document, rng, f"Report {i}")
        (originals / name).write_bytes(data)
        # Scans spread evenly through the documents: scan_share of them.
        if int((i + 1) * config.scan_share) > int(i * config.scan_share):
            _scan(originals / name, inputs / name)
        else:
            (inputs / name).write_bytes(data)
    manifest.write_text(json.dumps(wanted))
    return inputs, originals


def _scan(original: Path, target: Path) -> None:
    """An image-only PDF of ``original``'s pages rendered at the scans' resolution."""
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(str(original))
    try:
        images = [pdf[i].render(scale=SCAN_DPI / 72).to_pil().convert("L") for i in range(len(pdf))]
    finally:
        pdf.close()
    images[0].save(target, "PDF", save_all=True, append_images=images[1:], resolution=SCAN_DPI)


def truth_of(originals: Path) -> dict[tuple[str, int], str]:
    """Each page's true text: its born-digital original's text layer."""
    import pypdfium2 as pdfium

    from llm_ocr.sources.text_layer import page_text

    truth = {}
    for path in sorted(originals.glob("*.pdf")):
        pdf = pdfium.PdfDocument(str(path))
        count = len(pdf)
        pdf.close()
        for page in range(1, count + 1):
            truth[(path.name, page)] = page_text(str(path), page)
    return truth


def _server(model: str, args: list[str], log: Path) -> ManagedServer:
    from llm_ocr.serving.command_lines import free_port, sim_command
    from llm_ocr.serving.vllm.process import ManagedServer

    port = free_port()
    return ManagedServer(sim_command(model, host="127.0.0.1", port=port, extra_args=args), host="127.0.0.1",
                         port=port, log_path=log, startup_timeout=120, max_restarts=0, name=model)


def _layout_server(log: Path, threads: int) -> ManagedServer:
    from llm_ocr.serving.command_lines import free_port
    from llm_ocr.serving.vllm.process import ManagedServer

    port = free_port()
    command = [sys.executable, "-m", "llm_ocr.engines.cpu", "--host", "127.0.0.1", "--port", str(port),
               "--served-model-name", LAYOUT_MODEL, "--max-model-len", "262144", "--threads", str(threads)]
    return ManagedServer(command, host="127.0.0.1", port=port, log_path=log, startup_timeout=300, max_restarts=0,
                         name="cpu engine")


def _measure(name: str, out: Path, truth: dict[tuple[str, int], str], price: float, wall: float,
             work: dict[str, float], request_bound: int = 0) -> Outcome:
    from llm_ocr.engines.sim.content import word_recall
    from llm_ocr.storage import Storage
    from llm_ocr.storage.parts import iter_rows, list_parts
    from llm_ocr.storage.state import list_markers

    storage = Storage(str(out))
    stage = "escalate" if list_parts(storage.child("escalate")) else "extract"
    first: dict[tuple[str, int], tuple[float, int]] = {}
    for row in iter_rows(storage.child("extract"), columns=["doc_id", "page", "markdown", "attempts"]):
        key = (row["doc_id"], row["page"])
        first[key] = (word_recall(truth[key], row["markdown"] or ""), int(row["attempts"] or 0))
    recalls = []
    kept_bad = needless = caught = 0
    for row in iter_rows(storage.child(stage), columns=["doc_id", "page", "markdown", "status", "route"]):
        key = (row["doc_id"], row["page"])
        recall = word_recall(truth[key], row["markdown"] or "")
        recalls.append(recall)
        escalated = row.get("route") == "escalated"
        kept_bad += recall < 0.9 and row.get("status") == "ok"
        needless += escalated and first[key][0] >= 0.99
        caught += first[key][0] < 0.9 and (escalated or row.get("status") != "ok")
    busy: dict[str, float] = {}
    held = layout = 0.0
    routes: dict[str, int] = {}
    for folder in ("extract", "escalate"):
        for marker in list_markers(storage, folder):
            for model, counts in (marker.get("models") or {}).items():
                busy[model] = busy.get(model, 0.0) + float(counts.get("busy_s", 0.0))
            held += float((marker.get("gpu") or {}).get("gpu_seconds") or 0.0)
            layout += float(marker.get("layout_s") or 0.0)
            routes = dict(marker.get("routes") or {}) or routes  # Escalate's, when it ran
    return Outcome(name, len(recalls), round(sum(recalls) / len(recalls), 4) if recalls else 0.0,
                   sum(r < 0.9 for r in recalls), routes, work, {k: round(v, 2) for k, v in busy.items()},
                   round(held, 2), round(layout, 2), round(wall, 2), price,
                   max_requests=max((a for _, a in first.values()), default=0),
                   request_bound=request_bound, kept_bad=kept_bad, needless=needless, caught=caught)


def _request_bound(model: str) -> int:
    """The most requests the cost bound lets one page of ``model`` take: ``cost_bound`` times its
    whole-page reading's (a first attempt and the family's truncation retries)."""
    from llm_ocr.options import dense
    from llm_ocr.vlm.families import family_for

    return int(dense().cost_bound * (1 + family_for(model).retries.count))


async def run_cascade_bench(config: CascadeConfig, work: Path, names: Sequence[str] | None = None) -> list[Outcome]:
    """Run the configurations (``weak``, ``strong``, ``weak+escalate``, ``cascade``) and measure them."""
    import time

    from llm_ocr.bench.lower_bound import lower_bound, read_request_log
    from llm_ocr.options import EscalateOptions, JobOptions, RenderOptions, RouteOptions, StageSpec
    from llm_ocr.runners.escalate import escalate_shard
    from llm_ocr.runners.extract import extract_shard

    inputs, originals = make_cascade_corpus(work / "corpus", config)
    truth = truth_of(originals)
    corpus = ["--corpus", str(originals)]
    chosen = list(names or ("weak", "strong", "weak+escalate", "cascade"))
    outcomes = []
    async with contextlib.AsyncExitStack() as stack:
        layout = None
        if "cascade" in chosen:
            layout = await stack.enter_async_context(_layout_server(work / "layout.log", config.workers or 2))
        for name in chosen:
            out = work / "runs" / name.replace("+", "-")
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            # Fresh servers per configuration: each one's request log holds exactly its requests.
            logs = {WEAK_MODEL: out / "weak-requests.jsonl", STRONG_MODEL: out / "strong-requests.jsonl"}
            servers = contextlib.AsyncExitStack()
            weak = await servers.enter_async_context(_server(
                WEAK_MODEL, [*config.weak_args(), *corpus, "--request-log", str(logs[WEAK_MODEL])], out / "weak.log"))
            strong = await servers.enter_async_context(_server(
                STRONG_MODEL, [*config.strong_args(), *corpus, "--request-log", str(logs[STRONG_MODEL])],
                out / "strong.log"))
            first, model = (strong, STRONG_MODEL) if name == "strong" else (weak, WEAK_MODEL)
            route = RouteOptions(route="text-layer", route_endpoint=layout.base_url) if name == "cascade" and layout \
                else RouteOptions.model_validate({})
            job = JobOptions.model_validate({"output": str(out / "out"), "endpoint": first.base_url, "model": model,
                                             "workers": config.workers, "progress": "off"})
            # Extract knows a stronger model follows (as `llm-ocr run --escalate-to` tells it): a page
            # whose answer it cannot vouch for is left to that model (llm_ocr.stages.extract._whole).
            follows = EscalateOptions.model_validate(
                {"escalate_to": STRONG_MODEL, "escalate_endpoint": strong.base_url}
                if name in ("weak+escalate", "cascade") else {})
            spec = StageSpec(job=job, inputs=[str(inputs)], route=route, render=RenderOptions.model_validate({}),
                             escalate=follows)
            started = time.monotonic()
            async with servers:
                await extract_shard(spec)
                if name in ("weak+escalate", "cascade"):
                    escalate_job = job.model_copy(update={"endpoint": strong.base_url, "model": STRONG_MODEL})
                    await escalate_shard(StageSpec(job=escalate_job, escalate=EscalateOptions.model_validate({})))
            wall = time.monotonic() - started
            work_s = {
                model: round(lower_bound(config.timing(model == STRONG_MODEL), read_request_log(path)).makespan, 2)
                for model, path in logs.items() if path.exists() and path.stat().st_size
            }
            outcomes.append(_measure(name, out / "out", truth, config.gpu_price_per_hour, wall, work_s,
                                     _request_bound(model)))
    return outcomes


def format_outcomes(outcomes: Sequence[Outcome], config: CascadeConfig) -> str:
    """The table, and the verdict on the target (quality within 1 point, at most 40% of the GPU time)."""
    head = (f"{'configuration':<14} {'pages':>5} {'recall':>7} {'<90%':>5} {'text-layer/model/escalated':>26} "
            f"{'GPU-s':>7} {'weak+strong':>13} {'busy s':>7} {'held s':>7} {'layout s':>8} {'$/1k pages':>10} "
            f"{'req/page':>8} {'bad ok':>6} {'caught':>6} {'needless':>8}")
    lines = [head, "-" * len(head)]
    for o in outcomes:
        routes = "/".join(str(o.routes.get(k, 0)) for k in ("text-layer", "model", "escalated"))
        split = "+".join(f"{o.work_s.get(m, 0.0):.1f}" for m in (WEAK_MODEL, STRONG_MODEL))
        cost = o.per_thousand(o.gpu_s) / 3600 * o.price_per_hour
        lines.append(f"{o.name:<14} {o.pages:>5} {o.recall:>7.2%} {o.pages_under_90:>5} {routes:>26} "
                     f"{o.gpu_s:>7.1f} {split:>13} {sum(o.busy_s.values()):>7.1f} {o.held_s:>7.1f} "
                     f"{o.layout_s:>8.1f} {cost:>10.3f} {f'{o.max_requests}/{o.request_bound}':>8} "
                     f"{o.kept_bad:>6} {o.caught:>6} {o.needless:>8}")
    by_name = {o.name: o for o in outcomes}
    strong, cascade = by_name.get("strong"), by_name.get("cascade")
    if strong and cascade and strong.gpu_s > 0:
        gap = (strong.recall - cascade.recall) * 100
        share = cascade.gpu_s / strong.gpu_s
        lines.append(f"cascade vs strong alone: recall {gap:+.2f} points below (target <= 1), GPU-seconds "
                     f"{share:.0%} of its (target <= 40%): " + ("met" if gap <= 1 and share <= 0.4 else "NOT met"))
    lines.append(f"models: weak {WEAK_MODEL} ({config.strong_decode_ms / config.speed_ratio:g} ms/token, garble "
                 f"{config.garble_rate:.0%}, drop {config.drop_rate:.0%}, loop {config.loop_rate:.0%} of pages, ramble "
                 f"{config.ramble_rate:.0%} of images), "
                 f"strong {STRONG_MODEL} ({config.strong_decode_ms:g} ms/token); cost at "
                 f"${config.gpu_price_per_hour:.2f}/GPU-hour")
    lines.append("GPU-s: the models' work (their requests replayed by a perfect client); busy s: seconds their "
                 "servers had a request in flight; held s: the stages' wall time with their server held")
    lines.append("req/page: the first model's requests for one page at most / the cost bound's; bad ok: pages kept "
                 "`ok` under 90% recall; caught: pages under 90% at first that ended escalated or flagged; "
                 "needless: pages escalated whose first reading was at least 99%")
    return "\n".join(lines)
