"""``uv venv`` and ``uv pip install`` as a fake platform's container runs them (the job's bootstrap,
:mod:`llm_ocr.container.bootstrap`), offline.

- ``uv venv [--quiet] --python PYTHON DIR``: a real virtualenv (``python -m venv --without-pip``
  of the tests' interpreter, which stands for the image's), whose site-packages also sees the
  tests' site-packages through a ``.pth`` file: those packages stand for the dependencies the
  real uv would fetch from the index. Their ``.pth`` files are not processed, so the tests' own
  editable llm-ocr is not on the venv's path: the job runs the wheel it installs, or nothing.
- ``uv pip install [--quiet] --python DIR/bin/python "llm-ocr[EXTRAS] @ file:///path.whl"``: the
  wheel must exist (the container's view of it: the fake platform maps its mounts before running
  the command); it is installed with pip ``--no-deps --no-index`` into that venv, its console
  script in ``DIR/bin``.

Anything else is refused (exit 2), as an unmodelled command must not pass silently.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import urllib.parse
from pathlib import Path


def _option(args: list[str], name: str) -> str | None:
    if name in args:
        i = args.index(name)
        value = args[i + 1]
        del args[i : i + 2]
        return value
    return None


def venv(args: list[str]) -> int:
    args = [a for a in args if a != "--quiet"]
    python = _option(args, "--python")
    if len(args) != 1 or not python or not os.path.exists(python):
        print(f"fake uv: expected `venv --python PYTHON DIR` with an existing PYTHON, got {args} --python {python}", file=sys.stderr)
        return 2
    folder = Path(args[0])
    done = subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=False)
    if done.returncode:
        return done.returncode
    probe = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = subprocess.run([str(folder / "bin" / "python"), "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(site, "_fake_uv_dependencies.pth").write_text("".join(f"{p}\n" for p in sorted(ours)))
    return 0


def pip_install(args: list[str]) -> int:
    args = [a for a in args if a != "--quiet"]
    python = _option(args, "--python")
    if len(args) != 1 or not python:
        print(f"fake uv: expected `pip install --python PYTHON REQUIREMENT`, got {args}", file=sys.stderr)
        return 2
    match = re.fullmatch(r"llm-ocr(?:\[([a-z0-9,-]*)\])? @ (file://\S+\.whl)", args[0])
    if match is None:
        print(f"fake uv: only `llm-ocr[EXTRAS] @ file:///...whl` is modelled, got {args[0]!r}", file=sys.stderr)
        return 2
    path = urllib.parse.unquote(urllib.parse.urlparse(match.group(2)).path)
    if not os.path.isfile(path):
        print(f"error: Distribution not found at: {match.group(2)}", file=sys.stderr)
        return 1
    done = subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps",
                           "--no-index", "--disable-pip-version-check", path], check=False)
    if done.returncode == 0:
        print(f"fake uv: installed {os.path.basename(path)} (extras: {match.group(1) or 'none'}) into {Path(python).parent.parent}",
              flush=True)
    return done.returncode


def main(argv: list[str]) -> int:
    if argv[:1] == ["venv"]:
        return venv(argv[1:])
    if argv[:2] == ["pip", "install"]:
        return pip_install(argv[2:])
    print(f"fake uv: `uv {' '.join(argv)}` is not modelled", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
