"""Fidelity of the CPU cost model: simulated per-op CPU latency vs onnxruntime's per-op profile.

Run: `python -m tests.bench.bench_sim_fidelity`. Steps:
1. Calibrate the CPU profile on this host with a short micro-benchmark (one BLAS thread):
   peak GFLOPS from a float32 matrix product, memory bandwidth from a large array copy, the
   per-op overhead from onnxruntime running a one-element Relu.
2. For the light ResNet-50 (onnx wheel; its ConstantOfShape weight generators are folded to
   initializers first) and assets/models/transformer_demo.onnx, pin every node to the CPU and
   simulate with the calibrated target.
3. Profile the same model in onnxruntime (1 intra-op thread, graph optimizations off so nodes
   map one to one, profiling on), take each node's trimmed mean kernel time over the runs.
4. Print Spearman's rank correlation per model (acceptance: >= 0.8) and the worst outliers.
Printed figures, not timed assertions.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path

from tests.bench._common import best_time, fresh_blas_env, one_blas_thread

fresh_blas_env()

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402

import engine  # noqa: E402
from engine.hw.target import resolve_target  # noqa: E402
from engine.sim.timeline import SimOptions, simulate  # noqa: E402
from tests.models import LIGHT_DIR, demo_model  # noqa: E402

RUNS = 60


def _best(fn, repeat: int = 7) -> float:
    return best_time(fn, repeat)


def _stream_gbps(nbytes: int) -> float:
    """Streaming rate of an elementwise add over ``nbytes`` (2 reads + 1 write), per-call cost removed."""
    n = max(1, nbytes // 12)
    a, b, c = (np.ones(n, dtype=np.float32) for _ in range(3))
    a1, b1, c1 = (np.ones(1, dtype=np.float32) for _ in range(3))
    reps = max(1, (64 << 20) // nbytes)

    def big() -> None:
        for _ in range(reps):
            np.add(a, b, out=c)

    def tiny() -> None:
        for _ in range(reps):
            np.add(a1, b1, out=c1)

    per_call = (_best(big, repeat=5) - _best(tiny, repeat=5)) / reps
    return 12 * n / max(per_call, 1e-9) / 1e9


def _llc_kib() -> float:
    """Size of the largest cache this core sees (Linux sysfs), else 8 MiB."""
    sizes = []
    for p in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = p.read_text().strip().upper()
        mult = 1024 if text.endswith("M") else 1
        try:
            sizes.append(float(text.rstrip("KM")) * mult)
        except ValueError:
            continue
    return max(sizes) if sizes else 8192.0


def calibrate() -> dict[str, float]:
    """Peak GFLOPS, cache and DRAM bandwidth (GB/s) and per-op overhead (us), one thread."""
    n = 512
    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    b = a.copy()
    gflops = 2 * n**3 / _best(lambda: a @ b) / 1e9
    llc = _llc_kib()
    cache_kib = llc / 2  # the share one thread can stream through before DRAM dominates
    cache_gbps = _stream_gbps(int(cache_kib * 1024 / 4))
    dram_gbps = _stream_gbps(int(llc * 1024 * 4))
    relu = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="r")], "one",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])]), opset_imports=[helper.make_opsetid("", 17)])
    times = profile_ort(relu.SerializeToString(), {"x": np.ones(1, np.float32)}, runs=200)
    overhead = times.get("r", 1.0)
    return {"peak_gflops": gflops, "memory_bandwidth_gbps": dram_gbps, "cache_kib": cache_kib,
            "cache_bandwidth_gbps": cache_gbps, "op_overhead_us": overhead}


def profile_ort(model_bytes: bytes, feeds: dict[str, np.ndarray], runs: int = RUNS) -> dict[str, float]:
    """Median kernel time (us) per node name in onnxruntime, one thread, no graph rewrites."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.enable_profiling = True
    with tempfile.TemporaryDirectory() as tmp:
        so.profile_file_prefix = str(Path(tmp) / "prof")
        sess = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
        for _ in range(3):
            sess.run(None, feeds)
        for _ in range(runs):
            sess.run(None, feeds)
        path = sess.end_profiling()
        events = json.loads(Path(path).read_text())
    per: dict[str, list[float]] = {}
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            per.setdefault(e["name"][: -len("_kernel_time")], []).append(float(e["dur"]))
    # The profiler reports whole microseconds: a trimmed mean over many runs resolves finer.
    out = {}
    for k, v in per.items():
        v = sorted(v)
        cut = len(v) // 10
        out[k] = statistics.fmean(v[cut:len(v) - cut] if len(v) > 10 else v)
    return out


def prepared_resnet() -> onnx.ModelProto:
    """The light ResNet-50 with its ConstantOfShape weight generators folded into initializers."""
    m = onnx.load(str(LIGHT_DIR / "light_resnet50.onnx"))
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    keep = []
    for k, node in enumerate(m.graph.node):
        if not node.name:
            node.name = f"{node.op_type.lower()}_{k}"
        if node.op_type == "ConstantOfShape" and node.input[0] in inits:
            value = numpy_helper.to_array(next(a.t for a in node.attribute if a.name == "value"))
            shape = [int(d) for d in inits[node.input[0]]]
            m.graph.initializer.append(numpy_helper.from_array(np.full(shape, value.ravel()[0], value.dtype),
                                                               node.output[0]))
            continue
        keep.append(node)
    del m.graph.node[:]
    m.graph.node.extend(keep)
    used = {i for n in keep for i in n.input}
    live = [t for t in m.graph.initializer if t.name in used]
    del m.graph.initializer[:]
    m.graph.initializer.extend(live)
    names = {t.name for t in live} | set(inits)
    real_inputs = [i for i in m.graph.input if i.name not in names]
    del m.graph.input[:]
    m.graph.input.extend(real_inputs)
    m.ir_version = max(m.ir_version, 4)  # initializers no longer listed as graph inputs
    return m


def compare(name: str, model: onnx.ModelProto, cal: dict[str, float], runs: int = RUNS) -> float | None:
    graph = engine.load(model)
    target = resolve_target("phone-npu").with_cpu(**cal)
    pins = {n.name: "cpu" for n in graph.nodes}
    res = simulate(graph, target, SimOptions(pins=pins, move_islands=False, suggest=False))
    ours = {o.node: o.latency_us for o in res.ops if o.op_type != "Constant"}
    rng = np.random.default_rng(0)
    feeds = {v.name: rng.standard_normal([int(d) for d in v.type.shape]).astype(np.float32)
             for v in graph.inputs if v.name not in graph.initializers}
    theirs = profile_ort(model.SerializeToString(), feeds, runs=runs)
    common = sorted(set(ours) & set(theirs))
    if len(common) < 5:
        sys.stdout.write(f"{name}: only {len(common)} nodes matched the profile; skipped\n")
        return None
    x = np.array([ours[n] for n in common])
    y = np.array([theirs[n] for n in common])
    rho = float(spearmanr(x, y).statistic)
    ratio = np.log2(x / y)
    sys.stdout.write(f"{name:18s} {len(common):4d} ops   Spearman {rho:.3f}   "
                     f"sum simulated {x.sum() / 1e3:8.2f} ms vs onnxruntime {y.sum() / 1e3:8.2f} ms   "
                     f"median |log2 ratio| {np.median(np.abs(ratio)):.2f}\n")
    worst = np.argsort(-np.abs(ratio))[:5]
    for k in worst:
        op = graph.node_by_name(common[k]).op_type
        sys.stdout.write(f"    {common[k][:40]:40s} {op:18s} simulated {x[k]:9.1f} us   onnxruntime {y[k]:9.1f} us\n")
    return rho


def main() -> int:
    with one_blas_thread():
        cal = calibrate()
        sys.stdout.write(f"host CPU (1 thread): {cal['peak_gflops']:.1f} GFLOPS; DRAM {cal['memory_bandwidth_gbps']:.1f} GB/s; "
                         f"cache {cal['cache_kib'] / 1024:.0f} MiB at {cal['cache_bandwidth_gbps']:.1f} GB/s; "
                         f"op overhead {cal['op_overhead_us']:.1f} us\n")
        rows = [("resnet50 (light)", prepared_resnet(), RUNS)]
        tpath = demo_model("transformer_demo")
        if tpath.exists():
            rows.append(("transformer demo", onnx.load(str(tpath)), 10 * RUNS))  # tiny ops: more runs
        else:
            sys.stdout.write(f"transformer demo: {tpath} missing, skipped\n")
        results = {name: compare(name, model, cal, runs) for name, model, runs in rows}
    ok = [r for r in results.values() if r is not None]
    verdict = "meets" if ok and min(ok) >= 0.8 else "misses"
    sys.stdout.write(f"acceptance (Spearman >= 0.8 for each model): {verdict}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
