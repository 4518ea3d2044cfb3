"""``pip install WHEEL[EXTRAS]`` as a job container of :mod:`tests.fakes.fake_jobs` runs it.

The container sees the wheel under a volume's mount path (``/llm-ocr-code/wheels/...``); here
that path is mapped to the folder the fake materialised the volume in (``FAKE_JOBS_MOUNTS``, a
JSON object: mount path -> local folder). The wheel must exist there, as pip would require. It is
then installed with ``--no-deps --no-index --target $FAKE_JOBS_SITE``: into the job's own folder
(on the job's ``PYTHONPATH``, its console script in ``site/bin`` on the job's ``PATH``), never
into the shared test venv, whose packages stand in for the dependencies the real pip would fetch.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "install":
        print(f"fake pip: only `pip install WHEEL` is modelled, got {argv}", file=sys.stderr)
        return 2
    wheels = [a for a in argv[1:] if re.search(r"\.whl(\[[^\]]*\])?$", a)]
    if len(wheels) != 1:
        print(f"fake pip: expected one wheel file, got {argv[1:]}", file=sys.stderr)
        return 2
    match = re.match(r"^(.*\.whl)(?:\[([^\]]*)\])?$", wheels[0])
    assert match is not None
    path, extras = match.group(1), match.group(2) or ""
    local = path
    for mount, folder in json.loads(os.environ.get("FAKE_JOBS_MOUNTS") or "{}").items():
        if path == mount or path.startswith(mount.rstrip("/") + "/"):
            local = folder + path[len(mount.rstrip("/")):]
    if not os.path.isfile(local):
        print(f"ERROR: Could not install packages due to an OSError: [Errno 2] No such file or directory: {path!r}",
              file=sys.stderr)
        return 1
    target = os.environ["FAKE_JOBS_SITE"]
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--disable-pip-version-check",
         "--target", target, local],
        check=False,
    )
    if done.returncode == 0:
        print(f"fake pip: installed {os.path.basename(path)} (extras: {extras or 'none'}) into the job's site folder",
              flush=True)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
