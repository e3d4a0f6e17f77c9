"""The quantization facade: calibrate -> QDQ model -> layer-by-layer analysis -> report."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from engine.diagnostics import WARNING, Diagnostic
from engine.ir.graph import Graph
from engine.quant.analysis import QuantAnalysis, analyze
from engine.quant.calibrate import Calibration, calibrate
from engine.quant.config import QuantConfig
from engine.quant.data import CalibrationSet
from engine.quant.mixed import MixedPrecisionResult
from engine.quant.ort_rewrites import rewrite_warning
from engine.quant.ptq import Prepared, prepare, wants_pipeline
from engine.quant.qdq import QuantizedModel, build_qdq

Progress = Callable[[str, int, int], None]

LOW_SQNR_DB = 20.0
"""Below this output SQNR a quantized model is rarely usable: the CLI, report and editor warn."""


def low_sqnr_diagnostics(analysis: QuantAnalysis | None, config: QuantConfig,
                         threshold_db: float = LOW_SQNR_DB, worst: int = 3) -> list[Diagnostic]:
    """One ``low-sqnr`` warning per model output under ``threshold_db``: the output's figure, the
    layers that lose the most on their own (isolated SQNR) and the fix to try first."""
    if analysis is None:
        return []
    blame = [le for le in analysis.sensitivity() if le.isolated.sqnr_db < 200.0][:worst]
    where = ", ".join(f"{le.node} ({le.op_type}, {le.isolated.sqnr_db:.1f} dB alone)" for le in blame)
    if not config.per_channel:
        fix = "quantize weights per channel (--per-channel)"
    elif config.method == "minmax":
        fix = "try --method percentile or entropy (outliers stretch minmax ranges)"
    else:
        fix = "keep the worst layers at int16/fp16 (--target-sqnr 30 --target T)"
    out = []
    for name, err in analysis.outputs.items():
        if err.sqnr_db < threshold_db:
            msg = f"output {name!r} SQNR {err.sqnr_db:.1f} dB is below {threshold_db:g} dB"
            msg += f"; worst layers: {where}" if where else ""
            out.append(Diagnostic(WARNING, None, "low-sqnr", f"{msg}; {fix}"))
    return out


@dataclass
class QuantResult:
    """Everything one quantization produced."""

    config: QuantConfig
    calibration: Calibration
    model: QuantizedModel
    analysis: QuantAnalysis | None
    diagnostics: list[Diagnostic] = field(default_factory=list)
    mixed_precision: MixedPrecisionResult | None = None
    """The search that chose the precisions, when the model was quantized to a target SQNR."""
    ptq: Prepared | None = None
    """The PTQ algorithms that ran (CLE, SmoothQuant, range choice, bias correction), if any."""
    seconds: float = 0.0

    @property
    def reference(self) -> Graph | None:
        """The float graph the QDQ model approximates when PTQ rescaled it (CLE/SmoothQuant), else
        None (the input graph)."""
        return self.ptq.reference if self.ptq is not None else None

    @property
    def float_build(self) -> Graph | None:
        """The float graph that was quantized (the reference with corrected biases), if PTQ ran."""
        return self.ptq.build if self.ptq is not None else None

    @property
    def graph(self) -> Graph:
        """The QDQ graph."""
        return self.model.graph

    def report(self) -> dict:
        """The ``quantize --report`` document (CONTRACTS.md), worst layers listed last in order."""
        doc = {
            "method": self.config.method,
            "per_channel": self.config.per_channel,
            "symmetric": self.config.symmetric,
            "dtype": self.config.dtype,
            "samples": self.calibration.samples,
            "analysis_samples": self.analysis.samples if self.analysis else 0,
            "layers": [le.to_json() for le in self.analysis.layers] if self.analysis else [],
            "outputs": {k: {"cosine": round(v.cosine, 6), "sqnr_db": round(v.sqnr_db, 3),
                            "max_abs_err": float(f"{v.max_abs:.6g}")}
                        for k, v in self.analysis.outputs.items()} if self.analysis else {},
            "sensitivity": [le.node for le in self.analysis.sensitivity()] if self.analysis else [],
            "precision": dict(sorted(self.model.node_precision.items())),
            "diagnostics": [d.to_json() for d in self.diagnostics + self.model.diagnostics],
            "seconds": round(self.seconds, 3),
        }
        if self.ptq is not None:
            doc["ptq"] = self.ptq.to_json()
        if self.mixed_precision is not None:
            doc["mixed_precision"] = self.mixed_precision.to_json()
        return doc


def quantize(graph: Graph, data: CalibrationSet, config: QuantConfig | None = None,
             analysis_samples: int = 16, calibration: Calibration | None = None,
             progress: Progress | None = None, cancel: Callable[[], bool] | None = None) -> QuantResult:
    """Calibrate on ``data``, build the QDQ model and measure its error per layer.

    Pass a previous ``calibration`` to re-quantize with other settings without re-running the
    samples (histogram statistics serve every method). Without one, ``--method auto`` and the
    PTQ algorithms the config switches on run first (engine.quant.ptq); the analysis then compares
    with the float graph they produced, which computes what ``graph`` does.
    """
    import time

    from engine.quant.verify import check_quantizable

    check_quantizable(graph)
    config = config or QuantConfig()

    def stage(name: str) -> Callable[[int, int], None] | None:
        return (lambda done, total: progress(name, done, total)) if progress else None

    t0 = time.perf_counter()
    prepared = None
    ref = build = graph
    if calibration is None and wants_pipeline(config):
        prepared = prepare(graph, data, config, progress=progress, cancel=cancel)
        ref, build, calibration, config = prepared.reference, prepared.build, prepared.calibration, prepared.config
    elif calibration is None:
        calibration = calibrate(graph, data, config, progress=stage("calibrate"), cancel=cancel)
    qm = build_qdq(build, calibration, config)
    result_analysis = analyze(ref, qm, data, analysis_samples, progress=stage("analyze")) if analysis_samples else None
    diags = low_sqnr_diagnostics(result_analysis, config)
    rewrite = rewrite_warning(qm.graph)  # what onnxruntime's default session would not run as written
    return QuantResult(config, calibration, qm, result_analysis, [*diags, *([rewrite] if rewrite else [])],
                       ptq=prepared, seconds=time.perf_counter() - t0)
