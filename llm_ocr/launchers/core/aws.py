"""What the launchers on AWS (SageMaker, AWS Batch) share about the launcher's own credentials.

Their jobs reach AWS as a role of their own, so the launching machine's secret key and session token
must appear in no request: :func:`own_credentials` names them for
:func:`~llm_ocr.launchers.core.spec.assert_no_secret`.
"""

from __future__ import annotations

from typing import Any


def own_credentials(session: Any) -> dict[str, str]:
    """The secret parts of a boto3 ``session``'s credentials (``AWS_SECRET_ACCESS_KEY``,
    ``AWS_SESSION_TOKEN``), empty when there is no session yet (an offline dry run) or no credentials."""
    credentials = session.get_credentials() if session is not None else None
    if credentials is None:
        return {}
    frozen = credentials.get_frozen_credentials()
    return {"AWS_SECRET_ACCESS_KEY": frozen.secret_key or "", "AWS_SESSION_TOKEN": frozen.token or ""}
