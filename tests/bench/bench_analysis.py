"""What the per-layer analysis costs next to the runs it compares (issue #19).

PP-OCRv6 det small (rapidocr) at 1x3x320x320, quantized int8 (minmax, per channel) on 8 crops
of skimage photographs; then, side by side in one process with BLAS pinned to one thread:
- the floor: 8 FP32 runs plus 8 simulated int8 (QDQ) runs of the executor, outputs only;
- the analysis: accumulated and isolated error of every layer on the same 8 samples
  (engine.quant.analysis.analyze, what `quantize --report` and the editor's error panel run).
Best of several repeats each (the machine is shared). Target: analysis <= 3x the floor.

Run: ``python -m tests.bench.bench_analysis [REPEATS]``
"""

from __future__ import annotations

import os
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np

from tests.bench._common import fresh_blas_env, one_blas_thread

SITE = Path(sysconfig.get_paths()["purelib"])
DET_MODEL = SITE / "rapidocr" / "models" / "PP-OCRv6_det_small.onnx"
SHAPE = (1, 3, 320, 320)
SAMPLES = 8
TARGET = 3.0


def photo_crops(n: int, seed: int = 0) -> np.ndarray:
    """(n, 1, 3, 320, 320) float32 crops of skimage photographs, normalized as PaddleOCR's
    detector expects (ImageNet mean and std)."""
    from skimage import data, transform

    rng = np.random.default_rng(seed)
    photos = [data.astronaut(), data.coffee(), data.chelsea(), data.rocket()]
    mean = np.array([0.485, 0.456, 0.406], np.float32)[:, None, None]
    std = np.array([0.229, 0.224, 0.225], np.float32)[:, None, None]
    out = []
    for k in range(n):
        im = photos[k % len(photos)].astype(np.float32) / 255.0
        h, w = im.shape[:2]
        s = int(rng.integers(min(h, w) // 2, min(h, w) + 1))
        y, x = int(rng.integers(0, h - s + 1)), int(rng.integers(0, w - s + 1))
        crop = transform.resize(im[y:y + s, x:x + s], SHAPE[2:]).transpose(2, 0, 1)
        out.append(((crop - mean) / std)[None])
    return np.stack(out).astype(np.float32)


def timed(fn) -> tuple[float, float]:
    """(wall, process CPU) seconds of one call: on a shared machine the CPU time is the steadier."""
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def main(argv: list[str]) -> int:
    fresh_blas_env()
    repeat = int(argv[0]) if argv else 3
    if not DET_MODEL.exists():
        sys.stdout.write(f"skipped: {DET_MODEL} is not installed (pip install rapidocr)\n")
        return 0
    import engine
    from engine import executor_for
    from engine.quant.analysis import analyze
    from engine.quant.api import quantize
    from engine.quant.config import QuantConfig
    from engine.quant.data import CalibrationSet

    with one_blas_thread():
        graph = engine.load(DET_MODEL, shapes={"x": SHAPE})
        crops = photo_crops(SAMPLES)
        data = CalibrationSet.from_arrays("photo crops", {"x": crops})
        res = quantize(graph, data, QuantConfig(per_channel=True), analysis_samples=0)
        qm = res.model
        samples = [data.sample(i) for i in range(SAMPLES)]
        fp_ex, q_ex = executor_for(graph), executor_for(qm.graph)
        fp_ex.run(samples[0])
        q_ex.run(samples[0])

        def floor() -> None:
            for s in samples:
                fp_ex.run(s)
            for s in samples:
                q_ex.run(s)

        def analysis() -> None:
            analyze(graph, qm, samples, max_samples=SAMPLES)

        rows = []
        for _ in range(repeat):  # interleaved, so load changes hit both alike
            rows.append((timed(floor), timed(analysis)))
        a = analyze(graph, qm, samples, max_samples=SAMPLES)
    load = os.getloadavg()[0]
    floor_wall, floor_cpu = min(r[0][0] for r in rows), min(r[0][1] for r in rows)
    ana_wall, ana_cpu = min(r[1][0] for r in rows), min(r[1][1] for r in rows)
    ratio = ana_wall / floor_wall
    sys.stdout.write(f"PP-OCRv6 det small {SHAPE}, {SAMPLES} samples, {len(a.layers)} layers, "
                     f"best of {repeat}, load average {load:.1f}\n")
    sys.stdout.write(f"{'':28}{'wall':>10}{'CPU':>10}\n")
    sys.stdout.write(f"  {SAMPLES} FP32 + {SAMPLES} int8 runs    {floor_wall * 1000:8.0f} ms{floor_cpu * 1000:8.0f} ms\n")
    sys.stdout.write(f"  per-layer analysis        {ana_wall * 1000:8.0f} ms{ana_cpu * 1000:8.0f} ms"
                     "   (accumulated + isolated)\n")
    sys.stdout.write(f"  ratio                     {ratio:8.2f} x {ana_cpu / floor_cpu:7.2f} x    target <= {TARGET:g} x: "
                     f"{'ok' if ratio <= TARGET else 'MISSED'} (wall)\n")
    out = next(iter(a.outputs.values()))
    sys.stdout.write(f"  output SQNR {out.sqnr_db:.2f} dB; worst isolated layer "
                     f"{a.sensitivity()[0].node} {a.sensitivity()[0].isolated.sqnr_db:.2f} dB\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
