"""Per-tensor exactness of our QDQ simulation against onnxruntime (bench_exactness and its test).

Every QuantizeLinear output of the model is exposed as a graph output in onnxruntime (one intra-op
thread; exposing the int8 tensors does not stop its QDQ fusions, whose outputs they are), and the
same tensors are read from our executor with ``keep_all``. For each quantized tensor: the share of
int8 values equal over all samples and the largest difference in quantization steps; for each
float output: the SQNR of ours against onnxruntime's.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field

import numpy as np
import onnx

LEVELS = ("ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_ALL")


@dataclass
class Exactness:
    """Per-tensor agreement of one simulation with onnxruntime over a set of samples."""

    equal: dict[str, int] = field(default_factory=collections.Counter)
    total: dict[str, int] = field(default_factory=collections.Counter)
    max_steps: dict[str, int] = field(default_factory=collections.Counter)
    out_err: dict[str, float] = field(default_factory=collections.Counter)
    out_sig: dict[str, float] = field(default_factory=collections.Counter)
    seconds: float = 0.0  # our executor's time over all samples

    def unequal(self) -> tuple[int, int]:
        """(int8 values that differ from onnxruntime's, all int8 values), over every tensor."""
        total = sum(self.total.values())
        return total - sum(self.equal.values()), total

    def percent(self, name: str) -> float:
        """Share of the tensor's int8 values equal to onnxruntime's, in percent."""
        return 100.0 * self.equal[name] / max(self.total[name], 1)

    def worst(self, n: int) -> list[str]:
        """The ``n`` tensors with the fewest equal values."""
        return sorted(self.total, key=self.percent)[:n]

    def sqnr_db(self, name: str) -> float:
        """SQNR of our float output against onnxruntime's (200 dB when identical)."""
        err = self.out_err[name]
        return 200.0 if err == 0 else float(10 * np.log10(self.out_sig[name] / err))


def quantized_tensors(model: onnx.ModelProto) -> list[str]:
    """The outputs of the model's QuantizeLinear nodes, in graph order."""
    return [n.output[0] for n in model.graph.node if n.op_type == "QuantizeLinear"]


def ort_session(model: onnx.ModelProto, level: str = "ORT_ENABLE_ALL", optimized_path: str | None = None):
    """An onnxruntime CPU session on one thread that returns every quantized tensor too."""
    import onnxruntime as ort

    m = onnx.ModelProto()
    m.CopyFrom(model)
    present = {o.name for o in m.graph.output}
    for name in quantized_tensors(model):
        if name not in present:
            m.graph.output.append(onnx.ValueInfoProto(name=name))
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    if optimized_path:
        so.optimized_model_filepath = optimized_path
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])


def compare(model: onnx.ModelProto, graphs: dict[str, object], samples: list[dict[str, np.ndarray]],
            level: str = "ORT_ENABLE_ALL") -> dict[str, Exactness]:
    """Exactness of each of our simulations (label -> engine Graph or Executor) against
    onnxruntime on ``samples``."""
    from engine.sim.executor import Executor

    sess = ort_session(model, level)
    names = [o.name for o in sess.get_outputs()]
    outputs = [o.name for o in model.graph.output]
    qnames = quantized_tensors(model)
    runners = {label: g if isinstance(g, Executor) else Executor(g) for label, g in graphs.items()}
    res = {label: Exactness() for label in graphs}
    for feed in samples:
        ref = dict(zip(names, sess.run(None, feed)))
        for label, ex in runners.items():
            t = time.perf_counter()
            got = ex.run(feed, keep_all=True)
            r = res[label]
            r.seconds += time.perf_counter() - t
            for q in qnames:
                a, b = ref[q].astype(np.int64), np.asarray(got[q]).astype(np.int64)
                r.equal[q] += int((a == b).sum())
                r.total[q] += a.size
                r.max_steps[q] = max(r.max_steps[q], int(np.abs(a - b).max()) if a.size else 0)
            for o in outputs:
                a, b = ref[o].astype(np.float64), np.asarray(got[o]).astype(np.float64)
                r.out_err[o] += float(((a - b) ** 2).sum())
                r.out_sig[o] += float((a ** 2).sum())
    return res


def fused_ops(model: onnx.ModelProto, level: str, path: str) -> dict[str, int]:
    """Op histogram of the model onnxruntime optimizes at ``level`` (written to ``path``)."""
    ort_session(model, level, path)
    return dict(collections.Counter(n.op_type for n in onnx.load(path).graph.node))
