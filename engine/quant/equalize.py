"""Float-exact rescalings that make a model easier to quantize: CLE and SmoothQuant.

Cross-layer equalization (Nagel et al. 2019, "Data-Free Quantization Through Weight
Equalization and Bias Correction"). For two convolutions in a row, y = W2 f(W1 x + b1) + b2,
with f positively homogeneous (f(x / s) = f(x) / s for s > 0: identity, ReLU, LeakyReLU), each
channel i between them can be rescaled for free:

    W1[i] /= s_i,  b1[i] /= s_i,  W2[:, i] *= s_i

With r1_i = max |W1[i]| and r2_i = max |W2[:, i]|, s_i = sqrt(r1_i / r2_i) gives both layers the
range sqrt(r1_i r2_i) in channel i, so a channel with tiny weights in a depthwise conv no longer
wastes the levels of its neighbours, and the activation between them is rescaled with it. ReLU6
(Clip) and HardSwish are not homogeneous (their corners do not move with the scale), so chains
through them are left alone: rescaling there would change what the model computes.

Activation equalization. The same free rescaling, with s chosen for the activation between the
two convolutions rather than for their weights: with a_i = max |f(W1 x + b1)_i| over calibration
samples and g their geometric mean, s_i = (a_i / g)^alpha makes every channel's range
a_i^(1 - alpha) g^alpha (all equal at alpha = 1). The tensor between them is quantized per tensor,
so its small channels stop rounding to a few levels; the first conv's weights are quantized per
output channel, which a per-row factor does not change, and the second's columns take s_i (the
cost: its per-output-channel range may grow). ``alpha`` is chosen by the error it gives.

SmoothQuant (Xiao et al. 2022). For a MatMul X W whose activation X has a few outlier channels k,
X W = (X / s) (s W) with s_k = max|X_k|^a / max|W_k|^(1 - a) moves the outliers into the weights
(which are quantized per output channel and tolerate them). The division is folded into the
LayerNormalization that produces X (gamma / s, beta / s), so no op is added; ``alpha`` = a is
chosen by the error it gives.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from engine.ir.clone import clone_graph
from engine.ir.graph import Graph, Node

HOMOGENEOUS = frozenset({"Relu", "LeakyRelu"})
"""Fused activations f with f(x / s) = f(x) / s for every s > 0."""


@dataclass
class CLEPair:
    """Two convolutions whose shared channels were rescaled."""

    first: str
    second: str
    channels: int
    range_ratio_before: float
    """Largest over smallest per-channel weight range of the second conv's inputs (channel spread)."""
    range_ratio_after: float

    def to_json(self) -> dict:
        """JSON-ready."""
        return {"first": self.first, "second": self.second, "channels": self.channels,
                "range_ratio_before": round(self.range_ratio_before, 3),
                "range_ratio_after": round(self.range_ratio_after, 3)}


def _const_input(node: Node, i: int) -> np.ndarray | None:
    v = node.input(i)
    return v.const if v is not None and v.const is not None else None


def _conv_weight_ok(node: Node) -> bool:
    w = _const_input(node, 1)
    return node.op_type == "Conv" and not node.domain and w is not None and w.dtype.kind == "f" and w.ndim >= 3


def cle_pairs(graph: Graph) -> list[tuple[Node, Node]]:
    """(first, second) Conv pairs of the main graph that CLE can rescale exactly: the first's only
    reader is the second's data input, through no activation or a positively homogeneous one."""
    out = []
    for a in graph.toposort():
        if not _conv_weight_ok(a) or (a.activation is not None and a.activation.op_type not in HOMOGENEOUS):
            continue
        y = a.outputs[0]
        if y is None or y.is_graph_output or len(y.uses()) != 1:
            continue
        b, idx = y.uses()[0]
        if idx != 0 or not _conv_weight_ok(b):
            continue
        wa, wb = _const_input(a, 1), _const_input(b, 1)
        group = int(b.attrs.get("group", 1))
        if wa is None or wb is None or wb.shape[1] * group != wa.shape[0]:
            continue
        if len(a.inputs) > 2 and a.inputs[2] is not None and a.inputs[2].const is None:
            continue
        out.append((a, b))
    return out


def _second_ranges(wb: np.ndarray, group: int) -> np.ndarray:
    """max |W2| per input channel of a (grouped) conv: channel c sits in group c // cg, column c % cg."""
    m, cg = wb.shape[0], wb.shape[1]
    mg = m // group
    per = np.abs(wb).reshape(group, mg, cg, -1).max(axis=(1, 3))  # (group, cg)
    return per.reshape(-1)


def _scale_second(wb: np.ndarray, group: int, s: np.ndarray) -> np.ndarray:
    m, cg = wb.shape[0], wb.shape[1]
    mg = m // group
    out = wb.reshape(group, mg, cg, -1) * s.reshape(group, 1, cg, 1)
    return out.reshape(wb.shape).astype(wb.dtype)


def _spread(r: np.ndarray) -> float:
    pos = r[r > 0]
    return float(pos.max() / pos.min()) if pos.size else 1.0


def equalize(graph: Graph, sweeps: int = 4) -> tuple[Graph, list[CLEPair]]:
    """A copy of ``graph`` with every CLE pair equalized (``sweeps`` passes, since a conv can be the
    second of one pair and the first of the next); the list of pairs changed."""
    g = clone_graph(graph)
    pairs = cle_pairs(g)
    before = {}
    for a, b in pairs:
        before[(a.name, b.name)] = _spread(_second_ranges(_const_input(b, 1), int(b.attrs.get("group", 1))))
    for _ in range(sweeps):
        for a, b in pairs:
            wa, wb = _const_input(a, 1), _const_input(b, 1)
            group = int(b.attrs.get("group", 1))
            r1 = np.abs(wa).reshape(wa.shape[0], -1).max(axis=1).astype(np.float64)
            r2 = _second_ranges(wb, group).astype(np.float64)
            ok = (r1 > 0) & (r2 > 0)
            s = np.where(ok, np.sqrt(np.where(ok, r1 / np.where(r2 > 0, r2, 1.0), 1.0)), 1.0)
            shape = (-1,) + (1,) * (wa.ndim - 1)
            _set_const(g, a, 1, (wa / s.reshape(shape)).astype(wa.dtype))
            ba = _const_input(a, 2) if len(a.inputs) > 2 else None
            if ba is not None:
                _set_const(g, a, 2, (ba / s).astype(ba.dtype))
            _set_const(g, b, 1, _scale_second(wb, group, s))
    changed = []
    for a, b in pairs:
        after = _spread(_second_ranges(_const_input(b, 1), int(b.attrs.get("group", 1))))
        changed.append(CLEPair(a.name, b.name, int(_const_input(a, 1).shape[0]), before[(a.name, b.name)], after))
    return g, changed


def equalize_activations(graph: Graph, amax: Mapping[str, np.ndarray], alpha: float) -> tuple[Graph, list[CLEPair]]:
    """A copy of ``graph`` whose CLE pairs have the tensor between them equalized (module docstring);
    ``amax`` gives max |x| per channel (axis 1) of each first conv's output. The pairs' spread
    figures are those of ``equalize``: the second conv's input-channel weight ranges."""
    g = clone_graph(graph)
    changed = []
    for a, b in cle_pairs(g):
        y = a.outputs[0].name  # type: ignore[union-attr]
        ax = np.asarray(amax.get(y, np.zeros(0)), np.float64)
        wa, wb = _const_input(a, 1), _const_input(b, 1)
        if wa is None or wb is None or ax.shape != (wa.shape[0],) or not (ax > 0).any():
            continue
        pos = ax > 0
        gm = float(np.exp(np.mean(np.log(ax[pos]))))
        s = np.where(pos, np.power(np.where(pos, ax, gm) / gm, alpha), 1.0)
        _set_const(g, a, 1, (wa / s.reshape((-1,) + (1,) * (wa.ndim - 1))).astype(wa.dtype))
        ba = _const_input(a, 2) if len(a.inputs) > 2 else None
        if ba is not None:
            _set_const(g, a, 2, (ba / s).astype(ba.dtype))
        group = int(b.attrs.get("group", 1))
        _set_const(g, b, 1, _scale_second(wb, group, s))
        changed.append(CLEPair(a.name, b.name, int(wa.shape[0]), _spread(_second_ranges(wb, group)),
                               _spread(_second_ranges(_const_input(b, 1), group))))
    return g, changed


def channel_absmax_axis1(envs: Sequence[Mapping[str, np.ndarray]], names: Sequence[str]) -> dict[str, np.ndarray]:
    """max |x| over every axis but axis 1 (NCHW channels), over the samples ``envs``, of each tensor named."""
    out: dict[str, np.ndarray] = {}
    for name in names:
        arrs = [np.moveaxis(e[name], 1, -1) for e in envs if name in e and np.ndim(e[name]) >= 2]
        if arrs:
            out[name] = channel_absmax([{name: x} for x in arrs], [name])[name]
    return out


def _set_const(g: Graph, node: Node, idx: int, array: np.ndarray) -> None:
    """Give ``node`` input ``idx`` a new initializer holding ``array`` (shared weights stay intact)."""
    old = node.inputs[idx]
    assert old is not None
    if len(old.uses()) == 1 and not old.is_graph_output and old.name in g.initializers:
        old.const = array
        return
    node.set_input(idx, g.add_initializer(f"{old.name}_equalized", array))


@dataclass
class SmoothPair:
    """A LayerNormalization whose output channels were divided by s, folded into its MatMul readers."""

    norm: str
    matmuls: list[str]
    alpha: float
    max_abs_before: float
    max_abs_after: float

    def to_json(self) -> dict:
        """JSON-ready."""
        return {"norm": self.norm, "matmuls": self.matmuls, "alpha": self.alpha,
                "activation_max_abs_before": round(self.max_abs_before, 4),
                "activation_max_abs_after": round(self.max_abs_after, 4)}


def _matmul_weight(node: Node) -> np.ndarray | None:
    """The (K, N) constant weight of a MatMul, or a Gemm's B as (K, N)."""
    w = _const_input(node, 1)
    if w is None or w.dtype.kind != "f" or w.ndim != 2 or node.domain:
        return None
    if node.op_type == "MatMul":
        return w
    if node.op_type == "Gemm" and not node.attrs.get("transA", 0):
        return w.T if node.attrs.get("transB", 0) else w
    return None


def smooth_sites(graph: Graph) -> list[tuple[Node, list[Node]]]:
    """(LayerNormalization over the last axis with constant gamma/beta, its readers) where every
    reader is a MatMul/Gemm with a constant weight taking the norm's output as its first input."""
    out = []
    for n in graph.toposort():
        if n.op_type != "LayerNormalization" or n.domain or n.activation is not None:
            continue
        y = n.outputs[0]
        if y is None or y.is_graph_output or not y.uses() or int(n.attrs.get("axis", -1)) not in (-1,):
            continue
        if any(o is not None and o.uses() for o in n.outputs[1:]):
            continue
        gamma = _const_input(n, 1)
        if gamma is None or gamma.ndim != 1 or (len(n.inputs) > 2 and n.inputs[2] is not None
                                                and _const_input(n, 2) is None):
            continue
        readers = [u for u, i in y.uses() if i == 0 and _matmul_weight(u) is not None]
        if len(readers) != len(y.uses()):
            continue
        out.append((n, readers))
    return out


def smooth_scales(graph: Graph, amax: Mapping[str, np.ndarray], alpha: float) -> dict[str, np.ndarray]:
    """norm output name -> s (per last-axis channel) at each SmoothQuant site of ``graph``;
    ``amax`` gives max |x| per channel of each norm's output (from calibration samples)."""
    out = {}
    for norm, readers in smooth_sites(graph):
        name = norm.outputs[0].name  # type: ignore[union-attr]
        if name not in amax:
            continue
        ax = np.asarray(amax[name], np.float64)
        wmax = np.max([np.abs(_matmul_weight(r)).max(axis=1) for r in readers], axis=0).astype(np.float64)  # type: ignore[arg-type]
        if ax.shape != wmax.shape:
            continue
        ok = (ax > 0) & (wmax > 0)
        s = np.where(ok, np.power(np.maximum(ax, 1e-30), alpha) / np.power(np.maximum(wmax, 1e-30), 1 - alpha), 1.0)
        out[name] = s / np.exp(np.mean(np.log(s)))  # geometric mean 1: overall magnitudes stay put
    return out


def smooth(graph: Graph, scales: Mapping[str, np.ndarray], alpha: float,
           amax: Mapping[str, np.ndarray] | None = None) -> tuple[Graph, list[SmoothPair]]:
    """A copy of ``graph`` whose norm outputs named in ``scales`` are divided by s (folded into
    gamma and beta) and whose MatMul/Gemm readers multiply their weight rows by s."""
    g = clone_graph(graph)
    changed = []
    for norm, readers in smooth_sites(g):
        name = norm.outputs[0].name  # type: ignore[union-attr]
        if name not in scales:
            continue
        s = np.asarray(scales[name], np.float64)
        gamma = _const_input(norm, 1)
        _set_const(g, norm, 1, (gamma / s).astype(gamma.dtype))  # type: ignore[operator,union-attr]
        beta = _const_input(norm, 2) if len(norm.inputs) > 2 else None
        if beta is not None:
            _set_const(g, norm, 2, (beta / s).astype(beta.dtype))
        for r in readers:
            w = _const_input(r, 1)
            if r.op_type == "Gemm" and r.attrs.get("transB", 0):
                new = w * s[None, :]  # type: ignore[index,operator]
            else:
                new = w * s[:, None]  # type: ignore[index,operator]
            _set_const(g, r, 1, new.astype(w.dtype))  # type: ignore[union-attr]
        ax = np.asarray(amax[name]) if amax is not None and name in amax else np.zeros(1)
        changed.append(SmoothPair(norm.name, [r.name for r in readers], alpha, float(ax.max()),
                                  float((ax / s).max()) if ax.shape == s.shape else 0.0))
    return g, changed


def channel_absmax(envs: Sequence[Mapping[str, np.ndarray]], names: Sequence[str]) -> dict[str, np.ndarray]:
    """max |x| over every axis but the last, over the samples ``envs``, of each tensor named."""
    out: dict[str, np.ndarray] = {}
    for name in names:
        arrs = [e[name] for e in envs if name in e]
        if arrs:
            out[name] = np.max([np.abs(a).reshape(-1, a.shape[-1]).max(axis=0) for a in arrs], axis=0)
    return out
