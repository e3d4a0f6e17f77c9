"""Quantization quality, speed and memory against onnxruntime's quantize_static, side by side.

Run: `python -m tests.bench.bench_quant`. Prints:
1. digits CNN: FP32 and INT8 (per-channel) top-1 on the held-out set, for each method;
2. MobileNet demo calibrated with real images: output SQNR vs FP32 of each of our methods and
   of onnxruntime's quantize_static (QDQ, per-channel, same data; MinMax/Percentile/Entropy);
3. MinMax calibration time with 128 samples, ours vs onnxruntime;
4. peak memory of calibration (each in a fresh process: ru_maxrss above the post-load baseline)
   for MinMax / Percentile / Entropy, ours and onnxruntime's;
5. the PTQ algorithms (engine/quant/ptq.py) on held-out data (tests/bench/quant_data.py): PP-OCRv6
   rec small on text crops and mobilenet_demo on photo crops, plain int8 minmax ("before") and
   every algorithm in auto mode (--method auto, CLE / SmoothQuant / output ranges / AdaRound / bias correction
   where the calibration checks say they help: "after"), each
   with its quantize wall time and what each step bought, beside onnxruntime's quantize_static
   best of MinMax/Percentile/Entropy on the same calibration data.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.bench._common import fresh_blas_env, one_blas_thread

fresh_blas_env()

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnx.version_converter  # noqa: E402
import onnxruntime as ort  # noqa: E402

import engine  # noqa: E402
from engine.ir.onnx_io import to_onnx  # noqa: E402
from engine.quant.api import quantize  # noqa: E402
from engine.quant.cli import optimize_for_quantization  # noqa: E402
from engine.quant.config import QuantConfig  # noqa: E402
from engine.quant.data import CalibrationSet  # noqa: E402
from tests.models import ASSETS, demo_model  # noqa: E402

METHODS = ("minmax", "percentile", "entropy", "mse")
ORT_METHODS = {"minmax": "MinMax", "percentile": "Percentile", "entropy": "Entropy"}


def _sqnr(ref: np.ndarray, got: np.ndarray) -> float:
    err = float(((ref.astype(np.float64) - got) ** 2).sum())
    return 200.0 if err == 0 else 10 * np.log10(float((ref.astype(np.float64) ** 2).sum()) / err)


def _ort_session(model: onnx.ModelProto | str):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    data = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def digits_accuracy() -> None:
    path = demo_model("digits_cnn")
    test = np.load(ASSETS / "data" / "digits_test.npz")
    calib = np.load(ASSETS / "data" / "digits_calib.npz")
    g = engine.load(path)
    name = g.inputs[0].name
    data = CalibrationSet.from_arrays("digits_calib.npz", {name: calib[name]})
    x, y = test["x"], test["y"]
    fp = _ort_session(str(path))
    fp_acc = float(np.mean([fp.run(None, {name: x[i:i + 1]})[0].argmax() == y[i] for i in range(len(x))]))
    sys.stdout.write(f"digits CNN ({len(x)} held-out samples): FP32 top-1 {fp_acc:.4f}\n")
    opt = optimize_for_quantization(g)
    for method in METHODS:
        r = quantize(opt, data, QuantConfig(method=method, per_channel=True), analysis_samples=0)
        sess = _ort_session(to_onnx(r.graph))
        acc = float(np.mean([sess.run(None, {name: x[i:i + 1]})[0].argmax() == y[i] for i in range(len(x))]))
        sys.stdout.write(f"  INT8 per-channel {method:10s} top-1 {acc:.4f} (onnxruntime runs our QDQ model)\n")


def _ort_quantize(path: Path, feeds: list[dict], method: str, out: Path) -> None:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter(feeds)

        def get_next(self):
            return next(self.it, None)

    pre = out.with_suffix(".pre.onnx")
    quant_pre_process(str(path), str(pre), skip_symbolic_shape=True)
    quantize_static(str(pre), str(out), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    calibrate_method=getattr(CalibrationMethod, ORT_METHODS[method]))


def mobilenet_quality() -> None:
    path = demo_model("mobilenet_demo")
    if not path.exists():
        sys.stdout.write("mobilenet demo missing, skipped\n")
        return
    g = engine.load(path)
    name = g.inputs[0].name
    from engine.quant.data import load_calibration

    data = load_calibration(ASSETS / "data" / "images", g)
    feeds = [data.sample(i) for i in range(len(data))]
    fp = _ort_session(str(path))
    refs = [fp.run(None, f)[0] for f in feeds]
    opt = optimize_for_quantization(g)
    ours = {}
    for method in METHODS:
        r = quantize(opt, data, QuantConfig(method=method, per_channel=True), analysis_samples=0)
        sess = _ort_session(to_onnx(r.graph))
        got = np.concatenate([sess.run(None, f)[0] for f in feeds])
        ours[method] = _sqnr(np.concatenate(refs), got)
    theirs = {}
    with tempfile.TemporaryDirectory() as d:
        for method in ORT_METHODS:
            out = Path(d) / f"{method}.onnx"
            try:
                _ort_quantize(path, feeds, method, out)
            except Exception as exc:  # report and go on: this is a comparison, not our code
                sys.stdout.write(f"  onnxruntime {method} failed: {type(exc).__name__}: {exc}\n")
                continue
            sess = _ort_session(str(out))
            theirs[method] = _sqnr(np.concatenate(refs), np.concatenate([sess.run(None, f)[0] for f in feeds]))
    sys.stdout.write(f"MobileNet demo, {len(feeds)} real images ({name}), output SQNR vs FP32 (dB):\n")
    for m, v in ours.items():
        sys.stdout.write(f"  ours {m:10s} {v:6.2f}\n")
    for m, v in theirs.items():
        sys.stdout.write(f"  onnxruntime {m:10s} {v:6.2f}\n")
    if ours and theirs:
        best_o, best_t = max(ours.values()), max(theirs.values())
        sys.stdout.write(f"  best ours {best_o:.2f} dB vs best onnxruntime {best_t:.2f} dB: "
                         f"difference {best_o - best_t:+.2f} dB (target >= -0.5)\n")


_CHILD = r"""
import json, os, sys, threading, time
import numpy as np
PAGE = os.sysconf("SC_PAGE_SIZE")
def rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * PAGE
class Peak(threading.Thread):
    # samples resident memory every 2 ms: catches C++ allocations that tracemalloc cannot see
    def __init__(self):
        super().__init__(daemon=True); self.peak = rss(); self.stop = False
    def run(self):
        while not self.stop:
            self.peak = max(self.peak, rss()); time.sleep(0.002)
which, method, path, npz = sys.argv[1:5]
data = np.load(npz)
name = data.files[0]
arr = data[name]
feeds = [{name: arr[i]} for i in range(len(arr))]
if which == "ours":
    import engine
    from engine.quant.config import QuantConfig
    from engine.quant.calibrate import calibrate
    from engine.quant.cli import optimize_for_quantization
    from engine.quant.data import CalibrationSet
    g = optimize_for_quantization(engine.load(path))
    cs = CalibrationSet.from_arrays(npz, {name: arr})
    base = rss(); mon = Peak(); mon.start()
    t = time.perf_counter()
    calibrate(g, cs, QuantConfig(method=method))
    el = time.perf_counter() - t
else:
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, quantize_static
    class R(CalibrationDataReader):
        def __init__(self): self.it = iter(feeds)
        def get_next(self): return next(self.it, None)
    import tempfile, os
    base = rss(); mon = Peak(); mon.start()
    t = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        quantize_static(path, os.path.join(d, "q.onnx"), R(), quant_format=QuantFormat.QDQ,
                        calibrate_method=getattr(CalibrationMethod, method))
    el = time.perf_counter() - t
mon.stop = True; mon.join()
peak = max(mon.peak, rss())
print(json.dumps({"seconds": el, "peak_kb": peak // 1024, "extra_kb": (peak - base) // 1024}))
"""


def _child(which: str, method: str, path: Path, npz: Path) -> dict:
    env = {**os.environ}
    proc = subprocess.run([sys.executable, "-c", _CHILD, which, method, str(path), str(npz)],
                          capture_output=True, text=True, env=env, cwd=Path(__file__).resolve().parents[2])
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def speed_and_memory() -> None:
    path = demo_model("mobilenet_demo")
    src = ASSETS / "data" / "mobilenet_calib.npz"
    if not path.exists() or not src.exists():
        sys.stdout.write("mobilenet demo or its calibration data missing, skipped\n")
        return
    arr = np.load(src)
    name = arr.files[0]
    x = arr[name]
    reps = int(np.ceil(128 / len(x)))
    x128 = np.concatenate([x] * reps)[:128]
    with tempfile.TemporaryDirectory() as d:
        npz = Path(d) / "calib128.npz"
        np.savez(npz, **{name: x128})
        rows = {}
        for which, methods in (("ours", ("minmax", "percentile", "entropy")),
                               ("onnxruntime", ("MinMax", "Percentile", "Entropy"))):
            for m in methods:
                rows[(which, m.lower())] = _child(which, m, path, npz)
    sys.stdout.write("calibration with 128 samples of the MobileNet demo (fresh process each):\n")
    for (which, m), r in rows.items():
        if "error" in r:
            sys.stdout.write(f"  {which:12s} {m:10s} failed: {r['error']}\n")
        else:
            sys.stdout.write(f"  {which:12s} {m:10s} {r['seconds']:7.2f} s   peak +{r['extra_kb'] / 1024:8.1f} MiB\n")
    try:
        o, t = rows[("ours", "minmax")], rows[("onnxruntime", "minmax")]
        sys.stdout.write(f"  MinMax time ours/onnxruntime: {o['seconds'] / t['seconds']:.2f}x (target <= 1)\n")
        for m in ("percentile", "entropy"):
            ours_ratio = max(rows[("ours", m)]["extra_kb"], 1) / max(o["extra_kb"], 1)
            ort_ratio = max(rows[("onnxruntime", m)]["extra_kb"], 1) / max(t["extra_kb"], 1)
            sys.stdout.write(f"  {m} peak memory / MinMax: ours {ours_ratio:.2f}x (target < 2), "
                             f"onnxruntime {ort_ratio:.2f}x\n")
    except KeyError:
        pass


PTQ_DEFAULT = {"method": "auto", "cle": "auto", "smoothquant": "auto", "output_ranges": "auto", "adaround": "auto",
               "bias_correction": "auto"}


def _ptq_case(label: str, path: Path, ort_path: Path, data: CalibrationSet, held: np.ndarray) -> None:
    name = engine.load(path).inputs[0].name
    feeds = [{name: held[i]} for i in range(len(held))]
    fp = _ort_session(str(path))
    refs = np.concatenate([fp.run(None, f)[0] for f in feeds])
    opt = optimize_for_quantization(engine.load(path))
    sys.stdout.write(f"{label}: {len(data)} calibration samples, {len(held)} held-out, pooled output SQNR vs FP32\n")
    for tag, extra in (("before (minmax, no PTQ)", {"method": "minmax"}), ("after (every PTQ auto)", PTQ_DEFAULT)):
        t = time.perf_counter()
        r = quantize(opt, data, QuantConfig(per_channel=True, **extra), analysis_samples=0)
        seconds = time.perf_counter() - t
        sess = _ort_session(to_onnx(r.graph))
        got = np.concatenate([sess.run(None, f)[0] for f in feeds])
        sys.stdout.write(f"  ours {tag:24s} {_sqnr(refs, got):6.2f} dB  quantize {seconds:6.1f} s\n")
        for st in r.ptq.steps if r.ptq else []:
            held_gain = f"{st.heldout_db[1] - st.heldout_db[0]:+.2f}" if st.heldout_db else "  n/a"
            sys.stdout.write(f"      {st.algorithm:16s} {'applied' if st.applied else 'skipped':8s} "
                             f"calib {st.gain_db:+6.2f} dB  held-out {held_gain} dB  {st.seconds:6.1f} s\n")
    cal_feeds = [data.sample(i) for i in range(len(data))]
    best = {}
    with tempfile.TemporaryDirectory() as d:
        for method in ORT_METHODS:
            out = Path(d) / f"{method}.onnx"
            try:
                _ort_quantize(ort_path, cal_feeds, method, out)
            except Exception as exc:  # report and go on: this is a comparison, not our code
                sys.stdout.write(f"  onnxruntime {method} failed: {type(exc).__name__}: {exc}\n")
                continue
            sess = _ort_session(str(out))
            best[method] = _sqnr(refs, np.concatenate([sess.run(None, f)[0] for f in feeds]))
    for m, v in best.items():
        sys.stdout.write(f"  onnxruntime {m:10s} {v:6.2f} dB\n")


def ptq_algorithms() -> None:
    from engine.quant.data import load_calibration
    from tests.bench import quant_data

    with tempfile.TemporaryDirectory() as d:
        rec = quant_data.rec_model(Path(d) / "rec.onnx")
        # onnxruntime's per-channel QDQ needs opset >= 13 (the recognizer is opset 11)
        rec13 = Path(d) / "rec13.onnx"
        onnx.save(onnx.version_converter.convert_version(onnx.load(str(rec)), 13), str(rec13))
        name = engine.load(rec).inputs[0].name
        data = CalibrationSet.from_arrays("text crops", {name: quant_data.text_crops(32, 0)})
        _ptq_case("PP-OCRv6 rec small 1x3x48x320", rec, rec13, data, quant_data.text_crops(16, 1))
    mob = demo_model("mobilenet_demo")
    data = load_calibration(ASSETS / "data" / "images", engine.load(mob))
    _ptq_case("mobilenet_demo", mob, mob, data, quant_data.photo_crops(24, 1))


def main() -> int:
    with one_blas_thread():
        t = time.perf_counter()
        digits_accuracy()
        mobilenet_quality()
        ptq_algorithms()
    speed_and_memory()
    sys.stdout.write(f"(bench took {time.perf_counter() - t:.0f} s)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
