"""Issue #19 acceptance: our executor / onnxruntime on every zoo CNN and every light model.

Run: `python -m tests.bench.bench_executor_zoo [NAME ...]`. Both run in this process with one
thread each (onnxruntime intra/inter-op 1, BLAS pinned to 1), interleaved run by run so a
load spike on the machine hits both; the figures are medians. "ours" runs the graph as loaded,
"opt" after our optimizer (onnxruntime always optimizes its own graph); the ratio of the best
runs is printed too (less sensitive to a loaded machine than medians). Targets: every ratio
<= 1.5x, geometric mean <= 1.3x. Also prints the largest difference to onnxruntime's output
relative to its largest value, so a fast but wrong kernel shows.
"""

from __future__ import annotations

import math
import statistics
import sys
import time

from tests.bench._common import fresh_blas_env, one_blas_thread

fresh_blas_env()

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402

import engine  # noqa: E402
from engine.passes.pipeline import optimize  # noqa: E402
from tests.bench._cnn_cases import cases  # noqa: E402


def ort_session(path) -> ort.InferenceSession:
    """onnxruntime on one thread, its default (full) graph optimizations."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def interleaved_times(fns: dict[str, object], min_runs: int = 5, budget_s: float = 6.0) -> dict[str, list[float]]:
    """Seconds of every run of each callable, run in turn (one warm-up each) until the budget is spent."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    start = time.perf_counter()
    while True:
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
        n = len(times[next(iter(times))])
        if n >= min_runs and (time.perf_counter() - start > budget_s or n >= 15):
            break
    return times


def rel_err(ours: dict[str, np.ndarray], ref: list[np.ndarray], names: list[str]) -> float:
    worst = 0.0
    for name, r in zip(names, ref):
        a, b = np.asarray(ours[name], np.float64), np.asarray(r, np.float64)
        scale = max(float(np.max(np.abs(b))) if b.size else 0.0, 1e-12)
        worst = max(worst, float(np.max(np.abs(a - b))) / scale if b.size else 0.0)
    return worst


def main(argv: list[str]) -> int:
    only = set(argv) or None
    rows = []
    with one_blas_thread():
        for case in cases(only):
            if isinstance(case, tuple):
                sys.stdout.write(f"{case[0]}: skipped ({case[1]})\n")
                continue
            graph = engine.load(case.path, shapes=case.shapes or None)
            opt = optimize(graph).graph
            sess = ort_session(case.path)
            names = [o.name for o in sess.get_outputs()]
            err = rel_err(engine.execute(graph, case.feeds), sess.run(None, case.feeds), names)
            runs = interleaved_times({"ours": lambda g=graph, f=case.feeds: engine.execute(g, f),
                                      "opt": lambda g=opt, f=case.feeds: engine.execute(g, f),
                                      "ort": lambda s=sess, f=case.feeds: s.run(None, f)})
            t = {k: statistics.median(v) for k, v in runs.items()}
            best = {k: min(v) for k, v in runs.items()}
            rows.append((case.name, t["ours"], t["opt"], t["ort"], err))
            sys.stdout.write(f"{case.name:20s} ours {t['ours'] * 1e3:8.2f} ms  opt {t['opt'] * 1e3:8.2f} ms  "
                             f"onnxruntime {t['ort'] * 1e3:8.2f} ms  ours/ort {t['ours'] / t['ort']:5.2f}x  "
                             f"opt/ort {t['opt'] / t['ort']:5.2f}x  (best of {len(runs['ort'])}: "
                             f"{best['ours'] / best['ort']:5.2f}x, {best['opt'] / best['ort']:5.2f}x)  "
                             f"max rel diff {err:.1e}\n")
            sys.stdout.flush()
    if rows:
        gm = math.exp(statistics.mean(math.log(r[1] / r[3]) for r in rows))
        gmo = math.exp(statistics.mean(math.log(r[2] / r[3]) for r in rows))
        worst = max(rows, key=lambda r: r[1] / r[3])
        sys.stdout.write(f"geometric mean ours/ort {gm:.2f}x (target <= 1.3x), opt/ort {gmo:.2f}x; "
                         f"worst {worst[0]} {worst[1] / worst[3]:.2f}x (target <= 1.5x)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
