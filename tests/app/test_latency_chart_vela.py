"""The latency chart shows vela's cycles beside our estimate when the compile ran vela."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import engine
from engine.compiler import CompileOptions, compile_model
from engine.quant.config import QuantConfig
from engine.quant.data import CalibrationSet

pytestmark = pytest.mark.gui
ROOT = Path(__file__).resolve().parents[2]


def test_latency_rows_carry_vela_cycles_of_each_layer():
    pytest.importorskip("ethosu.vela")
    from app.panels.charts import latency_rows

    g = engine.load(ROOT / "assets/models/digits_cnn.onnx")
    data = dict(np.load(ROOT / "assets/data/digits_calib.npz"))
    r = compile_model(g, "ethos-u55", CalibrationSet.from_arrays("digits", {"x": data["x"][:16]}),
                      CompileOptions(quant=QuantConfig(method="minmax"), analysis_samples=0, vela=True))
    rows = latency_rows(SimpleNamespace(sim=r.sim, compile=r))
    conv_rows = [row for row in rows if row.name in {o.node for o in r.sim.ops if o.op_type == "Conv"}]
    assert conv_rows and all("vela" in row.label and "cycles" in row.tooltip for row in conv_rows)
