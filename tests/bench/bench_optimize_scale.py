"""Optimizer scaling: a synthetic 10,000-node graph and a 50,000-node one.

Run with ``python -m tests.bench.bench_optimize_scale`` (``make bench`` runs every bench).
Prints the figures (best of three runs, each size in its own interpreter, wall and CPU time);
the issue's targets are < 2 s for 10k nodes and < 6x that for 50k (about linear growth).
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import engine
from engine.passes.pipeline import optimize

ROOT = Path(__file__).resolve().parents[2]

C = 8  # channels of the synthetic tensor (1, C, 4, 4)


def synthetic_model(n_nodes: int, seed: int = 0):
    """A chain of blocks typical of exported CNNs: Conv, BatchNorm, Mul/Add by constants, Relu,
    Identity, Dropout, a shape subgraph feeding a Reshape, a Constant-fed Reshape, a cancelling
    Transpose pair and a residual Add -- 21 nodes per block."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    x = "x"
    b = 0
    while len(nodes) < n_nodes:
        p = f"b{b}_"
        inits += [numpy_helper.from_array(rng.standard_normal((C, C, 1, 1)).astype(np.float32) * 0.05, p + "W"),
                  numpy_helper.from_array(rng.standard_normal(C).astype(np.float32) * 0.1, p + "B")]
        for k in ("s", "bb", "m"):
            inits.append(numpy_helper.from_array(rng.standard_normal(C).astype(np.float32) * 0.1 + (k == "s"), p + k))
        inits.append(numpy_helper.from_array((rng.random(C) + 0.5).astype(np.float32), p + "v"))
        inits.append(numpy_helper.from_array((rng.random((1, C, 1, 1)) + 0.5).astype(np.float32), p + "mulc"))
        inits.append(numpy_helper.from_array(rng.standard_normal((1, C, 1, 1)).astype(np.float32) * 0.1, p + "addc"))
        shape_const = helper.make_tensor(p + "shape_val", TensorProto.INT64, [4], [1, C, 4, 4])
        nodes += [
            helper.make_node("Conv", [x, p + "W", p + "B"], [p + "conv"], name=p + "conv"),
            helper.make_node("BatchNormalization", [p + "conv", p + "s", p + "bb", p + "m", p + "v"], [p + "bn"],
                             name=p + "bn"),
            helper.make_node("Mul", [p + "bn", p + "mulc"], [p + "mul"], name=p + "mul"),
            helper.make_node("Add", [p + "mul", p + "addc"], [p + "add"], name=p + "add"),
            helper.make_node("Relu", [p + "add"], [p + "relu"], name=p + "relu"),
            helper.make_node("Identity", [p + "relu"], [p + "id"], name=p + "id"),
            helper.make_node("Dropout", [p + "id"], [p + "drop"], name=p + "drop"),
            helper.make_node("Constant", [], [p + "shape"], name=p + "const", value=shape_const),
            helper.make_node("Reshape", [p + "drop", p + "shape"], [p + "r1"], name=p + "r1"),
            helper.make_node("Shape", [p + "r1"], [p + "shp"], name=p + "shp"),
            helper.make_node("Constant", [], [p + "idx"], name=p + "idxc",
                             value=helper.make_tensor(p + "idx_val", TensorProto.INT64, [], [1])),
            helper.make_node("Gather", [p + "shp", p + "idx"], [p + "g"], name=p + "gather", axis=0),
            helper.make_node("Unsqueeze", [p + "g", "axes0"], [p + "u"], name=p + "unsq"),
            helper.make_node("Constant", [], [p + "rest"], name=p + "restc",
                             value=helper.make_tensor(p + "rest_val", TensorProto.INT64, [2], [4, 4])),
            helper.make_node("Concat", ["one", p + "u", p + "rest"], [p + "cat"], name=p + "cat", axis=0),
            helper.make_node("Reshape", [p + "r1", p + "cat"], [p + "r2"], name=p + "r2"),
            helper.make_node("Transpose", [p + "r2"], [p + "t1"], name=p + "t1", perm=[0, 2, 3, 1]),
            helper.make_node("Transpose", [p + "t1"], [p + "t2"], name=p + "t2", perm=[0, 3, 1, 2]),
            helper.make_node("Add", [p + "t2", x], [p + "res"], name=p + "res"),
            helper.make_node("Sigmoid", [p + "res"], [p + "sig"], name=p + "sig"),
            helper.make_node("Mul", [p + "res", p + "sig"], [p + "out"], name=p + "silu"),
        ]
        x = p + "out"
        b += 1
    inits += [numpy_helper.from_array(np.array([0], dtype=np.int64), "axes0"),
              numpy_helper.from_array(np.array([1], dtype=np.int64), "one")]
    graph = helper.make_graph(nodes, "synthetic", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, 4, 4])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, C, 4, 4])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def time_optimize(n_nodes: int, repeat: int = 3) -> dict[str, float]:
    """Nodes before/after and the best wall and CPU seconds of ``optimize`` on a fresh graph of
    about ``n_nodes`` nodes (loading is not timed)."""
    graph = engine.load(synthetic_model(n_nodes), check=False)
    wall = cpu = float("inf")
    after = 0
    for _ in range(repeat):
        gc.collect()
        t0, c0 = time.perf_counter(), time.process_time()
        res = optimize(graph)
        wall = min(wall, time.perf_counter() - t0)
        cpu = min(cpu, time.process_time() - c0)
        after = len(res.graph)
    return {"nodes": len(graph), "after": after, "wall": wall, "cpu": cpu}


def _in_subprocess(n_nodes: int) -> dict[str, float]:
    """Each size runs in its own interpreter so one size's heap does not slow the other."""
    out = subprocess.run([sys.executable, "-m", "tests.bench.bench_optimize_scale", "--one", str(n_nodes)],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    """Print the 10k and 50k figures and their ratios."""
    r10, r50 = _in_subprocess(10_000), _in_subprocess(50_000)
    print(f"10k: {r10['nodes']} -> {r10['after']} nodes in {r10['wall']:.2f} s wall, {r10['cpu']:.2f} s CPU "
          "(target < 2 s)")
    print(f"50k: {r50['nodes']} -> {r50['after']} nodes in {r50['wall']:.2f} s wall, {r50['cpu']:.2f} s CPU")
    print(f"ratio 50k/10k: {r50['wall'] / r10['wall']:.1f}x wall, {r50['cpu'] / r10['cpu']:.1f}x CPU (target < 6x)")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print(json.dumps(time_optimize(int(sys.argv[2]))))
    else:
        main()
