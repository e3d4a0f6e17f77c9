"""The cost model: turns each op's hardware-independent work into time on a target.

NPU, GEMM-like ops (Conv, ConvTranspose, MatMul, Gemm and their integer forms) use the
SCALE-Sim closed form for a systolic array of R rows and C columns. For output-stationary
dataflow the GEMM (M x K) @ (K x N) maps M onto rows and N onto columns and streams K:

    folds  = ceil(M / R) * ceil(N / C)
    cycles = folds * (2R + C + K - 2)        # per fold: R + C - 2 fill/skew, K MACs, R drain

Weight-stationary maps (K, N) and streams M; input-stationary maps (K, M) and streams N; the
formula is the same with those roles. Lower precisions than the array's native one divide
the rate (``macs_per_cycle / (R * C)``). Grouped and depthwise convolutions place several
groups side by side on the columns. Other ops run on the vector unit at
``vector_ops_per_cycle``.

Memory time is DRAM traffic over bandwidth plus one access latency. Weights are read once
(over their own port when the target has one, e.g. flash). A GEMM whose operands do not fit
the SRAM tile budget re-fetches activations once per weight chunk. Intermediates that the
placement keeps on chip (a fused chain whose tensor fits the residency budget) cost no
traffic. A fused activation (``node.activation``) is a free epilogue.

Latency = max(compute, memory) + per-op overhead; ``bound`` names the largest term (vela's
roofline). A target with an ``ethos_u`` section (the Ethos-U targets) costs its NPU ops with
``engine.hw.ethos_u`` instead: vela's performance estimate (output blocks in SHRAM, per-op
output cycles, burst-scaled memory access per memory area), from the tables in its YAML. CPU ops use the same roofline with the CPU's peak GFLOPS and bandwidth. Layout or
precision conversions at device boundaries cost the bytes they read and write.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from engine.hw import ethos_u
from engine.hw.ethos_u_ops import LayerMapper
from engine.hw.target import HardwareTarget
from engine.ir.graph import Node
from engine.place.support import GraphFacts, NodeFacts
from nodes import registry
from nodes.spec import Gemm, NodeContext

VIEW_OPS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Shape", "Size"}
"""Ops that only relabel a tensor or read its metadata: no data moves on either device."""
ABSORBED_ON_NPU = {"QuantizeLinear", "DequantizeLinear"}
"""QDQ ops the NPU compiler folds into its integer kernels."""
CPU_FLOPS_PER_ELEMENT = {
    # transcendentals: a vectorized libm needs about 1 to 1.5 cycles per element
    "Exp": 32, "Log": 32, "Erf": 48, "Gelu": 64, "Tanh": 40, "Sigmoid": 32, "Softmax": 48,
    "LogSoftmax": 48, "Sin": 40, "Cos": 40, "Softplus": 48, "Elu": 32, "Selu": 32, "Mish": 80,
    "Swish": 32, "HardSwish": 8, "HardSigmoid": 4,
    # division, roots and powers: long-latency units
    "Div": 8, "Reciprocal": 8, "Sqrt": 8, "Pow": 16,
    # normalizations: several passes and per-channel parameters
    "BatchNormalization": 8, "LayerNormalization": 24, "InstanceNormalization": 24,
    # strided copies: index arithmetic and gathers, about one cycle per element
    "Transpose": 32, "Slice": 32, "Gather": 32, "GatherElements": 32, "GatherND": 32, "Concat": 16,
    "Split": 16, "Pad": 16, "Tile": 16, "Expand": 16, "DepthToSpace": 32, "SpaceToDepth": 32,
    "Resize": 48,
}
"""CPU cost of one element of an op in peak-flop equivalents (about 32 per cycle on a core with
two 8-wide FMA units), for ops whose elements cost more than one streaming flop: vectorized
transcendentals, long-latency arithmetic and strided copies. Other element ops count one.
On the NPU, transcendentals come from lookup tables and copies from the DMA engine."""


@dataclass(frozen=True)
class GemmShape:
    """One GEMM (M x K) @ (K x N), executed ``repeats`` times."""

    m: int
    k: int
    n: int
    repeats: int = 1


@dataclass(frozen=True)
class OpCost:
    """Time of one op on one device and which term dominated."""

    device: str
    compute_us: float
    memory_us: float
    overhead_us: float
    bound: str
    macs: int = 0
    dram_bytes: int = 0
    cycles: int = 0
    folds: int = 0
    utilization: float = 0.0

    @property
    def latency_us(self) -> float:
        """max(compute, memory) + overhead."""
        return max(self.compute_us, self.memory_us) + self.overhead_us


def bound_of(compute: float, memory: float, overhead: float) -> str:
    """Which of the three terms is largest (ties favour compute, then memory)."""
    if compute >= memory and compute >= overhead:
        return "compute"
    if memory >= overhead:
        return "memory"
    return "overhead"


def fold_cycles(m: int, k: int, n: int, rows: int, cols: int, dataflow: str = "os") -> tuple[int, int]:
    """(cycles, folds) of one GEMM on a rows x cols systolic array (SCALE-Sim closed form)."""
    if dataflow == "os":
        sr, sc, t = m, n, k
    elif dataflow == "ws":
        sr, sc, t = k, n, m
    elif dataflow == "is":
        sr, sc, t = k, m, n
    else:
        raise ValueError(f"unknown dataflow {dataflow!r} (os, ws or is)")
    if min(m, k, n) <= 0:
        return 0, 0
    folds = math.ceil(sr / rows) * math.ceil(sc / cols)
    return folds * (2 * rows + cols + t - 2), folds


def _on_columns(g: Gemm, cols: int) -> GemmShape:
    """An op's matrix product on a MAC array: grouped GEMMs sit side by side on the columns
    (as many groups as fit), the rest repeat; batches repeat."""
    if g.groups <= 1:
        return GemmShape(g.m, g.k, g.n, g.batch)
    side = min(g.groups, max(1, cols // max(1, g.n)))
    return GemmShape(g.m, g.k, g.n * side, math.ceil(g.groups / side) * g.batch)


def gemm_shapes(node: Node, ctx: NodeContext, cols: int) -> list[GemmShape] | None:
    """The GEMMs a node lowers to on a MAC array (its OpSpec's ``gemm``), or None when it is not
    GEMM-like or not static."""
    spec = registry.get(node.op_type, node.domain)
    gemms = spec.gemm(ctx) if spec is not None else None
    return [_on_columns(g, cols) for g in gemms] if gemms else None


class CostModel:
    """Per-op costs of a graph on a target; one instance per (graph facts, target)."""

    def __init__(self, target: HardwareTarget) -> None:
        self.target = target
        npu = target.npu
        self._act_bw = npu.dram_bandwidth_gbps * 1e3  # bytes per us
        self._w_bw = (npu.weight_bandwidth_gbps or npu.dram_bandwidth_gbps) * 1e3
        self._split_port = npu.weight_bandwidth_gbps is not None
        self._tile_budget = max(1.0, npu.sram_bytes * (1.0 - npu.residency_fraction)) if npu.residency_fraction < 1 \
            else float(npu.sram_bytes)
        self._cpu_flops = target.cpu.peak_gflops * 1e3  # flops per us
        self._mapper: tuple[GraphFacts, LayerMapper] | None = None
        self._cycles: tuple[GraphFacts, dict[str, tuple[float, float, int, float]], dict[str, int]] | None = None
        self._arch = _effective_arch(target)

    # -- NPU ---------------------------------------------------------------------------------
    def npu_compute_cycles(self, f: NodeFacts) -> tuple[int, int, float]:
        """(cycles, folds, utilization) of a node on the NPU at peak clock."""
        npu = self.target.npu
        shapes = gemm_shapes(f.node, f.ctx, npu.cols) if f.ctx is not None else None
        if shapes:
            cycles = folds = 0
            for s in shapes:
                c, fo = fold_cycles(s.m, s.k, s.n, npu.rows, npu.cols, npu.dataflow)
                cycles += c * s.repeats
                folds += fo * s.repeats
            macs_per_cycle = npu.precisions.get(f.precision, npu.macs_per_cycle) if f.precision else npu.macs_per_cycle
            cycles = math.ceil(cycles / (macs_per_cycle / (npu.rows * npu.cols)))
            util = f.work.macs / (cycles * macs_per_cycle) if cycles else 0.0
            return cycles, folds, min(1.0, util)
        ops = f.work.macs + f.work.elem_ops
        return math.ceil(ops / npu.vector_ops_per_cycle), 0, 0.0

    def npu_cost(self, f: NodeFacts, facts: GraphFacts, resident: set[str] | frozenset[str] = frozenset()) -> OpCost:
        """Cost of a node on the NPU; values named in ``resident`` stay on chip (no DRAM traffic)."""
        npu = self.target.npu
        op = f.node.op_type
        if op in ABSORBED_ON_NPU or f.compile_time:
            return OpCost("npu", 0.0, 0.0, 0.0, "overhead")
        overhead = npu.op_overhead_us
        if op in VIEW_OPS:
            return OpCost("npu", 0.0, 0.0, overhead, "overhead")
        if self.target.ethos_u is not None:
            return self.ethos_u_cost(f, facts)
        cycles, folds, util = self.npu_compute_cycles(f)
        compute = cycles / npu.clock_mhz
        a_all = sum(facts.npu_bytes(v) for v in f.inputs)
        act_in = sum(facts.npu_bytes(v) for v in f.inputs if v.name not in resident)
        out = sum(facts.npu_bytes(v) for v in f.outputs if v.name not in resident)
        weights = sum(facts.npu_bytes(v) for v in f.weight_values)
        refetch = 0
        if folds:  # GEMM: SRAM tiling
            b_op = weights if weights else (facts.npu_bytes(f.inputs[1]) if len(f.inputs) > 1 else 0)
            a_op = a_all - (0 if weights else b_op)
            c_op = sum(facts.npu_bytes(v) for v in f.outputs)
            budget = self._tile_budget
            if a_op + b_op + c_op > budget and b_op > budget / 2 and a_op > budget / 2:
                chunks = math.ceil(b_op / (budget / 2))
                refetch = a_op * (chunks - 1)
        act_bytes = act_in + out + refetch
        act_us = act_bytes / self._act_bw
        w_us = weights / self._w_bw
        memory = (max(act_us, w_us) if self._split_port else act_us + w_us)
        if act_bytes + weights:
            memory += npu.dram_latency_ns / 1e3
        return OpCost("npu", compute, memory, overhead, bound_of(compute, memory, overhead), int(f.work.macs),
                      int(act_bytes + weights), cycles, folds, util)

    def ethos_u_layers(self, f: NodeFacts, facts: GraphFacts) -> list[ethos_u.LayerQuery]:
        """The Ethos-U operations vela makes of a node (engine.hw.ethos_u_ops)."""
        arch = self._arch
        if self._mapper is None or self._mapper[0] is not facts:
            fm = arch.memory(arch.feature_maps)
            size = fm.size_kib * 1024 if fm.size_kib else None
            mapper = LayerMapper(facts, arch.feature_maps, arch.constants, arch.graph_io, size, arch.spill)
            small = mapper.smallest_layer() if size is not None and arch.spill is None else None
            if small is not None and small[1] > size:
                from engine.errors import InputError

                raise InputError(f"{self.target.source or self.target.name}: field memory.areas.{fm.name}.size_kib: "
                                 f"{fm.size_kib:g} KiB cannot hold the smallest layer ({small[0]!r} reads and "
                                 f"writes {small[1] / 1024:.1f} KiB of feature maps)")
            self._mapper = (facts, mapper)
        return self._mapper[1].queries(f)

    def _ethos_u_cycles(self, f: NodeFacts, facts: GraphFacts) -> tuple[float, float, int, float]:
        """(NPU cycles, total cycles, MACs, last operation's total) of a node's Ethos-U operations.
        An operation with weights may start their DMA under the operation before it (``slack``,
        equation 5 of engine.hw.ethos_u), so such a node needs the previous costed node first:
        the chain back to a node without weights (or one already known) is estimated in
        ``facts.order`` (memoized per graph facts)."""
        if self._cycles is None or self._cycles[0] is not facts:
            self._cycles = (facts, {}, {g.name: i for i, g in enumerate(facts.order)})
        _, known, pos = self._cycles
        if f.name in known:
            return known[f.name]

        def previous(g: NodeFacts) -> NodeFacts | None:
            i = pos.get(g.name, 0) - 1
            while i >= 0 and not self.ethos_u_layers(facts.order[i], facts):
                i -= 1
            return facts.order[i] if i >= 0 else None

        def weighted(g: NodeFacts) -> bool:
            return any(q.weight_bytes for q in self.ethos_u_layers(g, facts))

        chain, g = [f], f
        while weighted(g):
            p = previous(g)
            if p is None or p.name in known:
                break
            chain.append(p)
            g = p
        for g in reversed(chain):
            p = previous(g) if weighted(g) else None
            known[g.name] = self._node_cycles(g, facts, known[p.name][3] if p is not None else 0.0)
        return known[f.name]

    def _node_cycles(self, f: NodeFacts, facts: GraphFacts, slack: float) -> tuple[float, float, int, float]:
        """(NPU cycles, total cycles, MACs, the last operation's total) of one node."""
        compute = total = last = 0.0
        macs = 0
        for q in self.ethos_u_layers(f, facts):
            try:
                c = ethos_u.estimate(self._arch, q, slack)
            except ValueError as exc:
                from engine.errors import InputError

                raise InputError(f"{self.target.source or self.target.name}: field npu.sram_kib: "
                                 f"the SHRAM cannot hold node {f.name!r} ({exc})") from None
            compute += c.npu
            total += c.total
            macs += c.macs
            slack = last = c.total
        return compute, total, macs, last

    def ethos_u_cost(self, f: NodeFacts, facts: GraphFacts) -> OpCost:
        """Cost of a node on an Ethos-U: the sum over its operations of vela's estimate,
        max(NPU cycles, each memory's access cycles), at the NPU clock."""
        arch = self._arch
        npu = self.target.npu
        nbytes = 0
        compute, total, macs = self._ethos_u_cycles(f, facts)[:3]
        compute_us = compute / npu.clock_mhz
        total_us = total / npu.clock_mhz
        memory_us = total_us if total > compute else 0.0
        util = macs / (total * arch.macs * arch.cores) if total else 0.0
        for v in (*f.inputs, *f.outputs, *f.weight_values):
            nbytes += facts.npu_bytes(v)
        return OpCost("npu", compute_us, memory_us, npu.op_overhead_us,
                      bound_of(compute_us, memory_us, npu.op_overhead_us), int(f.work.macs), int(nbytes),
                      round(total), 0, min(1.0, util))

    # -- CPU ---------------------------------------------------------------------------------
    def cpu_cost(self, f: NodeFacts, weights_cached: bool = True) -> OpCost:
        """Cost of a node on the CPU (roofline on peak GFLOPS and memory bandwidth).

        Activations were just written by the previous op and stream through the cache; weights
        do too when the model's weights fit the cache (``weights_cached``), otherwise they come
        from DRAM on every inference.
        """
        overhead = self.target.cpu.op_overhead_us
        if f.compile_time:
            return OpCost("cpu", 0.0, 0.0, 0.0, "overhead")
        if f.node.op_type in VIEW_OPS:
            return OpCost("cpu", 0.0, 0.0, overhead, "overhead")
        w = f.work
        per_elem = CPU_FLOPS_PER_ELEMENT.get(f.node.op_type, 1)
        compute = (2 * w.macs + per_elem * w.elem_ops) / self._cpu_flops
        nbytes = w.bytes_read + w.bytes_written
        cpu = self.target.cpu
        if weights_cached or not w.weight_bytes:
            memory = cpu.memory_us(nbytes)
        else:
            memory = cpu.memory_us(nbytes - w.weight_bytes) + w.weight_bytes / (cpu.memory_bandwidth_gbps * 1e3)
        return OpCost("cpu", compute, memory, overhead, bound_of(compute, memory, overhead), int(w.macs), int(nbytes))

    # -- boundaries --------------------------------------------------------------------------
    def transfer_us(self, nbytes: int) -> float:
        """One CPU<->NPU transfer of ``nbytes``."""
        return self.target.transfer.latency_us(nbytes)

    def conversion_us(self, host_bytes: int, npu_bytes: int) -> float:
        """Layout/precision conversion on the CPU: reads one form, writes the other."""
        return self.target.cpu.memory_us(host_bytes + npu_bytes)

    def needs_conversion(self, facts: GraphFacts, v) -> bool:
        """True when a tensor crossing CPU<->NPU changes layout (4-D, NHWC NPU) or element size."""
        if facts.npu_bytes(v) != facts.host_bytes(v):
            return True
        return self.target.npu.layout == "NHWC" and v.type.rank == 4


def _effective_arch(target: HardwareTarget) -> ethos_u.EthosUArch | None:
    """The target's Ethos-U with its memories' bytes per cycle as the NPU fields say: the
    feature-map memory at ``npu.dram_bandwidth_gbps``, the constants' memory at
    ``npu.weight_bandwidth_gbps`` (bytes per cycle = GB/s * 1000 / clock_mhz), so what-if edits
    of those fields (sweeps, the editor's sliders) reach the estimate; ``memory.areas`` keeps
    vela.ini's bursts and latencies (the bundled files give both the same bandwidth, which
    tests/engine/test_hw_ethos_u.py checks)."""
    import dataclasses

    arch = target.ethos_u
    if arch is None:
        return None
    npu = target.npu
    mems = dict(arch.memories)
    per_cycle = {arch.feature_maps: npu.dram_bandwidth_gbps * 1e3 / npu.clock_mhz}
    if npu.weight_bandwidth_gbps is not None and arch.constants != arch.feature_maps:
        per_cycle[arch.constants] = npu.weight_bandwidth_gbps * 1e3 / npu.clock_mhz
    for name, bpc in per_cycle.items():
        mems[name] = dataclasses.replace(mems[name], bytes_per_cycle=bpc)
    return dataclasses.replace(arch, memories=mems)


def plan_residency(order: list[NodeFacts], device: dict[str, str], partition: dict[str, int],
                   facts: GraphFacts, budget: float) -> set[str]:
    """Values kept in on-chip SRAM between NPU ops (greedy linear scan over the schedule).

    A value stays on chip when its producer and all its consumers run in the same NPU
    partition, it is not a graph output, and it fits the budget still free at the time it is
    produced; it leaves after its last consumer.
    """
    pos = {f.name: i for i, f in enumerate(order)}
    resident: set[str] = set()
    live: list[tuple[int, int, str]] = []  # (last use position, bytes, name)
    used = 0.0
    import heapq

    for i, f in enumerate(order):
        while live and live[0][0] < i:
            _, b, _ = heapq.heappop(live)
            used -= b
        if device.get(f.name) != "npu":
            continue
        part = partition.get(f.name)
        for v in f.outputs:
            if v.name in facts.output_names:
                continue
            cons = facts.consumers(v)
            if not cons or any(device.get(c.name) != "npu" or partition.get(c.name) != part for c in cons):
                continue
            b = facts.npu_bytes(v)
            if used + b > budget:
                continue
            resident.add(v.name)
            used += b
            heapq.heappush(live, (max(pos[c.name] for c in cons), b, v.name))
    return resident
