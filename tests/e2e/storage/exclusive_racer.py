"""One racer of tests/e2e/storage/test_exclusive_create.py: ``python -m tests.e2e.storage.exclusive_racer
URL FOLDER NAME...`` opens ``URL`` like a shard would, writes ``FOLDER/ready-PID``, waits for
``FOLDER/go``, then tries :meth:`Storage.create_exclusive` on every NAME (in the order given) with
content unique to this process, and prints ``{"token": ..., "won": [names]}``."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path

from llm_ocr.storage import Storage


def main() -> None:
    url, folder, *names = sys.argv[1:]
    storage = Storage(url)
    token = f"{os.getpid()}-{uuid.uuid4().hex}"
    storage.exists(storage.path("warm-up"))  # the client is built and connected before the race
    Path(folder, f"ready-{os.getpid()}").write_text(token)
    while not Path(folder, "go").exists():
        time.sleep(0.001)
    won = [name for name in names if storage.create_exclusive(storage.path(name), f"{token} {name}".encode())]
    print(json.dumps({"token": token, "won": won}))


if __name__ == "__main__":
    main()
