"""Secrets a job fetches from AWS Secrets Manager when it starts, by name.

SageMaker Processing has no secrets channel: whatever is in a job's ``Environment`` can be read
by anyone who can describe the job. So ``llm-ocr launch sagemaker --aws-secret HF_TOKEN=ID``
puts only the secret's *name* in the environment, as ``LLM_OCR_AWS_SECRET_HF_TOKEN=ID``, and
``llm-ocr`` fetches the value here, with the job's execution role, before anything else runs
(``secretsmanager:GetSecretValue`` on that secret). ``ID`` is a secret name or ARN, optionally
``ID#KEY`` to take one key of a JSON secret. The value lands in the process's environment as
``HF_TOKEN`` and is never logged.
"""

from __future__ import annotations

import json
import os
from collections.abc import MutableMapping

#: ``LLM_OCR_AWS_SECRET_<NAME>=<secret id>``: set ``<NAME>`` to that secret's value.
PREFIX = "LLM_OCR_AWS_SECRET_"


class SecretFetchError(RuntimeError):
    """A named secret could not be fetched; the message names it and the permission needed."""


def wanted_secrets(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Variable name -> secret id, from ``LLM_OCR_AWS_SECRET_*`` variables."""
    environ = os.environ if environ is None else environ
    return {key[len(PREFIX):]: value for key,
            value in environ.items() if key.startswith(PREFIX) and value and key != PREFIX}


def fetch_into_environment(environ: MutableMapping[str, str] | None = None, client: object = None) -> list[str]:
    """Fetch every wanted secret into ``environ``; the names set (never the values)."""
    environ = os.environ if environ is None else environ
    wanted = wanted_secrets(environ)
    if not wanted:
        return []
    if client is None:
        import boto3  # the sagemaker/s3 extras; only imported when a secret is wanted

        client = boto3.client("secretsmanager")
    for name, reference in sorted(wanted.items()):
        secret_id, _, key = reference.partition("#")
        try:
            answer = client.get_secret_value(SecretId=secret_id)  # type: ignore[attr-defined]
        except Exception as exc:  # noqa: BLE001 - any failure: say which secret and what to grant
            code = getattr(exc, "response", {}).get("Error", {}).get("Code", type(exc).__name__)
            raise SecretFetchError(
                f"cannot read AWS Secrets Manager secret {secret_id!r} for {name} ({code}): the job's execution role "
                "needs secretsmanager:GetSecretValue on it, in region "
                f"{os.environ.get('AWS_REGION') or os.environ.get('AWS_DEFAULT_REGION')}"
            ) from None
        value = answer.get("SecretString")
        if value is None:
            raise SecretFetchError(f"secret {secret_id!r} for {name} holds binary data; store the value as a string")
        if key:
            try:
                value = json.loads(value)[key]
            except (ValueError, KeyError, TypeError):
                raise SecretFetchError(f"secret {secret_id!r} for {name} is not a JSON object with the key "
                                       f"{key!r}") from None
        environ[name] = str(value)
    return sorted(wanted)
