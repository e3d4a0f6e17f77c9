"""The one-pass float32 activation kernels vs the numpy op chains they replaced and onnxruntime.

Run: `python -m tests.bench.bench_kernels`. For Sigmoid, SiLU (x * Sigmoid(x), in place on a
producer's buffer as the fused plan runs it) and Gelu on float32 feature maps of a few sizes:
the best time of our kernel (nodes/kernels.py), of the numpy chain that ran before (Sigmoid:
negative, exp, + 1, reciprocal; SiLU: that into a new buffer, then a multiply; Gelu: the
float64-polynomial erf pass, erf_flat, then + 1, * x, * 0.5), and of onnxruntime running the
same op on one thread (its Sigmoid, Sigmoid + Mul, Gelu; session overhead included), side by
side in this process, BLAS pinned to 1 thread. Also the largest relative difference to
float64. Prints ratios; nothing is asserted.
"""

from __future__ import annotations

import math
import sys

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from nodes import _kernels_jit
from nodes.activation import sigmoid_chain
from nodes.kernels import ERF_FAR, ERF_NEAR, gelu32_, logistic32_, silu32_
from tests.bench._common import best_time, one_blas_thread

SIZES = ((16, 160, 160), (64, 80, 80), (256, 20, 20))


def _best(fn, repeat: int = 15) -> float:
    fn()  # compiled and warm before the timed runs
    return best_time(fn, repeat)


def _np_sigmoid(x: np.ndarray) -> np.ndarray:
    return sigmoid_chain(x, np.empty_like(x))


def _np_silu(y: np.ndarray) -> np.ndarray:
    s = _np_sigmoid(y)
    y *= s
    return y


def _f64_gelu(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    _kernels_jit.erf_flat((x * np.float32(1 / math.sqrt(2.0))).reshape(-1), out.reshape(-1), ERF_NEAR, ERF_FAR)
    out += 1
    out *= x
    out *= np.float32(0.5)
    return out


def _ort(op: str, shape: tuple[int, ...]) -> ort.InferenceSession:
    nodes = {"Sigmoid": [helper.make_node("Sigmoid", ["x"], ["y"])],
             "SiLU": [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])],
             "Gelu": [helper.make_node("Gelu", ["x"], ["y"])]}[op]
    info = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, *shape]) for n in ("x", "y")]
    model = helper.make_model(helper.make_graph(nodes, op, info[:1], info[1:]),
                              opset_imports=[helper.make_opsetid("", 20)])
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _exact(op: str, x: np.ndarray) -> np.ndarray:
    from scipy.special import erf

    v = x.astype(np.float64)
    s = 1.0 / (1.0 + np.exp(-v))
    return {"Sigmoid": s, "SiLU": v * s, "Gelu": 0.5 * v * (1.0 + erf(v / math.sqrt(2.0)))}[op]


def _row(op: str, x: np.ndarray) -> str:
    buf, out = x.copy(), np.empty_like(x)
    ours, chain = {
        "Sigmoid": (lambda: logistic32_(x, out=out), lambda: _np_sigmoid(x)),
        "SiLU": (lambda: silu32_(buf, out=buf), lambda: _np_silu(buf)),
        "Gelu": (lambda: gelu32_(x, out=out), lambda: _f64_gelu(x, out))}[op]
    sess = _ort(op, x.shape[1:])
    t_ours, t_chain, t_ort = _best(ours), _best(chain), _best(lambda: sess.run(None, {"x": x}))
    exact = _exact(op, x)
    got = {"Sigmoid": logistic32_, "SiLU": silu32_, "Gelu": gelu32_}[op](x)
    big = np.abs(exact) > 1e-6
    rel = float(np.max(np.abs(got[big] - exact[big]) / np.abs(exact[big])))
    return (f"{op:8s} {x.size:8d} floats  ours {t_ours * 1e3:7.3f} ms  before {t_chain * 1e3:7.3f} ms "
            f"({t_chain / t_ours:4.2f}x faster)  onnxruntime {t_ort * 1e3:7.3f} ms (ours/ort {t_ours / t_ort:4.2f}x)  "
            f"max rel diff to float64 (|y| > 1e-6) {rel:.1e}\n")


def main() -> int:
    rng = np.random.default_rng(0)
    with one_blas_thread():
        for shape in SIZES:
            x = (rng.standard_normal((1, *shape)) * 3).astype(np.float32)
            for op in ("Sigmoid", "SiLU", "Gelu"):
                sys.stdout.write(_row(op, x))
                sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
