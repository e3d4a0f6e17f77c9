"""Where a plain int8 model's output noise comes from: the per-tensor noise budget on held-out data.

Run: `python -m tests.bench.bench_noise_budget [MODEL ...] [--variant NAME] [--samples N]` (models and
variants of tests/bench/bench_ptq_zoo.py; default ppocr_rec and mobilenet_demo, variant minmax, 4
held-out samples). For the QDQ model of the variant, every quantized activation and weight is
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


def main(argv: list[str]) -> int:
    variant, samples = "minmax", 4
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
            measure(name, *cases[name](), variant=variant, samples=samples)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
