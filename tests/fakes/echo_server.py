"""A model server that repeats everything it was given and exits: for redaction tests.

Prints every environment variable as ``NAME=VALUE``, its arguments (joined, and as a Python
list), the value of each variable named in ``$ECHO_SERVER_REPEAT`` (comma-separated) alone on a
line, and an argparse-style "unrecognized arguments" error repeating its command line, then
exits 2: the worst a server's log can hold. The repeated part comes last, within the tail of
the log llm-ocr prints when a server fails to start.
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    """Repeat the environment and the command line, then fail like a server that refused a flag."""
    args = sys.argv[1:]
    for name, value in sorted(os.environ.items()):
        print(f"echo-server env {name}={value}")
    print("echo-server argv:", " ".join(args))
    print("echo-server argv list:", args)
    for name in filter(None, os.environ.get("ECHO_SERVER_REPEAT", "").split(",")):
        print(f"echo-server repeats {os.environ.get(name)}")  # the value alone, without its name
    print(f"echo-server: error: unrecognized arguments: {' '.join(args)}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
