"""The compile driver: optimize -> quantize (integer targets) -> place -> simulate.

One function joins the stages every other tool runs separately, and keeps what each produced
so the bundle writer (engine/export) and the GUI can show it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.diagnostics import INFO, WARNING, Diagnostic
from engine.errors import InputError
from engine.ir.graph import Graph
from engine.quant.config import QuantConfig
from engine.quant.data import CalibrationSet

Progress = Callable[[str, int, int], None]
INTEGER_PRECISIONS = ("int8", "uint8", "int16")


@dataclass(frozen=True)
class CompileOptions:
    """Everything that shapes a compile besides the model, the target and the data."""

    quant: QuantConfig = field(default_factory=QuantConfig)
    disabled_passes: tuple[str, ...] = ()
    pins: dict[str, str] = field(default_factory=dict)
    allow_synthetic_calibration: bool = False
    synthetic_samples: int = 8
    analysis_samples: int = 8
    max_batch: int = 1
    profiling: bool = False
    vela: bool = False
    require_tflite: bool = False
    allow_float_ops: bool = False


@dataclass
class CompileResult:
    """The outputs of every stage."""

    source: Graph
    optimized: Graph
    target: Any
    options: CompileOptions
    optimize_trace: list = field(default_factory=list)
    quant: Any = None
    sim: Any = None
    tflite: Any = None
    vela: Any = None
    calibration_source: str = ""
    diagnostics: list[Diagnostic] = field(default_factory=list)

    @property
    def precision(self) -> str:
        """The NPU precision the compile targeted."""
        return self.target.npu.precision

    @property
    def quantized(self) -> bool:
        """True when a QDQ model was produced."""
        return self.quant is not None


def synthetic_calibration(graph: Graph, n: int, seed: int = 0) -> CalibrationSet:
    """Uniform [0, 1) samples of every input's shape (only with --allow-synthetic-calibration)."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for v in graph.inputs:
        if not v.type.is_static:
            raise InputError(f"input {v.name!r} has dynamic dimensions {v.type.shape}; fix them with --shape")
        dt = v.type.dtype if v.type.dtype is not None else np.dtype(np.float32)
        shape = (n, *[int(d) for d in v.type.shape])  # type: ignore[union-attr]
        arrays[v.name] = rng.random(shape).astype(dt) if dt.kind == "f" else np.zeros(shape, dt)
    return CalibrationSet.from_arrays("synthetic uniform [0,1)", arrays)


def require_static(graph: Graph) -> None:
    """Placement and cost need static shapes: name the first dynamic input dimension."""
    for v in graph.inputs:
        if v.type.shape is None:
            raise InputError(f"input {v.name!r} has an unknown shape; fix it with --shape {v.name}=D0,D1,...")
        for k, d in enumerate(v.type.shape):
            if not isinstance(d, int):
                raise InputError(f"input {v.name!r} dimension {k} is dynamic ({d!r}); "
                                 f"fix it with --shape {v.name}=D0,D1,...")


def optimize_graph(graph: Graph, disabled: tuple[str, ...] = (),
                   target: Any = None) -> tuple[Graph, list, list[Diagnostic]]:
    """Run the default optimization pipeline (the graph passed in is not modified), then, with a
    ``target``, the lowerings its NPU wants before placement (engine/passes/lower_npu.py)."""
    from engine.passes.pipeline import optimize

    res = optimize(graph, disable=disabled)
    trace, diags = list(res.trace), list(res.diagnostics)
    if target is not None:
        from engine.passes.lower_npu import lower_for_target

        run = lower_for_target(res.graph, target, disabled)
        trace += run.trace
        diags += run.diagnostics
        return run.graph, trace, diags
    return res.graph, trace, diags


def quant_config_for(quant: QuantConfig, target: Any) -> QuantConfig:
    """The QuantConfig a compile for ``target`` uses: int8 (the default) follows the target's
    integer precision (uint8, int16); any other explicit dtype is kept; a target that exports
    TFLite gets the TFLite int8 scheme (per-channel, asymmetric activations, int8)."""
    if target.npu.precision in INTEGER_PRECISIONS and target.npu.precision != quant.dtype and quant.dtype == "int8":
        quant = dataclasses.replace(quant, dtype=target.npu.precision)
    if target.exports_tflite():  # what the TFLite int8 spec requires (engine/quant/tflite_spec.py)
        from engine.quant.config import TFLITE_ONLY_OPS

        quant = dataclasses.replace(quant, tflite=True, per_channel=True, symmetric=False, dtype="int8",
                                    ops=quant.ops | TFLITE_ONLY_OPS)
    return quant


def compile_model(graph: Graph, target: Any, calibration: CalibrationSet | None = None,
                  options: CompileOptions | None = None, progress: Progress | None = None,
                  cancel: Callable[[], bool] | None = None, *, calibration_stats: Any = None,
                  histograms: bool | None = None, reuse: CompileResult | None = None) -> CompileResult:
    """Compile ``graph`` for ``target`` (a HardwareTarget, bundled name or YAML path).

    What a caller already knows is passed in rather than recomputed (the editor recompiles
    after every edit): ``calibration_stats``, the ``Calibration`` of an earlier compile of the
    same graph with the same passes and data, skips observing the samples; ``histograms=True``
    keeps per-tensor histograms whatever the method (for range views); ``reuse``, an earlier
    result of the same graph and options except ``pins`` (and the target's timing), keeps its
    optimized graph, quantization and diagnostics and only simulates again.
    """
    from engine.errors import Cancelled
    from engine.hw.target import resolve_target
    from engine.quant.api import quantize
    from engine.quant.calibrate import calibrate

    options = options or CompileOptions()
    target = resolve_target(target)
    require_static(graph)
    if options.vela and not target.exports_tflite():
        raise InputError(f"--vela: target {target.name!r} does not export TFLite (its YAML lists exports: "
                         f"{', '.join(target.exports)}); vela compiles TFLite only")
    if options.vela:
        from engine.export.vela import INSTALL_HINT, vela_available

        if not vela_available():
            raise InputError(f"--vela needs Arm's vela, which is not installed: {INSTALL_HINT}")

    def step(name: str, done: int, total: int) -> None:
        if cancel is not None and cancel():
            raise Cancelled(f"compile cancelled during {name}")
        if progress is not None:
            progress(name, done, total)

    if reuse is not None:
        result = CompileResult(graph, reuse.optimized, target, options, list(reuse.optimize_trace), quant=reuse.quant,
                               calibration_source=reuse.calibration_source, diagnostics=list(reuse.diagnostics))
        return _simulate(result, step)

    tflite = target.exports_tflite()
    disabled = tuple(options.disabled_passes)
    if tflite:
        from engine.quant.tflite_spec import disabled_fusions, sqrt_divisions_to_rsqrt

        disabled += tuple(d for d in disabled_fusions(options.allow_float_ops) if d not in disabled)
    step("optimize", 0, 1)
    optimized, trace, diags = optimize_graph(graph, disabled)
    if tflite and sqrt_divisions_to_rsqrt(optimized):
        diags.append(Diagnostic(INFO, None, "sqrt-div-as-rsqrt", "division by a square root written as "
                                "multiplication by a reciprocal square root (TFLite int8 RSQRT)"))
    from engine.passes.lower_npu import lower_for_target

    # after the Sqrt rewrite, so a Div by a constant it leaves is lowered too (lower_div: TFLite
    # targets always, since TFLite int8 has no DIV the NPU runs)
    lowered = lower_for_target(optimized, target, disabled)
    optimized = lowered.graph
    trace += lowered.trace
    diags += lowered.diagnostics
    step("optimize", 1, 1)
    result = CompileResult(graph, optimized, target, options, trace, diagnostics=diags)

    if target.npu.precision in INTEGER_PRECISIONS:
        data = calibration
        if data is None:
            if not options.allow_synthetic_calibration:
                raise InputError(f"target {target.name!r} runs {target.npu.precision}: quantization needs "
                                 "calibration data (--calib); --allow-synthetic-calibration uses random "
                                 "inputs instead, and the report says so")
            data = synthetic_calibration(graph, options.synthetic_samples)
            result.diagnostics.append(Diagnostic(
                WARNING, None, "synthetic-calibration",
                f"quantized with {options.synthetic_samples} synthetic random samples, not real data: "
                "scales and the error figures do not reflect real inputs"))
        quant = quant_config_for(options.quant, target)
        try:
            stats = calibration_stats
            if stats is None and histograms:
                stats = calibrate(optimized, data, quant, histograms=True,
                                  progress=lambda done, total: step("calibrate", done, total), cancel=cancel)
            result.quant = quantize(optimized, data, quant, analysis_samples=options.analysis_samples,
                                    calibration=stats, progress=step, cancel=cancel)
            result.diagnostics.extend(result.quant.diagnostics)
        except ValueError as exc:
            if "nothing to quantize" not in str(exc):
                raise
            result.diagnostics.append(Diagnostic(INFO, None, "nothing-to-quantize", str(exc)))
        result.calibration_source = data.source
        if tflite and result.quant is not None:
            from engine.export.tflite_lower import lower

            step("tflite", 0, 1)
            try:
                result.tflite = lower(result.quant.graph, options.allow_float_ops)
            except InputError as exc:
                if options.require_tflite or options.vela:
                    raise
                result.diagnostics.append(Diagnostic(WARNING, None, "no-tflite", f"model.tflite not written: {exc}"))
            step("tflite", 1, 1)
            by_op: dict[str, list[dict[str, str]]] = {}
            for f in result.tflite.float_ops if result.tflite is not None else []:
                by_op.setdefault(f["op"], []).append(f)
            for op_type, fs in by_op.items():
                result.diagnostics.append(Diagnostic(
                    WARNING, fs[0]["node"], "tflite-float-op",
                    f"{len(fs)} {op_type} stay float in model.tflite (--allow-float-ops): {fs[0]['reason']}"))
            if options.vela and result.tflite is not None:
                from engine.export.tflite import export_bytes
                from engine.export.vela import run_vela

                step("vela", 0, 1)
                result.vela = run_vela(export_bytes(result.tflite), result.tflite, target.vela, target.name)
                step("vela", 1, 1)
    else:
        result.diagnostics.append(Diagnostic(
            INFO, None, "float-target", f"target {target.name!r} runs {target.npu.precision}: no QDQ model"))

    return _simulate(result, step)


def _simulate(result: CompileResult, step: Progress) -> CompileResult:
    from engine.sim.timeline import SimOptions, simulate

    step("simulate", 0, 1)
    # The quantized model's per-node precisions (int16 raises, float layers) price each op.
    precisions = dict(result.quant.model.node_precision) if result.quant is not None else None
    result.sim = simulate(result.optimized, result.target,
                          SimOptions(pins=dict(result.options.pins) or None, precisions=precisions))
    step("simulate", 1, 1)
    return result
