"""Real architectures from the onnx wheel run in our executor and match onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import engine
from tests.models import light_models


def _feeds(graph, seed=0):
    rng = np.random.default_rng(seed)
    return {v.name: rng.standard_normal([int(d) for d in v.type.shape]).astype(v.type.dtype) for v in graph.inputs}


@pytest.mark.parametrize("path", light_models(), ids=lambda p: p.stem)
def test_light_model_matches_onnxruntime(path):
    graph = engine.load(path)
    feeds = _feeds(graph)
    ours = engine.execute(graph, feeds)
    assert engine.executor_for(graph).fused_fallbacks == 0  # the fused plan ran, not its unfused redo
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    theirs = sess.run(None, feeds)
    for v, ref in zip(graph.outputs, theirs):
        got = ours[v.name]
        assert got.shape == ref.shape
        scale = max(float(np.abs(ref).max()), 1e-12)
        err = float(np.abs(got.astype(np.float64) - ref).max()) / scale
        assert err <= 1e-3, f"{path.stem}/{v.name}: relative max abs diff {err:.2e}"
