"""Fake ``vllm serve`` for tests: parses the flags llm-ocr passes the way vLLM's argparse does,
then behaves as ``$FAKE_VLLM_MODE`` says.

Usage (through the ``vllm`` wrapper next to this file)::

    vllm serve MODEL --host H --port P [vLLM flags...]

Environment:

- ``FAKE_VLLM_ARGV_FILE``: write the arguments (after the program name) there as JSON.
  ``{gpu}`` in it (and in ``FAKE_VLLM_SIM_ARGS``) becomes ``$CUDA_VISIBLE_DEVICES``, so that
  one server per GPU writes one file each.
- ``FAKE_VLLM_API_KEY_FILE``: write the sha256 of the API key it would require there (from
  ``--api-key``, else ``VLLM_API_KEY``, as vLLM resolves it), so tests can check the key
  arrived without the fake ever printing it.

Like vLLM, it logs its non-default arguments at start-up, in clear text as vLLM did before it
masked ``api_key`` (vllm-project/vllm#52523): a key passed on its command line lands in its log.
- ``FAKE_VLLM_REJECT_FLAG``: comma-separated flags to treat as unknown; exits 2 with
  argparse's "unrecognized arguments" error, as vLLM does for a flag it lacks.
- ``FAKE_VLLM_MODE``:
    ``ok`` (default) exec the simulated server on that host/port with the served model name;
    ``crash_on_start`` print a CUDA out-of-memory traceback and exit 1 after 0.5 s;
    ``hang`` never become healthy (never listens);
    ``slow:SECONDS`` the simulator answers /health 503 for SECONDS first;
    ``spawn_child`` start a long-lived child process first (pid written to
    ``FAKE_VLLM_CHILD_PID_FILE``), then run the simulator.
- ``FAKE_VLLM_SIM_ARGS``: extra options for the simulated server (latency, slots, corpus).
- ``FAKE_VLLM_SIM_ARGS_GPU<N>``: more options for the server started with
  ``CUDA_VISIBLE_DEVICES=N`` only (e.g. ``--crash-after 3``: that GPU dies mid-run).
- ``FAKE_VLLM_IGNORE_SIGTERM=1``: ignore SIGTERM (only SIGKILL stops it), in ``hang`` mode.

Every flag vLLM's own parser has is accepted (with its nargs, integer/float values and choices:
tests/fakes/vllm_serve_flags.json), any other refused with vLLM's "unrecognized arguments" (exit 2);
only the flags below change what the fake does.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

#: Flags vLLM parses with ``json.loads`` into a dict (vllm/engine/arg_utils.py).
JSON_FLAGS = ("--limit-mm-per-prompt",)


def _json_dict(text: str) -> dict:
    # vLLM parses dict-valued flags such as --limit-mm-per-prompt with json.loads.
    value = json.loads(text)
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """``vllm serve``'s parser: every option vLLM's own parser has (tests/fakes/vllm_serve_flags.json,
    written from it: :mod:`tests.fakes.vllm_flags`), with its nargs, integer/float values and choices;
    any other flag is refused as vLLM refuses it. Dict-valued flags llm-ocr passes are parsed as JSON,
    as vLLM does."""
    # allow_abbrev=False is stricter than vLLM, whose parser accepts a unique prefix of a flag
    # (``--served-model-nam``): a truncated flag in the launcher works today but would break
    # the day vLLM adds a flag with the same prefix, so the fake refuses it.
    p = argparse.ArgumentParser(prog="vllm serve", usage="vllm serve [model_tag] [options]", allow_abbrev=False)
    p.add_argument("model_tag", nargs="?")
    table = json.loads(Path(__file__).with_name("vllm_serve_flags.json").read_text())["options"]
    for option in table:
        flags = option["flags"]
        if option["kind"] == "boolean":
            p.add_argument(*[f for f in flags if not f.startswith("--no-")], action=argparse.BooleanOptionalAction, default=None)
        elif option["kind"] == "flag":
            p.add_argument(*flags, action="store_true", default=None)
        else:
            kwargs: dict = {"type": {"int": int, "float": float}.get(option["type"], str)}
            if option["nargs"] is not None:
                kwargs["nargs"] = option["nargs"]
            if option["choices"] and option["type"] == "text":
                kwargs["choices"] = option["choices"]
            p.add_argument(*flags, **kwargs)
    for flag in JSON_FLAGS:
        p._option_string_actions[flag].type = _json_dict
    return p


def main(argv: list[str]) -> int:
    """Parse ``argv`` like vLLM, then act according to ``$FAKE_VLLM_MODE``."""
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    argv_file = os.environ.get("FAKE_VLLM_ARGV_FILE", "").replace("{gpu}", gpu)
    if argv_file:
        with open(argv_file, "w", encoding="utf-8") as f:
            json.dump(argv, f)

    if not argv or argv[0] != "serve":
        print("usage: vllm [-h] [-v] {chat,complete,serve,...} ...", file=sys.stderr)
        return 2
    args_list = argv[1:]
    # vllm/utils/argparse_utils.py: --served-model-name without the model first is an error.
    if args_list and args_list[0].startswith("-") and any(a.startswith("--served-model-name") for a in args_list):
        print("ValueError: `model` should be provided as the first positional argument when using "
              "`vllm serve`. i.e. `vllm serve <model> --<arg> <value>`.", file=sys.stderr)
        return 1

    parser = build_parser()
    args = parser.parse_args(args_list)  # an unknown flag: "unrecognized arguments", exit 2, as vLLM
    rejected = {f for f in os.environ.get("FAKE_VLLM_REJECT_FLAG", "").split(",") if f}
    bad = [a for a in args_list if a.split("=", 1)[0] in rejected]
    if bad:
        parser.error(f"unrecognized arguments: {' '.join(bad)}")  # exits 2, like vLLM
    model = args.model_tag or args.model
    if not model:
        parser.error("no model given")
    names = args.served_model_name or [model]
    # vllm/entrypoints/.../api_utils.py log_non_default_args(), unmasked as in older vLLM.
    non_default = {k: v for k, v in vars(args).items() if v is not None and v != parser.get_default(k)}
    print(f"INFO fake vllm: non-default args: {non_default}", flush=True)
    print(f"INFO fake vllm: serving {model} as {names} on {args.host}:{args.port}", flush=True)
    api_key = args.api_key[0] if isinstance(args.api_key, list) else (args.api_key or os.environ.get("VLLM_API_KEY"))
    key_file = os.environ.get("FAKE_VLLM_API_KEY_FILE")
    if key_file and api_key:
        with open(key_file, "w", encoding="utf-8") as f:
            f.write(hashlib.sha256(api_key.encode()).hexdigest())

    mode = os.environ.get("FAKE_VLLM_MODE", "ok")
    if mode == "crash_on_start":
        time.sleep(0.5)
        print(
            "Traceback (most recent call last):\n"
            '  File "vllm/v1/worker/gpu_worker.py", line 241, in determine_available_memory\n'
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
            "total capacity of 22.05 GiB of which 1.12 GiB is free.\n"
            "RuntimeError: Engine core initialization failed. See root cause above.",
            file=sys.stderr, flush=True,
        )
        return 1
    if mode == "hang":
        if os.environ.get("FAKE_VLLM_IGNORE_SIGTERM") == "1":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("INFO fake vllm: loading weights forever", flush=True)
        while True:
            time.sleep(3600)

    sim = [sys.executable, "-m", "llm_ocr.engines.sim", "--host", args.host or "127.0.0.1",
           "--port", str(args.port), "--served-model-name", *names]
    if args.max_model_len:
        sim += ["--max-model-len", str(args.max_model_len)]
    if args.max_num_seqs:
        sim += ["--slots", str(args.max_num_seqs)]
    if mode.startswith("slow:"):
        sim += ["--startup-delay", mode.split(":", 1)[1]]
    elif mode == "spawn_child":
        # Like vLLM's EngineCore: a child in the same process group that outlives nothing.
        child = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(3600)"])
        pid_file = os.environ.get("FAKE_VLLM_CHILD_PID_FILE")
        if pid_file:
            with open(pid_file, "w", encoding="utf-8") as f:
                f.write(str(child.pid))
    elif mode != "ok":
        print(f"fake vllm: unknown FAKE_VLLM_MODE {mode!r}", file=sys.stderr)
        return 2
    sim += shlex.split(os.environ.get("FAKE_VLLM_SIM_ARGS", "").replace("{gpu}", gpu))
    sim += shlex.split(os.environ.get(f"FAKE_VLLM_SIM_ARGS_GPU{gpu}", "")) if gpu else []
    sys.stdout.flush()
    sys.stderr.flush()
    # exec keeps the pid, so the managed process *is* the server, as with the real vllm.
    os.execv(sys.executable, sim)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
