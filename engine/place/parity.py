"""Placement parity with Arm's vela: which nodes we place on the CPU that vela runs on the NPU,
and the other way round.

vela compiles the exported model.tflite and says, per TFLite operator, whether it runs on the
NPU (its per-layer CSV) or the CPU (its log, with the constraint that failed). Each TFLite
operator remembers the ONNX node it was lowered from, so both verdicts meet on the nodes of the
compiled graph. Only nodes our simulation placed take part (QUANTIZE ops of the QDQ model have
no node in the float graph).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Parity:
    """Our placement beside vela's, per node of the compiled graph."""

    ours_npu: int
    ours_cpu: int
    vela_npu: int
    vela_cpu: int
    ours_cpu_vela_npu: list[dict[str, Any]] = field(default_factory=list)
    vela_cpu_ours_npu: list[dict[str, Any]] = field(default_factory=list)
    vela_cpu_ops: list[dict[str, Any]] = field(default_factory=list)

    @property
    def agrees(self) -> bool:
        """True when no node is on our CPU that vela runs on the NPU, nor the other way round."""
        return not self.ours_cpu_vela_npu and not self.vela_cpu_ours_npu

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready summary (counts, both mismatch lists, vela's CPU operators with reasons)."""
        return {"ours": {"npu": self.ours_npu, "cpu": self.ours_cpu}, "vela": {"npu": self.vela_npu,
                "cpu": self.vela_cpu}, "ours_cpu_vela_npu": self.ours_cpu_vela_npu,
                "vela_cpu_ours_npu": self.vela_cpu_ours_npu, "vela_cpu_ops": self.vela_cpu_ops}


def compare(sim: Any, vela: Any) -> Parity:
    """Compare a SimResult (our placement) with a VelaResult of the same compile."""
    ours = {o.node: o for o in sim.ops}
    vela_npu = {layer["node"] for layer in vela.layers if layer.get("node") and layer.get("target", "NPU") == "NPU"}
    vela_cpu: dict[str, dict[str, Any]] = {}
    for c in vela.cpu_operators:
        if c.get("node"):
            vela_cpu.setdefault(c["node"], c)
    p = Parity(sum(1 for o in sim.ops if o.device == "npu"), sum(1 for o in sim.ops if o.device == "cpu"),
               vela.npu_ops, vela.cpu_ops)
    for name, o in ours.items():
        if o.device == "cpu" and name in vela_npu and name not in vela_cpu:
            p.ours_cpu_vela_npu.append({"node": name, "op_type": o.op_type, "our_reason": o.fallback_reason})
        if o.device == "npu" and name in vela_cpu:
            c = vela_cpu[name]
            p.vela_cpu_ours_npu.append({"node": name, "op_type": o.op_type, "tflite_op": c["op"],
                                        "vela_reason": c["reason"]})
    for c in vela.cpu_operators:
        o = ours.get(c.get("node") or "")
        p.vela_cpu_ops.append({"tflite_op": c["op"], "node": c.get("node"), "vela_reason": c["reason"],
                               "ours": None if o is None else o.device,
                               "our_reason": None if o is None else o.fallback_reason})
    return p
