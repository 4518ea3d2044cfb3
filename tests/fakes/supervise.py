"""A process supervisor for tests, like a Kubernetes controller restarting a crashed vLLM pod.

Usage::

    python tests/fakes/supervise.py [--restart-delay S] [--starts-file PATH] -- COMMAND...

Runs COMMAND; whenever it exits (for any reason), waits ``--restart-delay`` seconds and runs it
again, with the same arguments (so on the same port). Each start appends a line to
``--starts-file``. SIGTERM or SIGINT stops the child (SIGTERM, then SIGKILL after 5 s) and exits.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="supervise")
    parser.add_argument("--restart-delay", type=float, default=1.0)
    parser.add_argument("--starts-file", default=None)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    stopping = False
    child: subprocess.Popen[bytes] | None = None

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.terminate()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while not stopping:
        if args.starts_file:
            with open(args.starts_file, "a", encoding="utf-8") as starts:
                starts.write(f"{time.time()}\n")
        child = subprocess.Popen(command)
        while child.poll() is None:
            try:
                child.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                continue
        if stopping:
            break
        print(f"supervise: child exited with code {child.returncode}; restarting in {args.restart_delay}s",
              file=sys.stderr, flush=True)
        deadline = time.monotonic() + args.restart_delay
        while not stopping and time.monotonic() < deadline:
            time.sleep(0.05)
    if child is not None and child.poll() is None:
        try:
            child.wait(timeout=5)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
