"""NPU Studio's engine: load, execute, optimize, quantize, place, simulate and compile models.

Pure Python + numpy + onnx; no Qt. The CLI and the GUI drive this same facade.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping

import numpy as np

from engine.errors import ExecutionError, InputError, ModelError
from engine.ir.graph import Graph
from engine.loader import load

__all__ = ["ExecutionError", "Graph", "InputError", "ModelError", "execute", "load", "supported_ops"]
__version__ = "0.1.0"

_executors: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def supported_ops() -> set[str]:
    """The op types (default ONNX domain) the executor and the tools know."""
    from nodes import registry

    return registry.op_types()


def executor_for(graph: Graph):
    """The cached Executor of a graph (plans are rebuilt when the graph changes)."""
    from engine.sim.executor import Executor

    ex = _executors.get(graph)
    if ex is None:
        ex = Executor(graph)
        _executors[graph] = ex
    return ex


def execute(graph: Graph, feeds: Mapping[str, np.ndarray], keep_all: bool = False) -> dict[str, np.ndarray]:
    """Run the graph with the numpy executor; returns output name -> array.

    With ``keep_all`` every intermediate value is returned too. Feeds are checked against the
    declared inputs first (missing, unknown, wrong rank, dtype or fixed dimension: InputError).
    """
    from engine.sim.feeds import check_feeds

    feeds = check_feeds(graph, feeds)
    return executor_for(graph).run(feeds, keep_all=keep_all)
