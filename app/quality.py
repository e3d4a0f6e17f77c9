"""What the editor says about the quality of a compile: the engine's low-output-SQNR warning
in the editor's words, and whether error figures come from real calibration data or from
random inputs. Nothing is measured or judged again here."""

from __future__ import annotations

from typing import Any

from app import style
from engine.diagnostics import Diagnostic

LOW_SQNR = "low-sqnr"  # engine.quant.api.low_sqnr_diagnostics

# Where the engine's fixes (worded as CLI flags) are in the editor.
GUI_FIX = {"(--per-channel)": "(Compile > per channel)",
           "try --method percentile or entropy": "try the percentile or entropy method (Compile > Method)",
           "(--target-sqnr 30 --target T)": "(Precision tab: Find candidates)"}


def low_sqnr_warnings(result: Any) -> list[Diagnostic]:
    """The compile's ``low-sqnr`` warnings (engine.quant.api.low_sqnr_diagnostics, the one
    definition: an output under 20 dB, its worst layers, the fix to try first), with the fix
    named where the editor has it, and a note when the samples were random inputs."""
    out = []
    for d in result.compile.diagnostics:
        if d.code != LOW_SQNR:
            continue
        msg = d.message
        for cli, gui in GUI_FIX.items():
            msg = msg.replace(cli, gui)
        if synthetic(result):
            msg += "; first calibrate on real data (Compile > Calibration data): these scales come from random inputs"
        out.append(Diagnostic(d.severity, d.node, d.code, msg))
    return out


def synthetic(result: Any) -> bool:
    """True when the compile was calibrated on random inputs (no calibration set chosen)."""
    return not result.settings.calibration


def samples_phrase(result: Any, n: int) -> str:
    """ "8 calibration samples", or "8 synthetic random samples (no calibration set)"."""
    if synthetic(result):
        return f"{style.count(n, 'synthetic random sample')} (no calibration set)"
    return style.count(n, "calibration sample")
