"""The generated parts of docs/targets.md: the YAML field table, the bundled targets, vela ratios.

The field table walks ``engine.hw.target.SCHEMA`` (the objects the loader validates with), so
a field added to the schema appears here with its type, bound, default and one-line meaning
the next time the docs are generated. ``COST_USE`` adds what the cost model, placement or
simulator does with each field; a field without an entry is still listed (its schema text).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tools.docgen.sandbox import ROOT

# Optional results of a vela comparison benchmark (see docs/targets.md, "Fidelity").
VELA_RESULTS = ROOT / "tests" / "bench" / "results" / "vela.json"

COST_USE: dict[str, str] = {
    "name": "the name `--target` accepts and reports show",
    "description": "shown by `simulate --list-targets` and at the top of reports",
    "npu.array.rows": "systolic array height R: a GEMM takes ceil(M/R) * ceil(N/C) folds of 2R + C + K - 2 cycles",
    "npu.array.cols": "systolic array width C (see rows); grouped/depthwise convolutions place groups side by side on the columns",
    "npu.array.dataflow": "which GEMM dimensions are mapped on the array and which one streams (os: M x N, ws: K x N, is: K x M)",
    "npu.clock_mhz": "turns cycles into microseconds; the thermal model decays it toward `thermal.sustained_clock_mhz`",
    "npu.precision": "the precision ops run at; sets the element size of NPU tensors and the dtype rule of placement",
    "npu.precisions": "MACs per cycle per precision; a precision below the array's native one divides the rate",
    "npu.vector_ops_per_cycle": "throughput of every non-GEMM op on the NPU (element ops / this / clock)",
    "npu.sram_kib": "tile budget of GEMMs (operands that do not fit re-fetch activations) and residency of fused chains",
    "npu.dram_bandwidth_gbps": "memory time of NPU ops: DRAM bytes / bandwidth (+ one access latency)",
    "npu.dram_latency_ns": "added once per op that touches DRAM",
    "npu.weight_bandwidth_gbps": "weights are read over this port instead of DRAM's (e.g. flash on microcontrollers)",
    "npu.dispatch_overhead_us": "paid once per NPU partition; placement moves an NPU island to the CPU when this costs more than it saves",
    "npu.op_overhead_us": "added to every NPU op (command processing)",
    "npu.layout": "activations cross the CPU<->NPU boundary through a layout conversion when the model's layout differs",
    "npu.residency_fraction": "share of SRAM that may keep an intermediate on chip between fused ops (no DRAM traffic)",
    "npu.constraints": "rules every op must meet to run on the NPU (dtypes, static shapes, rank, tensor size, kernel, stride, dilation)",
    "npu.ops": "op types the NPU runs; each may override the global constraints; every other op falls back to the CPU",
    "cpu.name": "shown in reports",
    "cpu.peak_gflops": "compute time of CPU ops: (2 * MACs + flops per element op * element ops) / peak",
    "cpu.memory_bandwidth_gbps": "memory time of CPU ops beyond the cache",
    "cpu.op_overhead_us": "added to every CPU op (kernel dispatch)",
    "cpu.cache_kib": "bytes up to this size move at `cache_bandwidth_gbps` instead of DRAM's; weights stay cached when the model's fit",
    "cpu.cache_bandwidth_gbps": "bandwidth of the cache (see cache_kib)",
    "transfer.bandwidth_gbps": "every tensor crossing between CPU and NPU costs bytes / bandwidth",
    "transfer.fixed_us": "plus this fixed cost per transfer (synchronisation, cache maintenance)",
    "thermal.sustained_clock_mhz": "`simulate --thermal`: the clock under continuous load",
    "thermal.time_constant_s": "`simulate --thermal`: how fast the clock falls from peak toward sustained",
    "exports": "extra files `compile` writes for this target (`tflite`: model.tflite)",
    "vela": "how `compile --vela` runs Arm's vela (accelerator_config, system_config, memory_mode)",
    "base": "this file extends that target: mappings merge key by key, other values replace, null removes",
    "aliases": "other names `--target` accepts for this bundled target (ethos-u55-128 = ethos-u55)",
    "ethos_u": "with it, NPU ops are costed as vela estimates them (engine/hw/ethos_u.py), not by the roofline",
    "memory": "the memory system vela.ini describes for the target's system config and memory mode",
    "ethos_u.macs": "checked against vela.accelerator_config; = OFM micro-block W x H x C x 8",
    "ethos_u.ofm_ublock": "the OFM block search steps in micro-blocks; compute cycles count micro-blocks per block",
    "ethos_u.shram_banks": "the OFM block must fit: IFM and accumulators double-buffered, rounded to granules",
    "ethos_u.output_cycles_per_elem": "output-stage cycles per OFM element; elementwise ops cost this per element",
    "ethos_u.weight_compression": "weights read from constant memory: int8 bytes x this (+ 10 bytes per channel)",
    "memory.areas": "per memory: bytes/cycle = axi_bytes_per_cycle x clock_scale; bursts scale traffic; latencies per block",
    "memory.feature_maps": "IFM/OFM traffic goes to this memory's access cycles",
    "memory.constants": "weights, biases, LUTs and constant operands are read from here (or DMA'd into SRAM first)",
}

CONSTRAINT_USE = "per-op overrides under `npu.ops.OP` take the same keys"

_UNITS = (("_mhz", "MHz"), ("_kib", "KiB"), ("_gbps", "GB/s"), ("_us", "µs"), ("_ns", "ns"), ("_s", "s"))


def _unit(key: str) -> str:
    for suffix, unit in _UNITS:
        if key.endswith(suffix):
            return unit
    return ""


def _bound(f: Any) -> str:
    parts = []
    if getattr(f, "minimum", None) is not None:
        parts.append(f">= {f.minimum:g}")
    if getattr(f, "above", None) is not None:
        parts.append(f"> {f.above:g}")
    if getattr(f, "choices", None):
        parts.append(" \\| ".join(str(c) for c in f.choices))
    return ", ".join(parts)


def _rows(schema: dict[str, Any], prefix: str = "") -> list[str]:
    from engine.hw.schema import Field

    rows = []
    for key, spec in schema.items():
        path = f"{prefix}{key}"
        if isinstance(spec, dict):
            rows += _rows(spec, f"{path}.")
            continue
        if not isinstance(spec, Field):
            continue
        req = "yes" if spec.required else (f"no (default `{spec.default}`)" if spec.default is not None else "no")
        use = COST_USE.get(path, "")
        rows.append(f"| `{path}` | {spec.kind} | {_unit(key)} | {_bound(spec)} | {req} | {spec.doc} | {use} |")
    return rows


def field_table() -> str:
    """Markdown table of every field of the target YAML schema."""
    from engine.hw.target import (
        CONSTRAINT_SCHEMA,
        ETHOS_U_SCHEMA,
        MEMORY_AREA_SCHEMA,
        MEMORY_SCHEMA,
        SCHEMA,
    )

    head = ["| Field | Type | Unit | Allowed | Required | Meaning | What the cost model does with it |",
            "|---|---|---|---|---|---|---|"]
    lines = head + _rows(SCHEMA)
    lines += ["", f"Constraint keys (under `npu.constraints`; {CONSTRAINT_USE}):", "", *head]
    lines += _rows(CONSTRAINT_SCHEMA, "npu.constraints.")
    lines += ["", "Ethos-U keys (under `ethos_u`, `memory` and `memory.areas.NAME`):", "", *head]
    lines += _rows(ETHOS_U_SCHEMA, "ethos_u.") + _rows(MEMORY_SCHEMA, "memory.")
    lines += _rows(MEMORY_AREA_SCHEMA, "memory.areas.NAME.")
    return "\n".join(lines) + "\n"


def bundled_table() -> str:
    """One row per bundled target, from the YAML files themselves."""
    from engine.hw.target import bundled_targets, load_target

    lines = ["| Target | NPU array | Clock | Precision | Peak | SRAM | DRAM | CPU | CPU<->NPU | NPU ops | Exports |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, path in bundled_targets().items():
        t = load_target(path)
        n = t.npu
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        exports = ", ".join(raw.get("exports") or []) or "onnx-qdq"
        ops_doc = Path(path).with_name(f"{name}.SUPPORTED_OPS.md")
        ops = (f"[{len(t.ops)}](../assets/targets/{ops_doc.name})" if ops_doc.exists() else str(len(t.ops)))
        lines.append(
            f"| `{name}` | {n.rows}x{n.cols} {n.dataflow} | {n.clock_mhz:g} MHz | {n.precision} | "
            f"{n.peak_tops:.3g} TOPS | {n.sram_kib:g} KiB | {n.dram_bandwidth_gbps:g} GB/s | "
            f"{t.cpu.peak_gflops:g} GFLOPS | {t.transfer.bandwidth_gbps:g} GB/s + {t.transfer.fixed_us:g} µs | "
            f"{ops} | {exports} |")
    return "\n".join(lines) + "\n"


def vela_ratios() -> str:
    """The ours/vela table when the benchmark left its results file; otherwise says so."""
    rel = VELA_RESULTS.relative_to(ROOT).as_posix()
    if not VELA_RESULTS.is_file():
        return (f"_No vela results yet: this table is filled from `{rel}` when a benchmark writes it "
                "(`{\"rows\": [{\"model\", \"target\", \"ours_cycles\", \"vela_cycles\"}]}`), "
                "then `python tools/gen_docs.py` is rerun._\n")
    doc = json.loads(VELA_RESULTS.read_text(encoding="utf-8"))
    rows = doc.get("rows", [])
    lines = [f"From `{rel}`" + (f" (vela {doc['vela_version']})" if doc.get("vela_version") else "")
             + ", over the ops both put on the NPU:", "",
             "| Target | Models | Median ours / vela | Worst ours / vela | Lowest Spearman |", "|---|---:|---:|---:|---:|"]
    for target in dict.fromkeys(r["target"] for r in rows):
        ratios = sorted(_ratio(r) for r in rows if r["target"] == target)
        rhos = [r["spearman"] for r in rows if r["target"] == target and r.get("spearman") is not None]
        worst = max(ratios, key=lambda x: abs(x - 1))
        median = ratios[len(ratios) // 2] if len(ratios) % 2 else sum(ratios[len(ratios) // 2 - 1:][:2]) / 2
        lines.append(f"| `{target}` | {len(ratios)} | {median:.2f} | {worst:.2f} | "
                     + (f"{min(rhos):.2f}" if rhos else "-") + " |")
    lines += ["", "| Model | Target | Ours (cycles) | vela (cycles) | ours / vela | Spearman | on our CPU, vela's NPU |",
              "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        rho = f"{r['spearman']:.2f}" if r.get("spearman") is not None else "-"
        lines.append(f"| {r['model']} | {r['target']} | {r['ours_cycles']:,.0f} | {r['vela_cycles']:,.0f} | "
                     f"{_ratio(r):.2f} | {rho} | {r.get('cpu_here_npu_there', 0)} |")
    return "\n".join(lines) + "\n"


def _ratio(r: dict[str, Any]) -> float:
    return r["ours_cycles"] / r["vela_cycles"] if r.get("vela_cycles") else float("nan")
