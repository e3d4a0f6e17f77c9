"""Calibration: run the FP32 graph over real samples and observe the tensors that get quantized."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from engine.errors import InputError
from engine.ir.graph import Graph, Node
from engine.quant.config import COMPUTE_OPS, QuantConfig
from engine.quant.data import CalibrationSet
from engine.quant.observers import HistogramObserver, MinMaxObserver, Observer

Progress = Callable[[int, int], None]


class Cancelled(Exception):
    """Long work stopped because the user asked (the cancel callback returned True)."""


# Activations that an NPU applies in the epilogue of the op that produces their input.
FUSABLE_AFTER_COMPUTE = frozenset({"Relu", "Clip"})


@dataclass
class Calibration:
    """Observed statistics per tensor name, and how many samples produced them."""

    stats: dict[str, Observer]
    samples: int
    source: str = ""
    histograms: bool = field(default=False)


def is_float_activation(v) -> bool:
    """A non-constant float tensor (the kind that gets Q/DQ)."""
    return v is not None and v.const is None and (v.type.dtype is None or v.type.dtype.kind == "f")


def quantizable_nodes(graph: Graph, config: QuantConfig) -> list[Node]:
    """Nodes of the main graph that quantization touches, in topological order."""
    out = []
    for n in graph.toposort():
        if n.op_type not in config.ops or n.domain:
            continue
        if not n.outputs or n.outputs[0] is None or not is_float_activation(n.outputs[0]):
            continue
        out.append(n)
    return out


def fused_into_producer(node: Node, config: QuantConfig) -> bool:
    """True for a Relu/Clip that an NPU runs as the epilogue of the compute op before it."""
    if node.op_type not in FUSABLE_AFTER_COMPUTE or not node.inputs or node.inputs[0] is None:
        return False
    x = node.inputs[0]
    p = x.producer()
    return (p is not None and p.op_type in COMPUTE_OPS and p.op_type in config.ops
            and len(x.uses()) == 1 and not x.is_graph_output)


def tensors_to_observe(graph: Graph, config: QuantConfig) -> list[str]:
    """Names of the activation tensors whose ranges quantization needs."""
    names: dict[str, None] = {}
    for n in quantizable_nodes(graph, config):
        for v in n.inputs:
            if is_float_activation(v):
                names[v.name] = None
        names[n.outputs[0].name] = None  # type: ignore[union-attr]
    return list(names)


def calibrate(graph: Graph, data: CalibrationSet, config: QuantConfig, tensors: list[str] | None = None,
              histograms: bool | None = None, progress: Progress | None = None,
              cancel: Callable[[], bool] | None = None) -> Calibration:
    """Observe ``tensors`` (default: every tensor quantization needs) over all samples.

    MinMax alone needs only running min/max; any other method (or ``histograms=True``, which
    the GUI asks for to draw thresholds) keeps a 2048-bin histogram per tensor, whose memory
    does not grow with the number of samples.
    """
    from engine import executor_for
    from engine.sim.feeds import check_feeds

    if len(data) == 0:
        raise InputError(f"{data.source}: no calibration samples")
    names = set(tensors if tensors is not None else tensors_to_observe(graph, config))
    if histograms is None:
        histograms = config.method != "minmax" or bool(config.method_overrides)
    stats: dict[str, Observer] = {
        n: HistogramObserver(config.bins) if histograms else MinMaxObserver() for n in names}
    ex = executor_for(graph)

    def hook(node: Node, outs: list[np.ndarray | None]) -> None:
        for v, arr in zip(node.outputs, outs):
            if v is not None and arr is not None and v.name in names:
                stats[v.name].update(arr)

    total = len(data)
    for i, feeds in enumerate(data):
        if cancel is not None and cancel():
            raise Cancelled("calibration cancelled")
        feeds = check_feeds(graph, feeds)
        for k, arr in feeds.items():
            if k in names:
                stats[k].update(arr)
        ex.run(feeds, hook=hook)
        if progress is not None:
            progress(i + 1, total)
    return Calibration(stats, total, data.source, histograms)
