"""Where model.tflite and the QDQ model part: every quantized tensor, LiteRT beside onnxruntime.

Run: `python -m tests.bench.bench_tflite_tensors [NAME ...] [--samples N]` (names of
bench_tflite_zoo; mobilenet_demo by default). Compiles like bench_tflite_zoo (12 calibration
samples) and prints, for each TFLite op writing a tensor the QDQ model quantizes too:

* whole network: the SQNR vs FP32 of that tensor in the QDQ model (onnxruntime, no graph
  optimizations: DequantizeLinear -> float op -> QuantizeLinear) and in LiteRT (reference kernels,
  `experimental_preserve_all_tensors`), and the share of equal int8 values;
* op by op: the op alone, fed the QDQ model's own int8 inputs (our TFLite simulation, which
  equals LiteRT bit for bit), against the QDQ model's int8 output, in single and double
  (reference-kernel) rounding: the share of equal values and the largest difference in steps.

A quantization decision the two files do not share shows as an op whose op-by-op figures are
far from 100% (a scale, a bias, a fused activation); rounding shows as one step on a few values.
Prints figures; asserts nothing.
"""

from __future__ import annotations

import sys

from tests.bench._common import fresh_blas_env, one_blas_thread

fresh_blas_env()

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402

from engine.compiler import CompileOptions, compile_model  # noqa: E402
from engine.export.tflite import export_bytes, quantize_input  # noqa: E402
from engine.ir.onnx_io import to_onnx  # noqa: E402
from engine.quant.config import QuantConfig  # noqa: E402
from engine.quant.data import CalibrationSet  # noqa: E402
from engine.sim.fixedpoint import DOUBLE, SINGLE  # noqa: E402
from engine.sim.tflite_int import TfliteSimulator  # noqa: E402
from tests.bench.bench_tflite_zoo import ASSETS, MODELS, _images, _load  # noqa: E402

SAMPLES = 12


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so)


def _with_outputs(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    have = {o.name for o in model.graph.output}
    for n in names:
        if n not in have:
            model.graph.output.append(onnx.helper.make_value_info(n, onnx.TypeProto()))
    return model


def measure(name: str) -> None:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    path, shapes, calib, mean, std, _ = MODELS[name]
    g = _load(path, shapes)
    inp = g.inputs[0].name
    xs = np.load(ASSETS / "data" / calib)[inp][:SAMPLES] if calib else \
        _images([int(d) for d in g.inputs[0].type.shape], mean, std)[:SAMPLES]
    r = compile_model(g, "ethos-u55", CalibrationSet.from_arrays(name, {inp: xs}),
                      CompileOptions(quant=QuantConfig(method="percentile"), analysis_samples=0, require_tflite=True,
                                     allow_float_ops=name.endswith("+allow_float_ops")))
    tm = r.tflite
    qdq_model = to_onnx(r.quant.graph)
    qnames = [n.output[0] for n in qdq_model.graph.node if n.op_type == "QuantizeLinear"]
    index = {t.name: k for k, t in enumerate(tm.tensors) if t.name in set(qnames)}
    qdq = _session(_with_outputs(qdq_model, list(index)))
    fp = _session(_with_outputs(to_onnx(r.optimized), [n[: -len("_quantized")] for n in index]))
    it = Interpreter(model_content=export_bytes(tm), experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
                     experimental_preserve_all_tensors=True)
    it.allocate_tensors()
    detail = {d["name"]: d["index"] for d in it.get_tensor_details()}
    sims = {mode: TfliteSimulator(tm, mode) for mode in (SINGLE, DOUBLE)}
    whole: dict[int, list[float]] = {}  # tensor -> [signal, QDQ error, LiteRT error, equal, count]
    local: dict[tuple[str, int], list[int]] = {}  # (mode, tensor) -> [equal, count, max diff]

    def nhwc(a: np.ndarray) -> np.ndarray:
        return a.transpose(0, 2, 3, 1) if a.ndim == 4 and tm.nhwc else a

    x1 = xs[:, 0]
    for i in range(len(x1)):
        x = x1[i:i + 1]
        q = quantize_input(tm, inp, x)
        qv = dict(zip([o.name for o in qdq.get_outputs()], qdq.run(None, {inp: x})))
        fv = dict(zip([o.name for o in fp.get_outputs()], fp.run(None, {inp: x})))
        given = {k: nhwc(qv[n]) for n, k in index.items()}
        it.set_tensor(it.get_input_details()[0]["index"], q)
        it.invoke()
        for n, k in index.items():
            t = tm.tensors[k]
            lite = it.get_tensor(detail[n]).reshape(t.shape) if n in detail else None
            ref = nhwc(fv[n[: -len("_quantized")]]).astype(np.float64).reshape(t.shape)
            ours = given[k].reshape(t.shape)
            e = whole.setdefault(k, [0.0, 0.0, 0.0, 0, 0])
            deq = [(a.astype(np.float64) - t.scalar_zp()) * t.scalar_scale() for a in (ours, lite if lite is not None else ours)]
            e[0] += float(np.sum(ref ** 2))
            e[1] += float(np.sum((deq[0] - ref) ** 2))
            e[2] += float(np.sum((deq[1] - ref) ** 2))
            e[3] += int(np.sum(ours == lite)) if lite is not None else 0
            e[4] += ours.size
        for mode, sim in sims.items():
            def hook(op, y, mode=mode, given=given):
                k = op.outputs[0]
                if k in given:
                    d = np.abs(y.astype(np.int64) - given[k].reshape(y.shape).astype(np.int64))
                    s = local.setdefault((mode, k), [0, 0, 0])
                    s[0] += int(np.sum(d == 0))
                    s[1] += d.size
                    s[2] = max(s[2], int(d.max()))

            sim.run({inp: q}, hook=hook, given=given)
    print(f"{name}: {len(tm.ops)} TFLite ops, {len(index)} tensors quantized in both, {len(x1)} samples")
    print(f"  {'op':18s} {'tensor':44s} {'SQNR QDQ':>9s} {'LiteRT':>7s} {'equal':>7s} | op alone, QDQ inputs:"
          " single rounding, double rounding")

    def db(sig: float, err: float) -> float:
        return 10 * np.log10(sig / err) if err > 0 else float("inf")

    for op in tm.ops:
        k = op.outputs[0]
        if k not in whole:
            continue
        sig, eq_, el, same, cnt = whole[k]
        s, d = local[(SINGLE, k)], local[(DOUBLE, k)]
        print(f"  {op.opcode:18s} {tm.tensors[k].name[-44:]:44s} {db(sig, eq_):8.2f} {db(sig, el):7.2f}"
              f" {100 * same / cnt:6.2f}% | {100 * s[0] / s[1]:6.2f}% (max {s[2]}), {100 * d[0] / d[1]:6.2f}% (max {d[2]})")


def main(argv: list[str]) -> int:
    global SAMPLES
    if "--samples" in argv:
        k = argv.index("--samples")
        SAMPLES = int(argv[k + 1])
        argv = argv[:k] + argv[k + 2:]
    with one_blas_thread():
        for name in argv or ["mobilenet_demo"]:
            measure(name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
