"""Whole models: every bundled demo and every onnx 'light' model, optimized, checked and compared.

The optimized model must pass onnx.checker.check_model(full_check=True), run in onnxruntime and
match the original's outputs (max abs diff <= 1e-4 of the output's max magnitude); no
BatchNormalization may follow a Conv, no Constant/Identity/Dropout may remain, and the
transformer demo's LayerNorm and GELU must be single nodes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import engine
from engine.ir.onnx_io import to_onnx
from engine.passes.pipeline import optimize

ROOT = Path(__file__).resolve().parents[2]
DEMOS = ROOT / "assets" / "models"
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
DEMO_NAMES = ["mobilenet_demo.onnx", "transformer_demo.onnx", "digits_cnn.onnx"]


def _cases() -> list:
    cases = []
    for name in DEMO_NAMES:
        path = DEMOS / name
        cases.append(pytest.param(path, id=name, marks=pytest.mark.skipif(
            not path.exists(), reason=f"demo model {name} is not in assets/models")))
    lights = sorted(LIGHT.glob("*.onnx")) if LIGHT.exists() else []
    if not lights:
        cases.append(pytest.param(None, id="light", marks=pytest.mark.skip(reason="onnx wheel has no light models")))
    cases += [pytest.param(p, id=p.name) for p in lights]
    return cases


def _ort_run(proto: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    return sess.run(None, {k: v for k, v in feeds.items() if k in names})


@pytest.mark.parametrize("path", _cases())
def test_optimized_model_is_valid_runs_and_matches(path):
    graph = engine.load(path)
    feeds = {}
    rng = np.random.default_rng(0)
    for v in graph.inputs:
        shape = tuple(d if isinstance(d, int) else 1 for d in v.type.shape or ())
        feeds[v.name] = rng.standard_normal(shape).astype(v.type.dtype or np.float32)
    result = optimize(graph)
    opt = to_onnx(result.graph)
    onnx.checker.check_model(opt, full_check=True)
    want = _ort_run(onnx.load(str(path)), feeds)
    got = _ort_run(opt, feeds)
    assert len(want) == len(got)
    for w, g in zip(want, got):
        assert w.shape == g.shape
        scale = max(float(np.max(np.abs(w))), 1e-12)
        assert float(np.max(np.abs(w.astype(np.float64) - g))) <= 1e-4 * scale
    ops = [n.op_type for n in result.graph.nodes]
    assert not {"Constant", "Identity", "Dropout"} & set(ops)
    for n in result.graph.nodes:
        if n.op_type == "BatchNormalization":
            src = n.inputs[0].producer()
            assert src is None or src.op_type != "Conv", f"{n.name} still follows Conv {src.name}"
    assert result.nodes_after < result.nodes_before
    assert not [d for d in result.diagnostics if d.severity == "error"]
    if path.name == "transformer_demo.onnx":
        assert "LayerNormalization" in ops and "Gelu" in ops
        assert not {"Erf", "Sqrt", "Pow", "Tanh"} & set(ops)


def test_demo_model_executor_agrees_after_fusion():
    path = DEMOS / "mobilenet_demo.onnx"
    if not path.exists():
        pytest.skip("demo model mobilenet_demo.onnx is not in assets/models")
    graph = engine.load(path)
    result = optimize(graph)
    assert any(n.activation for n in result.graph.nodes)
    x = np.random.default_rng(1).standard_normal(tuple(graph.inputs[0].type.shape)).astype(np.float32)
    a = engine.execute(graph, {graph.inputs[0].name: x})
    b = engine.execute(result.graph, {graph.inputs[0].name: x})
    for k in a:
        assert float(np.max(np.abs(a[k] - b[k]))) <= 1e-4 * max(float(np.max(np.abs(a[k]))), 1e-12)
