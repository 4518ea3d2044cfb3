"""The service's configuration: where its state lives, where it listens, what it accepts, and the
token rules. Imports no web framework, so ``llm-ocr worker`` needs none."""

from __future__ import annotations

import ipaddress
import logging
import os
from dataclasses import dataclass, field
from typing import Any

from llm_ocr.redaction import redact
from llm_ocr.service.callback import SECRET_VARIABLE, CallbackSettings
from llm_ocr.service.queue import DATABASE_VARIABLE, DocumentQueue, DriverMissing, QueueUnavailable, is_postgres
from llm_ocr.service.spool import Spool
from llm_ocr.service.worker import WorkerSettings

log = logging.getLogger("llm_ocr.service")


@dataclass
class Limits:
    """What the gateway accepts."""

    #: Largest upload, in bytes.
    max_upload: int = 100 * 1024 * 1024
    #: Most pages in one document.
    max_pages: int = 2000
    #: Most documents queued (waiting for a worker) at once; more answer 429.
    queue_length: int = 1000
    #: Seconds a 429 asks the client to wait (``Retry-After``).
    retry_after: int = 5
    #: Documents named by a local path (or ``file://``) are refused unless this is set: a
    #: service reachable from elsewhere must not read its own machine's files for a caller.
    allow_local_urls: bool = False


#: The variable that holds the token (``--token-file`` names a file instead).
TOKEN_VARIABLE = "LLM_OCR_SERVICE_TOKEN"  # noqa: S105 - the variable's name, not a token


class ServiceError(Exception):
    """The service cannot start as configured; the message says why and what to do."""


@dataclass
class ServiceConfig:
    """Where the service keeps its state, where it listens, what it accepts, and its worker."""

    #: The folder of the SQLite database (``service.db``), and of documents and results unless ``store``.
    data: str = "llm-ocr-service"
    #: The state and queue: a PostgreSQL URL (``postgresql://...``) or a SQLite file; None:
    #: ``data/service.db``. The URL's password is never shown (``repr`` leaves it out).
    database_url: str | None = field(default=None, repr=False)
    #: Documents and results: a folder or any store URL (default: ``data``).
    store: str | None = None
    storage_options: dict[str, Any] = field(default_factory=dict)
    host: str = "127.0.0.1"
    #: 0: any free port (the one chosen is announced).
    port: int = 8080
    token: str | None = field(default=None, repr=False)
    limits: Limits = field(default_factory=Limits)
    #: The worker in this process; None: the gateway alone.
    worker: WorkerSettings | None = field(default_factory=WorkerSettings)
    #: The folder of Fields schemas submissions may name (``schema=NAME``: ``NAME.json``).
    schemas: str | None = None
    #: How documents' callbacks are made (the secret that signs them).
    callbacks: CallbackSettings = field(default_factory=CallbackSettings)

    @property
    def database(self) -> str:
        """The database: ``database_url``, else the SQLite file ``data/service.db``."""
        return self.database_url or os.path.join(self.data, "service.db")


def is_loopback(host: str) -> bool:
    """True when ``host`` is reachable only from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, token: str | None) -> None:
    """Refuse to listen beyond loopback without a token."""
    if token is None and not is_loopback(host):
        raise ServiceError(f"--host {host} is reachable from other machines: give the API a token with --token-file "
                           f"FILE or {TOKEN_VARIABLE} (or listen on 127.0.0.1)")


def read_token(token_file: str | None) -> str | None:
    """The token from ``token_file`` (its first line), else from :data:`TOKEN_VARIABLE`."""
    if token_file:
        try:
            with open(token_file, encoding="utf-8") as handle:
                token = handle.readline().strip()
        except OSError as exc:
            raise ServiceError(f"cannot read --token-file {token_file}: {exc.strerror}") from None
        if not token:
            raise ServiceError(f"--token-file {token_file} is empty")
        return token
    return os.environ.get(TOKEN_VARIABLE) or None


def read_callback_secret(secret_file: str | None) -> str | None:
    """The callbacks' secret from ``secret_file`` (its first line), else from :data:`SECRET_VARIABLE`."""
    if secret_file:
        try:
            with open(secret_file, encoding="utf-8") as handle:
                secret = handle.readline().strip()
        except OSError as exc:
            raise ServiceError(f"cannot read --callback-secret-file {secret_file}: {exc.strerror}") from None
        if not secret:
            raise ServiceError(f"--callback-secret-file {secret_file} is empty")
        return secret
    return os.environ.get(SECRET_VARIABLE) or None


def database_of(given: str | None) -> str | None:
    """The database named by ``--database`` (``given``), else by :data:`DATABASE_VARIABLE`; None:
    the SQLite file under ``--data``."""
    return given or os.environ.get(DATABASE_VARIABLE) or None


def open_queue(database: str) -> DocumentQueue:
    """The queue in ``database``: a PostgreSQL URL, else the path of a SQLite file."""
    if is_postgres(database):
        from llm_ocr.service.postgres import PostgresQueue

        return PostgresQueue(database)
    from llm_ocr.service.sqlite import SQLiteQueue

    return SQLiteQueue(database)


def open_state(config: ServiceConfig) -> tuple[DocumentQueue, Spool]:
    """The queue and the spool of ``config``; :class:`ServiceError` when the database cannot be used."""
    try:
        queue = open_queue(config.database)
    except (QueueUnavailable, DriverMissing) as exc:
        raise ServiceError(str(exc)) from None
    return queue, Spool(config.store or config.data, config.storage_options)


def database_shown(config: ServiceConfig) -> str:
    """The database as it may be logged: a URL's password replaced by ``***``."""
    return redact(config.database)


def shared_store_warning(config: ServiceConfig) -> str | None:
    """Why ``config`` may not work across machines, or None: PostgreSQL is shared by every machine,
    but documents and results on a local folder are seen only by the machines that mount it."""
    if config.database_url and is_postgres(config.database_url) and config.store is None:
        return (f"documents and results are kept under --data {config.data}: every gateway and worker must "
                "see that folder (a shared mount), or give --store s3://... (or another store URL)")
    return None


def run_worker(config: ServiceConfig) -> None:
    """``llm-ocr worker``: read documents from ``config``'s queue until SIGINT or SIGTERM (no gateway)."""
    import asyncio
    import signal

    from llm_ocr.service.worker import Worker

    assert config.worker is not None
    settings = config.worker

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        queue, spool = open_state(config)
        log.info("llm-ocr worker: database %s, documents and results in %s", database_shown(config),
                 redact(spool.url))
        if (warning := shared_store_warning(config)) is not None:
            log.warning("%s", warning)
        try:
            await Worker(queue, spool, settings, callbacks=config.callbacks).run(stop)
        finally:
            queue.close()

    asyncio.run(main())
