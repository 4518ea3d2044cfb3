"""``gcp-storage-emulator``, with uploads that honour ``ifGenerationMatch=0`` as Cloud Storage does.

The emulator ignores the precondition (tests/e2e/storage/test_exclusive_create.py checks that it
still does): every conditional upload "wins", the last one overwriting the others. llm-ocr's
atomic create on GCS (work claims, the slots of a work group's parts: docs/stragglers.md) is that
precondition, so against the bare emulator two processes writing one group's next slot at once
both succeed and one's rows are overwritten by the other's: seen as a page written twice in the
Cloud Run end-to-end test once two readers shared a group. Cloud Storage answers such an upload
``412 Precondition Failed`` when the object exists
(https://cloud.google.com/storage/docs/request-preconditions); so does this.

The emulator serves one request at a time (``http.server.HTTPServer``), so the check and the
write cannot interleave with another upload. The check is made where an upload starts (a media
or multipart upload, or a resumable one's first request), which is where gcsfs sends it.

Run as the emulator's own command: ``python -m tests.fakes.gcs_emulator start --port N ...``.
"""

from __future__ import annotations

import json
import sys
from http import HTTPStatus
from typing import Any

PRECONDITION_FAILED = {"error": {"code": 412, "message": "At least one of the pre-conditions you specified did not hold.",
                                 "errors": [{"domain": "global", "reason": "conditionNotMet",
                                             "message": "At least one of the pre-conditions you specified did not hold."}]}}


def _object_name(request: Any) -> str | None:
    """The name an upload request creates: in the query, or in its metadata (multipart, resumable)."""
    if request.query.get("name"):
        return str(request.query["name"][0])
    data = request.data
    if isinstance(data, dict):
        meta = data.get("meta") if "meta" in data else data
        if isinstance(meta, dict) and meta.get("name"):
            return str(meta["name"])
    return None


def strict(insert: Any, storage_errors: tuple[type[BaseException], ...]) -> Any:
    """``insert`` (the emulator's upload handler) refusing an upload with ``ifGenerationMatch=0``
    whose object exists."""

    def checked(request: Any, response: Any, storage: Any, *args: Any, **kwargs: Any) -> Any:
        if request.query.get("ifGenerationMatch") == ["0"] and "upload_id" not in request.query:
            name = _object_name(request)
            if name is not None:
                try:
                    storage.get_file_obj(request.params["bucket_name"], name)
                except storage_errors:
                    pass
                else:
                    response.status = HTTPStatus.PRECONDITION_FAILED
                    response.write_file(json.dumps(PRECONDITION_FAILED).encode(), "application/json")
                    return None
        return insert(request, response, storage, *args, **kwargs)

    return checked


def install() -> None:
    """Put the checked upload handler where the emulator's router finds it."""
    from gcp_storage_emulator import server
    from gcp_storage_emulator.exceptions import NotFound
    from gcp_storage_emulator.handlers import objects

    original = objects.insert
    checked = strict(original, (NotFound,))
    objects.insert = checked  # the router's fallback for uploads posted without /upload
    for _, handlers in server.HANDLERS:
        for method, handler in list(handlers.items()):
            if handler is original:
                handlers[method] = checked


def main(argv: list[str]) -> None:
    install()
    from gcp_storage_emulator.__main__ import main as emulator_main

    emulator_main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
