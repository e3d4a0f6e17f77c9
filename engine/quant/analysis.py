"""Layer-by-layer error of the quantized model against FP32 (cosine, max abs error, SQNR).

Two views, as RKNN's accuracy analysis distinguishes them:
- accumulated: the QDQ model run end to end; a layer's error includes everything upstream;
- isolated: only that layer quantized (its inputs taken from the FP32 run, quantized with the
  layer's own parameters, weights and bias quantized), so the layer's own sensitivity shows.
SQNR = 10 log10(sum(ref^2) / sum((ref - q)^2)) in dB; cosine = <ref, q> / (|ref| |q|).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from engine.ir.fused import run_activation
from engine.ir.graph import Graph, Node
from engine.quant.config import quant_spec
from engine.quant.data import CalibrationSet
from engine.quant.params import (
    FLOAT_PRECISIONS,
    dequantize_array,
    fake_quantize,
    quantize_array,
    round_to_precision,
)
from engine.quant.qdq import QuantizedModel


@dataclass
class ErrorStats:
    """Streaming error statistics of a quantized tensor against its FP32 reference."""

    ref2: float = 0.0
    err2: float = 0.0
    q2: float = 0.0
    dot: float = 0.0
    max_abs: float = 0.0

    def update(self, ref: np.ndarray, q: np.ndarray) -> None:
        """Add one sample: the sums in float64, the max over the float32 differences. Float32
        tensors take one compiled pass (nodes.kernels.error_sums_; 10x numpy's six passes on
        1.6M values), other types float64 copies."""
        r, x = np.asarray(ref), np.asarray(q)
        if r.dtype == np.float32 and x.dtype == np.float32 and r.size == x.size:
            from nodes.kernels import error_sums_

            ref2, err2, q2, dot, max_abs = error_sums_(r, x)
        else:
            r, x = r.astype(np.float64).ravel(), x.astype(np.float64).ravel()
            with np.errstate(over="ignore", invalid="ignore"):
                d = r - x
                ref2, err2, q2, dot = (r * r).sum(), (d * d).sum(), (x * x).sum(), (r * x).sum()
            max_abs = np.abs(d).max() if d.size else 0.0
        self.ref2 += float(ref2)
        self.err2 += float(err2)
        self.q2 += float(q2)
        self.dot += float(dot)
        self.max_abs = float(np.maximum(self.max_abs, max_abs))  # a NaN stays

    @property
    def cosine(self) -> float:
        """Cosine similarity (1.0 when both are zero)."""
        den = np.sqrt(self.ref2 * self.q2)
        if den == 0:
            return 1.0 if self.ref2 == self.q2 else 0.0
        return float(self.dot / den)

    @property
    def sqnr_db(self) -> float:
        """Signal-to-quantization-noise ratio in dB (capped at 200 for exact results)."""
        if self.err2 == 0:
            return 200.0
        if self.ref2 == 0:
            return 0.0
        return float(min(10.0 * np.log10(self.ref2 / self.err2), 200.0))

    def to_json(self) -> dict:
        """Rounded figures for reports."""
        return {"cosine": round(self.cosine, 6), "max_abs_err": float(f"{self.max_abs:.6g}"),
                "sqnr_db": round(self.sqnr_db, 3)}


@dataclass
class LayerError:
    """Accumulated and isolated error of one quantized node."""

    node: str
    op_type: str
    dtype: str
    accumulated: ErrorStats = field(default_factory=ErrorStats)
    isolated: ErrorStats = field(default_factory=ErrorStats)

    def to_json(self) -> dict:
        """The report row (CONTRACTS keys are the accumulated figures)."""
        row = {"node": self.node, "op_type": self.op_type, "dtype": self.dtype, **self.accumulated.to_json()}
        row["isolated"] = self.isolated.to_json()
        return row


@dataclass
class QuantAnalysis:
    """Per-layer errors (topological order) and per-output errors."""

    layers: list[LayerError]
    outputs: dict[str, ErrorStats]
    samples: int

    def sensitivity(self) -> list[LayerError]:
        """Layers from most to least sensitive by isolated SQNR."""
        return sorted(self.layers, key=lambda e: e.isolated.sqnr_db)

    def layer(self, node: str) -> LayerError | None:
        """The row of one node."""
        return next((e for e in self.layers if e.node == node), None)


def _visible_output(qm: QuantizedModel, name: str, names: set[str] | None = None) -> str:
    """The tensor consumers of ``name`` read in the QDQ graph (its dequantized copy if any);
    ``names`` holds the value names of every scope when ``name`` may live in a body."""
    dq = f"{name}_dequantized"
    return dq if dq in (names if names is not None else qm.graph.values) else name


class IsolatedInputs:
    """Quantized inputs shared between the isolated runs of one analysis: a node's constants
    (weights, biases) are quantized once for every sample, and an activation read by several
    nodes with the same quantization parameters once per sample (``next_sample`` drops those)."""

    def __init__(self) -> None:
        self._consts: dict[tuple[str, int], np.ndarray] = {}
        self._acts: dict[tuple[str, int], np.ndarray] = {}

    def next_sample(self) -> None:
        """The activations of the previous sample are not read again."""
        self._acts.clear()

    def const(self, node: Node, i: int, make: Callable[[], np.ndarray]) -> np.ndarray:
        """Input ``i`` (a constant) of ``node`` as ``make`` quantizes it, made once."""
        key = (node.name, i)
        x = self._consts.get(key)
        if x is None:
            x = self._consts[key] = make()
        return x

    def act(self, name: str, how: object, make: Callable[[], np.ndarray]) -> np.ndarray:
        """Activation ``name`` quantized ``how`` (its parameters or precision), made once a sample."""
        key = (name, id(how))
        x = self._acts.get(key)
        if x is None:
            x = self._acts[key] = make()
        return x


def isolated_args(qm: QuantizedModel, node: Node, env: Mapping[str, np.ndarray],
                  shared: IsolatedInputs | None = None) -> list[np.ndarray | None]:
    """The inputs of one node of the FP32 graph (values from ``env``) with only that node's own
    quantization applied: its activations, weight and bias quantized as the QDQ model does.
    With ``shared`` the quantized constants and activations are reused (see IsolatedInputs)."""
    node_name = node.name
    precision = qm.node_precision.get(node_name, "fp32")
    params = qm.node_params.get(node_name, {})
    q = quant_spec(node)
    w_in, b_in = (q.weight_input, q.bias_input) if q is not None else (None, None)
    args: list[np.ndarray | None] = []
    for i, v in enumerate(node.inputs):
        if v is None:
            args.append(None)
            continue
        x = v.const if v.const is not None else env[v.name]
        make = _input_quantizer(qm, precision, params, v, i, w_in, b_in, x)
        if make is None:
            args.append(x)
        elif shared is None:
            args.append(make())
        elif v.const is not None:
            args.append(shared.const(node, i, make))
        else:
            how = params.get(v.name) if precision not in FLOAT_PRECISIONS else precision
            args.append(shared.act(v.name, how, make))
    return args


def _input_quantizer(qm: QuantizedModel, precision: str, params: Mapping, v, i: int, w_in: int | None,
                     b_in: int | None, x: np.ndarray) -> Callable[[], np.ndarray] | None:
    """How input ``i`` (value ``v``, array ``x``) of a node is quantized in isolation, or None."""
    if precision in FLOAT_PRECISIONS:
        if v.const is None or i == w_in:
            return lambda: round_to_precision(x, precision)
        return None
    if v.name in params:
        return lambda: fake_quantize(x, params[v.name])
    if i == w_in and v.name in qm.weights:
        return lambda: fake_quantize(x, qm.weights[v.name])
    if i == b_in and v.name in qm.biases:
        bqp = qm.biases[v.name]
        return lambda: dequantize_array(quantize_array(x, bqp), bqp)
    return None


def run_node(graph: Graph, node: Node, args: Sequence[np.ndarray | None], activation: bool = True) -> np.ndarray:
    """The first output of ``node`` computed from ``args`` with the registry's reference kernel,
    its fused activation applied unless ``activation`` is False."""
    from nodes import registry
    from nodes.spec import RunContext

    spec = registry.get(node.op_type, node.domain)
    assert spec is not None
    res = spec.reference(RunContext(node, spec.resolve_attrs(node), graph.opset(spec.domain)), *args)
    out = res if isinstance(res, np.ndarray) else np.asarray(next(iter(res)))
    return run_activation(node, out, graph.opset("")) if node.activation and activation else out


def _isolated_output(qm: QuantizedModel, fp_graph: Graph, node: Node, env: Mapping[str, np.ndarray],
                     shared: IsolatedInputs | None = None) -> np.ndarray:
    """Run one node of the FP32 graph with only its own quantization applied."""
    precision = qm.node_precision.get(node.name, "fp32")
    out = run_node(fp_graph, node, isolated_args(qm, node, env, shared))
    name = node.outputs[0].name  # type: ignore[union-attr]
    if name in qm.activations and precision not in FLOAT_PRECISIONS:
        out = fake_quantize(out, qm.activations[name])
    return out


def analyze(fp_graph: Graph, qm: QuantizedModel, data: CalibrationSet | Iterable[dict[str, np.ndarray]],
            max_samples: int = 16, progress: Callable[[int, int], None] | None = None,
            outputs_only: bool = False) -> QuantAnalysis:
    """Compare the QDQ model with FP32 layer by layer on up to ``max_samples`` samples.

    With ``outputs_only`` only the model outputs are compared (fast; for precision searches).
    """
    from engine import executor_for
    from engine.passes.base import subgraphs
    from engine.sim.feeds import check_feeds

    by_name: dict[str, Node] = {}
    for n in fp_graph.all_nodes():
        by_name.setdefault(n.name, n)
    layers = [LayerError(n, by_name[n].op_type, p) for n, p in qm.node_precision.items()]
    outputs = {v.name: ErrorStats() for v in fp_graph.outputs}
    fp_ex = executor_for(fp_graph)
    q_ex = executor_for(qm.graph)
    samples = list(data)[:max_samples] if not isinstance(data, CalibrationSet) else \
        [data.sample(i) for i in range(min(len(data), max_samples))]
    # Layers inside If/Loop/Scan bodies are compared per execution of their body, through hooks.
    in_body = {le.node for le in layers if by_name[le.node].graph is not fp_graph}
    q_names = {name for g in (qm.graph, *subgraphs(qm.graph)) for name in g.values}
    watch = {_visible_output(qm, by_name[n].outputs[0].name, q_names): n  # type: ignore[union-attr]
             for n in in_body}
    runs: dict[str, list] = {n: [] for n in in_body}
    seen: dict[str, list] = {n: [] for n in in_body}

    def fp_hook(node: Node, outs: list) -> None:
        if node.name in runs and by_name[node.name] is node:
            runs[node.name].append((outs[0], _isolated_output(qm, fp_graph, node, fp_ex.scope())))

    def q_hook(node: Node, outs: list) -> None:
        for v, arr in zip(node.outputs, outs):
            if v is not None and v.name in watch:
                seen[watch[v.name]].append(arr)

    body_hooks = bool(in_body) and not outputs_only
    # The values the comparison reads: each layer's output in both runs, and its FP32 inputs
    # (the isolated runs quantize them). Kept by name, the runs stay on the fused plans.
    fp_keep: set[str] = set()
    q_keep: set[str] = set()
    for le in [] if outputs_only else layers:
        if le.node not in in_body:
            node = by_name[le.node]
            name = node.outputs[0].name  # type: ignore[union-attr]
            fp_keep.add(name)
            fp_keep.update(v.name for v in node.inputs if v is not None and v.const is None)
            q_keep.add(_visible_output(qm, name))
    shared = IsolatedInputs()  # not in bodies: a body's values change name-for-name per iteration
    for k, feeds in enumerate(samples):
        shared.next_sample()
        feeds = check_feeds(fp_graph, feeds)
        ref = fp_ex.run(feeds, keep=fp_keep, hook=fp_hook if body_hooks else None, hook_bodies=True)
        got = q_ex.run(check_feeds(qm.graph, feeds), keep=q_keep, hook=q_hook if body_hooks else None,
                       hook_bodies=True)
        for le in [] if outputs_only else layers:
            if le.node in in_body:
                for (want, isolated), q in zip(runs[le.node], seen[le.node]):
                    le.accumulated.update(want, q)
                    le.isolated.update(want, isolated)
                runs[le.node].clear()
                seen[le.node].clear()
                continue
            node = by_name[le.node]
            name = node.outputs[0].name  # type: ignore[union-attr]
            le.accumulated.update(ref[name], got[_visible_output(qm, name)])
            le.isolated.update(ref[name], _isolated_output(qm, fp_graph, node, ref, shared))
        for name, st in outputs.items():
            st.update(ref[name], got[name])
        if progress is not None:
            progress(k + 1, len(samples))
    return QuantAnalysis(layers, outputs, len(samples))
