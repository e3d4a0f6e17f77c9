"""The editor's process-wide interpreter settings: the one place that changes them.

The GUI thread shares the GIL with worker threads and the cyclic garbage collector with every
thread, so both are process state; nothing else in app/ (and nothing in engine/ or nodes/)
touches ``sys.setswitchinterval`` or ``gc``. ``start_up`` runs once, when the first window is
made (app/main_window.py), before any worker starts:

- GIL switch interval 1 ms (Python's default is 5 ms). Qt calls back into Python for every
  paint and bounding box; while a worker computes, each callback can wait up to one interval
  for the GIL, which adds up to visible stalls on a canvas of many items.
- The worker process that compiles, re-simulates and runs sustained figures (app/worker_process.py)
  starts, so that its imports and kernel warm-up run while the window is being made.
- The start-up heap (Qt wrappers, the engine modules preloaded here so that no worker compiles
  bytecode while holding the GIL) is collected once and frozen: later full collections do not
  visit it.

While a document is on screen its objects are frozen too (``settle_heap`` after it is shown,
``release_heap`` when it closes): an open model is hundreds of thousands of tracked objects,
and a full collection visiting them stalls the GUI thread for 0.1-1 s at a random moment.
While a model is read and its canvas items are made, automatic collections are paused
(``collections_paused``, counted, so nested or concurrent holders never re-enable them early).

Measured on light_densenet121 (1,746 nodes), tests/app/test_responsiveness.py: see the commit
message that introduced this module for the before/after stall figures.
"""

from __future__ import annotations

import gc
import importlib
import logging
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)

GUI_SWITCH_INTERVAL_S = 0.001
PRELOAD = ("engine.compiler", "engine.passes.pipeline", "engine.place.partition", "engine.hw.target",
           "engine.ir.clone", "engine.quant.api", "engine.quant.mixed", "engine.sim.timeline", "engine.sim.thermal",
           "engine.sim.stream", "engine.sim.executor", "engine.export.artifacts", "engine.export.report")

_lock = threading.Lock()
_holds = 0
_started = False


def start_up() -> None:
    """Apply the settings above (once per process; later calls do nothing)."""
    global _started
    with _lock:
        if _started:
            return
        _started = True
    sys.setswitchinterval(GUI_SWITCH_INTERVAL_S)
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            log.debug("engine module %s is not available", name)
    gc.collect()
    gc.freeze()
    from app.worker_process import start_worker, worker

    start_worker()  # its imports and kernel warm-up overlap the window's start (app/worker_process.py)
    from PySide6.QtCore import QCoreApplication

    qapp = QCoreApplication.instance()
    if qapp is not None:
        qapp.aboutToQuit.connect(worker().stop)


@contextmanager
def collections_paused() -> Iterator[None]:
    """No automatic cyclic collections inside the block (reading a model, making its items)."""
    global _holds
    with _lock:
        _holds += 1
        gc.disable()
    try:
        yield
    finally:
        with _lock:
            _holds -= 1
            if _holds == 0:
                gc.enable()


def settle_heap() -> None:
    """A document is on screen: move every object alive now out of the collector's reach."""
    gc.freeze()


def release_heap() -> None:
    """A document closed: its objects (and everything else frozen) become collectable again."""
    gc.unfreeze()
