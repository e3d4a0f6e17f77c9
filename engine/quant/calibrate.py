"""Calibration: run the FP32 graph over real samples and observe the tensors that get quantized."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from engine.errors import Cancelled, InputError, InternalError
from engine.ir.graph import Graph, Node
from engine.quant.config import QuantConfig, quant_spec
from engine.quant.data import CalibrationSet
from engine.quant.observers import HistogramObserver, MinMaxObserver, NonFiniteError, Observer

Progress = Callable[[int, int], None]


# Activations that an NPU applies in the epilogue of the op that produces their input.


@dataclass
class Calibration:
    """Observed statistics per tensor name, and how many samples produced them."""

    stats: dict[str, Observer]
    samples: int
    source: str = ""
    histograms: bool = field(default=False)


def is_float_dtype(dt) -> bool:
    """float16/32/64 and ml_dtypes' bfloat16 (numpy kind 'V')."""
    return dt is not None and (np.dtype(dt).kind == "f" or np.dtype(dt).name == "bfloat16")


def is_float_activation(v) -> bool:
    """A non-constant float tensor (the kind that gets Q/DQ)."""
    return v is not None and v.const is None and (v.type.dtype is None or is_float_dtype(v.type.dtype))


def quantizable_nodes(graph: Graph, config: QuantConfig) -> list[Node]:
    """Nodes that quantization touches, in topological order: the main graph's, then those of
    every If/Loop/Scan body (outer bodies before the bodies nested in them)."""
    from engine.passes.base import subgraphs

    out = []
    for g in (graph, *subgraphs(graph)):
        for n in g.toposort():
            if n.op_type not in config.ops or n.domain:
                continue
            if not n.outputs or n.outputs[0] is None or not is_float_activation(n.outputs[0]):
                continue
            out.append(n)
    return out


def fused_into_producer(node: Node, config: QuantConfig) -> bool:
    """True for a Relu/Clip that an NPU runs as the epilogue of the compute op before it."""
    q = quant_spec(node)
    if q is None or not q.epilogue or not node.inputs or node.inputs[0] is None:
        return False
    x = node.inputs[0]
    p = x.producer()
    pq = quant_spec(p) if p is not None else None
    return (p is not None and pq is not None and pq.role == "compute" and p.op_type in config.ops
            and len(x.uses()) == 1 and not x.is_graph_output)


def tensors_to_observe(graph: Graph, config: QuantConfig) -> list[str]:
    """Names of the activation tensors whose ranges quantization needs."""
    names: dict[str, None] = {}
    for n in quantizable_nodes(graph, config):
        for v in n.inputs:
            if is_float_activation(v):
                names[v.name] = None
        names[n.outputs[0].name] = None  # type: ignore[union-attr]
    if config.tflite:  # every model input becomes an int8 tensor, whatever reads it
        for v in graph.inputs:
            if is_float_activation(v):
                names[v.name] = None
    return list(names)


def calibrate(graph: Graph, data: CalibrationSet, config: QuantConfig, tensors: list[str] | None = None,
              histograms: bool | None = None, progress: Progress | None = None,
              cancel: Callable[[], bool] | None = None, batch: int = 16,
              observers: dict[str, Observer] | None = None) -> Calibration:
    """Observe ``tensors`` (default: every tensor quantization needs) over all samples.

    Tensors inside If/Loop/Scan bodies are observed every time their body runs (every
    iteration of a Loop), so their ranges cover all executions.

    MinMax alone needs only running min/max; any other method (or ``histograms=True``, which
    the GUI asks for to draw thresholds) keeps a 2048-bin histogram per tensor, whose memory
    does not grow with the number of samples. Samples run ``batch`` at a time when the graph
    provably treats them independently (checked on two samples), one at a time otherwise.
    ``observers`` (tensor name -> fresh observer) replaces the default ones (e.g. histograms whose
    range a first pass fixed, for sharded calibration: engine.sweep.shard).
    """
    from engine import executor_for
    from engine.sim.feeds import check_feeds

    if len(data) == 0:
        raise InputError(f"{data.source}: no calibration samples")
    names = set(tensors if tensors is not None else tensors_to_observe(graph, config))
    if observers is not None:
        names = set(observers)
        histograms = any(isinstance(o, HistogramObserver) for o in observers.values())
    if histograms is None:
        histograms = config.method != "minmax" or bool(config.method_overrides)
    stats: dict[str, Observer] = dict(observers) if observers is not None else {
        n: HistogramObserver(config.bins) if histograms else MinMaxObserver() for n in names}
    ex = executor_for(graph)
    body_inputs = _body_inputs_first_read(graph, names)
    running = [ex]

    def observe(name: str, arr: np.ndarray) -> None:
        try:
            stats[name].update(arr)
        except NonFiniteError as exc:  # e.g. 3e38 inputs overflowing float32 in the first layer
            raise InputError(f"{data.source}: tensor {name[:60]!r} {exc} during calibration; values near "
                             "the float limit cannot be quantized") from None

    def hook(node: Node, outs: list[np.ndarray | None]) -> None:
        for v, arr in zip(node.outputs, outs):
            if v is not None and arr is not None and v.name in names:
                observe(v.name, arr)
        if body_inputs:  # a body's own inputs (loop-carried state, scan slices) at their first reader
            for v in node.inputs:
                if v is not None and body_inputs.get(v.name) == node.name:
                    arr = running[0].scope().get(v.name)
                    if isinstance(arr, np.ndarray):
                        observe(v.name, arr)

    total = len(data)
    batched = _batched_graph(graph, data, batch) if batch > 1 else None
    done = 0
    if batched is not None:  # same statistics: min/max/histograms of a batch = of its samples
        bex = executor_for(batched)
        running[0] = bex
        while total - done >= batch:
            if cancel is not None and cancel():
                raise Cancelled("calibration cancelled")
            feeds = _stack([data.sample(done + k) for k in range(batch)])
            for k, arr in feeds.items():
                if k in names:
                    observe(k, arr)
            bex.run(check_feeds(batched, feeds), hook=hook, hook_bodies=True)
            done += batch
            if progress is not None:
                progress(done, total)
    running[0] = ex
    for i in range(done, total):
        if cancel is not None and cancel():
            raise Cancelled("calibration cancelled")
        feeds = check_feeds(graph, data.sample(i))
        for k, arr in feeds.items():
            if k in names:
                observe(k, arr)
        ex.run(feeds, hook=hook, hook_bodies=True)
        if progress is not None:
            progress(i + 1, total)
    return Calibration(stats, total, data.source, histograms)


def _body_inputs_first_read(graph: Graph, names: set[str]) -> dict[str, str]:
    """Inputs of If/Loop/Scan bodies that need observing -> the name of the first body node
    reading them (no node produces them, so they are observed when that node runs)."""
    from engine.passes.base import subgraphs

    out: dict[str, str] = {}
    for g in subgraphs(graph):
        wanted = {v.name for v in g.inputs if v.name in names}
        for n in g.toposort():
            for v in n.inputs:
                if v is not None and v.name in wanted and v.name not in out:
                    out[v.name] = n.name
    return out


def _stack(samples: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {k: np.concatenate([s[k] for s in samples], axis=0) for k in samples[0]}


def _batched_graph(graph: Graph, data: CalibrationSet, batch: int) -> Graph | None:
    """A copy of ``graph`` whose leading input dim 1 is ``batch``, when it provably computes every
    sample independently: shapes infer cleanly and two samples run batched give the same outputs
    as run alone. Otherwise None (calibration then runs one sample at a time)."""
    from engine import executor_for
    from engine.ir.clone import clone_graph
    from engine.ir.infer import infer_shapes
    from engine.sim.feeds import check_feeds
    from nodes.types import TensorType

    if len(data) < 2 * batch or not graph.inputs:
        return None
    if any(v.type.shape is None or not v.type.shape or v.type.shape[0] != 1 for v in graph.inputs):
        return None
    g = clone_graph(graph)
    for v in g.inputs:
        v.type = TensorType(v.type.dtype, (batch, *v.type.shape[1:]))  # type: ignore[index]
    for n in g.nodes:
        for out in n.outputs:
            if out is not None:
                out.type = TensorType(out.type.dtype, None)
    if any(d.code == "shape-inference" for d in infer_shapes(g)):
        return None
    if any(o.type.shape is None or not o.type.shape or o.type.shape[0] != batch for o in g.outputs):
        return None
    samples = [check_feeds(graph, data.sample(i)) for i in range(batch)]
    try:
        together = executor_for(g).run(check_feeds(g, _stack(samples)))
        for i in (0, batch - 1):
            alone = executor_for(graph).run(samples[i])
            for name, ref in alone.items():
                if not np.allclose(together[name][i:i + 1], ref, rtol=1e-4, atol=1e-5, equal_nan=True):
                    return None
    except (ValueError, InternalError):  # a probe: any failure means "run the samples one by one"
        return None
    return g
