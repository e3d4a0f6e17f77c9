"""Simulator scale: engine time of `simulate` on synthetic graphs of 1,250 to 20,000 nodes.

Run: `python -m tests.bench.bench_sim_scale`. The graphs mix 1x1 convolutions, activations,
residual adds and ops the phone NPU cannot run (so placement, the island step, transfers and
the timeline all have work). Engine time covers verdicts, costs, placement with the island
step, partitioning, residency planning and the timeline; loading the model is reported
apart. Targets: under 1 s at 10,000 nodes, and linear growth (fitted exponent close to 1).
Printed figures, not timed assertions.
"""

from __future__ import annotations

import math
import sys
import time

import numpy as np
from onnx import helper, numpy_helper

import engine
from engine.hw.target import resolve_target
from engine.sim.timeline import simulate
from tests.bench._common import one_blas_thread
from tests.engine.sim_graphs import _model, vi

SIZES = (1250, 2500, 5000, 10000, 20000)


def synthetic_cnn(n_nodes: int, seed: int = 0):
    """A long CNN-like chain with skips, 1x1 convs and some CPU-only ops."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array((rng.standard_normal((16, 16, 1, 1)) * 0.1).astype(np.float32), "W")
    nodes, names = [], ["x"]
    for k in range(n_nodes):
        r = rng.random()
        out = f"v{k}"
        if r < 0.2:
            nodes.append(helper.make_node("Conv", [names[-1], "W"], [out], name=f"n{k}", kernel_shape=[1, 1]))
        elif r < 0.3 and len(names) > 4:
            other = names[-int(rng.integers(2, min(len(names), 8)))]
            nodes.append(helper.make_node("Add", [names[-1], other], [out], name=f"n{k}"))
        elif r < 0.35:
            nodes.append(helper.make_node("Erf", [names[-1]], [out], name=f"n{k}"))
        elif r < 0.55:
            nodes.append(helper.make_node("Sigmoid", [names[-1]], [out], name=f"n{k}"))
        else:
            nodes.append(helper.make_node("Relu", [names[-1]], [out], name=f"n{k}"))
        names.append(out)
    return _model(nodes, [vi("x", [1, 16, 28, 28])], [vi(names[-1], [1, 16, 28, 28])], [w])


def best_of(fn, repeat: int = 3) -> tuple[float, float]:
    """Best process CPU time (the engine's own time, robust on a shared machine) and best wall time."""
    cpu = wall = math.inf
    for _ in range(repeat):
        c0, w0 = time.process_time(), time.perf_counter()
        fn()
        cpu = min(cpu, time.process_time() - c0)
        wall = min(wall, time.perf_counter() - w0)
    return cpu, wall


def main() -> int:
    target = resolve_target("phone-npu")
    rows = []
    with one_blas_thread():
        for n in SIZES:
            model = synthetic_cnn(n)
            t0 = time.perf_counter()
            graph = engine.load(model)
            load_s = time.perf_counter() - t0
            res = simulate(graph, target)
            sim_s, wall_s = best_of(lambda g=graph: simulate(g, target))
            rows.append((n, sim_s))
            s = res.summary()
            sys.stdout.write(f"{n:6d} nodes   simulate {sim_s * 1e3:7.1f} ms engine time ({sim_s / n * 1e6:5.1f} us/node), "
                             f"{wall_s * 1e3:7.1f} ms wall   load {load_s * 1e3:7.1f} ms   "
                             f"{s['npu_ops']} npu / {s['cpu_ops']} cpu ops, {s['partitions']} partitions, "
                             f"{s['transfers']} transfers\n")
    xs = np.log([r[0] for r in rows])
    ys = np.log([r[1] for r in rows])
    slope = float(np.polyfit(xs, ys, 1)[0])
    at10k = dict(rows)[10000]
    sys.stdout.write(f"growth exponent {slope:.2f} over {SIZES[0]:,}..{SIZES[-1]:,} nodes (1.0 = linear); "
                     f"10,000 nodes in {at10k:.3f} s engine time ({'under' if at10k < 1.0 else 'OVER'} the 1 s target)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
