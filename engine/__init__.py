"""NPU Studio's engine: load, execute, optimize, quantize, place, simulate and compile models.

Pure Python + numpy + onnx; no Qt. The CLI and the GUI drive this same facade.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from engine.errors import ExecutionError, InputError, ModelError
from engine.ir.graph import Graph
from engine.loader import load

if TYPE_CHECKING:
    from engine.hw.target import HardwareTarget
    from engine.passes.pipeline import OptimizeOptions, OptimizeResult
    from engine.sim.timeline import SimOptions, SimResult

__all__ = ["ExecutionError", "Graph", "InputError", "ModelError", "compile", "execute", "load", "optimize", "quantize",
           "simulate", "supported_ops"]
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


def execute(graph: Graph, feeds: Mapping[str, np.ndarray], keep_all: bool = False,
            max_bytes: int | None = None) -> dict[str, np.ndarray]:
    """Run the graph with the numpy executor; returns output name -> array.

    With ``keep_all`` every intermediate value is returned too. Feeds are checked against the
    declared inputs first (missing, unknown, wrong rank, dtype or fixed dimension: InputError).
    A run whose estimated peak memory exceeds ``max_bytes`` (default: half of physical memory)
    is refused with an ExecutionError before anything is allocated.
    """
    from engine.sim.feeds import check_feeds

    feeds = check_feeds(graph, feeds)
    ex = executor_for(graph)
    if max_bytes is not None:
        ex.max_bytes = max_bytes
    return ex.run(feeds, keep_all=keep_all)


def optimize(graph: Graph, options: OptimizeOptions | None = None, disable: tuple[str, ...] = ()) -> OptimizeResult:
    """Run the default optimization pipeline on a copy of ``graph`` (engine.passes.pipeline).

    Returns an OptimizeResult: ``.graph`` (the optimized copy), ``.trace`` (per pass: modified,
    nodes before/after, ms, rewrites fired and rules that did not fire with the reason),
    ``.diagnostics`` and ``.report()`` (the ``optimize --report`` document).
    """
    from engine.passes.pipeline import optimize as _optimize

    return _optimize(graph, options, disable=disable)


def simulate(graph: Graph, target: HardwareTarget | str, options: SimOptions | None = None) -> SimResult:
    """Place ``graph`` on a hardware target and simulate one inference (engine.sim.timeline).

    ``target`` is a HardwareTarget, a bundled target name or a target YAML path; returns a
    SimResult whose ``to_json()`` is the ``simulate --json`` document.
    """
    from engine.sim.timeline import simulate as _simulate

    return _simulate(graph, target, options)


def quantize(graph: Graph, calibration, config=None, analysis_samples: int = 16):
    """Calibrate on ``calibration`` (a CalibrationSet, or a path: .npz / image or .npy folder), build
    the QDQ model and measure its error per layer; returns a QuantResult (engine.quant.api)."""
    from engine.quant.api import quantize as _quantize
    from engine.quant.data import CalibrationSet, load_calibration

    data = calibration if isinstance(calibration, CalibrationSet) else load_calibration(calibration, graph)
    return _quantize(graph, data, config, analysis_samples=analysis_samples)


def compile(graph: Graph, target, calibration=None, options=None, progress=None):
    """optimize -> quantize (integer targets) -> place -> simulate; returns a CompileResult whose
    bundle ``engine.export.artifacts.write_bundle(result, outdir)`` writes. ``calibration`` is a
    CalibrationSet or a path; ``target`` a HardwareTarget, bundled name or YAML path."""
    from engine.compiler import compile_model
    from engine.quant.data import CalibrationSet, load_calibration

    if calibration is not None and not isinstance(calibration, CalibrationSet):
        calibration = load_calibration(calibration, graph)
    return compile_model(graph, target, calibration, options, progress=progress)
