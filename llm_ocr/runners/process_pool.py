"""Worker processes started from llm-ocr's own entry point, never from the caller's main module.

Why not ``concurrent.futures.ProcessPoolExecutor``: its workers must be spawned (a forked one
would inherit the event loop, its sockets and other threads' locks), and a spawned worker first
runs the parent's main module again (CPython's ``multiprocessing/spawn.py``:
``get_preparation_data`` sends the main module's path or name, ``prepare`` re-runs it as
``__mp_main__``). A user's script without an ``if __name__ == "__main__":`` guard then runs again
in every worker, which fails (``RuntimeError``, then ``BrokenProcessPool``), and a script read
from standard input (``python -``) has no file to run (``FileNotFoundError: '<stdin>'``). The
``forkserver`` method sends the same data, and ``set_executable`` changes only the interpreter;
avoiding the re-import inside ``multiprocessing`` would take its private functions.

So a worker here is a plain :mod:`subprocess` running ``python -c`` with a one-line bootstrap:
take the parent's ``sys.path`` (as spawn does, so imports resolve as in the parent), import this
module, :func:`serve`. Each call is pickled over the worker's own stdin and its answer over its
stdout; functions travel by reference, and only llm-ocr's module-level ones are sent, so nothing
of the caller's program is imported or run in a worker, whatever it is: a script with or without
the guard, ``python -``, ``python -c``, the REPL, a notebook, pytest. Public APIs only
(``subprocess``, ``pickle``, ``os.dup2``), none of them specific to one operating system (the
tests run on Linux).

A worker
- is a process, not a thread: pypdfium2 is not thread-safe, and rendering is CPU-bound;
- is a fresh interpreter: no event loop, sockets (``close_fds``) or locks inherited;
- ends with its parent: an idle one reads EOF on stdin, a busy one is ended by a watcher thread;
- ignores SIGINT and SIGTERM: Ctrl-C reaches the terminal's whole process group, and Slurm's
  stop (``scancel``, a preemption, ``scontrol requeue``) every process of a task; the parent, not
  its workers, decides how a run stops (the pages in flight finish, which needs their workers:
  a worker ended by that SIGTERM failed its page's call, and the run with it, exit 2 where a
  stop is 3); the pool ends its workers by closing their stdin, or with SIGKILL;
- writes stray output (a C library's ``printf``) to stderr: its stdout carries the answers.

A worker that dies during a call (a crash in native code, the OOM killer) fails that call with
:class:`WorkerDied`; the next call starts a new worker. The pool itself never breaks.

Workers are started as the work needs them, not all at once: the first with the first call, each
further one once calls have waited in the queue, in all, longer than a worker was seen to take to
start and answer its first call. A worker started while another is running takes no call until
it has started (it answers a ping first): a call it took at once would wait out its start, 0.6 to
1.3 s measured on a loaded 2-core machine, while the running worker answers such calls in
milliseconds. The documents' estimates a run makes before its first render
(:mod:`llm_ocr.runners.render_order`) waited so for the slowest of them: its first request went
out 1.3 s late. A worker costs an interpreter and llm-ocr's rendering imports
(0.7-0.8 CPU-seconds measured on a 2-core machine) before its first page; a one-page document, or
a run whose model is slower than one worker's rendering, never needed the second, while a queue
that keeps growing pays for one within a worker's start.

Calls go in two lanes: :meth:`ProcessPool.submit_first` goes before every call of
:meth:`~ProcessPool.submit` not yet started. A run renders pages ahead of its requests, so its
queue holds renders most of the time, and a page whose request waits on a worker's call (its
fingerprint for the run's copies, its figures cropped from the answer) holds an in-flight slot
meanwhile: behind the renders, such calls waited up to 3.4 s (p90 2.2 s) on a loaded 2-core
machine, and the longest pages reached the server late. First, they wait for the calls running.
"""

from __future__ import annotations

import itertools
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import IO, Any, Generic, TypeVar

C = TypeVar("C")

#: The length of every message, before it: an unsigned 64-bit integer, big-endian.
_HEADER = struct.Struct("!Q")

#: What ``python -c`` runs in a worker: argv is the parent's pid, then the parent's ``sys.path``.
_BOOTSTRAP = (
    "import sys; sys.path[:] = sys.argv[2:]; from llm_ocr.runners.process_pool import serve; serve(int(sys.argv[1]))"
)

#: How long a worker whose answers ended may take to exit before it is killed.
_EXIT_WAIT_S = 10.0


class WorkerDied(Exception):
    """The worker process running a call ended before answering it."""


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker: the ``__cause__`` of the one re-raised."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f'\n"""\n{self.text}"""'


# -- the parent's side ----------------------------------------------------------------------------


class Lanes(Generic[C]):
    """Calls not started, in two lanes: those of :attr:`first` go before those of :attr:`behind`,
    each lane in order (:meth:`ProcessPool.submit_first`; in one thread,
    :class:`~llm_ocr.runners.workers.ThreadLanes`). Not locked: its owner's lock guards it."""

    def __init__(self) -> None:
        self.first: deque[C] = deque()
        self.behind: deque[C] = deque()

    def __bool__(self) -> bool:
        return bool(self.first or self.behind)

    def __iter__(self) -> Iterator[C]:
        return itertools.chain(self.first, self.behind)

    def pop(self) -> C:
        """The next call to run (the lanes must not both be empty)."""
        return (self.first or self.behind).popleft()


@dataclass
class _Call:
    future: Future[Any]
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: When it was submitted, on the pool's clock.
    queued_at: float = 0.0


class ProcessPool(Executor):
    """An :class:`~concurrent.futures.Executor` of up to ``workers`` processes started as
    ``python -c`` from llm-ocr's own bootstrap (the module docstring says why). The first worker
    starts with the first call; another starts only once the calls queued have waited, in all,
    longer than a worker took to start (the module docstring). Each worker serves calls one at a
    time; ``fn`` must be a module-level function of an importable module, and its arguments and
    result picklable. ``clock`` is the pool's clock for those waits (``time.monotonic``)."""

    def __init__(self, workers: int, *, name: str = "llm-ocr-worker",
                 clock: Callable[[], float] = time.monotonic) -> None:
        if workers < 1:
            raise ValueError(f"a process pool needs at least one worker, not {workers}")
        self._command = worker_command()
        self._clock = clock
        #: Calls not started.
        self._queue: Lanes[_Call] = Lanes()
        self._changed = threading.Condition()
        self._closed = False
        #: Threads 0 .. allowed-1 may run a worker (the others wait to be needed).
        self._allowed = 1
        #: Seconds the queued calls have waited since the last worker was allowed.
        self._waited = 0.0
        #: Seconds the last worker started took from its start to its first answer (None: none yet).
        self._start_s: float | None = None
        #: A worker was allowed and none has started since (no second one until it has).
        self._growing = False
        #: Worker processes started so far (restarts after a death included).
        self.started = 0
        #: Workers that have answered a call and not died since.
        self._live = 0
        # One thread per worker hands it a call at a time and waits for the answer: daemon
        # threads, so a pool never closed cannot keep the interpreter alive (its workers then
        # read EOF when this process exits, and end).
        self._threads = [
            threading.Thread(target=self._serve_calls, args=(i,), name=f"{name}-{i}", daemon=True)
            for i in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        """Schedule ``fn(*args, **kwargs)`` in a worker; its :class:`~concurrent.futures.Future`."""
        return self._submit(self._queue.behind, fn, args, kwargs)

    def submit_first(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        """As :meth:`submit`, ahead of every call of :meth:`submit` not yet started (in order
        among themselves): for a call someone waits on while holding what others need."""
        return self._submit(self._queue.first, fn, args, kwargs)

    def _submit(self, lane: deque[_Call], fn: Callable[..., Any], args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> Future[Any]:
        with self._changed:
            if self._closed:
                raise RuntimeError("cannot schedule new calls after shutdown")
            future: Future[Any] = Future()
            lane.append(_Call(future, fn, args, kwargs, self._clock()))
            self._grow_if_waited()
            self._changed.notify_all()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop taking calls; cancel those not started (``cancel_futures``); the workers end once
        the calls queued before are answered (``wait``: return only then)."""
        with self._changed:
            self._closed = True
            if cancel_futures:
                while self._queue:
                    self._queue.pop().future.cancel()
            self._changed.notify_all()
        if wait:
            for thread in self._threads:
                thread.join()

    def _next_call(self, index: int) -> _Call | None:
        """The next call for thread ``index``, once it may run a worker; None when the pool is
        shut down and nothing is left for it."""
        with self._changed:
            if not self._wait_for_work(index):
                return None
            call = self._queue.pop()
            self._waited += self._clock() - call.queued_at
            self._grow_if_waited()
            return call

    def _grow_if_waited(self) -> None:
        """Allow one more worker when the calls still queued, and those taken since the last one
        was allowed, have waited longer in all than a worker took to start (under ``_changed``).
        Checked as calls are submitted and taken, so the calls still queued count what they waited
        so far. Not before a worker has answered (no start measured yet), nor while the last worker
        allowed has not answered its first call: one at a time, each paid for by waits it saw."""
        if (not self._queue or self._allowed >= len(self._threads) or self._start_s is None
                or self._growing):
            return
        now = self._clock()
        waiting = sum(now - queued.queued_at for queued in self._queue)
        if self._waited + waiting > self._start_s:
            self._allowed += 1
            self._growing = True
            self._waited = 0.0
            self._changed.notify_all()

    def _answered(self, started_at: float | None) -> None:
        """A worker answered a call, its first when it was started at ``started_at``: that is how
        long a start takes, and the next worker may be allowed."""
        if started_at is not None:
            with self._changed:
                self._start_s = self._clock() - started_at
                self._growing = False
                self._live += 1

    def _warm_up_wanted(self, index: int) -> bool:
        """Wait until thread ``index`` may run a worker and a call waits; whether another worker
        is running meanwhile (then this one starts before it takes a call; else there is no one
        else to take it, and the call starts the worker). False when the pool is shut down."""
        with self._changed:
            return self._wait_for_work(index) and self._live > 0

    def _wait_for_work(self, index: int) -> bool:
        """Under ``_changed``: wait until a call waits and thread ``index`` may run a worker
        (True), or the pool is shut down with nothing left for it (False)."""
        while not (self._queue and index < self._allowed):
            if self._closed:
                return False
            self._changed.wait()
        return True

    def _start(self) -> tuple[_Worker, float]:
        started_at = self._clock()
        worker = _Worker(self._command)
        with self._changed:
            self.started += 1
        return worker, started_at

    def _warm_up(self) -> _Worker | None:
        """A worker started and answering (a ping), its start timed; None if it died starting
        (the next call starts one as a first worker does, and fails if that dies too)."""
        worker, started_at = self._start()
        try:
            worker.call(os.getpid, (), {})
        except WorkerDied:
            return None
        self._answered(started_at)
        return worker

    def _serve_calls(self, index: int) -> None:
        worker: _Worker | None = None
        try:
            while True:
                if worker is None and self._warm_up_wanted(index):
                    worker = self._warm_up()
                if (call := self._next_call(index)) is None:
                    break
                if not call.future.set_running_or_notify_cancel():
                    continue  # cancelled while queued
                try:
                    started_at = None
                    if worker is None:
                        worker, started_at = self._start()
                    try:
                        result = worker.call(call.fn, call.args, call.kwargs)
                    except Exception as exc:
                        if isinstance(exc.__cause__, RemoteTraceback):  # the worker answered: with an error
                            self._answered(started_at)
                        raise
                    self._answered(started_at)
                    call.future.set_result(result)
                except WorkerDied as exc:
                    worker = None
                    if started_at is None:  # it had answered before: it was counted running
                        with self._changed:
                            self._live -= 1
                    call.future.set_exception(exc)
                except BaseException as exc:  # noqa: BLE001 - the call's own error, raised where it is awaited
                    call.future.set_exception(exc)
        finally:
            if worker is not None:
                worker.close()


def worker_command() -> list[str]:
    """The command line that starts a worker of this process: the bootstrap, this process's pid
    and its ``sys.path``, whose ``""`` (the current directory) is made absolute, as spawn does; the
    other entries are kept as they are (some are keys of import hooks, not paths)."""
    if not sys.executable or getattr(sys, "frozen", False):  # a frozen app's executable would run the app again
        raise RuntimeError("worker processes need a Python interpreter, and this process has none "
                           "(sys.executable is empty, or a frozen application): use workers=0")
    paths = [path or os.getcwd() for path in sys.path]
    return [sys.executable, "-c", _BOOTSTRAP, str(os.getpid()), *paths]


class _Worker:
    """One worker process and the two pipes to it, used by one thread of the pool."""

    def __init__(self, command: list[str]) -> None:
        # stderr is the parent's: a worker's warnings and crash reports show where the run's do.
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.process.stdin is not None and self.process.stdout is not None
        self.calls: IO[bytes] = self.process.stdin
        self.answers: IO[bytes] = self.process.stdout

    def call(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``fn(*args, **kwargs)`` in the worker: its result, or its exception raised here."""
        message = pickle.dumps((fn, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)  # before writing: no torn message
        try:
            _write(self.calls, message)
            answer = _read(self.answers)
        except (OSError, EOFError):
            raise WorkerDied(self._ended(fn)) from None
        ok, value, remote = pickle.loads(answer)
        if ok:
            return value
        value.__cause__ = RemoteTraceback(remote)
        raise value

    def _ended(self, fn: Callable[..., Any]) -> str:
        try:
            code = self.process.wait(_EXIT_WAIT_S)
        except subprocess.TimeoutExpired:  # its stdout closed, yet it lives on: do not leave it behind
            self.process.kill()
            code = self.process.wait()
        self._close_pipes()
        how = f"killed by {_signal_name(-code)}" if code < 0 else f"exit code {code}"
        name = getattr(fn, "__qualname__", repr(fn))
        return f"the worker process (pid {self.process.pid}) running {name} ended without answering ({how})"

    def close(self) -> None:
        """End the worker: EOF on its stdin, and wait for it (it is between calls)."""
        self._close_pipes()
        try:
            self.process.wait(_EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def _close_pipes(self) -> None:
        for pipe in (self.calls, self.answers):
            try:
                pipe.close()
            except OSError:
                pass  # a broken pipe, already of no use


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _write(stream: IO[bytes], message: bytes) -> None:
    stream.write(_HEADER.pack(len(message)))
    stream.write(message)
    stream.flush()


def _read(stream: IO[bytes]) -> bytes:
    """One whole message; EOFError if the stream ends first (the other side is gone)."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError
    (size,) = _HEADER.unpack(header)
    message = stream.read(size)
    if len(message) < size:
        raise EOFError
    return message


# -- the worker's side ----------------------------------------------------------------------------


def serve(parent: int) -> None:
    """A worker's main loop (run by the bootstrap): answer calls from stdin until it closes."""
    calls = os.fdopen(os.dup(0), "rb")
    answers = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # nothing else may read the calls
    os.close(devnull)
    os.dup2(2, 1)  # nor write into the answers: print() and C libraries' output go to stderr
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides how a run stops (module docstring)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _exit_with_parent(parent)
    while True:
        try:
            message = _read(calls)
        except EOFError:
            return  # the pool closed this worker, or the parent is gone
        try:
            fn, args, kwargs = pickle.loads(message)
            answer = _answer(True, fn(*args, **kwargs), None)
        except Exception as exc:  # noqa: BLE001 - the call's error goes back to the caller
            answer = _answer(False, exc, traceback.format_exc())
        try:
            _write(answers, answer)
        except OSError:
            return  # the parent is gone


def _answer(ok: bool, value: Any, remote: str | None) -> bytes:
    """The pickled answer; an exception or result that cannot travel becomes an error saying so."""
    try:
        answer = pickle.dumps((ok, value, remote), protocol=pickle.HIGHEST_PROTOCOL)
        if not ok:
            pickle.loads(answer)  # an exception whose class cannot be rebuilt from its args
        return answer
    except Exception as exc:  # noqa: BLE001
        what = f"{type(value).__name__}: {value}" if not ok else f"its result ({type(value).__name__})"
        error = RuntimeError(f"{what} could not be sent back from the worker process: {exc}")
        return pickle.dumps((False, error, remote or traceback.format_exc()), protocol=pickle.HIGHEST_PROTOCOL)


def _exit_with_parent(parent: int) -> None:
    """End this worker when ``parent`` dies, even in the middle of a call.

    An idle worker sees EOF on stdin when its parent dies; a busy one would finish its call first
    (a long render), so a daemon thread watches for the re-parenting instead.
    """

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="llm-ocr-parent-watch", daemon=True).start()
