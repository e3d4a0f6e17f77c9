"""Arm's vela as a second opinion: compile model.tflite for the target's Ethos-U and read its report.

vela (the ``ethos-u`` extra: ``pip install npu-studio[ethos-u]``) runs as a child process on the
exported file with the target's ``vela:`` section (accelerator config, system config, memory
mode, config file) and ``--verbose-performance``; everything it writes into its output folder is
kept (OUTDIR/vela/ in the bundle). From its summary CSV we take the total cycles, the inference
time and the CPU/NPU operator counts; from its per-layer CSV each layer's cycles, matched to our
nodes through the output tensor names we wrote.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import InputError
from engine.export.tflite_ir import TModel

INSTALL_HINT = "pip install 'npu-studio[ethos-u]' (brings ethos-u-vela and ai-edge-litert)"


@dataclass
class VelaResult:
    """vela's outputs (file name -> bytes) and what we read from them."""

    files: dict[str, bytes]
    summary: dict[str, str]
    layers: list[dict[str, Any]] = field(default_factory=list)
    cpu_ops: int = 0
    npu_ops: int = 0
    cpu_reasons: list[str] = field(default_factory=list)
    cpu_operators: list[dict[str, Any]] = field(default_factory=list)

    @property
    def total_cycles(self) -> int:
        """Cycles of one inference (vela's cycles_total)."""
        return int(float(self.summary.get("cycles_total", 0)))

    @property
    def latency_us(self) -> float:
        """vela's inference time in microseconds."""
        return float(self.summary.get("inference_time", 0.0)) * 1e6

    def to_json(self, our_latency_us: float | None = None) -> dict[str, Any]:
        """plan.json's ``vela`` section: vela's figures beside ours."""
        doc = {"total_cycles": self.total_cycles, "latency_us": round(self.latency_us, 3),
               "npu_ops": self.npu_ops, "cpu_ops": self.cpu_ops, "cpu_reasons": self.cpu_reasons,
               "cpu_operators": self.cpu_operators,
               "accelerator": self.summary.get("accelerator_configuration"),
               "system_config": self.summary.get("system_config"), "memory_mode": self.summary.get("memory_mode"),
               "layers": self.layers}
        if our_latency_us is not None:
            doc["our_latency_us"] = round(our_latency_us, 3)
        return doc


def vela_available() -> bool:
    """True when the ethos-u-vela package is importable."""
    return importlib.util.find_spec("ethosu") is not None and importlib.util.find_spec("ethosu.vela") is not None


def run_vela(tflite_bytes: bytes, model: TModel, vela_cfg: dict[str, str] | None, target_name: str,
             timeout_s: float = 600.0) -> VelaResult:
    """Compile ``tflite_bytes`` with vela; InputError when vela is missing or fails on the file."""
    if not vela_available():
        raise InputError(f"--vela needs Arm's vela, which is not installed: {INSTALL_HINT}")
    if vela_cfg is None:
        raise InputError(f"--vela: target {target_name!r} has no vela: section (accelerator_config, "
                         "system_config, memory_mode)")
    with tempfile.TemporaryDirectory(prefix="npu-studio-vela-") as tmp:
        src = Path(tmp) / "model.tflite"
        src.write_bytes(tflite_bytes)
        out = Path(tmp) / "out"
        cmd = [sys.executable, "-m", "ethosu.vela", str(src), "--output-dir", str(out),
               "--accelerator-config", vela_cfg["accelerator_config"],
               "--system-config", vela_cfg["system_config"], "--memory-mode", vela_cfg["memory_mode"],
               "--config", vela_cfg.get("config") or "Arm/vela.ini", "--verbose-performance",
               "--show-cpu-operations"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise InputError(f"vela did not finish within {timeout_s:.0f} s on model.tflite") from None
        if proc.returncode != 0:
            lines = [ln.strip() for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
            why = next((ln for ln in reversed(lines) if "rror" in ln), lines[-1] if lines else "no output")
            raise InputError(f"vela failed on model.tflite (exit {proc.returncode}): {why[:300]}")
        files = {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file()}
    log = (proc.stdout + proc.stderr).replace(tmp, ".")  # no temporary paths: reproducible
    files["vela.log"] = log.encode("utf-8")
    return _parse(files, model, log)


def _parse(files: dict[str, bytes], model: TModel, log: str) -> VelaResult:
    summary_name = next((k for k in files if "_summary_" in k and k.endswith(".csv")), None)
    if summary_name is None:
        raise InputError("vela wrote no summary CSV")
    rows = list(csv.DictReader(io.StringIO(files[summary_name].decode("utf-8"))))
    summary = rows[0] if rows else {}
    node_of = {model.tensors[o.outputs[0]].name: o.node for o in model.ops}
    layers: list[dict[str, Any]] = []
    per_layer = next((k for k in files if k.endswith("_per-layer.csv")), None)
    if per_layer is not None:
        for r in csv.DictReader(io.StringIO(files[per_layer].decode("utf-8"))):
            cycles = int(float(r.get("Op Cycles") or 0))
            name = r.get("Name", "")
            layers.append({"tensor": name, "node": node_of.get(name), "op": r.get("NNG Operator"),
                           "original": r.get("Original Operator") or next(iter(r.values()), ""),
                           "target": r.get("Target"), "cycles": cycles,
                           "macs": int(float(r.get("MAC Count") or 0))})
    m_cpu = re.search(r"CPU operators = (\d+)", log)
    m_npu = re.search(r"NPU operators = (\d+)", log)
    reasons: list[str] = []
    cpu_operators: list[dict[str, Any]] = []
    lines = log.splitlines()
    for k, ln in enumerate(lines):
        # vela 5: "Warning (supported operators) operator: OP, ofm: 'NAME'" then "Reason: ..."
        if ln.startswith("Warning (supported operators)") or "placing on cpu" in ln.lower():
            why = next((w.strip() for w in lines[k + 1:k + 3] if w.strip().startswith(("Reason:", "- "))), "")
            reasons.append(ln.strip() + (f" {why}" if why else ""))
            m = re.search(r"operator: (\w+), ofm: '([^']*)'", ln)
            if m:
                cpu_operators.append({"op": m.group(1), "tensor": m.group(2), "node": node_of.get(m.group(2)),
                                      "reason": why.removeprefix("Reason:").strip()})
    return VelaResult(files, summary, layers, int(m_cpu.group(1)) if m_cpu else 0,
                      int(m_npu.group(1)) if m_npu else 0, reasons, cpu_operators)


def node_cycles(result: VelaResult) -> dict[str, int]:
    """vela's cycles per ONNX node (summed over the TFLite ops lowered from it)."""
    out: dict[str, int] = {}
    for layer in result.layers:
        if layer["node"]:
            out[layer["node"]] = out.get(layer["node"], 0) + layer["cycles"]
    return out


MAC_OPS = {"Conv", "ConvTranspose", "Gemm", "MatMul", "QLinearConv", "QLinearMatMul", "MaxPool", "AveragePool",
           "GlobalAveragePool", "GlobalMaxPool"}
"""Ops whose layers are MAC layers in the comparison (vela counts MACs for its pools too; the
MACs vela reports for the parts of a lowered softmax or mean do not make them MAC layers)."""


@dataclass
class VelaComparison:
    """Our estimate beside vela's, per ONNX node and in total, over the ops both put on the NPU.

    ``layers`` rows: node, op type, our cycles, vela's cycles, vela's MACs. ``ours_total_us`` and
    ``vela_total_us`` sum the nodes both run on the NPU; ``cpu_here_npu_there`` lists nodes we
    keep on the CPU that vela runs on the NPU (a placement difference, not a cost one), and
    ``npu_here_cpu_there`` the reverse.
    """

    layers: list[dict[str, Any]]
    ours_total_us: float
    vela_total_us: float
    vela_all_us: float
    ours_all_us: float
    cpu_here_npu_there: list[str]
    npu_here_cpu_there: list[str]

    @property
    def ratio(self) -> float:
        """ours / vela over the nodes both put on the NPU."""
        return self.ours_total_us / self.vela_total_us if self.vela_total_us else float("nan")

    def spearman(self) -> float:
        """Spearman's rank correlation of our and vela's cycles over matched layers with MACs."""
        import numpy as np

        rows = [r for r in self.layers if r["macs"] > 0]
        if len(rows) < 3:
            return float("nan")

        def ranks(xs: list[float]) -> np.ndarray:
            a = np.asarray(xs, dtype=float)
            order = a.argsort(kind="stable")
            r = np.empty(len(a))
            r[order] = np.arange(len(a))
            for v in np.unique(a):  # ties share their mean rank
                m = a == v
                r[m] = r[m].mean()
            return r

        x, y = ranks([r["ours"] for r in rows]), ranks([r["vela"] for r in rows])
        if x.std() == 0 or y.std() == 0:
            return float("nan")
        return float(np.corrcoef(x, y)[0, 1])


def compare(sim: Any, result: VelaResult, clock_mhz: float) -> VelaComparison:
    """Match vela's per-layer cycles to the simulated ops (by the ONNX node each TFLite op came
    from) and total both over the nodes both put on the NPU."""
    from engine.hw.ethos_u_ops import LayerMapper

    facts = sim.placement.facts
    mapper = LayerMapper(facts, "sram", "flash", "sram")
    owner: dict[str, str] = {}  # a fused activation's layer belongs to its producer
    for f in facts.order:
        if mapper.fused_into_producer(f):
            owner[f.name] = f.inputs[0].producer().name
    vela_cyc: dict[str, int] = {}
    vela_macs: dict[str, int] = {}
    # vela lowers some ops to several (Mean: a depthwise and a Mul; Softmax: about 30): only the
    # last writes the node's output tensor; the ones before it, from the same original op, are its.
    nodes: list[str | None] = [layer["node"] for layer in result.layers]
    for k in range(len(nodes) - 2, -1, -1):
        nxt = result.layers[k + 1]
        if nodes[k] is None and nodes[k + 1] and result.layers[k].get("original") == nxt.get("original"):
            nodes[k] = nodes[k + 1]
    for layer, node in zip(result.layers, nodes, strict=True):
        node = owner.get(node, node)
        if node:
            vela_cyc[node] = vela_cyc.get(node, 0) + layer["cycles"]
            vela_macs[node] = vela_macs.get(node, 0) + layer["macs"]
    vela_cpu = {owner.get(c["node"], c["node"]) for c in result.cpu_operators if c.get("node")}
    rows = []
    ours_sum = vela_sum = ours_all = 0.0
    cpu_here, npu_here = [], []
    for rec in sim.ops:
        ours_all += rec.latency_us
        if rec.node in owner and rec.cost.latency_us == 0:
            continue
        if rec.device != "npu":
            if rec.node in vela_cyc:
                cpu_here.append(rec.node)
            continue
        if rec.node in vela_cpu:
            npu_here.append(rec.node)
            continue
        ours = rec.cost.latency_us * clock_mhz
        vela = vela_cyc.get(rec.node, 0)
        rows.append({"node": rec.node, "op_type": rec.op_type, "ours": ours, "vela": vela,
                     "macs": vela_macs.get(rec.node, 0) if rec.op_type in MAC_OPS else 0})
        ours_sum += ours
        vela_sum += vela
    return VelaComparison(rows, ours_sum / clock_mhz, vela_sum / clock_mhz, result.latency_us, ours_all,
                          cpu_here, npu_here)
