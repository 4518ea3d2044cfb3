"""Gateway and worker in one process: ``llm-ocr service`` (and :class:`BackgroundService`, the same
in a thread of a program or a test).

The gateway is served by uvicorn on the same event loop as the worker. Signals are this module's,
not uvicorn's: SIGINT or SIGTERM stops intake (the gateway closes), the worker's document in
progress stops after its pages in flight and goes back to the queue, and the process exits.

Bound to anything but loopback, the API requires a token: :func:`check_exposure` refuses to start
without one. The token is compared, never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import Callable, Iterator

import uvicorn

from llm_ocr.service.config import (
    ServiceConfig,
    ServiceError,
    check_exposure,
    database_shown,
    open_state,
    shared_store_warning,
)
from llm_ocr.service.gateway import Gateway, create_app
from llm_ocr.service.queue import DocumentQueue
from llm_ocr.service.spool import Spool
from llm_ocr.service.worker import Worker

log = logging.getLogger("llm_ocr.service")

class _Server(uvicorn.Server):
    # The signals are the service's (serve() below), so that a stop first lets the worker
    # put its document back; uvicorn's own handler would re-raise them once it has stopped.
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve(config: ServiceConfig, stop: asyncio.Event, started: Callable[[str], None] | None = None) -> None:
    """Run the gateway (and the worker, if configured) until ``stop`` is set; ``started`` gets the URL."""
    check_exposure(config.host, config.token)
    queue, spool = open_state(config)
    try:
        await _serve(config, queue, spool, stop, started)
    finally:
        queue.close()


async def _serve(config: ServiceConfig, queue: DocumentQueue, spool: Spool, stop: asyncio.Event,
                 started: Callable[[str], None] | None) -> None:
    if (warning := shared_store_warning(config)) is not None:
        log.warning("%s", warning)
    worker = Worker(queue, spool, config.worker, callbacks=config.callbacks) if config.worker is not None else None
    gateway = Gateway(queue, spool, config.limits, config.token,
                      on_submit=worker.wake.set if worker else None,
                      workers_ready=(lambda: worker.ready) if worker else None,
                      schemas=config.schemas, callbacks=config.callbacks)
    server = _Server(uvicorn.Config(create_app(gateway), host=config.host, port=config.port, log_level="warning",
                                    access_log=False, lifespan="off"))
    tasks = [asyncio.create_task(server.serve(), name="gateway")]
    if worker is not None:
        tasks.append(asyncio.create_task(worker.run(stop), name="worker"))
    stopped = asyncio.create_task(stop.wait())
    try:
        while not server.started:
            done, _ = await asyncio.wait([*tasks, stopped], timeout=0.05, return_when=asyncio.FIRST_COMPLETED)
            if done:
                break
        if server.started:
            port = server.servers[0].sockets[0].getsockname()[1]
            host = f"[{config.host}]" if ":" in config.host else config.host
            url = f"http://{host}:{port}"
            log.info("llm-ocr service listening on %s (%s; database %s)", url,
                     "gateway and one worker" if worker else "gateway only", database_shown(config))
            if started is not None:
                started(url)
        await asyncio.wait([*tasks, stopped], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.set()
        server.should_exit = True
        results = await asyncio.gather(*tasks, return_exceptions=True)
        stopped.cancel()
    for task, result in zip(tasks, results):
        if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
            raise ServiceError(f"the {task.get_name()} stopped: {result}") from result
    if not server.started:
        raise ServiceError(f"the gateway could not listen on {config.host}:{config.port}")


def run_service(config: ServiceConfig) -> None:
    """Serve until SIGINT or SIGTERM (the command's entry)."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await serve(config, stop)

    asyncio.run(main())


class BackgroundService:
    """The service in a thread of this process, for a program or a test::

        with BackgroundService(ServiceConfig(data=tmp, port=0, worker=WorkerSettings(endpoint=url))) as service:
            llm_ocr.Service(service.url).submit("scan.pdf").wait()
    """

    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="llm-ocr-service", daemon=True)

    def _main(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            await serve(self.config, self._stop, self._started)

        try:
            asyncio.run(main())
        except BaseException as exc:  # noqa: BLE001 - handed to the thread that waits for the start
            self._error = exc
        finally:
            self._ready.set()

    def _started(self, url: str) -> None:
        self.url = url
        self._ready.set()

    def __enter__(self) -> BackgroundService:
        self._thread.start()
        self._ready.wait()
        if not self.url:
            raise ServiceError(f"the service did not start: {self._error}") from self._error
        return self

    def stop(self) -> None:
        """Stop it (the worker's document goes back to the queue) and wait until it has."""
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join()
        if self._error is not None:
            raise self._error

    def __exit__(self, *exc: object) -> None:
        self.stop()

