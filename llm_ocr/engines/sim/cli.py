"""A simulated OpenAI-compatible OCR model server (vLLM look-alike) for tests, benchmarks
and demos without a GPU, answering as the served model's family does (DeepSeek-OCR by default).

Run it as its own process, like a real server::

    python -m llm_ocr.engines.sim --port 8000 --corpus docs/ --slots 64

It answers ``/health``, ``/v1/models``, ``/metrics`` and ``/v1/chat/completions`` the way
vLLM does (validation, error JSON, metric names), with latency from a simple batch model, and
faults on demand (``POST /sim/faults``) or at random rates. Pages of
PDFs given with ``--corpus`` are recognised and answered from their text layer; any other
image gets a deterministic synthetic page. See :mod:`llm_ocr.engines.sim.server` for the timing
model and :mod:`llm_ocr.testing` for a context manager that runs it in tests.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from llm_ocr.argtypes import fraction, non_negative, positive, positive_int

from ..frame.cli import add_frame_options, frame_settings
from . import FAULT_KINDS

if TYPE_CHECKING:  # the server (and aiohttp) is imported only when it runs
    from .server import SimConfig

__all__ = ["FAULT_KINDS", "add_decode_options", "build_parser", "config_from_args", "main"]


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The command-line parser (pass ``parser`` to add the options to a subcommand's)."""
    p = parser or argparse.ArgumentParser(
        prog="python -m llm_ocr.engines.sim",
        description="Simulated OpenAI-compatible OCR model server (vLLM look-alike) for tests and benchmarks "
        "without a GPU: it answers as the served model's family does (DeepSeek-OCR by default).",
    )
    model = add_frame_options(
        p,
        default_port=0,
        model_help="model name(s) to answer to, repeatable (default deepseek-ai/DeepSeek-OCR)",
        tokens_help="output tokens per character of answer text",
        log_help="append one JSON line per chat request (body with images replaced by sha256 and size, "
        "status, outcome)",
    )
    model.add_argument("--recipe", action="append", default=[], metavar="[NAME=]FAMILY", type=_recipe_spec,
                       help="the model family every served name plays (default: each name's own family, "
                       "chosen as llm-ocr chooses it; see llm-ocr models); NAME=FAMILY: the family one served "
                       "name plays, so that one server plays several families, two recipes of one model "
                       "included; repeatable")
    model.add_argument("--lenient", action="store_true",
                       help="answer page requests that stray from the family's recipe as a real model would "
                       "(grounding tags dropped, loops without the n-gram processor) instead of refusing "
                       "them with a 400")
    model.add_argument("--corpus", action="append", default=[], metavar="DIR_OR_FILE",
                       help="PDF file or folder (recursive) whose pages are answered from their text "
                       "layer; repeatable")
    model.add_argument("--render-dpi", type=positive, default=144.0, metavar="DPI",
                       help="the resolution the client rendered --corpus pages at (llm-ocr's --dpi): a "
                       "received image that is a crop of a known page at this scale (a tile of a dense "
                       "page) is answered with the text of that region (default %(default)s)")
    perf = p.add_argument_group("performance (the decode model)")
    add_decode_options(perf)
    perf.add_argument("--startup-delay", type=non_negative, default=0.0, metavar="S",
                      help="seconds /health answers 503 before becoming ready (default %(default)s)")
    faults = p.add_argument_group("faults")
    faults.add_argument("--loop-repeat-rate", type=fraction, default=1.0,
                        help="share of looping pages that loop again when retried at a temperature above 0, "
                        "decided per image and temperature (default %(default)s: always)")
    faults.add_argument("--garble-rate", type=fraction, default=0.0,
                        help="fraction of page images read garbled, most words misread letter by letter, as "
                        "a weaker model does; decided per image and --seed (default %(default)s)")
    faults.add_argument("--drop-rate", type=fraction, default=0.0,
                        help="fraction of page images whose reading stops after the first third of the page, "
                        "decided per image and --seed (default %(default)s)")
    faults.add_argument("--ramble-rate", type=fraction, default=0.0,
                        help="fraction of images (pages and crops) answered with plausible text that is not "
                        "theirs, never repeating, until max_tokens, as a weak model that invents a page; decided "
                        "per image and --seed (default %(default)s)")
    faults.add_argument("--garble-page", action="append", default=[], metavar="FILE:PAGE", type=_page_spec,
                        help="this --corpus page is always read garbled; repeatable")
    faults.add_argument("--drop-page", action="append", default=[], metavar="FILE:PAGE", type=_page_spec,
                        help="this --corpus page's reading always stops after its first third; repeatable")
    faults.add_argument("--error-rate", type=fraction, default=0.0,
                        help="fraction of requests answered HTTP 500 (default %(default)s)")
    faults.add_argument("--hang-rate", type=fraction, default=0.0,
                        help="fraction of requests never answered (default %(default)s)")
    faults.add_argument("--reset-rate", type=fraction, default=0.0,
                        help="fraction of requests whose connection is reset (default %(default)s)")
    faults.add_argument("--crash-after", type=int, default=0, metavar="N",
                        help="exit with code 1 on the N-th chat request, like a GPU that dies mid-run "
                        "(default %(default)s: never)")
    faults.add_argument("--crash-on-page", action="append", default=[], metavar="FILE:PAGE", type=_page_spec,
                        help="exit with code 1 whenever this --corpus page (file name or path, 1-based page) "
                        "is sent, like vLLM on an image that crashes it; repeatable")
    faults.add_argument("--crash-times", type=positive_int, default=None, metavar="N",
                        help="crash on each --crash-on-page page at most N times in all, across restarts "
                        "(needs --crash-ledger; default: every time)")
    faults.add_argument("--crash-ledger", default=None, metavar="PATH",
                        help="file that gets one line FILE:PAGE per poison-page crash (and counts them)")
    fields = p.add_argument_group("structured answers about documents (llm-ocr fields)")
    fields.add_argument("--fields-invalid-rate", type=fraction, default=0.0,
                        help="fraction of documents whose first structured answer is cut in the middle (not "
                        "JSON); a repair request is answered correctly; decided per document and --seed "
                        "(default %(default)s)")
    fields.add_argument("--fields-invent-rate", type=fraction, default=0.0,
                        help="fraction of documents whose first structured answer replaces one free-text value "
                        "with a name found nowhere in the document (default %(default)s)")
    fields.add_argument("--no-structured-outputs", dest="structured_outputs", action="store_false",
                        help="answer HTTP 400 to response_format / structured_outputs, like an endpoint "
                        "without structured outputs")
    return p


#: The decode model's defaults when the simulator runs on its own (``llm-ocr bench`` has its own).
DECODE_DEFAULTS: dict[str, Any] = {
    "slots": 64, "prefill_ms": 20.0, "decode_ms_per_token": 0.0, "load_slowdown": 1.0, "output_tokens_mean": 0.0,
    "output_tokens_sigma": 0.5, "loop_rate": 0.0, "seed": 0,
}


def add_decode_options(group: argparse._ArgumentGroup | argparse.ArgumentParser,
                       defaults: Mapping[str, Any] | None = None) -> None:
    """The simulated server's decode model as options: how many sequences run at once, how long
    a request takes, how long answers are, which pages loop (``--instant``: no time at all).
    ``llm-ocr bench`` takes the same options, for the server it starts, with its own ``defaults``."""
    d = {**DECODE_DEFAULTS, **(defaults or {})}
    group.add_argument("--slots", type=positive_int, default=d["slots"],
                       help="sequences decoded at once, like vLLM --max-num-seqs; more requests wait "
                       "in a queue (default %(default)s)")
    group.add_argument("--prefill-ms", type=non_negative, default=d["prefill_ms"],
                       help="time per request before its first token (default %(default)s)")
    group.add_argument("--decode-ms-per-token", type=non_negative, default=d["decode_ms_per_token"],
                       help="base time per output token of one sequence (default %(default)s)")
    group.add_argument("--load-slowdown", type=non_negative, default=d["load_slowdown"],
                       help="per-token time is base * (1 + load_slowdown * running / slots), "
                       "re-evaluated as the batch changes (default %(default)s)")
    group.add_argument("--instant", action="store_true", help="no latency at all (measures the client's ceiling)")
    group.add_argument("--output-tokens-mean", type=non_negative, default=d["output_tokens_mean"], metavar="TOKENS",
                       help="give synthetic page answers a lognormal length with this mean in tokens, "
                       "fixed per image and --seed (a long tail, like real pages); 0 keeps their "
                       "natural length of a few hundred tokens (default %(default)s)")
    group.add_argument("--output-tokens-sigma", type=non_negative, default=d["output_tokens_sigma"], metavar="SIGMA",
                       help="sigma of the log of that length: 0.5 puts ~5%% of pages above twice the "
                       "mean (default %(default)s)")
    group.add_argument("--loop-rate", type=fraction, default=d["loop_rate"],
                       help="fraction of (image, prompt) pairs that loop until max_tokens, finish_reason "
                       "'length' (or, streamed, until the client closes the stream); decided per image so "
                       "retries loop again. With the n-gram processor on (vllm_xargs.ngram_size), the "
                       "repeated unit is a table row longer than its window_size, as only such loops "
                       "escape it in vLLM (default %(default)s)")
    group.add_argument("--seed", type=int, default=d["seed"],
                       help="seed of the random draws: answer lengths, loops, faults (default %(default)s)")


def _page_spec(text: str) -> tuple[str, int]:
    from .poison import parse_page_spec

    try:
        return parse_page_spec(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _recipe_spec(text: str) -> tuple[str | None, str]:
    """``FAMILY`` (every served name) or ``NAME=FAMILY`` (one served name): (name or None, family)."""
    name, _, family = text.rpartition("=")
    if "=" in text and not name:
        raise argparse.ArgumentTypeError(f"{text!r}: NAME=FAMILY needs a served name before '='")
    return name or None, family


def served_recipes(specs: Sequence[tuple[str | None, str]], served: Sequence[str]) -> tuple[str | None, dict[str, str]]:
    """The ``--recipe`` values as (the family every name plays, or None; {served name: family}),
    each family checked against llm-ocr's; a NAME that is not served is refused."""
    from llm_ocr.vlm.families import family_named

    every = [family for name, family in specs if name is None]
    if len(every) > 1:
        raise SystemExit(f"--recipe FAMILY given {len(every)} times ({', '.join(every)}): "
                         "give NAME=FAMILY for each name")
    named = {name: family for name, family in specs if name is not None}
    for family in [*every, *named.values()]:
        family_named(family)  # raises UnknownRecipe with the choices
    unknown = sorted(set(named) - set(served))
    if unknown:
        raise SystemExit(f"--recipe names {', '.join(unknown)}, not a --served-model-name")
    return (every[0] if every else None), named


def config_from_args(args: argparse.Namespace) -> SimConfig:
    """A :class:`~llm_ocr.engines.sim.server.SimConfig` from parsed arguments."""
    from .damage import Damage
    from .poison import PoisonPages
    from .server import SimConfig

    if args.crash_times and not args.crash_ledger:
        raise SystemExit("--crash-times needs --crash-ledger (the count must survive the restarts)")
    from llm_ocr.vlm.families import UnknownRecipe, family_for

    poison = PoisonPages(args.crash_on_page, args.crash_times or 0, args.crash_ledger) if args.crash_on_page else None
    settings = frame_settings(args)
    first = settings["served_model_names"][0]
    try:
        recipe, recipes = served_recipes(args.recipe, settings["served_model_names"])
        family = family_for(first, recipes.get(first, recipe))
    except UnknownRecipe as exc:
        raise SystemExit(str(exc)) from None
    if args.max_model_len is None:  # the context of the family it plays, as vLLM's would be
        settings["max_model_len"] = family.serving.context
    return SimConfig(
        **settings,
        recipe=recipe,
        recipes=recipes,
        lenient=args.lenient,
        corpus=list(args.corpus),
        render_dpi=args.render_dpi,
        slots=args.slots,
        prefill_ms=args.prefill_ms,
        decode_ms_per_token=args.decode_ms_per_token,
        load_slowdown=args.load_slowdown,
        output_tokens_mean=args.output_tokens_mean,
        output_tokens_sigma=args.output_tokens_sigma,
        loop_rate=args.loop_rate,
        loop_repeat_rate=args.loop_repeat_rate,
        damage=Damage(args.garble_rate, args.drop_rate, tuple(args.garble_page), tuple(args.drop_page),
                      ramble_rate=args.ramble_rate),
        error_rate=args.error_rate,
        hang_rate=args.hang_rate,
        reset_rate=args.reset_rate,
        crash_after=args.crash_after,
        seed=args.seed,
        startup_delay=args.startup_delay,
        instant=args.instant,
        poison=poison,
        fields_invalid_rate=args.fields_invalid_rate,
        fields_invent_rate=args.fields_invent_rate,
        structured_outputs=args.structured_outputs,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the server until SIGTERM/SIGINT; returns the exit code."""
    from .server import serve

    args = build_parser().parse_args(argv)
    return asyncio.run(serve(config_from_args(args)))


if __name__ == "__main__":
    raise SystemExit(main())
