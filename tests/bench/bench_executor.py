"""Executor speed: ours vs onnxruntime (1 intra-op thread) vs onnx.reference, side by side.

Run: `python -m tests.bench.bench_executor`. Prints median times and ratios for the light
ResNet-50 and the transformer demo. Targets: <= 2x onnxruntime on the CNN, <= 1.5x on the
transformer, >= 20x faster than the reference evaluator on the CNN.
"""

from __future__ import annotations

import sys

from tests.bench._common import fresh_blas_env, median_time, one_blas_thread

fresh_blas_env()

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import engine  # noqa: E402
from tests.models import LIGHT_DIR, demo_model  # noqa: E402


def bench(path, with_reference: bool) -> dict[str, float]:
    graph = engine.load(path)
    rng = np.random.default_rng(0)
    feeds = {v.name: rng.standard_normal([int(d) for d in v.type.shape]).astype(v.type.dtype) for v in graph.inputs}
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    from engine.passes.pipeline import optimize

    opt = optimize(graph).graph
    res = {
        "ours": median_time(lambda: engine.execute(graph, feeds), repeat=7),
        "ours_opt": median_time(lambda: engine.execute(opt, feeds), repeat=7),
        "onnxruntime": median_time(lambda: sess.run(None, feeds), repeat=7),
    }
    if with_reference:
        ref = ReferenceEvaluator(onnx.load(str(path)))
        res["reference"] = median_time(lambda: ref.run(None, feeds), repeat=1, warmup=0)
    return res


def main() -> int:
    with one_blas_thread():
        rows = [("resnet50 (light)", LIGHT_DIR / "light_resnet50.onnx", True),
                ("transformer demo", demo_model("transformer_demo"), False)]
        for name, path, with_ref in rows:
            if not path.exists():
                sys.stdout.write(f"{name}: {path} missing, skipped\n")
                continue
            r = bench(path, with_ref)
            line = (f"{name:18s} ours {r['ours'] * 1e3:8.2f} ms (after our optimizer {r['ours_opt'] * 1e3:8.2f} ms)   "
                    f"onnxruntime {r['onnxruntime'] * 1e3:8.2f} ms   ours/ort {r['ours'] / r['onnxruntime']:5.2f}x "
                    f"(optimized {r['ours_opt'] / r['onnxruntime']:5.2f}x)")
            if "reference" in r:
                line += f"   reference {r['reference'] * 1e3:9.1f} ms   reference/ours {r['reference'] / r['ours']:6.1f}x"
            sys.stdout.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
