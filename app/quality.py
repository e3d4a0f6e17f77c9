"""What the editor says about the quality of a compile: output SQNR below ``LOW_SQNR_DB`` is
poor, and the warning names the layers that lose the most and the fix to try first; error
figures say whether they come from real calibration data or from random inputs.

Computed from what the engine's quantize report already holds (per-output and per-layer SQNR,
``engine.quant.analysis.QuantAnalysis``); nothing is measured again here.
"""

from __future__ import annotations

from typing import Any

from engine.diagnostics import WARNING, Diagnostic

LOW_SQNR_DB = 20.0  # below this an output is noticeably degraded (about 1 % relative noise power)
WORST_LAYERS = 3


def low_sqnr_warnings(result: Any) -> list[Diagnostic]:
    """One warning per output whose SQNR is below LOW_SQNR_DB (``result``: an AnalysisResult)."""
    q = result.quant
    if q is None or q.analysis is None:
        return []
    poor = {name: e.sqnr_db for name, e in q.analysis.outputs.items() if e.sqnr_db < LOW_SQNR_DB}
    if not poor:
        return []
    worst = q.analysis.sensitivity()[:WORST_LAYERS]
    layers = ", ".join(f"{e.node} ({e.op_type}, {e.isolated.sqnr_db:.1f} dB alone)" for e in worst)
    fix = fix_to_try(result, [e.node for e in worst])
    return [Diagnostic(WARNING, worst[0].node if worst else None, "low-output-sqnr",
                       f"output {name!r}: SQNR {db:.2f} dB is below {LOW_SQNR_DB:.0f} dB (poor); worst layers: "
                       f"{layers or 'none measured'}; try {fix}")
            for name, db in sorted(poor.items(), key=lambda kv: kv[1])]


def fix_to_try(result: Any, worst: list[str]) -> str:
    """The first remedy that applies, in the order that usually helps most."""
    q = result.quant
    cfg = q.config
    if synthetic(result):
        return "real calibration data (Compile > Calibration data): these scales come from random inputs"
    if not cfg.per_channel:
        return "per-channel weights (Compile > per channel)"
    if cfg.method == "minmax":
        return "the percentile or entropy method (Compile > Method)"
    raise_to = next((p for p in ("int16", "fp16", "bf16") if p in result.compile.target.npu.precisions), None)
    if raise_to is not None and worst:
        return f"raising {', '.join(worst)} to {raise_to} (Precision tab)"
    return "another calibration method per tensor (Op analysis > Method)"


def synthetic(result: Any) -> bool:
    """True when the compile was calibrated on random inputs (no calibration set chosen)."""
    return not result.settings.calibration


def samples_phrase(result: Any, n: int) -> str:
    """ "8 calibration samples", or "8 synthetic random samples (no calibration set)"."""
    if synthetic(result):
        return f"{n} synthetic random sample{'s' if n != 1 else ''} (no calibration set)"
    return f"{n} calibration sample{'s' if n != 1 else ''}"
