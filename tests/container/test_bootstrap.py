"""A job's bootstrap in a stock image: what it runs vLLM with, and how it fails.

The install itself runs in the launcher end-to-end tests (the fakes' containers, with a fake
``uv``: one pod of the Kubernetes launch installs the wheel into a venv of its own, every other
job of the run links to the run's venv of the same wheel) and against a stand-in image with the
real package index in tests/packaging."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from llm_ocr.container.bootstrap import VLLM_MODULE, image_server_command
from llm_ocr.launchers.core.command import BOOTSTRAP


def test_an_image_without_a_vllm_program_gets_its_pythons_vllm_module(tmp_path: Path) -> None:
    site = tmp_path / "site" / "vllm"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("")
    code = "from llm_ocr.container.bootstrap import image_server_command as f; import os; print(f(dict(os.environ)))"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), *sys.path])}
    found = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert found == f"{sys.executable} -m {VLLM_MODULE}"
    # A `vllm` on PATH (vLLM's images), or the user's own choice, is left alone.
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "vllm").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "vllm").chmod(0o755)
    assert image_server_command({"PATH": str(tmp_path / "bin")}) is None
    assert image_server_command({"PATH": "/usr/bin", "LLM_OCR_SERVER_COMMAND": "vllm serve"}) is None


def test_a_missing_wheel_stops_the_job_with_the_reason(tmp_path: Path) -> None:
    missing = "/llm-ocr-code/wheels/0000/llm_ocr-0.1.0-py3-none-any.whl"
    done = subprocess.run([sys.executable, "-c", BOOTSTRAP, f"{missing}[hub]", "llm-ocr", "run"], capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path)}, timeout=60)
    assert done.returncode == 1 and len(BOOTSTRAP) <= 256  # one SageMaker ContainerEntrypoint word
    assert done.stderr.strip() == f"llm-ocr bootstrap: the llm-ocr wheel {missing} is not in the container"


def test_an_install_that_touches_the_images_packages_stops_the_job(tmp_path: Path) -> None:
    # An installer that (wrongly) adds a distribution the image's Python sees: the bootstrap notices.
    site, bin_dir = tmp_path / "image-site", tmp_path / "bin"
    site.mkdir()
    bin_dir.mkdir()
    uv = bin_dir / "uv"
    uv.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = venv ]; then mkdir -p "$5/bin"; exit 0; fi\n'
        f'mkdir -p "{site}/intruder-1.0.dist-info" && printf "Name: intruder\\nVersion: 1.0\\n" > "{site}/intruder-1.0.dist-info/METADATA"\n'
    )
    uv.chmod(0o755)
    (tmp_path / "src").mkdir()
    code = "import sys; from llm_ocr.container.bootstrap import install_main; install_main(sys.argv[1:])"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHONPATH": os.pathsep.join([str(site), *sys.path]), "TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code, f"{tmp_path / 'src'}[s3]", str(tmp_path / "venv")],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "changed the image's own packages (intruder==1.0)" in done.stderr
