"""What differs between stores, in one place: options, environment, errors, secrets.

Everything else in the package reads and writes through fsspec and never looks at a URL's
scheme. The few things that genuinely differ per store live here, as data where possible:

- **options**: ``--storage-options`` is either one flat dict for every store (the old form)
  or keyed by protocol, ``{"s3": {...}, "gs": {...}, "hf": {...}}``, so that inputs on one
  store and the output on another each get their own credentials (:func:`store_options`).
  Protocol-keyed entries win over flat keys; aliases (``gcs``/``gs``, ``s3a``/``s3``) match.
- **environment**: each store's own client reads its ecosystem's standard settings, and we
  rely on that rather than re-implementing it. Verified with the installed versions (tests
  pin it): botocore resolves the AWS credential chain and ``AWS_ENDPOINT_URL`` /
  ``AWS_ENDPOINT_URL_S3`` for s3fs by itself; gcsfs reads ``STORAGE_EMULATOR_HOST`` and
  Google ADC; huggingface_hub reads ``HF_TOKEN`` and ``HF_ENDPOINT`` (the latter at import
  time). The one adjustment is gcsfs's experimental zonal/HNS layer, which asks the bucket
  for its storage layout on every call and, against the emulator (which does not implement
  that API), waits 60 s each time: :func:`prepare_environment` turns it off before gcsfs is
  first imported, only when ``STORAGE_EMULATOR_HOST`` is set.
- **errors**: :func:`classify` sorts what s3fs/botocore, gcsfs and huggingface_hub raise into
  transient (retry), access (credentials: say what to set), missing, or other;
  :func:`explain` turns an error into a message that names the store and what to set.
- **secrets** never reach a log line or message: :func:`redact` and :func:`scrub`.

No import of any store client happens at module import time.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from fsspec.core import split_protocol

from llm_ocr.redaction import Redactor


@dataclass(frozen=True)
class StoreInfo:
    """How to talk to users about one store."""

    name: str
    protocols: tuple[str, ...]
    credentials: str  # what to set when access is denied
    endpoint: str  # how to point the client at another endpoint (emulators, MinIO...)


STORES: tuple[StoreInfo, ...] = (
    StoreInfo(
        "S3",
        ("s3", "s3a"),
        "set AWS credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE, or an instance/task role) "
        'or pass them in --storage-options \'{"s3": {"key": ..., "secret": ...}}\'',
        "AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL (or endpoint_url in --storage-options)",
    ),
    StoreInfo(
        "Google Cloud Storage",
        ("gs", "gcs"),
        "set Google credentials (gcloud auth application-default login, GOOGLE_APPLICATION_CREDENTIALS, "
        'or the VM/job service account) or --storage-options \'{"gs": {"token": ...}}\'',
        "STORAGE_EMULATOR_HOST",
    ),
    StoreInfo(
        "Hugging Face Hub",
        ("hf",),
        "set HF_TOKEN to a token with write access to the repo (for outputs) or read access (for inputs), "
        "or run `hf auth login`",
        "HF_ENDPOINT",
    ),
)

_LOCAL = StoreInfo("local disk", ("file", "local"), "check the file permissions", "")
_GENERIC = StoreInfo("storage", (), "check the credentials in --storage-options", "")


def protocol_of(url: str) -> str:
    """The URL's protocol (``file`` for plain paths); the outermost one of a chained URL."""
    return split_protocol(url.split("::", 1)[0])[0] or "file"


def store_info(url: str) -> StoreInfo:
    """How messages name the store of ``url`` and what they tell users to set."""
    protocol = protocol_of(url)
    for info in (*STORES, _LOCAL):
        if protocol in info.protocols:
            return info
    return _GENERIC


# --------------------------------------------------------------------------------------------
# Options and environment


def _aliases(protocol: str) -> tuple[str, ...]:
    for info in (*STORES, _LOCAL):
        if protocol in info.protocols:
            return info.protocols
    return (protocol,)


def _all_protocol_names() -> set[str]:
    from fsspec.registry import known_implementations, registry

    names = set(known_implementations) | set(registry)
    for info in (*STORES, _LOCAL):
        names.update(info.protocols)
    return names


def is_per_protocol_key(key: str, value: Any) -> bool:
    """Whether ``key: value`` of --storage-options is a per-protocol entry (``"s3": {...}``)."""
    return isinstance(value, Mapping) and key in _all_protocol_names()


def store_options(url: str, storage_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The fsspec options for ``url``: flat keys plus the entry for its protocol (a copy).

    Also prepares the environment of the store's client (:func:`prepare_environment`), so call
    this before building the filesystem.
    """
    protocol = protocol_of(url)
    prepare_environment(protocol)
    options: dict[str, Any] = {}
    per_protocol: dict[str, Any] = {}
    aliases = _aliases(protocol)
    for key, value in (storage_options or {}).items():
        if is_per_protocol_key(key, value):
            if key in aliases:
                per_protocol.update(value)
        else:
            options[key] = value
    options.update(per_protocol)
    return options


def prepare_environment(protocol: str) -> None:
    """Adjust a store client's environment before it is first imported (see module docstring).

    GCS only: with ``STORAGE_EMULATOR_HOST`` set, gcsfs's experimental zonal/HNS filesystem
    (on by default, chosen at *import* time from ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT``) makes
    every call wait 60 s for a layout API the emulator lacks. A value the user set wins.
    """
    if protocol in ("gs", "gcs") and os.environ.get("STORAGE_EMULATOR_HOST") and "gcsfs" not in sys.modules:
        os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")


# --------------------------------------------------------------------------------------------
# Secrets

#: Option keys whose values are safe to show (everything else is redacted).
_SAFE_KEYS = frozenset(
    {
        "endpoint_url", "endpoint", "region_name", "region", "anon", "project", "requester_pays",
        "use_ssl", "default_block_size", "default_fill_cache", "version_aware", "cache_regions",
        "listings_expiry_time", "max_concurrency", "skip_instance_cache", "use_listings_cache",
        "consistency", "block_size", "expand_info", "max_workers", "revision", "profile",
        "client_kwargs", "config_kwargs", "s3_additional_kwargs",
    }
)

def redact(options: Any) -> Any:
    """A copy of storage options safe to log: values of non-allowlisted keys become ``***``."""
    if isinstance(options, Mapping):
        out: dict[str, Any] = {}
        for key, value in options.items():
            if isinstance(value, Mapping) and (key in _SAFE_KEYS or is_per_protocol_key(key, value)):
                out[key] = redact(value)
            elif key in _SAFE_KEYS and not isinstance(value, Mapping):
                out[key] = value
            else:
                out[key] = "***"
        return out
    return "***"


def _secret_values(options: Any) -> list[str]:
    found: list[str] = []
    if isinstance(options, Mapping):
        for key, value in options.items():
            if isinstance(value, Mapping):
                found += _secret_values(value)
            elif isinstance(value, str) and key not in _SAFE_KEYS and len(value) >= 4:
                found.append(value)
    return found


def scrub(text: str, storage_options: Mapping[str, Any] | None = None) -> str:
    """``text`` with every secret value of ``storage_options`` and the environment replaced, and
    whatever is shaped like a credential (:class:`llm_ocr.redaction.Redactor`)."""
    return Redactor(_secret_values(storage_options or {}))(text)


# --------------------------------------------------------------------------------------------
# Errors


class StorageError(Exception):
    """A store cannot be used: access denied, or it kept failing after retries.

    The message names the store and says what to set or do; it never carries secrets. Not an
    ``OSError`` on purpose: code that treats an ``OSError`` while reading a part as "this part
    is corrupt, redo it" must not do so because the network is down.
    """

ErrorKind = Literal["transient", "access", "missing", "other"]

#: Exception class names (anywhere in the MRO) of network-level failures, matched by name so no
#: client library has to be imported to classify its errors.
_NETWORK_CLASSES = frozenset(
    {
        # botocore (not OSError subclasses)
        "HTTPClientError", "EndpointConnectionError", "ConnectionClosedError", "ConnectTimeoutError",
        "ReadTimeoutError", "ResponseStreamingError", "ProxyConnectionError", "IncompleteReadError",
        "ResponseParserError",
        # aiohttp (gcsfs, s3fs, our own client)
        "ClientConnectionError", "ClientPayloadError", "ServerDisconnectedError", "ServerTimeoutError",
        # httpx / httpx2 (huggingface_hub), requests, urllib3
        "TransportError", "RemoteProtocolError", "ChunkedEncodingError", "ProtocolError",
        # google-auth token refresh over the network
        "RefreshError",
    }
)
_CREDENTIAL_CLASSES = frozenset(
    {
        "NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError", "NoAuthTokenError",
        "ProfileNotFound", "UnauthorizedSSOTokenError", "TokenRetrievalError",
        "DefaultCredentialsError", "LocalTokenNotFoundError", "GatedRepoError",
    }
)
_TRANSIENT_CODES = frozenset(
    {
        "SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequestsException",
        "RequestThrottled", "InternalError", "ServiceUnavailable", "RequestTimeout", "RequestTimeoutException",
        "ProvisionedThroughputExceededException", "BandwidthLimitExceeded", "EC2ThrottledException",
    }
)
_ACCESS_CODES = frozenset(
    {
        "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken",
        "AllAccessDisabled", "AccountProblem", "InvalidSecurity", "TokenRefreshRequired", "UnrecognizedClientException",
    }
)
_TRANSIENT_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
_TRANSIENT_ERRNO = frozenset({errno.EBUSY, errno.EAGAIN, errno.ETIMEDOUT, errno.ECONNRESET, errno.ECONNREFUSED,
                              errno.ECONNABORTED, errno.EPIPE, errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EIO,
                              getattr(errno, "EREMOTEIO", 121)})


def _names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def http_status(exc: BaseException) -> int | None:
    """The HTTP status an exception carries (huggingface_hub, gcsfs, botocore), if any."""
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    if isinstance(status, int):
        return status
    if isinstance(response, Mapping):  # botocore ClientError
        meta = response.get("ResponseMetadata") or {}
        if isinstance(meta.get("HTTPStatusCode"), int):
            return meta["HTTPStatusCode"]
    code = getattr(exc, "code", None)  # gcsfs HttpError
    if isinstance(code, int) and 100 <= code < 600:
        return code
    if isinstance(code, str) and code.isdigit():
        return int(code)
    return None


def retry_after(exc: BaseException) -> float | None:
    """Seconds a throttling response asked us to wait (``Retry-After``), if it said."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    value = headers.get("Retry-After") if headers is not None and hasattr(headers, "get") else None
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _aws_code(exc: BaseException) -> str | None:
    response = getattr(exc, "response", None)
    if isinstance(response, Mapping):
        return (response.get("Error") or {}).get("Code")
    return None


def classify(exc: BaseException) -> ErrorKind:
    """Sort a storage error: retry it, explain credentials, report absence, or just show it."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:  # a wrapped cause may be more telling
        seen.add(id(current))
        kind = _classify_one(current)
        if kind != "other":
            return kind
        current = current.__cause__ or current.__context__
    return "other"


def _classify_one(exc: BaseException) -> ErrorKind:
    names = _names(exc)
    if names & _CREDENTIAL_CLASSES or isinstance(exc, PermissionError):
        return "access"
    code = _aws_code(exc)
    if code in _ACCESS_CODES:
        return "access"
    if code in _TRANSIENT_CODES:
        return "transient"
    status = http_status(exc)
    if status in (401, 403):
        return "access"
    if status in (409, 412) and "HfHubHTTPError" in names:
        return "transient"  # the Hub's answer to concurrent commits on one branch: try again
    if status == 404 or isinstance(exc, FileNotFoundError):
        return "missing"
    if status in _TRANSIENT_STATUS or (status is not None and status >= 500):
        return "transient"
    if status is not None:
        return "other"
    # gcsfs turns 403 into a plain OSError("Forbidden: ..."); gcsfs/google-auth name bad tokens.
    text = str(exc)
    if isinstance(exc, OSError) and (text.startswith("Forbidden") or "Invalid Credentials" in text):
        return "access"
    if names & _NETWORK_CLASSES or isinstance(exc, (ConnectionError, TimeoutError)):
        return "transient"
    if isinstance(exc, (IsADirectoryError, NotADirectoryError, FileExistsError)):
        return "other"
    if isinstance(exc, OSError):
        # s3fs maps throttling and server errors to OSError(EBUSY/EREMOTEIO/EIO); an OSError
        # without errno (many clients) is a network problem more often than not.
        return "transient" if exc.errno is None or exc.errno in _TRANSIENT_ERRNO else "other"
    return "other"


def explain(exc: BaseException, url: str, action: str, storage_options: Mapping[str, Any] | None = None) -> str:
    """A one-line, secret-free message: ``cannot ACTION URL: what happened — what to set``.

    ``action`` is a verb phrase such as ``"write to"`` or ``"read"``.
    """
    info = store_info(url)
    detail = _detail(exc)
    kind = classify(exc)
    message = f"cannot {action} {url}: {detail}"
    if kind == "access":
        message += f" — {info.credentials}"
        if info.endpoint:
            message += f" (endpoint: {info.endpoint})"
    elif kind == "missing" and "write" in action:
        message += f" — check the bucket/repo name and that it exists ({info.name})"
    elif kind == "transient":
        message += f" — {info.name} kept failing after retries; completed work is kept, rerun to resume"
        if info.endpoint:
            message += f" (endpoint from {info.endpoint})"
    return scrub(message, storage_options)


def _detail(exc: BaseException) -> str:
    code = _aws_code(exc) or (_aws_code(exc.__cause__) if exc.__cause__ is not None else None)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    name = type(exc).__name__
    if code and code not in text:
        return f"{code} ({name}: {text})" if text else code
    if code:
        return f"{code} ({text})" if not text.startswith(code) else text
    return f"{name}: {text}" if text else name
