"""Mixed-precision search on real OCR models: quality on held-out crops, simulated latency, time.

Run: `python -m tests.bench.bench_mixed [rec] [det] [--seed S]` (S picks other crops: calibration
seed 2S, held-out seed 2S+1). For each case it runs the real command line
(`python -m engine quantize ... --target-sqnr DB --target phone-npu`) in a fresh process on the
machine's cores, then measures the written model on held-out samples the search never saw, with
our executor and with onnxruntime, and prints:
1. PP-OCRv6 rec small (rapidocr, 1x3x48x320), text crops of skimage's text() and page():
   held-out pooled output SQNR (target >= 30 dB), simulated latency / all-int8 (target <= 1.3x),
   wall time (target <= 180 s);
2. PP-OCRv6 det small (1x3x320x320), skimage photographs: the same at 25 dB, reached or one
   warning line, wall time <= 180 s;
3. what the search believed (its check samples, held out of its decisions and ranges; its search
   samples and their bootstrap bound) and where its time went (phases, measurements).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.bench._common import fresh_blas_env, one_blas_thread

fresh_blas_env()

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def text_crops(n: int, seed: int, hw: tuple[int, int] = (48, 320)) -> np.ndarray:
    """``n`` text-line crops of skimage's text() and page(), resized to ``hw``, normalised the way
    PaddleOCR's recognizer expects ((x/255 - 0.5) / 0.5), three channels: (n, 1, 3, H, W)."""
    from skimage import data
    from skimage.transform import resize

    rng = np.random.default_rng(seed)
    pages = [data.text().astype(np.float32) / 255, data.page().astype(np.float32) / 255]
    h_out, w_out = hw
    out = []
    for i in range(n):
        im = pages[i % 2]
        h = int(rng.integers(24, min(64, im.shape[0])))
        w = min(im.shape[1], int(h * w_out / h_out * rng.uniform(0.7, 1.3)))
        y, x = int(rng.integers(0, im.shape[0] - h + 1)), int(rng.integers(0, im.shape[1] - w + 1))
        crop = resize(im[y:y + h, x:x + w], hw, anti_aliasing=True)
        out.append(np.repeat(((crop - 0.5) / 0.5)[None], 3, axis=0))
    return np.stack(out)[:, None].astype(np.float32)


def photos(n: int, seed: int, side: int = 320) -> np.ndarray:
    """``n`` random crops of skimage's colour photographs at side x side, normalised like
    PaddleOCR's detector input (ImageNet mean/std): (n, 1, 3, side, side)."""
    from skimage import data
    from skimage.transform import resize

    rng = np.random.default_rng(seed)
    imgs = [data.astronaut(), data.coffee(), data.chelsea(), data.rocket(), data.hubble_deep_field()]
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    out = []
    for i in range(n):
        im = imgs[i % len(imgs)].astype(np.float32) / 255
        s = int(rng.integers(min(im.shape[:2]) // 2, min(im.shape[:2]) + 1))
        y, x = int(rng.integers(0, im.shape[0] - s + 1)), int(rng.integers(0, im.shape[1] - s + 1))
        crop = resize(im[y:y + s, x:x + s], (side, side), anti_aliasing=True)
        out.append(((crop - mean) / std).transpose(2, 0, 1))
    return np.stack(out)[:, None].astype(np.float32)


def _child_cpu() -> float:
    """CPU seconds (user + system) of the finished child processes so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _sqnr(refs: list[np.ndarray], gots: list[np.ndarray]) -> float:
    r = np.concatenate([a.ravel() for a in refs]).astype(np.float64)
    g = np.concatenate([a.ravel() for a in gots]).astype(np.float64)
    err = float(((r - g) ** 2).sum())
    return 200.0 if err == 0 else float(10 * np.log10((r ** 2).sum() / err))


def _ort(path: str, optimize: bool = True):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    if not optimize:  # its WeightBiasQuantization once flipped the float biases of our int16 Convs (bench_exactness)
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def case(label: str, model: Path, shape: tuple[int, ...], calib: np.ndarray, held: np.ndarray,
         target_db: float, extra: list[str]) -> None:
    import engine
    from engine.sim.timeline import simulate

    with tempfile.TemporaryDirectory() as d:
        npz = Path(d) / "calib.npz"
        np.savez(npz, x=calib)
        shape_arg = ["--shape", "x=" + ",".join(map(str, shape))]
        base = [sys.executable, "-m", "engine", "quantize", str(model), *shape_arg, "--calib", str(npz), "--quiet",
                *extra]
        t, c = time.perf_counter(), _child_cpu()
        p8 = subprocess.run([*base, "-o", f"{d}/int8.onnx", "--analysis-samples", "1"],  # its model, not its report
                            capture_output=True, text=True, cwd=ROOT)
        t8, c8 = time.perf_counter() - t, _child_cpu() - c
        t, c = time.perf_counter(), _child_cpu()
        pm = subprocess.run([*base, "-o", f"{d}/mixed.onnx", "--report", f"{d}/r.json", "--target-sqnr",
                             str(target_db), "--target", "phone-npu"], capture_output=True, text=True, cwd=ROOT)
        tm, cm = time.perf_counter() - t, _child_cpu() - c
        if p8.returncode != 0 or pm.returncode != 0:
            sys.stdout.write(f"{label}: quantize failed:\n{p8.stderr[-800:]}{pm.stderr[-800:]}\n")
            return
        if os.environ.get("BENCH_MIXED_KEEP"):  # a folder to keep the report in (for a closer look)
            keep = Path(os.environ["BENCH_MIXED_KEEP"])
            keep.mkdir(parents=True, exist_ok=True)
            (keep / f"{model.stem}.json").write_text(Path(f"{d}/r.json").read_text())
        mp = json.loads(Path(f"{d}/r.json").read_text())["mixed_precision"]
        warnings = [ln for ln in pm.stderr.splitlines() if ln.startswith("warning:")]
        fp = _ort(str(model))
        refs = [fp.run(None, {"x": held[i]})[0] for i in range(len(held))]
        figures = {}
        for which in ("int8", "mixed"):
            path = f"{d}/{which}.onnx"
            ours = engine.executor_for(engine.load(path))
            got_ours = [ours.run({"x": held[i]})[next(iter(fp.get_outputs())).name] for i in range(len(held))]
            sess, plain = _ort(path), _ort(path, optimize=False)
            got_ort = [sess.run(None, {"x": held[i]})[0] for i in range(len(held))]
            got_plain = [plain.run(None, {"x": held[i]})[0] for i in range(len(held))]
            lat = simulate(engine.load(path), "phone-npu").latency_us
            figures[which] = (_sqnr(refs, got_ours), _sqnr(refs, got_ort), lat, _sqnr(refs, got_plain))
    (s8, o8, l8, _), (sm, om, lm, pm_db) = figures["int8"], figures["mixed"]
    kinds = {}
    for r in mp["raised"]:
        kinds[r["to"]] = kinds.get(r["to"], 0) + 1
    sys.stdout.write(
        f"{label} ({len(calib)} calibration samples, {len(held)} held-out the search never saw):\n"
        f"  all-int8:  held-out SQNR {s8:6.2f} dB (onnxruntime runs it: {o8:6.2f} dB), simulated {l8:8.1f} us, "
        f"quantize {t8:5.1f} s wall ({c8:5.1f} s CPU)\n"
        f"  --target-sqnr {target_db:g}: held-out SQNR {sm:6.2f} dB (onnxruntime: {om:6.2f} dB, with its graph "
        f"optimizations off {pm_db:6.2f} dB), simulated "
        f"{lm:8.1f} us = {lm / l8:.3f}x int8 (target <= 1.3x), quantize {tm:5.1f} s wall (target <= 180 s; "
        f"{cm:5.1f} s CPU; load average {os.getloadavg()[0]:.1f})\n"
        f"  search: reached={mp['reached']} ({mp['stopped']}), its check samples {mp['output_sqnr_db']:.2f} dB "
        f"(its search samples {mp['search_sqnr_db']:.2f} dB, bound {mp.get('search_bound_db') or 0:.2f} dB; "
        f"samples {mp['samples']}), {len(mp['raised'])} raise(s) {kinds}, {len(mp['pruned'])} pruned, "
        f"{len(mp['refused'])} refused, {mp['sensitivity_measured'][0]}/{mp['sensitivity_measured'][1]} groups "
        f"measured\n"
        f"  check samples' bootstrap bound {mp.get('check_bound_db') or 0:.2f} dB (what reached needs); "
        f"where the command's {sum(p['seconds'] for p in mp.get('phases', [])):.0f} s went (the search's {mp.get('seconds') or 0:.0f} s): "
        + ", ".join(f"{p['phase']} {p['seconds']:.0f} s" for p in mp.get("phases", []))
        + f"; measurements {mp.get('measurements')}\n")
    for w in warnings:
        sys.stdout.write(f"  stderr: {w}\n")
    if not warnings and not mp["reached"]:
        sys.stdout.write("  MISSING the warning line for an unreached target\n")


def main() -> int:
    try:
        import rapidocr
    except ImportError:
        sys.stdout.write("rapidocr not installed, skipped\n")
        return 0
    models = Path(rapidocr.__file__).parent / "models"
    t = time.perf_counter()
    with one_blas_thread():  # for this process's measurements; the CLI runs on the machine's cores
        args = sys.argv[1:]
        seed = int(args[args.index("--seed") + 1]) if "--seed" in args else 0  # another crop set per seed
        which = [a for a in args if a in ("rec", "det")] or ["rec", "det"]
        if "rec" in which:
            case(f"PP-OCRv6 rec small 1x3x48x320 (seed {seed})", models / "PP-OCRv6_rec_small.onnx",
                 (1, 3, 48, 320), text_crops(32, 2 * seed), text_crops(16, 2 * seed + 1), 30.0, ["--per-channel"])
        if "det" in which:
            case(f"PP-OCRv6 det small 1x3x320x320 (seed {seed})", models / "PP-OCRv6_det_small.onnx",
                 (1, 3, 320, 320), photos(16, 2 * seed), photos(8, 2 * seed + 1), 25.0, ["--per-channel"])
    sys.stdout.write(f"(bench took {time.perf_counter() - t:.0f} s)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
