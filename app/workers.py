"""Background work with progress and cancel: the GUI thread never waits for long jobs.

A ``Task`` runs a plain function in Qt's thread pool. The function receives a ``TaskControl``
to report progress (throttled) and to poll for cancellation; results, errors and progress
arrive on the GUI thread as signals. Functions must not touch Qt widgets or a graph that the
GUI is editing (give them a clone or a snapshot).

A thread shares the GIL with the GUI thread, so the heavy engine jobs (compiles, re-simulations,
sustained runs, exports, tensor views) run in the worker process instead (app/worker_process.py's
``ProcessTask``, with this ``Task``'s interface); threads here read models and lay them out.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal

from app.runtime import collections_paused
from engine.errors import Cancelled, ExecutionError, InputError, ModelError
from engine.ir import clone
from engine.ir.graph import Graph

log = logging.getLogger(__name__)
_EXPECTED = (ModelError, InputError, ExecutionError, ValueError, OSError)
WORKER_NICENESS = int(os.environ.get("NPU_STUDIO_WORKER_NICE", "5"))


def _lower_priority() -> None:
    """Make the calling worker thread yield the CPU to the GUI thread when cores are busy.

    On Linux a thread has its own nice value; a worker a few steps nicer than the GUI thread
    still gets whatever CPU is idle, but when every core is taken (a compile on one, another
    program on the other) the scheduler runs the GUI thread first. Elsewhere: no-op."""
    if sys.platform.startswith("linux") and hasattr(os, "setpriority") and WORKER_NICENESS > 0:
        try:
            tid = threading.get_native_id()
            if os.getpriority(os.PRIO_PROCESS, tid) < WORKER_NICENESS:
                os.setpriority(os.PRIO_PROCESS, tid, WORKER_NICENESS)
        except OSError:
            pass


def clone_unchanged(graph: Graph, version: int, read: Callable[[Graph], Any] | None = None) -> Any:
    """``read(graph)`` (a clone by default) in a worker, of the document's graph as it was at
    ``version``; raises Cancelled when the graph was edited meanwhile.

    Copying a large graph on the GUI thread stalls it (light_densenet121: 18 ms alone, 40-100 ms
    while a worker holds the GIL half the time), so the worker copies it while the GUI thread goes
    on. The GUI thread never waits for that copy: an edit it makes meanwhile bumps the version
    (every Graph mutation does), which this sees before or after the copy (a read torn by an edit
    may also raise); such a task is stale anyway, since the edit requests its own analysis.
    ``read`` must only read, and not through ``Graph.nodes`` (its cache belongs to the GUI thread)."""
    if graph.version != version:
        raise Cancelled()
    try:
        out = read(graph) if read is not None else clone.clone_graph(graph)
    except Exception:
        if graph.version != version:
            raise Cancelled() from None
        raise
    if graph.version != version:
        raise Cancelled()
    return out


class TaskControl:
    """Handed to a task function: report progress, check for cancellation."""

    def __init__(self, signals: TaskSignals) -> None:
        self._signals = signals
        self._cancel = threading.Event()
        self._last = 0.0

    def progress(self, fraction: float, text: str = "") -> None:
        """Report progress in [0, 1] (sent at most every 50 ms, and always at 1)."""
        now = time.monotonic()
        if fraction >= 1.0 or now - self._last >= 0.05:
            self._last = now
            emit_safely(self._signals.progress, float(fraction), text)

    def cancel(self) -> None:
        """Ask the task to stop at its next check."""
        self._cancel.set()

    def cancelled(self) -> bool:
        """True once cancel() was called."""
        return self._cancel.is_set()

    def check(self) -> None:
        """Raise Cancelled when cancel() was called."""
        if self._cancel.is_set():
            raise Cancelled()


def emit_safely(signal: Any, *args: Any) -> None:
    """Emit from a worker thread; when the editor has already destroyed the task's signal object
    (a job that ends while the application quits) there is no one left to tell, and PySide's
    "Signal source has been deleted" RuntimeError must not print a traceback at exit."""
    with contextlib.suppress(RuntimeError):
        signal.emit(*args)


class TaskSignals(QObject):
    """Signals of one task (emitted from the worker thread, delivered on the GUI thread)."""

    progress = Signal(float, str)
    finished = Signal(object)
    failed = Signal(str)
    cancelled = Signal()


def init_task_state(task: Any, fn: Callable[..., Any], args: tuple, name: str) -> None:
    """The fields every task kind shares (this module's Task, app/worker_process.ProcessTask)."""
    task.fn, task.args, task.name = fn, args, name
    task.signals = TaskSignals()
    task.control = TaskControl(task.signals)
    task.done = threading.Event()
    task.result = None  # set before ``finished`` is emitted (and ``done`` is set)
    task.error = None  # the one-line message of ``failed``, set before ``done``
    task.internal_error = False  # True when ``error`` is a bug of ours, not the user's input


class Task(QRunnable):
    """Run ``fn(control, *args)`` in the thread pool; see the module docstring."""

    _running: set[Task] = set()

    def __init__(self, fn: Callable[..., Any], *args: Any, name: str = "task") -> None:
        super().__init__()
        self.setAutoDelete(False)
        init_task_state(self, fn, args, name)

    def run(self) -> None:
        _lower_priority()
        try:
            # No cyclic collection while a worker runs: one started on this thread would free
            # unreachable Qt wrappers here, off the GUI thread, and deadlock with a GUI thread
            # that holds Qt's locks while waiting for the GIL (seen: a chart's setYRange vs an
            # executor plan). Collections resume when no task runs (app/runtime.py).
            with collections_paused():
                result = self.fn(self.control, *self.args)
            self.result = result
        except Cancelled:
            emit_safely(self.signals.cancelled)
        except _EXPECTED as exc:
            self.error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            emit_safely(self.signals.failed, self.error)
        except Exception as exc:  # report, never kill the GUI
            log.error("%s failed:\n%s", self.name, traceback.format_exc())
            self.internal_error = True
            self.error = f"internal error in {self.name}: {type(exc).__name__}: {exc}"
            emit_safely(self.signals.failed, self.error)
        else:
            if self.control.cancelled():
                emit_safely(self.signals.cancelled)
            else:
                emit_safely(self.signals.finished, result)
        finally:
            self.done.set()
            Task._running.discard(self)

    def start(self) -> Task:
        """Queue the task in the global thread pool; returns self."""
        Task._running.add(self)  # keep alive until run() ends
        QThreadPool.globalInstance().start(self)
        return self

    def cancel(self) -> None:
        """Ask the task to stop."""
        self.control.cancel()
