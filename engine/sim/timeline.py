"""The simulator: one inference of a placed graph as a timeline of events per lane.

Lanes are ``npu``, ``cpu`` and ``dma``. Nodes run in the placement's schedule; an op starts
when its lane is free and its inputs are on its device. A tensor crossing devices is
converted on the CPU (layout NCHW<->NHWC, precision float<->int8 ...) and moved by the DMA
lane; the first op of each NPU partition pays the dispatch overhead. The result is data:
per-op records (start, latency, bound, device, reason), events per lane, transfers, a stage
breakdown in the field notes' table form (input load/decode, preprocess, layout conversion
and copies, NPU inference, CPU fallback, postprocess) and a summary. ``SimResult.to_json``
gives the document of ``npu-studio simulate --json`` (CONTRACTS.md). Stream and thermal modes
live in engine/sim/stream.py and engine/sim/thermal.py and take a SimResult.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.diagnostics import Diagnostic
from engine.errors import InputError
from engine.hw.cost_model import CostModel, OpCost, plan_residency
from engine.hw.target import HardwareTarget, resolve_target
from engine.ir.fused import FusedActivation
from engine.ir.graph import Graph, Value
from engine.place.partition import Placement, Transfer, place
from engine.place.support import GraphFacts

LANES = ("npu", "cpu", "dma")


@dataclass(frozen=True)
class HostPipeline:
    """The application around the model, run on the CPU: decode, preprocess, postprocess.

    An image-like input (rank 4 with 1, 3 or 4 channels) comes from a camera-style source
    image ``source_scale`` times larger per side than the model input. Decoding costs
    ``decode_ops_per_pixel`` and preprocessing (resize, colour conversion, normalization,
    layout) ``preprocess_ops_per_pixel`` CPU ops per source pixel; these are scalar-heavy
    codes, which the op counts absorb. Other inputs are only copied. Outputs are
    postprocessed (softmax, top-k, box decoding ...) at ``postprocess_ops_per_element``.
    """

    source_scale: float = 3.0
    decode_ops_per_pixel: float = 200.0
    preprocess_ops_per_pixel: float = 100.0
    postprocess_ops_per_element: float = 10.0
    enabled: bool = True


@dataclass(frozen=True)
class SimOptions:
    """Options of one simulation (explicit data, no globals)."""

    pins: dict[str, str] | None = None
    move_islands: bool = True
    suggest: bool = True
    host: HostPipeline = field(default_factory=HostPipeline)
    # Precision of single nodes (a mixed-precision model); None reads them from a QDQ graph's
    # Q/DQ types, and every other node computes in the target's precision.
    precisions: dict[str, str] | None = None


@dataclass
class OpRecord:
    """One op on the timeline."""

    node: str
    op_type: str
    device: str
    partition: int
    start_us: float
    cost: OpCost
    fallback_reason: str | None
    activation: FusedActivation | None = None
    provenance: list[str] | None = None
    transfer_wait_us: float = 0.0
    precision: str = ""  # what the op computes in (on the CPU: float)

    @property
    def bound(self) -> str:
        """What limits the op: its cost's bound, or "transfer" when getting its inputs across
        devices (conversion + DMA) took longer than the op itself."""
        return "transfer" if self.transfer_wait_us > self.cost.latency_us else self.cost.bound

    @property
    def latency_us(self) -> float:
        """The op's latency on its device."""
        return self.cost.latency_us

    @property
    def end_us(self) -> float:
        """When the op finishes."""
        return self.start_us + self.cost.latency_us


@dataclass
class Event:
    """Anything occupying a lane: an op, a dispatch, a conversion or a transfer."""

    lane: str
    kind: str
    name: str
    start_us: float
    end_us: float
    node: str | None = None


@dataclass
class Stage:
    """One row of the stage breakdown."""

    name: str
    us: float
    share: float
    note: str = ""


@dataclass
class TransferRecord:
    """A transfer placed on the DMA lane."""

    transfer: Transfer
    start_us: float


@dataclass
class SimResult:
    """Everything one simulation produced (data only; renderers live in the CLI and GUI)."""

    target: HardwareTarget
    graph_name: str
    placement: Placement
    ops: list[OpRecord]
    events: list[Event]
    transfers: list[TransferRecord]
    stages: list[Stage]
    latency_us: float
    end_to_end_us: float
    host_us: dict[str, float]
    diagnostics: list[Diagnostic]

    def lane_busy_us(self, lane: str, kind: str | None = None) -> float:
        """Total busy time of a lane (optionally of one event kind)."""
        return sum(e.end_us - e.start_us for e in self.events if e.lane == lane and (kind is None or e.kind == kind))

    def summary(self) -> dict[str, Any]:
        """The summary block of the JSON document."""
        npu_ops = sum(1 for o in self.ops if o.device == "npu")
        return {
            "npu_ops": npu_ops,
            "cpu_ops": len(self.ops) - npu_ops,
            "npu_us": _r(self.lane_busy_us("npu")),
            "cpu_us": _r(sum(o.latency_us for o in self.ops if o.device == "cpu")),
            "transfer_us": _r(self.lane_busy_us("dma")),
            "conversion_us": _r(self.lane_busy_us("cpu", "convert")),
            "dispatch_us": _r(self.lane_busy_us("npu", "dispatch")),
            "partitions": len(self.placement.partitions),
            "transfers": len(self.transfers),
            "end_to_end_us": _r(self.end_to_end_us),
            "macs": int(sum(o.cost.macs for o in self.ops)),
        }

    def to_json(self, events: bool = True) -> dict[str, Any]:
        """The ``simulate --json`` document (CONTRACTS.md keys plus stages, suggestions ...)."""
        ops = []
        for o in self.ops:
            c = o.cost
            rec = {"node": o.node, "op_type": o.op_type, "device": o.device, "start_us": _r(o.start_us),
                   "latency_us": _r(o.latency_us), "bound": o.bound, "fallback_reason": o.fallback_reason,
                   "precision": o.precision,
                   "partition": o.partition, "compute_us": _r(c.compute_us), "memory_us": _r(c.memory_us),
                   "overhead_us": _r(c.overhead_us), "macs": c.macs, "dram_bytes": c.dram_bytes}
            if c.folds:
                rec["folds"] = c.folds
                rec["utilization"] = round(c.utilization, 4)
            if o.activation:
                rec["activation"] = o.activation.to_json()
            if o.provenance:
                rec["provenance"] = o.provenance
            ops.append(rec)
        doc: dict[str, Any] = {
            "target": self.target.name,
            "model": self.graph_name,
            "latency_us": _r(self.latency_us),
            "ops": ops,
            "partitions": [{"index": p.index, "device": p.device, "nodes": list(p.nodes)}
                           for p in self.placement.partitions],
            "transfers": [{"from": t.transfer.src, "to": t.transfer.dst, "value": t.transfer.value,
                           "from_device": t.transfer.from_device, "to_device": t.transfer.to_device,
                           "bytes": t.transfer.bytes, "start_us": _r(t.start_us),
                           "latency_us": _r(t.transfer.latency_us), "conversion_us": _r(t.transfer.conversion_us)}
                          for t in self.transfers],
            "summary": self.summary(),
            "stages": [{"stage": s.name, "us": _r(s.us), "share": round(s.share, 4), "note": s.note}
                       for s in self.stages],
            "suggestions": [{"nodes": s.nodes, "op_types": s.op_types, "rules": s.rules, "fixes": s.fixes,
                             "saving_us": _r(s.saving_us), "message": s.message}
                            for s in self.placement.suggestions],
            "diagnostics": [d.to_json() for d in self.diagnostics],
            "target_summary": self.target.summary(),
        }
        if events:
            doc["timeline"] = [{"lane": e.lane, "kind": e.kind, "name": e.name, "node": e.node,
                                "start_us": _r(e.start_us), "end_us": _r(e.end_us)} for e in self.events]
        return doc


def _r(x: float) -> float:
    return round(float(x), 4)


# -- the timeline ----------------------------------------------------------------------------------
class _Lanes:
    def __init__(self) -> None:
        self.free = dict.fromkeys(LANES, 0.0)
        self.events: list[Event] = []

    def book(self, lane: str, kind: str, name: str, ready: float, duration: float, node: str | None = None) -> float:
        start = max(self.free[lane], ready)
        end = start + duration
        self.free[lane] = end
        self.events.append(Event(lane, kind, name, start, end, node))
        return end


def _timeline(pl: Placement, costs: dict[str, OpCost], cm: CostModel) -> tuple[list[OpRecord], _Lanes,
                                                                                  list[TransferRecord], float]:
    facts = pl.facts
    lanes = _Lanes()
    avail: dict[tuple[str, str], float] = {}
    transfers = {(t.value, t.to_device): t for t in pl.transfers}
    placed: list[TransferRecord] = []

    def conv_us(v: Value) -> float:
        return cm.conversion_us(facts.host_bytes(v), facts.npu_bytes(v)) if cm.needs_conversion(facts, v) else 0.0

    def ready_on(v: Value, dev: str) -> float:
        key = (v.name, dev)
        t = avail.get(key)
        if t is not None:
            return t
        p = v.producer()
        if p is None or p.name not in pl.device:  # graph input: in host memory
            t = 0.0
            if dev == "npu":
                c = conv_us(v)
                if c > 0:
                    t = lanes.book("cpu", "convert", f"convert {v.name} for the NPU", 0.0, c)
        else:
            src = pl.device[p.name]
            t0 = avail[(v.name, src)]
            tr = transfers.get(key)
            if tr is None:  # cannot happen for a consistent placement; keep going safely
                t = t0
            elif src == "cpu":
                t1 = lanes.book("cpu", "convert", f"convert {v.name} for the NPU", t0, tr.conversion_us) \
                    if tr.conversion_us > 0 else t0
                t = lanes.book("dma", "transfer", f"{v.name} cpu->npu", t1, tr.latency_us)
                placed.append(TransferRecord(tr, t - tr.latency_us))
            else:
                t1 = lanes.book("dma", "transfer", f"{v.name} npu->cpu", t0, tr.latency_us)
                placed.append(TransferRecord(tr, t1 - tr.latency_us))
                t = lanes.book("cpu", "convert", f"convert {v.name} from the NPU", t1, tr.conversion_us) \
                    if tr.conversion_us > 0 else t1
        avail[key] = t
        return t

    records: list[OpRecord] = []
    dispatch = pl.target.npu.dispatch_overhead_us
    started: set[int] = set()
    for f in pl.order:
        name = f.name
        dev = pl.device[name]
        part = pl.partition_of[name]
        ready = wait = 0.0
        for v in f.inputs:
            t_in = ready_on(v, dev)
            ready = max(ready, t_in)
            p = v.producer()
            if p is not None and p.name in pl.device and pl.device[p.name] != dev:
                wait = max(wait, t_in - avail[(v.name, pl.device[p.name])])
        if dev == "npu" and part not in started:
            started.add(part)
            if dispatch > 0:
                ready = lanes.book("npu", "dispatch", f"dispatch partition {part}", ready, dispatch)
        cost = costs[name]
        end = lanes.book(dev, "op", name, ready, cost.latency_us, name)
        for v in f.outputs:
            avail[(v.name, dev)] = end
        reason = None
        if dev == "cpu":
            reason = pl.reason.get(name) or "placed on the CPU"
        meta = f.node.meta
        prov = meta.get("provenance")
        records.append(OpRecord(name, f.node.op_type, dev, part, end - cost.latency_us, cost, reason,
                                f.node.activation, list(prov) if prov else None, wait,
                                f.precision if dev == "npu" else "fp32"))
    latency = max((e.end_us for e in lanes.events), default=0.0)
    for v in facts.graph.outputs:
        p = v.producer()
        if p is not None and pl.device.get(p.name) == "npu":
            c = conv_us(v)
            t0 = avail.get((v.name, "npu"), 0.0)
            end = lanes.book("cpu", "convert", f"convert output {v.name} from the NPU", t0, c) if c > 0 else t0
            latency = max(latency, end)
    return records, lanes, placed, latency


# -- host stages ---------------------------------------------------------------------------------
def _is_image(v: Value) -> bool:
    s = v.type.shape
    return s is not None and len(s) == 4 and all(isinstance(d, int) for d in s) and s[1] in (1, 3, 4)


def _host_stages(graph: Graph, facts: GraphFacts, target: HardwareTarget, host: HostPipeline) -> dict[str, Any]:
    flops = target.cpu.peak_gflops * 1e3
    mem = target.cpu.memory_us
    decode = pre = post = 0.0
    dnote, pnote, onote = [], [], []
    if host.enabled:
        for v in graph.inputs:
            if v.name in graph.initializers:
                continue
            raw = facts.host_bytes(v)
            if _is_image(v):
                shp = v.type.shape
                src = shp[0] * shp[2] * shp[3] * host.source_scale ** 2  # type: ignore[index,operator]
                decode += max(src * host.decode_ops_per_pixel / flops, mem(src * shp[1]))  # type: ignore[index]
                pre += max(src * host.preprocess_ops_per_pixel / flops, mem(src * shp[1] + raw))  # type: ignore[index]
                side = f"{int(shp[2] * host.source_scale)}x{int(shp[3] * host.source_scale)}"  # type: ignore[index,operator]
                dnote.append(f"decode a {side} image")
                pnote.append(f"resize {side} to {shp[2]}x{shp[3]} + normalize")  # type: ignore[index]
            else:
                decode += mem(raw)
                dnote.append(f"load {v.name}")
        for v in graph.outputs:
            n = v.type.numel() or 0
            post += max(n * host.postprocess_ops_per_element / flops, mem(facts.host_bytes(v)))
            onote.append(f"{v.name}: {n} values")
    return {"decode": decode, "preprocess": pre, "postprocess": post,
            "decode_note": "; ".join(dnote), "preprocess_note": "; ".join(pnote) or "none",
            "postprocess_note": "; ".join(onote)}


def _stages(records: list[OpRecord], lanes: _Lanes, host: dict[str, Any], pl: Placement) -> list[Stage]:
    conv = sum(e.end_us - e.start_us for e in lanes.events if e.kind in ("convert", "transfer"))
    npu = sum(e.end_us - e.start_us for e in lanes.events if e.lane == "npu")
    cpu = sum(o.latency_us for o in records if o.device == "cpu")
    n_cpu = sum(1 for o in records if o.device == "cpu")
    slow = sorted((o for o in records if o.device == "npu"), key=lambda o: -o.latency_us)[:2]
    rows = [
        ("input load / decode", host["decode"], host["decode_note"]),
        ("preprocess", host["preprocess"], host["preprocess_note"]),
        ("layout conversion / copies", conv, f"{len(pl.transfers)} transfers, NPU layout {pl.target.npu.layout}"),
        ("NPU inference", npu, f"{len(records) - n_cpu} ops in {sum(1 for p in pl.partitions if p.device == 'npu')} "
                               "partitions" + (f"; slowest {', '.join(o.node for o in slow)}" if slow else "")),
        ("CPU fallback", cpu, f"{n_cpu} ops"),
        ("postprocess", host["postprocess"], host["postprocess_note"]),
    ]
    total = sum(r[1] for r in rows) or 1.0
    return [Stage(n, us, us / total, note) for n, us, note in rows]


# -- facade --------------------------------------------------------------------------------------
def require_static_inputs(graph: Graph) -> None:
    """Raise InputError naming the first graph input dimension that is not a fixed size."""
    where = graph.source_path or graph.name
    for v in graph.inputs:
        if v.name in graph.initializers or v.type.shape is None:
            continue
        for k, d in enumerate(v.type.shape):
            if not isinstance(d, int):
                shown = "unknown" if d is None else repr(d)
                dims = ",".join(str(x) if isinstance(x, int) else "D" + str(i) for i, x in enumerate(v.type.shape))
                raise InputError(f"{where}: input {v.name!r} dimension {k} is dynamic ({shown}); simulation "
                                 f"needs static shapes: fix it with --shape {v.name}={dims}")


def simulate(graph: Graph, target: HardwareTarget | str, options: SimOptions | None = None,
             placement: Placement | None = None) -> SimResult:
    """Place the graph on the target and simulate one inference; returns a SimResult.

    ``target`` may be a HardwareTarget, a bundled target name or a YAML path. Pass a ready
    ``placement`` to simulate it as it is (what-if studies, the GUI's manual edits).
    """
    options = options or SimOptions()
    tgt = resolve_target(target)
    require_static_inputs(graph)
    return _simulate(graph, tgt, options, placement)


def _simulate(graph: Graph, tgt: HardwareTarget, options: SimOptions, placement: Placement | None) -> SimResult:
    if placement is None:
        from engine.quant.qdq import read_precisions

        precisions = options.precisions if options.precisions is not None else read_precisions(graph)
        placement = place(graph, tgt, pins=options.pins, move_islands=options.move_islands,
                          suggest=options.suggest, precisions=precisions)
    pl = placement
    cm = CostModel(tgt)
    facts = pl.facts
    resident = plan_residency(pl.order, pl.device, pl.partition_of, facts,
                              tgt.npu.sram_bytes * tgt.npu.residency_fraction)
    costs: dict[str, OpCost] = {}
    shared: dict = {}  # equal signature and equal residency pattern: equal cost
    for f in pl.order:
        if pl.device[f.name] == "cpu":
            costs[f.name] = pl.cpu_estimate.get(f.name) or cm.cpu_cost(f)
            continue
        pattern = (tuple(v.name in resident for v in f.inputs), tuple(v.name in resident for v in f.outputs))
        if f.name in pl.npu_estimate and not any(pattern[0]) and not any(pattern[1]):
            costs[f.name] = pl.npu_estimate[f.name]  # nothing of it stays on chip: the estimate holds
            continue
        key = (f.key, pattern) if f.key is not None else None
        cost = shared.get(key) if key is not None else None
        if cost is None:
            cost = cm.npu_cost(f, facts, resident)
            if key is not None:
                shared[key] = cost
        costs[f.name] = cost
    records, lanes, transfers, latency = _timeline(pl, costs, cm)
    host = _host_stages(graph, facts, tgt, options.host)
    stages = _stages(records, lanes, host, pl)
    e2e = host["decode"] + host["preprocess"] + latency + host["postprocess"]
    diags = list(graph.diagnostics) + pl.diagnostics
    return SimResult(tgt, graph.name, pl, records, lanes.events, transfers, stages, latency, e2e,
                     {k: v for k, v in host.items() if isinstance(v, float)}, diags)
