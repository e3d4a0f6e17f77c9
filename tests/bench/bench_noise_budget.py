"""Where a plain int8 model's output noise comes from: the per-tensor noise budget on held-out data.

Run: `python -m tests.bench.bench_noise_budget [MODEL ...] [--variant NAME] [--samples N] [--limits]`
(models and variants of tests/bench/bench_ptq_zoo.py; default ppocr_rec and mobilenet_demo, variant
minmax, 4 held-out samples).

With ``--limits`` it prints, instead, what limits plain int8 (nothing raised) once every PTQ step
may run (variant ``auto`` by default: --method auto, CLE, SmoothQuant, --output-ranges, AdaRound and
bias correction, each kept where the calibration checks pass): the pooled output SQNR on every
held-out sample, run by onnxruntime (default session without WeightBiasQuantization, which would
quantize the float weights (c) and (d) keep), of (a) the QDQ model, (b) its weights and
biases only (every activation QuantizeLinear/DequantizeLinear pair bypassed), (c) its activations
only (each weight and bias DequantizeLinear replaced by the float reference's constant; (c') the
same with the biases bias correction shifted, when it ran: its shift also cancels the mean error
of the activations), (d) (a) with the top 10 / 20 tensors of the noise budget left float (a weight
left float takes its layer's reference bias with it), the budget ranked on calibration samples
(not the held-out ones it is judged on). Nothing here changes a default.

Without ``--limits``: for the QDQ model of the variant, every quantized activation and weight is
quantized alone in the FP32 model (engine/quant/budget.py) and its output noise measured on the
held-out samples. Prints the full int8 output SQNR, the SQNR the summed budget predicts (activations,
weights, both), and the largest tensors: share of the noise, the SQNR each leaves alone, the op that
writes it and the ops that read it, and what removing the top 5 / 10 / 20 entirely would leave.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from tests.bench._common import fresh_blas_env, one_blas_thread

fresh_blas_env()

import numpy as np  # noqa: E402

import engine  # noqa: E402
from engine.quant.api import quantize  # noqa: E402
from engine.quant.budget import noise_budget  # noqa: E402
from engine.quant.cli import optimize_for_quantization  # noqa: E402
from engine.quant.config import QuantConfig  # noqa: E402
from engine.quant.data import CalibrationSet, load_calibration  # noqa: E402
from tests.bench.bench_ptq_zoo import VARIANTS, _cases  # noqa: E402


def _db(signal: float, noise: float) -> float:
    return float("inf") if noise <= 0 else 10 * float(np.log10(signal / noise))


def measure(name: str, path: Path, calib, held: np.ndarray, variant: str, samples: int, top: int = 15) -> None:
    from engine import executor_for
    from engine.sim.feeds import check_feeds

    g = engine.load(path)
    inp = g.inputs[0].name
    data = load_calibration(calib, g) if isinstance(calib, Path) else CalibrationSet.from_arrays(name, {inp: calib})
    opt = optimize_for_quantization(g)
    r = quantize(opt, data, QuantConfig(per_channel=True, **VARIANTS[variant]), analysis_samples=0)
    fp = r.reference or opt
    feeds = [{inp: held[i]} for i in range(min(samples, len(held)))]
    t = time.perf_counter()
    rows = noise_budget(fp, r.model, feeds, weights=True)
    seconds = time.perf_counter() - t
    signal = rows[0].signal if rows else 0.0
    fp_ex, q_ex = executor_for(fp), executor_for(r.model.graph)
    full = 0.0
    for f in feeds:
        want = fp_ex.run(check_feeds(fp, f))
        got = q_ex.run(check_feeds(r.model.graph, f))
        full += sum(float(np.square(want[k].astype(np.float64) - got[k]).sum()) for k in want)
    acts = sum(x.noise for x in rows if x.kind == "activation")
    wts = sum(x.noise for x in rows if x.kind == "weight")
    sys.stdout.write(f"{name} ({variant}, {len(feeds)} held-out samples, budget {seconds:.0f} s): full int8 "
                     f"{_db(signal, full):.2f} dB; summed alone: activations {_db(signal, acts):.2f} dB, "
                     f"weights {_db(signal, wts):.2f} dB, both {_db(signal, acts + wts):.2f} dB "
                     f"({len(rows)} tensors)\n")
    for k in (5, 10, 20):
        rest = sum(x.noise for x in rows[k:])
        sys.stdout.write(f"  without the top {k:2d} ({sum(x.share for x in rows[:k]):5.1%} of the noise): "
                         f"{_db(signal, rest):.2f} dB\n")
    for x in rows[:top]:
        v = fp.values.get(x.tensor)
        if x.kind == "weight":
            where = f"weight of {v.uses()[0][0].op_type} {v.uses()[0][0].name}" if v is not None and v.uses() else "weight"
        else:
            p = v.producer() if v is not None else None
            readers = ", ".join(sorted({u.op_type for u, _ in v.uses()})) if v is not None else ""
            where = f"{p.op_type if p else 'input'} {p.name if p else ''} -> {readers}"
        sys.stdout.write(f"  {x.share:6.1%}  alone {x.alone_db:6.2f} dB  {x.tensor}  ({where})\n")
    sys.stdout.flush()


def _bypass_activations(g, tensors=None) -> int:
    """Bypass the QuantizeLinear -> DequantizeLinear pairs of activations (of ``tensors`` when
    given, by the tensor the pair quantizes): their readers read the float value. Returns the count."""
    done = 0
    for q in [n for n in g.nodes if n.op_type == "QuantizeLinear"]:
        if not q.name.endswith("_QuantizeLinear"):
            continue
        if tensors is not None and q.name[: -len("_QuantizeLinear")] not in tensors:
            continue
        src = q.inputs[0]
        for d in [u for u in q.outputs[0].consumers() if u.op_type == "DequantizeLinear"]:
            d.outputs[0].replace_all_uses_with(src)
            g.remove_node(d)
        if not q.outputs[0].consumers():
            g.remove_node(q)
        done += 1
    return done


def _float_constants(g, reference, names) -> int:
    """Replace the DequantizeLinear of each weight/bias in ``names`` by ``reference``'s float constant."""
    done = 0
    for name in names:
        d = next((n for n in g.nodes if n.name == f"{name}_DequantizeLinear" and n.op_type == "DequantizeLinear"), None)
        ref = reference.values.get(name)
        if d is None or ref is None or ref.const is None:
            continue
        c = g.add_initializer(f"{name}_float", np.asarray(ref.const, np.float32))
        d.outputs[0].replace_all_uses_with(c)
        g.remove_node(d)
        done += 1
    return done


def _biases_of(g, weights) -> list[str]:
    """The bias tensors of the layers that read ``weights`` (through their DequantizeLinear)."""
    out = []
    for w in weights:
        dq = g.values.get(f"{w}_dequantized")
        for user, _ in dq.uses() if dq is not None else []:
            b = user.input(2) if len(user.inputs) > 2 else None
            p = b.producer() if b is not None else None
            if p is not None and p.op_type == "DequantizeLinear" and p.name.endswith("_DequantizeLinear"):
                out.append(p.name[: -len("_DequantizeLinear")])
    return out


def limits(name: str, path: Path, calib, held: np.ndarray, variant: str, budget_samples: int = 4) -> None:
    """What limits plain int8 on one model (see the module docstring, ``--limits``)."""
    from engine.ir.clone import clone_graph
    from engine.ir.onnx_io import to_onnx
    from tests.bench.bench_quant import _ort_session, _sqnr

    g = engine.load(path)
    inp = g.inputs[0].name
    data = load_calibration(calib, g) if isinstance(calib, Path) else CalibrationSet.from_arrays(name, {inp: calib})
    feeds = [{inp: held[i]} for i in range(len(held))]
    refs = np.concatenate([_ort_session(str(path)).run(None, f)[0] for f in feeds])
    opt = optimize_for_quantization(g)
    t = time.perf_counter()
    r = quantize(opt, data, QuantConfig(per_channel=True, **VARIANTS[variant]), analysis_samples=0)
    q_seconds = time.perf_counter() - t
    fp = r.reference or opt
    kept = [st.algorithm for st in (r.ptq.steps if r.ptq else []) if st.applied]

    def held_db(graph, rewrite: bool = False) -> float:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads, so.log_severity_level = 1, 3  # the bypassed pairs leave unused constants
        # onnxruntime's WeightBiasQuantization would quantize the float weights (c) and (d) keep
        # to int8 per tensor (a Conv reading a DequantizeLinear): rec (c) 6.56 dB with it
        sess = ort.InferenceSession(to_onnx(graph).SerializeToString(), so, providers=["CPUExecutionProvider"],
                                    disabled_optimizers=[] if rewrite else ["WeightBiasQuantization"])
        return _sqnr(refs, np.concatenate([sess.run(None, f)[0] for f in feeds]))

    qm = r.model
    consts = [*qm.weights, *qm.biases]
    rows = [("(a) weights and activations int8", held_db(qm.graph),
             f"{held_db(qm.graph, rewrite=True):.2f} dB in the default session")]
    wo = clone_graph(qm.graph)
    n_act = _bypass_activations(wo)
    rows.append(("(b) weights only int8 (activations float)", held_db(wo), f"{n_act} activation pairs bypassed"))
    ao = clone_graph(qm.graph)
    n_const = _float_constants(ao, fp, consts)
    rows.append(("(c) activations only int8 (weights float)", held_db(ao), f"{n_const} weights/biases float"))
    if r.float_build is not None and any(st.algorithm == "bias_correction" and st.applied for st in r.ptq.steps):
        ab = clone_graph(qm.graph)
        _float_constants(ab, fp, list(qm.weights))
        _float_constants(ab, r.float_build, list(qm.biases))
        rows.append(("(c') as (c), biases bias-corrected", held_db(ab), "the shifts bias correction added, in float"))
    budget_feeds = [data.sample(i) for i in np.linspace(0, len(data) - 1, budget_samples).round().astype(int)]
    t = time.perf_counter()
    ranked = noise_budget(fp, qm, budget_feeds, weights=True)
    b_seconds = time.perf_counter() - t
    for k in (10, 20):
        top = ranked[:k]
        gk = clone_graph(qm.graph)
        acts = {x.tensor for x in top if x.kind == "activation"}
        wts = [x.tensor for x in top if x.kind == "weight"]
        _bypass_activations(gk, acts)
        _float_constants(gk, fp, [*_biases_of(gk, wts), *wts])
        what = ", ".join(f"{x.tensor} ({x.kind[0]}, {x.share:.0%})" for x in top[:6])
        rows.append((f"(d) (a) with the top {k} noise tensors float", held_db(gk),
                     f"{len(acts)} activations + {len(wts)} weights, {sum(x.share for x in top):.0%} of the "
                     f"budget; first: {what}"))
    sys.stdout.write(f"{name}, variant {variant} (kept: {', '.join(kept) or 'none'}; quantize {q_seconds:.0f} s, "
                     f"budget on {budget_samples} calibration samples {b_seconds:.0f} s): pooled output SQNR on "
                     f"{len(feeds)} held-out samples, onnxruntime without WeightBiasQuantization\n")
    for label, db, note in rows:
        sys.stdout.write(f"  {label:46s} {db:6.2f} dB  {note}\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    variant, samples = "minmax", 4
    table = "--limits" in argv
    if table:
        argv = [a for a in argv if a != "--limits"]
        variant = "auto"
    if "--variant" in argv:
        i = argv.index("--variant")
        variant, argv = argv[i + 1], argv[:i] + argv[i + 2:]
    if "--samples" in argv:
        i = argv.index("--samples")
        samples, argv = int(argv[i + 1]), argv[:i] + argv[i + 2:]
    if variant not in VARIANTS:
        sys.stdout.write(f"unknown variant {variant!r}; choose from {', '.join(VARIANTS)}\n")
        return 2
    with one_blas_thread(), tempfile.TemporaryDirectory() as d:
        cases = _cases(Path(d))
        for name in argv or ["ppocr_rec", "mobilenet_demo"]:
            if name not in cases:
                sys.stdout.write(f"unknown model {name!r}; choose from {', '.join(cases)}\n")
                return 2
            if table:
                limits(name, *cases[name](), variant=variant)
            else:
                measure(name, *cases[name](), variant=variant, samples=samples)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
