"""``moto_server``, with S3's conditional puts (``If-None-Match: *``) decided atomically, as S3 does.

moto checks the condition and then stores the object, in two steps of a threaded server: two
racers can both pass the check, and the second overwrites the first
(tests/e2e/storage/test_exclusive_create.py saw it once on a loaded machine). llm-ocr's atomic
create on S3 (work claims, the slots of a work group's parts: docs/stragglers.md) is that
condition, and S3 answers all but one of such racing puts ``412 Precondition Failed``
(https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html). Here the
conditional puts of one server are made one at a time, so moto's check holds.

Run as moto's own command: ``python -m tests.fakes.moto_server -H 127.0.0.1 -p N``.
"""

from __future__ import annotations

import functools
import sys
import threading
from typing import Any


def install() -> None:
    """Make moto's ``PutObject`` with ``If-None-Match: *`` one at a time."""
    from moto.s3.responses import S3Response

    put_object = S3Response.put_object
    lock = threading.Lock()

    @functools.wraps(put_object)
    def put_object_atomically(self: Any) -> Any:
        if self.headers.get("If-None-Match") == "*":
            with lock:
                return put_object(self)
        return put_object(self)

    S3Response.put_object = put_object_atomically  # type: ignore[method-assign]


def main(argv: list[str]) -> None:
    install()
    from moto.server import main as moto_main

    moto_main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
