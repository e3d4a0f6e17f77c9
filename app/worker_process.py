"""The editor's worker process: compiles, re-simulations and sustained runs off the GUI's GIL.

A worker thread shares the GIL with the GUI thread: while a compile runs Python (or numpy and
protobuf calls that hold the GIL), every Qt callback into Python waits for it, and the event loop
stalls (PP-OCRv6 det's opening compile: 124-305 ms wall for 58-73 ms of GUI-thread CPU). A
``ProcessTask`` runs the same job functions, with the same signals as ``app.workers.Task``, in one
persistent worker process (started with ``spawn``, so no Qt state is forked). It imports the
engine and loads the compiled kernels once, when it starts, never per job.

What crosses (app/wire.py): the job function by name, its arguments (the document's graph as
flat tables, written in a GUI-process thread from the graph as it was at the request's version,
as ``clone_unchanged`` reads it) and its result. Results of analysis and compile jobs stay in
both processes under their job id (the last ``KEEP``): a later job that takes one (a what-if
on the current result) sends only its id, and a result that shares a graph with an earlier one
(a re-simulation) sends only a reference to it.

In the GUI process a sender thread writes jobs and cancellations (the GUI thread never touches
the pipe) and a reader thread receives progress and results and reads them (pickles that
yield the GIL, app/wire.py) before the signals reach the GUI thread.

Cancellation: ``cancel()`` tells the worker, whose job sees ``control.cancelled()``; a result that
arrives anyway is dropped (the ``cancelled`` signal is emitted instead). A worker that dies (a
crash, a kill) fails its jobs with one line and the next job starts a new one. ``stop()`` (on
quit, and at exit) asks it to leave and kills it when it does not within a second; the worker
also exits by itself when the editor's end of the pipe closes, so none is left behind.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import multiprocessing as mp
import os
import pickle
import queue
import sys
import threading
import traceback
from collections import OrderedDict
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from app import wire
from app.workers import WORKER_NICENESS, TaskControl, clone_unchanged, emit_safely, init_task_state
from engine.errors import Cancelled

log = logging.getLogger(__name__)

KEEP = 6  # results kept in both processes, for later jobs and results that refer to them
STOP_TIMEOUT_S = 1.0
JOB_THREADS = 4
EARLY_JOBS = frozenset({"open check", "open layout"})  # task names of jobs that need no kernel: they run beside the warm-up
WARM_UP = ("engine.compiler", "engine.passes.pipeline", "engine.quant.api", "engine.sim.timeline",
           "engine.sim.thermal", "engine.sim.stream", "engine.sim.executor", "app.analysis_jobs", "app.jobs")


def _expected() -> tuple[type[BaseException], ...]:
    from engine.errors import ExecutionError, InputError, ModelError

    return ModelError, InputError, ExecutionError, ValueError, OSError


# -- what both processes keep -------------------------------------------------------------------
class Store:
    """Results by job id (the last KEEP) and where each object other jobs may refer to sits."""

    PATHS = ("", "compile", "compile.sim", "compile.source", "compile.optimized", "compile.quant", "optimized")

    def __init__(self) -> None:
        self._items: OrderedDict[int, Any] = OrderedDict()
        self._where: dict[int, tuple[int, str]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _at(obj: Any, path: str) -> Any:
        for part in path.split(".") if path else ():
            obj = getattr(obj, part, None)
        return obj

    def keeps(self, obj: Any) -> bool:
        """True for results other jobs take (analysis results, compile outcomes)."""
        from app.analysis_jobs import AnalysisResult
        from app.jobs import CompileOutcome

        return isinstance(obj, (AnalysisResult, CompileOutcome))

    def put(self, token: int, obj: Any) -> None:
        with self._lock:
            self._items[token] = obj
            for path in self.PATHS:
                part = self._at(obj, path)
                if part is not None:
                    self._where.setdefault(id(part), (token, path))
            while len(self._items) > KEEP:
                old, _ = self._items.popitem(last=False)
                self._where = {k: v for k, v in self._where.items() if v[0] != old}

    def reference(self, obj: Any) -> tuple[int, str] | None:
        """(token, path) of an object kept here, else None."""
        with self._lock:
            where = self._where.get(id(obj))
            if where is not None and self._at(self._items.get(where[0]), where[1]) is obj:
                return where
        return None

    def get(self, token: int, path: str) -> Any:
        with self._lock:
            if token not in self._items:
                raise Cancelled()  # superseded: newer results replaced it in the worker
            return self._at(self._items[token], path)


_STORE = Store()


def _kept(token: int, path: str) -> Any:
    return _STORE.get(token, path)


class _RefPickler(wire.Pickler):
    """Writes objects the other process keeps as references to them."""

    def reducer_override(self, obj: Any) -> Any:
        where = _STORE.reference(obj)
        if where is not None:
            return _kept, where
        return super().reducer_override(obj)


def _dumps(obj: Any, ahead: Any = ()) -> bytes:
    return wire.dumps(obj, pickler=_RefPickler, ahead=ahead)


# -- the worker process ---------------------------------------------------------------------
class _PipeProgress:
    """Stands in for TaskSignals.progress in the worker: emit() sends the progress over the pipe."""

    def __init__(self, job: int, send: Callable[..., None]) -> None:
        self.job, self._send = job, send

    def emit(self, fraction: float, text: str) -> None:
        self._send(("progress", self.job, fraction, text))


class WorkerControl(TaskControl):
    """Handed to a job in the worker: ``TaskControl``'s progress (throttled the same way, sent over
    the pipe) and cancellation (by the editor's cancel message)."""

    def __init__(self, job: int, send: Callable[..., None], cancelled: set[int]) -> None:
        super().__init__(SimpleNamespace(progress=_PipeProgress(job, send)))  # type: ignore[arg-type]
        self.job = job
        self._cancelled = cancelled

    def cancelled(self) -> bool:
        """True once the editor cancelled this job."""
        return self.job in self._cancelled or super().cancelled()

    def check(self) -> None:
        """Raise Cancelled when the editor cancelled this job."""
        if self.cancelled():
            raise Cancelled()


def serve(conn: Any, warm: bool = True) -> None:
    """The worker process's main: warm up, then run jobs (JOB_THREADS at a time) until told to stop."""
    if sys.platform.startswith("linux") and WORKER_NICENESS > 0:
        with contextlib.suppress(OSError):
            os.nice(WORKER_NICENESS)  # the editor's threads first when every core is busy
    jobs: queue.Queue = queue.Queue()
    cancelled: set[int] = set()
    lock = threading.RLock()

    def send(message: tuple, payload: bytes | None = None) -> None:
        try:
            with lock:
                conn.send_bytes(pickle.dumps(message))
                if payload is not None:
                    conn.send_bytes(payload)
        except OSError:  # the editor's end closed (killed before it read "ready"): leave quietly, as receive does
            os._exit(0)

    def receive() -> None:  # the editor's end closed: leave at once, whatever is running
        try:
            while True:
                message = pickle.loads(conn.recv_bytes())
                if message[0] == "job":
                    jobs.put((message[1], message[2], conn.recv_bytes()))
                elif message[0] == "cancel":
                    cancelled.add(message[1])
                elif message[0] == "quit":
                    break
        except (EOFError, OSError):
            pass
        os._exit(0)

    threading.Thread(target=receive, name="npu-studio-worker-pipe", daemon=True).start()
    wire.YIELD_S = 0.0  # a writer here holds no GIL the GUI thread needs: its chunks need no pause
    send(("ready", os.getpid()))
    from concurrent.futures import ThreadPoolExecutor

    # Jobs run side by side, as they did in the editor's thread pool: a tensor view does not wait
    # for a compile, nor a closed window's what-if for the next window's compile.
    pool = ThreadPoolExecutor(max_workers=JOB_THREADS, thread_name_prefix="npu-studio-job")
    gate = _Gate(pool)
    if warm:  # once per process: no job pays the imports or the kernels' loading
        for name in WARM_UP:
            importlib.import_module(name)
        from app.canvas import _layout_jit

        cached = _layout_jit.cached()
        if cached:  # loaded from numba's cache before it says it takes an open's layout
            from app.canvas.layout import warm_up as layout_warm_up

            layout_warm_up()
            send(("accepting", 0))
        # An open's layout (often the first job, sent at start-up) needs no kernel: it runs while
        # they load. Other jobs are held until then, as no job ran beside the warm-up before (a
        # module imported by a job while numba compiles could deadlock on the two locks). With an
        # empty cache (the first start after an install) the kernels come first and the layout's
        # 25 s compile after them: until it is done, the editor lays out by itself (interpreted).
        threading.Thread(target=_warm_up, args=(gate, None if cached else send), name="npu-studio-warm-up",
                         daemon=True).start()
    else:
        gate.open()
        send(("accepting", 0))
    while True:
        job, name, payload = jobs.get()
        gate.submit(name in EARLY_JOBS, _run_job, job, name, payload, send, lock, cancelled)


class _Gate:
    """Hands jobs to the pool; until ``open()``, only the early ones (the rest are held, outside
    the pool, so that held jobs never take the threads an open needs)."""

    def __init__(self, pool: Any) -> None:
        self._pool, self._lock, self._held, self._open = pool, threading.Lock(), [], False

    def submit(self, early: bool, *call: Any) -> None:
        with self._lock:
            if early or self._open:
                self._pool.submit(*call)
            else:
                self._held.append(call)

    def open(self) -> None:
        with self._lock:
            self._open = True
            for call in self._held:
                self._pool.submit(*call)
            self._held.clear()


def _warm_up(gate: _Gate, compile_layout: Callable[..., None] | None) -> None:
    """The kernels, then (``compile_layout``: the sender of the "accepting" message) the layout's."""
    from nodes.kernels import warm_up

    try:
        warm_up()
    finally:
        gate.open()
    if compile_layout is not None:
        from app.canvas.layout import warm_up as layout_warm_up

        layout_warm_up()
        compile_layout(("accepting", 0))


def _run_job(job: int, name: str, payload: bytes, send: Callable[..., None], lock: threading.Lock,
             cancelled: set[int]) -> None:
    if job in cancelled:
        send(("cancelled", job))
        return
    control = WorkerControl(job, send, cancelled)
    try:
        fn, args = wire.loads(payload)
        result = fn(control, *args)
        if control.cancelled():
            raise Cancelled()
        data = _dumps(result, wire.bulk_of(result))
    except Cancelled:
        send(("cancelled", job))
    except _expected() as exc:
        send(("failed", job, str(exc).splitlines()[0] if str(exc) else type(exc).__name__, False))
    except Exception as exc:
        log.error("%s failed:\n%s", name, traceback.format_exc())
        send(("failed", job, f"internal error in {name}: {type(exc).__name__}: {exc}", True))
    else:
        with lock:  # kept here in the order the editor receives (and keeps) them
            if _STORE.keeps(result):
                _STORE.put(job, result)
            send(("done", job), data)
    finally:
        cancelled.discard(job)


# -- the editor's side ------------------------------------------------------------------------
class WorkerProcess:
    """The persistent worker process and the two threads that talk to it (see the module docstring)."""

    def __init__(self, warm: bool = True) -> None:
        self.warm = warm
        self._lock = threading.Lock()
        self.process: Any = None
        self.pid: int | None = None
        self.ready = threading.Event()
        self.accepting = threading.Event()  # it imported its modules: an open's layout runs there at once
        self._conn: Any = None
        self._outbox: queue.Queue | None = None
        self._tasks: dict[int, Any] = {}
        self._next = 0
        self.restarts = 0

    def ensure_started(self) -> None:
        """Start the worker (again, after it died) unless it runs."""
        with self._lock:
            if self.process is not None and self.process.is_alive():
                return
            if self.process is not None:
                self.restarts += 1
            ctx = mp.get_context("spawn")
            ours, theirs = ctx.Pipe(duplex=True)
            proc = ctx.Process(target=serve, args=(theirs, self.warm), name="npu-studio-worker", daemon=True)
            proc.start()
            theirs.close()
            self.process, self._conn, self.ready, self.accepting = proc, ours, threading.Event(), threading.Event()
            self._outbox = queue.Queue()
            threading.Thread(target=self._write, args=(ours, self._outbox), name="npu-studio-send", daemon=True).start()
            threading.Thread(target=self._read, args=(proc, ours, self.accepting), name="npu-studio-receive", daemon=True).start()

    def submit(self, task: Any) -> int:
        """Queue ``task`` (a ProcessTask); returns its job id."""
        self.ensure_started()
        with self._lock:
            self._next += 1
            job = self._next
            self._tasks[job] = task
            outbox = self._outbox
        assert outbox is not None
        outbox.put(("job", job, task))
        return job

    def cancel(self, job: int) -> None:
        """Tell the worker to stop ``job`` (a queued one never starts)."""
        with self._lock:
            outbox = self._outbox
        if outbox is not None:
            outbox.put(("cancel", job, None))

    def _write(self, conn: Any, outbox: queue.Queue) -> None:
        from app.runtime import collections_paused

        while True:
            kind, job, task = outbox.get()
            if kind == "stop":
                return
            try:
                if kind == "cancel":
                    conn.send_bytes(pickle.dumps(("cancel", job)))
                    continue
                try:
                    # No collections while the tables of a graph are made: a full one, run in this
                    # thread among them, held the GIL 30-50 ms on 50,000 nodes; they are freed by
                    # reference counting once written, before collections resume.
                    with collections_paused():
                        payload = task.serialize()
                except Cancelled:
                    self._finish(job, "cancelled")
                    continue
                except Exception as exc:
                    log.error("%s: its arguments cannot be sent:\n%s", task.name, traceback.format_exc())
                    self._finish(job, "failed", f"internal error in {task.name}: {type(exc).__name__}: {exc}", True)
                    continue
                conn.send_bytes(pickle.dumps(("job", job, task.name)))
                conn.send_bytes(payload)
            except (OSError, EOFError, ValueError):
                return  # the worker is gone: the reader fails its tasks

    def _read(self, proc: Any, conn: Any, accepting: threading.Event) -> None:
        from app.runtime import collections_paused

        try:
            while True:
                message = pickle.loads(conn.recv_bytes())
                kind, job = message[0], message[1]
                if kind == "ready":
                    self.pid = job
                    self.ready.set()
                elif kind == "accepting":
                    accepting.set()
                elif kind == "progress":
                    task = self._tasks.get(job)
                    if task is not None:
                        emit_safely(task.signals.progress, message[2], message[3])
                elif kind == "done":
                    data = conn.recv_bytes()
                    task = self._tasks.get(job)
                    if task is None or task.control.cancelled():
                        self._finish(job, "cancelled")
                        continue
                    # No collections while thousands of objects appear here, off the GUI thread
                    # (app/workers.py says why); unreferenced Qt wrappers are never among them.
                    try:
                        with collections_paused():
                            result = wire.loads(data)
                    except Cancelled:
                        self._finish(job, "cancelled")
                        continue
                    except Exception as exc:
                        log.error("%s: its result cannot be read:\n%s", task.name, traceback.format_exc())
                        self._finish(job, "failed", f"internal error in {task.name}: {type(exc).__name__}: {exc}", True)
                        continue
                    if _STORE.keeps(result):
                        _STORE.put(job, result)
                    self._finish(job, "done", result)
                elif kind == "failed":
                    self._finish(job, "failed", message[2], message[3])
                else:
                    self._finish(job, "cancelled")
        except (EOFError, OSError):
            pass
        proc.join(5)
        code = proc.exitcode
        with self._lock:
            orphans = list(self._tasks)
        for job in orphans:
            self._finish(job, "failed", f"the worker process stopped (exit status {code}); the next job starts a new one",
                         True)

    def _finish(self, job: int, how: str, value: Any = None, internal: bool = False) -> None:
        with self._lock:
            task = self._tasks.pop(job, None)
        if task is not None:
            task.finish(how, value, internal)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Ask the worker to leave; kill it when it has not within ``timeout`` seconds."""
        with self._lock:
            proc, conn, outbox = self.process, self._conn, self._outbox
            self.process = self._conn = self._outbox = None
        if proc is None:
            return
        if outbox is not None:
            outbox.put(("stop", 0, None))
        with contextlib.suppress(OSError, ValueError):
            conn.send_bytes(pickle.dumps(("quit", 0)))
        proc.join(timeout)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout)
        with contextlib.suppress(OSError):
            conn.close()


_WORKER: WorkerProcess | None = None
_WORKER_LOCK = threading.Lock()


def worker() -> WorkerProcess:
    """The editor's worker process (one per editor process; started on first use)."""
    global _WORKER
    with _WORKER_LOCK:
        if _WORKER is None:
            _WORKER = WorkerProcess()
            import atexit

            atexit.register(_WORKER.stop)
        return _WORKER


def start_worker() -> None:
    """Start the worker now (the window does, so its warm-up overlaps the editor's start-up)."""
    worker().ensure_started()


class ProcessTask:
    """``app.workers.Task``'s interface for a job run in the worker process.

    ``fn`` must be a module-level function; ``graph_version``, when given, is the version of the
    graph in ``args`` the job is for (the arguments are written from the graph as it was then, or
    the task is cancelled: an edit requests its own job)."""

    def __init__(self, fn: Callable[..., Any], *args: Any, name: str = "task", graph: Any = None,
                 graph_version: int | None = None) -> None:
        init_task_state(self, fn, args, name)
        self.job: int | None = None
        self._graph, self._version = graph, graph_version

    def serialize(self) -> bytes:
        """The job's function and arguments as bytes (in the sender thread)."""
        if self.control.cancelled():
            raise Cancelled()
        item = (self.fn, self.args)
        if self._graph is None:
            return _dumps(item)
        return clone_unchanged(self._graph, self._version, lambda g: _dumps(item, [g]))

    def start(self) -> ProcessTask:
        """Send the job to the worker process; returns self."""
        self.job = worker().submit(self)
        return self

    def cancel(self) -> None:
        """Ask the job to stop (its result, should it come, is dropped)."""
        self.control.cancel()
        if self.job is not None:
            worker().cancel(self.job)

    def finish(self, how: str, value: Any, internal: bool) -> None:
        """The job ended (in the reader or sender thread): set the fields, then signal."""
        try:
            if how == "done" and not self.control.cancelled():
                self.result = value
                self.signals.finished.emit(value)
            elif how == "failed":
                self.error, self.internal_error = value, internal
                self.signals.failed.emit(value)
            else:
                self.signals.cancelled.emit()
        except RuntimeError:  # its receiver went away (a closed window)
            pass
        finally:
            self.done.set()
