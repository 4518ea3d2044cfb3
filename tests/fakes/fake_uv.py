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

**Shared venvs.** Every job of a test run ships the same wheel (it is byte-stable:
``llm_ocr/launchers/wheel.py``), and installing it costs a job about 2 CPU-seconds (a venv, pip,
byte-compiling the package), a third of what a small job costs. With ``LLM_OCR_TEST_VENVS_DIR``
set (the run's folder, tests/fakes/container.py), ``venv`` only marks ``DIR`` as the job's, and
``pip install`` makes ``DIR`` a link to the run's venv for that wheel (``venv-SHA256``), which the
first job to ship it installs exactly as above, under a file lock, and every later job finds
installed. The checks stay the job's own (the arguments, the wheel in the container, ``DIR`` the
venv it made), and the bootstrap still runs ``DIR/bin/llm-ocr`` from the wheel. A job whose
variable is empty makes and fills its own venv.

Anything else is refused (exit 2), as an unmodelled command must not pass silently.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
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


#: The run's folder of shared venvs (empty or unset: each job installs its own).
SHARED = "LLM_OCR_TEST_VENVS_DIR"
#: In a job's venv folder while it waits to be linked to the shared venv: the ``--python`` given.
PENDING = ".fake-uv-shared"


def venv(args: list[str]) -> int:
    args = [a for a in args if a != "--quiet"]
    python = _option(args, "--python")
    if len(args) != 1 or not python or not os.path.exists(python):
        print(f"fake uv: expected `venv --python PYTHON DIR` with an existing PYTHON, got {args} --python {python}", file=sys.stderr)
        return 2
    folder = Path(args[0])
    if os.environ.get(SHARED):
        if folder.is_symlink():  # an earlier attempt's link (the bootstrap's rmtree leaves links alone)
            folder.unlink()
        folder.mkdir(parents=True, exist_ok=True)
        (folder / PENDING).write_text(python)
        return 0
    return _make_venv(folder)


def _make_venv(folder: Path) -> int:
    """A venv of the tests' interpreter at ``folder`` that sees the tests' packages."""
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
    target = Path(python).parent.parent
    if (target / PENDING).exists():
        shared, code = _shared_venv(path)
        if code:
            return code
        shutil.rmtree(target)
        target.symlink_to(shared, target_is_directory=True)
        print(f"fake uv: installed {os.path.basename(path)} (extras: {match.group(1) or 'none'}) into {target} "
              f"(linked to the run's venv for this wheel, {shared.name})", flush=True)
        return 0
    done = _install(path, python)
    if done == 0:
        print(f"fake uv: installed {os.path.basename(path)} (extras: {match.group(1) or 'none'}) into {target}", flush=True)
    return done


def _install(wheel: str, python: str) -> int:
    """pip-install the wheel alone (``--no-deps``: the tests' packages stand for its dependencies)."""
    return subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps",
                           "--no-index", "--disable-pip-version-check", wheel], check=False).returncode


def _shared_venv(wheel: str) -> tuple[Path, int]:
    """The run's venv for this wheel (by its sha256), made and filled by the first job to ship it
    while the others wait on its lock; an exit status other than 0 if that failed."""
    digest = hashlib.sha256(Path(wheel).read_bytes()).hexdigest()[:16]
    root = Path(os.environ[SHARED])
    root.mkdir(parents=True, exist_ok=True)
    shared = root / f"venv-{digest}"
    with (root / f"venv-{digest}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (shared / ".installed").exists():
            return shared, 0
        shutil.rmtree(shared, ignore_errors=True)  # a half-made one (its maker was killed)
        code = _make_venv(shared) or _install(wheel, str(shared / "bin" / "python"))
        if code == 0:
            (shared / ".installed").touch()
        return shared, code


def main(argv: list[str]) -> int:
    if argv[:1] == ["venv"]:
        return venv(argv[1:])
    if argv[:2] == ["pip", "install"]:
        return pip_install(argv[2:])
    print(f"fake uv: `uv {' '.join(argv)}` is not modelled", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
