"""A job's first step in a stock model image: llm-ocr into a virtualenv of its own, then ``exec``.

The launcher ships the llm-ocr wheel and makes the container's command (see
:func:`llm_ocr.launchers.core.command.install_then_run`)::

    python3 -c "import sys;sys.path.insert(0,sys.argv[1].partition('[')[0]);..." WHEEL[EXTRAS] llm-ocr STAGE ...

``python3`` is the image's own interpreter; it imports this module straight from the wheel (a
wheel is a zip archive, and this module needs nothing but the standard library), which then:

1. when the job serves a model (``LLM_OCR_ENGINE=vllm``), checks that the image's CUDA runs on
   the machine's driver (:mod:`.cuda`), and stops at once, naming both, when it cannot;
2. makes a virtualenv (``$LLM_OCR_VENV``, default ``$TMPDIR/llm-ocr-venv``) from the image's
   Python and installs ``llm-ocr[EXTRAS]`` from the wheel into it. Never into the image's own
   environment: vLLM's images pin what vLLM needs (AWS's vLLM DLC ships transformers 4.57.6,
   which requires ``huggingface-hub<1.0``; llm-ocr's ``datasets`` needs hub >= 1.31, so a pip
   install there upgrades hub and ``import transformers`` fails: vLLM never starts). llm-ocr
   talks to vLLM over HTTP and starts it as a subprocess, so it need not share its Python;
3. ``exec`` s the venv's ``llm-ocr`` with the job's arguments, the environment unchanged, so
   ``vllm`` on ``PATH`` is still the image's (llm-ocr's default ``--server-command`` is
   ``vllm serve``). An image whose Python has vLLM but no ``vllm`` program gets
   ``LLM_OCR_SERVER_COMMAND="<the image's python> -m vllm.entrypoints.openai.api_server"``.

The Dockerfiles install llm-ocr into their image the same way, at build time
(``python3 -m llm_ocr.container.bootstrap install SOURCE[EXTRAS] VENV --link /usr/local/bin``,
:func:`install_main`). Both check that the image's own packages (every distribution its Python
sees) are the same after the install as before, and stop when they are not.

The installer is ``uv`` (https://docs.astral.sh/uv/; vLLM's images have it): on ``PATH``, else
the image's pip puts it in a private folder (``pip install --target``, which leaves the image's
packages alone), else the venv's own pip (``python3 -m venv``). Signals reach llm-ocr directly
(``exec``), and its exit status is the job's. A failure here exits 2 with the reason.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: Where the venv goes (default: the temporary folder).
VENV_ENV = "LLM_OCR_VENV"
#: vLLM's OpenAI server as a module, for images with vLLM but no ``vllm`` program.
VLLM_MODULE = "vllm.entrypoints.openai.api_server"
#: Exit status when the job cannot start (llm-ocr's own "could not run").
CANNOT_RUN = 2


class BootstrapError(Exception):
    """The job cannot start; the message says why."""


def main(argv: list[str] | None = None) -> None:
    """``WHEEL[EXTRAS] PROGRAM ARGS...``: install, then exec ``PROGRAM`` from the venv."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if len(args) < 2:
            raise BootstrapError("usage: bootstrap WHEEL[EXTRAS] llm-ocr STAGE ...")
        wheel, extras = split_wheel(args[0])
        env = dict(os.environ)
        if env.get("LLM_OCR_ENGINE") == "vllm":
            from llm_ocr.container.cuda import CudaMismatch, check_cuda, interpreter_of

            try:
                _say(check_cuda(interpreter_of("vllm") or sys.executable, env))
            except CudaMismatch as exc:
                raise BootstrapError(str(exc)) from None
        server = image_server_command(env)
        if server:
            env["LLM_OCR_SERVER_COMMAND"] = server
            _say(f"the image has vLLM but no `vllm` program: LLM_OCR_SERVER_COMMAND={server}")
        venv = Path(env.get(VENV_ENV) or Path(tempfile.gettempdir()) / "llm-ocr-venv")
        install(wheel, extras, venv, env)
        program = venv / "bin" / args[1]
        if not program.exists():
            raise BootstrapError(f"{program} is missing after installing {wheel.name}")
    except BootstrapError as exc:
        print(f"llm-ocr bootstrap: {exc}", file=sys.stderr, flush=True)
        sys.exit(CANNOT_RUN)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(str(program), [args[1], *args[2:]], env)


def split_wheel(spec: str) -> tuple[Path, list[str]]:
    """``/code/x.whl[hub,s3]`` -> (``/code/x.whl``, ``["hub", "s3"]``); the wheel (or, for an image
    build, the source folder) must exist."""
    path, _, rest = spec.partition("[")
    extras = [e.strip() for e in rest.rstrip("]").split(",") if e.strip()]
    wheel = Path(path)
    if not wheel.exists():
        raise BootstrapError(f"the llm-ocr wheel {path} is not in the container (was the code volume or input "
                             "mounted?)")
    return wheel, extras


def install_main(argv: list[str]) -> None:
    """``install SOURCE[EXTRAS] VENV [--link DIR]``: what the Dockerfiles run at build time (the
    same venv, the same installer as a job's bootstrap, the image's packages left alone), then
    ``DIR/llm-ocr`` linked to the venv's and run once (``--help``)."""
    link = None
    if len(argv) == 4 and argv[2] == "--link":
        link, argv = Path(argv[3]), argv[:2]
    if len(argv) != 2:
        print("usage: python3 -m llm_ocr.container.bootstrap install SOURCE[EXTRAS] VENV [--link DIR]", file=sys.stderr)
        sys.exit(CANNOT_RUN)
    try:
        source, extras = split_wheel(argv[0])
        venv = Path(argv[1])
        install(source, extras, venv, dict(os.environ))
        if link is not None:
            target = link / "llm-ocr"
            target.unlink(missing_ok=True)
            target.symlink_to(venv / "bin" / "llm-ocr")
            _run([str(target), "--help"], {**os.environ, "PYTHONPATH": ""}, "run llm-ocr --help", quiet=True)
    except BootstrapError as exc:
        print(f"llm-ocr bootstrap: {exc}", file=sys.stderr, flush=True)
        sys.exit(CANNOT_RUN)


def image_server_command(env: dict[str, str]) -> str | None:
    """The command that starts the image's vLLM when ``vllm serve`` would not find it: None when
    ``vllm`` is on PATH, the user chose a command, or this Python has no vLLM either."""
    if env.get("LLM_OCR_SERVER_COMMAND") or shutil.which("vllm", path=env.get("PATH")):
        return None
    if importlib.util.find_spec("vllm") is None:
        return None
    return f"{sys.executable} -m {VLLM_MODULE}"


def install(wheel: Path, extras: list[str], venv: Path, env: dict[str, str]) -> None:
    """A fresh venv at ``venv`` from this Python, with ``llm-ocr[extras]`` from ``wheel``."""
    started = time.monotonic()
    requirement = f"llm-ocr{'[' + ','.join(extras) + ']' if extras else ''} @ {wheel.resolve().as_uri()}"
    image_packages = installed_packages()
    shutil.rmtree(venv, ignore_errors=True)
    uv = find_uv(env)
    if uv is not None:
        # The system's certificates, as pip uses them: a proxy's CA installed in the image is trusted
        # (uv's own default is its bundled roots; older uv reads UV_NATIVE_TLS, newer UV_SYSTEM_CERTS).
        uv_env = {"UV_NATIVE_TLS": "1", "UV_SYSTEM_CERTS": "1", **env}
        _run([*uv, "venv", "--quiet", "--python", sys.executable, str(venv)], uv_env, "create the venv")
        _run([*uv, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), requirement], uv_env,
             f"install {requirement}")
        how = "uv"
    else:
        _run([sys.executable, "-m", "venv", str(venv)], env, "create the venv (python3 -m venv)")
        _run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
              "--no-cache-dir", requirement], env, f"install {requirement}")
        how = "pip"
    changed = sorted(set(image_packages) ^ set(installed_packages()))
    if changed:  # never expected: the install went into the image's own Python after all
        raise BootstrapError(f"installing llm-ocr changed the image's own packages ({', '.join(changed[:8])}): vLLM "
                             "may no longer start")
    _say(f"installed {requirement.partition(' @ ')[0]} into {venv} with {how} in {time.monotonic() - started:.0f} s "
         "(the image's packages unchanged)")


def installed_packages() -> list[str]:
    """``name==version`` of every distribution this (the image's) Python sees."""
    import importlib.metadata

    return sorted(f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions() if d.metadata["Name"])  # noqa: E501 - not wrapped yet


def find_uv(env: dict[str, str]) -> list[str] | None:
    """How to run uv: on PATH, as this Python's module, or installed now with this Python's pip into
    a private folder (``--target``: the image's packages are left alone); None without any."""
    found = shutil.which("uv", path=env.get("PATH"))
    if found:
        return [found]
    if importlib.util.find_spec("uv") is not None:
        return [sys.executable, "-m", "uv"]
    if importlib.util.find_spec("pip") is None:
        return None
    target = Path(tempfile.gettempdir()) / "llm-ocr-uv"
    if (target / "bin" / "uv").exists():  # a retry in the same container
        return [str(target / "bin" / "uv")]
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                           "--no-cache-dir", "--target", str(target), "uv"], env=env, check=False)
    binary = target / "bin" / "uv"
    if done.returncode != 0 or not binary.exists():
        _say("could not install uv with the image's pip; using python3 -m venv and pip")
        return None
    return [str(binary)]


def _run(command: list[str], env: dict[str, str], what: str, *, quiet: bool = False) -> None:
    try:
        done = subprocess.run(command, env=env, check=False, stdout=subprocess.DEVNULL if quiet else None)
    except OSError as exc:
        raise BootstrapError(f"could not {what}: {exc}") from None
    if done.returncode != 0:
        raise BootstrapError(f"could not {what} (exit {done.returncode}; the output above says why)")


def _say(line: str) -> None:
    print(f"llm-ocr bootstrap: {line}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["install"]:
        install_main(sys.argv[2:])
    else:
        main()
