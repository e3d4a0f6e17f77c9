"""Empirical bias correction (Nagel et al. 2019, section 4.2, measured rather than derived).

Quantized weights W~ = W + e give a quantized conv an output error e x whose mean over the data,
e E[x], is a per-channel shift the next layers inherit: a depthwise conv with nine weights per
channel rounds them with a clear bias, and the shift accumulates down the network. Measured on
the calibration samples (QDQ model against FP32, per output channel, every axis but the
channel's averaged), the shift is subtracted from the float bias before the model is quantized:

    b'[c] = b[c] - mean(y_q[c] - y_fp[c])

Each op's shift is measured with only that op quantized (its inputs from the FP32 run), before
its fused activation (a ReLU or HardSwish inside the conv), where the bias acts. With
``weights_only`` the op's data input stays FP32 too, so the shift is the weights' alone,
(W~ - W) E[x]: the activation's rounding, which the next samples round differently, is left out
of it. PP-OCRv6 rec's Conv.26 (1x1, 384 -> 192) reads a Gelu output whose energy is 88% its
per-channel mean (about -0.15): its weights quantized alone leave the model output at 25.6 dB on
held-out crops, and 48.2 dB with that shift removed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from engine.ir.clone import clone_graph
from engine.ir.graph import Graph, Node
from engine.quant.analysis import isolated_args, run_node
from engine.quant.calibrate import Calibration
from engine.quant.config import QuantConfig
from engine.quant.params import FLOAT_PRECISIONS
from engine.quant.qdq import build_qdq


@dataclass
class BiasShift:
    """The correction folded into one op's bias."""

    node: str
    op_type: str
    channels: int
    mean_abs_shift: float
    relative_shift: float
    """mean |shift| over the output's RMS: how large the removed bias was."""

    def to_json(self) -> dict:
        """JSON-ready."""
        return {"node": self.node, "op_type": self.op_type, "channels": self.channels,
                "mean_abs_shift": float(f"{self.mean_abs_shift:.4g}"),
                "relative_shift": float(f"{self.relative_shift:.4g}")}


def _channel_axis(node: Node, y: np.ndarray) -> int:
    return 1 if node.op_type == "Conv" else y.ndim - 1


def correctable(graph: Graph, precision: Mapping[str, str]) -> list[Node]:
    """Conv/Gemm nodes of the main graph, quantized to an integer type, whose bias is a constant 1-D vector or absent (an absent one is added)."""
    out = []
    for n in graph.toposort():
        if n.op_type not in ("Conv", "Gemm") or n.domain:
            continue
        if precision.get(n.name, "fp32") in FLOAT_PRECISIONS:
            continue
        w = n.input(1)
        if w is None or w.const is None or w.const.dtype.kind != "f":
            continue
        if n.op_type == "Gemm" and (n.attrs.get("transA", 0) or float(n.attrs.get("beta", 1.0)) != 1.0):
            continue
        b = n.input(2) if len(n.inputs) > 2 else None
        if b is not None and (b.const is None or b.const.ndim != 1):
            continue
        out.append(n)
    return out


def _preactivation(graph: Graph, node: Node, args: list) -> np.ndarray:
    return np.asarray(run_node(graph, node, args, activation=False), np.float64)


def measure_shifts(build: Graph, calib: Calibration, config: QuantConfig,
                   ref_envs: Sequence[Mapping[str, np.ndarray]],
                   reference: Graph | None = None, weights_only: bool = False) -> dict[str, tuple[np.ndarray, float]]:
    """node name -> (mean shift per output channel, RMS of the output) of each correctable op of
    ``build`` quantized alone: its input, weight and bias quantized as the QDQ model does, the
    input taken from the FP32 values ``ref_envs``, both outputs taken before the fused activation.
    Measuring each op alone keeps the corrections independent: corrected together, an op would
    also cancel the shifts of the ops above it, which their own corrections already remove.
    The FP32 side takes its weights from ``reference`` when given (``build``'s may already be
    rounded, by AdaRound)."""
    qm = build_qdq(build, calib, config)
    out: dict[str, tuple[np.ndarray, float]] = {}
    for n in correctable(build, qm.node_precision):
        sums, sq, count = 0.0, 0.0, 0
        for env in ref_envs:
            if any(v is not None and v.const is None and v.name not in env for v in n.inputs):
                break
            fp_node = reference.node_by_name(n.name) if reference is not None else None
            fp_args = [None if v is None else v.const if v.const is not None else env[v.name]
                       for v in (fp_node or n).inputs]
            q_args = isolated_args(qm, n, env)
            if weights_only:  # the data input as FP32 computes it: the weights' shift alone
                q_args = [f if v is not None and v.const is None else q for v, q, f in zip(n.inputs, q_args, fp_args)]
            ref = _preactivation(build, n, fp_args)
            d = _preactivation(build, n, q_args) - ref
            ax = _channel_axis(n, d)
            d = d.swapaxes(ax, -1).reshape(-1, d.shape[ax])
            sums = sums + d.sum(axis=0)
            sq += float(np.square(ref).sum())
            count += d.shape[0]
        if count:
            shift = np.asarray(sums) / count
            out[n.name] = (shift, float(np.sqrt(sq / (count * shift.size))))
    return out


def correct_biases(build: Graph, calib: Calibration, config: QuantConfig,
                   ref_envs: Sequence[Mapping[str, np.ndarray]],
                   reference: Graph | None = None, weights_only: bool = False) -> tuple[Graph, list[BiasShift]]:
    """A copy of ``build`` whose Conv/Gemm biases cancel the mean output shift each op's own
    quantization causes (measured on the FP32 values ``ref_envs``, against ``reference``'s
    weights when given; with ``weights_only`` the shift of its weights alone), and what each
    correction was."""
    g = clone_graph(build)
    out = []
    for name, (shift, rms) in measure_shifts(g, calib, config, ref_envs, reference, weights_only).items():
        node = g.node_by_name(name)
        assert node is not None
        _add_to_bias(g, node, -shift)
        mean_abs = float(np.abs(shift).mean())
        out.append(BiasShift(name, node.op_type, int(np.size(shift)), mean_abs, mean_abs / rms if rms > 0 else 0.0))
    return g, out


def _add_to_bias(g: Graph, node: Node, delta: np.ndarray) -> None:
    w = node.input(1)
    assert w is not None and w.const is not None
    b = node.input(2) if len(node.inputs) > 2 else None
    dtype = w.const.dtype
    if b is None:
        v = g.add_initializer(f"{node.name}_bias_corrected", delta.astype(dtype))
        inputs = list(node.inputs) + [None] * (3 - len(node.inputs))
        inputs[2] = v
        node.set_inputs(inputs)
        return
    new = (b.const.astype(np.float64) + delta).astype(b.const.dtype)  # type: ignore[union-attr]
    if len(b.uses()) == 1 and not b.is_graph_output and b.name in g.initializers:
        b.const = new
    else:
        node.set_input(2, g.add_initializer(f"{b.name}_corrected", new))
