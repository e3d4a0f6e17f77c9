"""Where the executor's time goes, per op type, beside onnxruntime's own profile.

Run: `python -m tests.bench.bench_executor_profile [NAME ...]` (names from
tests/bench/_cnn_cases.py; default: the 320x320 text detector, the recognizer and the light
ResNet-50). For each model: per op type, our CPU milliseconds per run (this thread's CPU time
between the executor's per-node hook calls, so other processes on a shared machine do not
inflate it; a hook runs the unfused plan, one step per node) and the share of our total, onnxruntime's milliseconds per run from its
enable_profiling JSON (per-node kernel times; its fused nodes, e.g. FusedConv, are counted under
the op they came from) and the ratio. Conv is split into grouped/depthwise ("Conv/g") and dense.
BLAS and onnxruntime on one thread.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections import defaultdict

from tests.bench._common import fresh_blas_env, one_blas_thread

fresh_blas_env()

import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402

import engine  # noqa: E402
from engine.sim.executor import Executor  # noqa: E402
from tests.bench._cnn_cases import cases  # noqa: E402

DEFAULT = {"ppocr_det", "ppocr_rec", "light_resnet50"}
RUNS = 5
_FUSED = {"FusedConv": "Conv", "FusedGemm": "Gemm", "FusedMatMul": "MatMul", "NhwcConv": "Conv",
          "QLinearConv": "Conv"}


def _kind(op_type: str, group: int) -> str:
    return "Conv/g" if op_type == "Conv" and group > 1 else op_type


def _groups(path) -> dict[str, int]:
    model = onnx.load(str(path), load_external_data=False)
    out = {}
    for n in model.graph.node:
        g = next((a.i for a in n.attribute if a.name == "group"), 1)
        out[n.name] = g
    return out


def _shape_group(event: dict) -> int:
    """A renamed (fused, re-laid-out) conv's group from its X and W shapes in the profile."""
    shapes = [next(iter(s.values())) for s in event.get("args", {}).get("input_type_shape", [])]
    if len(shapes) >= 2 and len(shapes[0]) >= 3 and len(shapes[1]) >= 3 and shapes[1][1]:
        return max(1, shapes[0][1] // shapes[1][1])
    return 1


def ours_profile(graph, feeds) -> dict[str, float]:
    ex = Executor(graph)
    ex.run(feeds, hook=lambda node, outs: None)  # warm-up of the hooked (unfused) plan: its
    # kernels prepare constant operands once per plan (centered/narrowed weights), not per run
    acc: dict[str, float] = defaultdict(float)
    last = [0.0]

    def hook(node, _outs):
        now = time.thread_time()
        g = int(node.attrs.get("group", 1) or 1) if node.op_type == "Conv" else 1
        acc[_kind(node.op_type, g)] += now - last[0]
        last[0] = now

    for _ in range(RUNS):
        last[0] = time.thread_time()
        ex.run(feeds, hook=hook)
    return {k: v / RUNS * 1e3 for k, v in acc.items()}


def ort_profile(path, feeds) -> dict[str, float]:
    groups = _groups(path)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(tempfile.mkdtemp(), "ort")
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    sess.run(None, feeds)  # warm-up, excluded below
    acc: dict[str, float] = defaultdict(float)
    warm = sess.end_profiling()
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    for _ in range(RUNS + 1):
        sess.run(None, feeds)
    prof = sess.end_profiling()
    with open(prof) as f:
        events = json.load(f)
    runs = [e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"]
    first_end = runs[0]["ts"] + runs[0]["dur"] if runs else 0
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time") or e["ts"] < first_end:
            continue
        op = e.get("args", {}).get("op_name", "?")
        op = _FUSED.get(op, op)
        node = e["name"][: -len("_kernel_time")]
        acc[_kind(op, groups.get(node, _shape_group(e)))] += e["dur"] / 1e3
    os.remove(warm)
    os.remove(prof)
    return {k: v / RUNS for k, v in acc.items()}


def main(argv: list[str]) -> int:
    only = set(argv) or DEFAULT
    with one_blas_thread():
        for case in cases(only):
            if isinstance(case, tuple):
                sys.stdout.write(f"{case[0]}: skipped ({case[1]})\n")
                continue
            graph = engine.load(case.path, shapes=case.shapes or None)
            ours = ours_profile(graph, case.feeds)
            theirs = ort_profile(case.path, case.feeds)
            tot_o, tot_t = sum(ours.values()), sum(theirs.values())
            sys.stdout.write(f"\n== {case.name}: ours {tot_o:.1f} ms, onnxruntime {tot_t:.1f} ms (kernels), "
                             f"{tot_o / max(tot_t, 1e-9):.2f}x\n")
            sys.stdout.write(f"{'op type':22s} {'ours ms':>9s} {'share':>6s} {'ort ms':>9s} {'share':>6s} "
                             f"{'ours/ort':>8s} {'gap ms':>8s}\n")
            for k in sorted(set(ours) | set(theirs), key=lambda k: -(ours.get(k, 0) - theirs.get(k, 0))):
                o, t = ours.get(k, 0.0), theirs.get(k, 0.0)
                ratio = f"{o / t:7.2f}x" if t > 1e-3 else "     n/a"
                sys.stdout.write(f"{k:22s} {o:9.2f} {o / tot_o:6.1%} {t:9.2f} {t / max(tot_t, 1e-9):6.1%} "
                                 f"{ratio:>8s} {o - t:8.2f}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
