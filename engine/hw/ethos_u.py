"""Cycles of one Ethos-U layer, with the structure of vela's performance estimate.

Arm's vela (``ethosu/vela/npu_performance.py``; in vela 5 its C++ core regor,
``ethos_u55_performance.cpp`` and ``ethos_u55.cpp``, which U65 shares) estimates each NPU
operation as the largest of its compute cycles and the cycles each memory needs for the bytes
the operation moves:

    total = max(npu, sram_access, dram_access, flash_access)                        (1)

**Blocks.** The NPU computes an output feature map (OFM, NHWC) in blocks. The block is the one
of the candidate shapes (multiples of the OFM micro-block, at most 64x32x128 W x H x C) whose
IFM block, double-buffered, and accumulators, double-buffered, fit the shared buffer (SHRAM:
``shram_banks`` banks of 1 KiB, each area rounded up to its bank granule) and which reads the
fewest IFM and weight elements per OFM element (vela 5.2 counts a FullyConnected's weights too;
an elementwise op takes the fewest blocks, ties keeping the shallower block found first):

    ifm_block_h = (ofm_block_h - 1) * stride_y + min(dilated_kernel_h, 8)          (2)
    cost = (ifm_block_wh * C_in * n_blocks_wh [* n_blocks_c] + weights_fetched) / ofm_elements
           * padded_ofm_volume / ofm_volume

(the last factor is ours: vela 5's C++ core picks blocks that tile the OFM with little padding,
which the legacy search's fetch cost alone does not; with it our per-layer cycles track vela's
on 14x14 and 7x7 maps, where the fetch-optimal block wastes a quarter of the MACs).

**Compute.** A block of ``u`` micro-blocks (``ofm_ublock`` W x H x C: 2x1x8 on a U55-128, 2x2x8
on the -256 configs) takes, per kernel element (per 4 for depthwise, per 4 and per 8 IFM
channels for the part-kernel method vela picks for shallow IFMs):

    conv:       max(32 * ublock_c / 8, 4 * u_xy) * kernel_elems * u_z  [* ceil(C_in / ifm_block_c)]
    depthwise:  max(32 * ublock_c / 8, 4 * u_xy) * ceil(kernel_elems / 4) * u_z   (3)
    pooling:    max(4, kernel_elems) * u_xy * u_z * ifm_bits / 2   (vela 5.2's C++ core; its legacy
                                                  core had no ifm_bits / 2 factor)

plus a pipeline delay when a block is a single micro-block. The output stage costs
``output_cycles_per_elem[op]`` (or the activation's, whichever is larger) per OFM element of the
block clipped to the OFM; a block's command overhead is a quarter of (IFM block + OFM block memory latency and
transfer + both stages). Compute and output overlap across blocks:

    npu = max(dpu_blk, out_blk) * n_blocks + min(dpu_blk, out_blk)                   (4)

Elementwise ops have no DPU stage: ``npu = cycles_per_elem * ofm_elements``, where
cycles_per_elem is at least a quarter of one block's memory-latency-bound command.

**Memory.** Each tensor's bytes are scaled by its burst efficiency, ``burst_length /
min(burst_length, contiguous_bytes)``, where contiguous_bytes is what one block access reads
or writes in a row (NHWC: block depth; vela's brick format NHCWB16 between NPU ops: 16 channels
times the block width; the whole block row when the tensor is exactly as deep), and divided by the bytes per cycle of the memory it lives in (AXI port
width x clock scale: SRAM 8 B/cycle, off-chip flash 1 B/cycle on the U55 high-end embedded
system). The IFM is read once per OFM block and sub-kernel, weights once per OFM block in XY,
biases and scales once (vela's ``measure_element_access``). Weights and constant tensors live
where the memory mode puts constants (off-chip flash for Shared_Sram); feature maps in the
arena (SRAM). A LUT activation's table takes SHRAM banks; vela 5.2 counts no cycles for its DMA.

**Weight buffering.** Weights read in place cost their memory once per OFM block. vela's
scheduler may instead DMA them into SRAM first, in OFM-depth slices and double-buffered, so
that only the first slice delays compute, and it starts that first slice during the previous
operation (regor's ProposeWeightBuffering pre-buffers as much as the previous operation's cycles,
its slack, cover); the estimate takes whichever of the two is faster:

    pre = min(transfer(encoded weights), slack)
    npu_buffered = max(transfer(encoded weights) - pre, npu + max(0, transfer(first slice) - pre))   (5)

**Compound operations** (regor's, no single NPU block): a MatMul of two feature maps is a Mul
and a ReduceSum per output column (equation 6, ``_matmul``), a Transpose costs its memory
traffic (equation 7, ``_transpose``).

The micro-architecture numbers (MACs, micro-blocks, SHRAM banks and granules, output cycles
per element per op kind) are data in the target YAML's ``ethos_u`` section, the memory system
in its ``memory`` section; this module holds only the maths.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

BLOCK_TYPES = ("conv", "depthwise", "vector", "pooling", "reduce_sum", "elementwise", "matmul", "transpose")
"""vela's NPU block types: ConvolutionMxN, ConvolutionDepthWise, VectorProduct (fully connected),
Pooling, ReduceSum and ElementWise, and the two compound operations of its C++ core (regor): a
MatMul of two feature maps (``ifm`` A as 1 x B x M x K, ``ifm2`` the other operand transposed,
1 x B x N x K) and a Transpose."""
OUTPUT_KINDS = ("ew_unary_32", "ew_binary_32", "mul_32", "mul", "add_simple", "add", "maxpool", "other")
"""The rows of ``output_cycles_per_elem``, in vela's order."""
ACTIVATION_KINDS = ("lut", "relu", "none")
"""The rows of ``activation_cycles_per_elem``, in vela's order."""
SHRAM_ELEMENTS = ("ifm8", "ifm16", "ifm8_elementwise", "ifm16_elementwise", "ifm32", "acc16", "acc32", "acc40")
"""The entries of ``shram_granules``, in vela's order."""
SHRAM_BANK_BYTES = 1024
SUBKERNEL_MAX = (8, 8)  # (height, width)
OFM_SPLIT_DEPTH = 16
BIAS_BYTES = 10  # an encoded scale and bias per output channel


def _up(a: float, b: int) -> int:
    """a rounded up to a multiple of b."""
    return int(-(-a // b) * b)


def _div(a: float, b: int) -> int:
    """ceil(a / b)."""
    return int(-(-a // b))


@dataclass(frozen=True)
class MemoryArea:
    """One memory on an AXI port: bytes per NPU cycle, burst length and latencies in NPU cycles."""

    name: str
    bytes_per_cycle: float
    burst_bytes: int
    read_latency: int
    write_latency: int
    size_kib: float | None = None


@dataclass(frozen=True)
class EthosUArch:
    """One accelerator configuration and its memory system (what vela reads from its tables and
    from vela.ini)."""

    macs: int
    cores: int
    ofm_ublock: tuple[int, int, int]  # width, height, depth
    ifm_ublock: tuple[int, int, int]
    shram_banks: int
    shram_granules: tuple[int, ...]
    output_cycles_per_elem: tuple[float, ...]
    activation_cycles_per_elem: tuple[float, ...]
    memories: dict[str, MemoryArea] = field(default_factory=dict)
    feature_maps: str = "sram"
    constants: str = "flash"
    graph_io: str = "sram"
    spill: str | None = None
    scratch: str = "sram"
    always_buffer_weights: bool = False
    weight_compression: float = 1.0
    lut_pass_cycles_per_elem: float | None = None
    ofm_block_max: tuple[int, int, int] = (64, 32, 128)
    reserved_output_banks: int = 2

    @property
    def reserved_end_banks(self) -> int:
        """Banks at the end of SHRAM that vela keeps free on configs with more than 16."""
        return 2 if self.shram_banks > 16 else 0

    def granule(self, element: str) -> int:
        """The bank granule of one SHRAM element kind."""
        return self.shram_granules[SHRAM_ELEMENTS.index(element)]

    def memory(self, area: str) -> MemoryArea:
        """A memory area by name (sram, flash, dram)."""
        return self.memories[area]

    def smallest_block_banks(self) -> int:
        """SHRAM banks the smallest layer needs: a 1x1-kernel convolution of one OFM micro-block
        with int8 IFM and 32-bit accumulators (IFM and accumulators double-buffered)."""
        w, h, d = self.ofm_ublock
        ifm = _up(_div(w * h * _up(_up(self.ifm_ublock[2], 1), 8), SHRAM_BANK_BYTES) * 2, self.granule("ifm8"))
        acc = _up(_div(w * h * _up(d, 8) * 4, SHRAM_BANK_BYTES) * 2, self.granule("acc32"))
        return self.reserved_output_banks + ifm + acc + self.reserved_end_banks


@dataclass
class LayerQuery:
    """What the estimate needs of one NPU operation (shapes are NHWC)."""

    block_type: str
    ifm: tuple[int, int, int, int]
    ofm: tuple[int, int, int, int]
    ifm2: tuple[int, int, int, int] | None = None
    kernel: tuple[int, int] = (1, 1)  # height, width
    stride: tuple[int, int] = (1, 1)
    dilation: tuple[int, int] = (1, 1)
    ifm_bits: int = 8
    ofm_bits: int = 8
    output_kind: str = "other"
    activation: str = "none"
    has_bias: bool = False
    weight_bytes: int = 0
    ifm_brick: bool = False  # NHCWB16 (vela's format between NPU ops) rather than NHWC
    ofm_brick: bool = False
    ifm2_brick: bool = False
    ifm_area: str = "sram"
    ifm2_area: str = "sram"
    ofm_area: str = "sram"
    upscale: int = 1
    repeats: int = 1
    ifm2_const_mul: bool = False  # a Mul by a broadcast constant (read at 16 bits, one row per burst)
    lut_pass: bool = False  # a LUT activation alone (a 1x1 pass of its own)


@dataclass(frozen=True)
class BlockConfig:
    """The OFM and IFM block shapes (N, H, W, C) vela would choose, and the kernel method."""

    ofm_block: tuple[int, int, int, int]
    ifm_block: tuple[int, int, int, int]
    partkernel: bool
    acc_bits: int


@dataclass(frozen=True)
class LayerCycles:
    """The estimate of one operation: NPU cycles, access cycles per memory, total and MACs."""

    npu: float
    access: dict[str, float]
    macs: int

    @property
    def total(self) -> float:
        """Equation (1): the largest of compute and each memory's access cycles."""
        return max([self.npu, *self.access.values()])

    @property
    def bound(self) -> str:
        """``compute`` when the NPU term is the largest, else ``memory``."""
        return "compute" if self.npu >= max(self.access.values(), default=0.0) else "memory"


# -- block configuration --------------------------------------------------------------------------
def _equal_depth(q: LayerQuery) -> bool:
    return q.block_type in ("elementwise", "pooling", "depthwise")


def _partkernel(q: LayerQuery) -> bool:
    """vela's choice between depth-first and part-kernel-first convolution (better MAC use)."""
    if q.block_type not in ("conv", "depthwise"):
        return False
    depth = q.ifm[3]
    if depth <= 8:
        return True
    k = q.kernel[0] * q.kernel[1]
    depth_util = depth / _up(depth, 32 if q.ifm_bits == 8 else 16)
    part_util = depth * k / (_up(depth, 8) * _up(k, 4 if q.ifm_bits == 8 else 2))
    return part_util > depth_util


def _area(k: int, d: int) -> int:
    return (k - 1) * d + 1


def _ifm_extent(ofm: int, stride: int, border: int, upscale: int) -> int:
    return math.ceil(((ofm - 1) * stride + border) / upscale)


def _fits(arch: EthosUArch, q: LayerQuery, ofm_b: tuple[int, int, int], ifm_b: tuple[int, int, int],
          acc_bits: int, lut_banks: int) -> bool:
    """Does the (IFM, accumulator) layout of these blocks fit SHRAM (vela's _try_block_config)?"""
    ow, oh, od = ofm_b
    iw, ih, idp = ifm_b
    ew = q.block_type == "elementwise"
    gran = arch.granule(f"ifm{q.ifm_bits}_elementwise" if ew and q.ifm_bits != 32 else f"ifm{q.ifm_bits}")
    ifm_banks = _up(_div(iw * ih * _up(idp * q.ifm_bits / 8, 8), SHRAM_BANK_BYTES) * 2, gran)
    lut_start = arch.shram_banks - lut_banks  # the LUT (or the reserved end banks) at the top
    ifm_end = arch.reserved_output_banks + ifm_banks
    if not ew:
        acc_banks = _up(_div(ow * oh * _up(od, 8) * acc_bits // 8, SHRAM_BANK_BYTES) * 2,
                        arch.granule(f"acc{acc_bits}"))
        return ifm_end <= lut_start - acc_banks
    scalar = q.ifm2 is not None and math.prod(q.ifm2) == 1
    ifm2_banks = 0 if (q.ifm2 is None or scalar) else ifm_banks
    return ifm_end + ifm2_banks <= lut_start


_BLOCKS: dict[tuple, BlockConfig | None] = {}
_BLOCKS_MAX = 8192


def block_config(arch: EthosUArch, q: LayerQuery) -> BlockConfig | None:
    """The block vela's ``find_block_config`` picks: over OFM blocks that fit SHRAM, the fewest
    IFM and weight elements fetched per OFM element (equation 2), ties to the larger IFM cover.
    None when no block fits (the SHRAM is too small for this layer). Memoized on what the
    search reads (networks repeat layer shapes; placement and simulation ask twice)."""
    key = (arch.macs, arch.ofm_ublock, arch.ifm_ublock, arch.shram_banks, arch.shram_granules, arch.ofm_block_max,
           arch.reserved_output_banks, q.block_type, q.ifm, q.ofm, q.ifm2, q.kernel, q.stride, q.dilation, q.ifm_bits,
           q.activation == "lut", q.upscale)
    hit = _BLOCKS.get(key, False)
    if hit is False:
        if len(_BLOCKS) >= _BLOCKS_MAX:
            _BLOCKS.clear()
        hit = _BLOCKS[key] = _search_block(arch, q)
    return hit


def _search_block(arch: EthosUArch, q: LayerQuery) -> BlockConfig | None:
    n, oh, ow, oc = q.ofm
    ifm = q.ifm if q.ifm2 is None or math.prod(q.ifm2) <= math.prod(q.ifm) else q.ifm2
    uw, uh, ud = arch.ofm_ublock
    acc_bits = 40 if (q.ifm_bits == 16 and q.block_type != "pooling") else 32
    partk = _partkernel(q)
    lut_banks = max(2 if q.activation == "lut" else 0, arch.reserved_end_banks)
    kh, kw = _area(q.kernel[0], q.dilation[0]), _area(q.kernel[1], q.dilation[1])
    ifm_repeats = _div(kw, SUBKERNEL_MAX[1]) * _div(kh, SUBKERNEL_MAX[0])
    if q.ifm_bits == 16:
        ifm_depth_blk = _up(min(ifm[3], 16), 4)
    else:
        ifm_depth_blk = _up(min(ifm[3], 16 if partk else 32), arch.ifm_ublock[2])
    weight_wh = kw * kh if q.block_type in ("conv", "depthwise", "vector") else 0  # vela 5.2 counts FC weights
    sh = _up(min(oh, arch.ofm_block_max[1]), uh)
    sw = _up(min(ow, arch.ofm_block_max[0]), uw)
    sd = _up(min(oc, arch.ofm_block_max[2]), ud)
    best, best_cov, chosen = math.inf, math.inf, None
    depth = max(ud, min(sd, OFM_SPLIT_DEPTH))
    if depth < oc:
        depth = _up(depth, OFM_SPLIT_DEPTH)
    ofm_elems = n * oh * ow * oc
    while depth <= sd:
        wont: set[tuple[int, int]] = set()
        for h in range(uh, sh + 1, uh):
            for w in range(uw, sw + 1, uw):
                if (h, w) in wont:
                    continue
                ih = _up(_ifm_extent(h, q.stride[0], min(kh, SUBKERNEL_MAX[0]), q.upscale), uh)
                iw = _up(_ifm_extent(w, q.stride[1], min(kw, SUBKERNEL_MAX[1]), q.upscale), uw)
                idp = depth if _equal_depth(q) else ifm_depth_blk
                bh = 1 if (oh == 1 and q.kernel[0] == 1 and uh == 2) else h  # conv1d: one row
                if not _fits(arch, q, (w, min(bh, oh) if bh == 1 else bh, depth), (iw, ih, idp), acc_bits, lut_banks):
                    wont.add((w, h))
                    continue
                full = (_div(oh, h), _div(ow, w), _div(oc, depth))
                frac = (oh / h, ow / w, oc / depth)
                wfetch = weight_wh * ifm[3] * full[0] * full[1]
                if q.block_type != "depthwise":
                    wfetch *= depth * frac[2]
                ifetch = ih * iw * ifm[3] * ifm_repeats * frac[0] * frac[1]
                if not _equal_depth(q):
                    ifetch *= full[2]
                if q.block_type == "elementwise":  # the fewest blocks; ties keep the shallower one found first
                    cost = ofm_elems / (h * w * depth)
                else:
                    cost = (ifetch + wfetch) / ofm_elems
                    cost *= (full[0] * h * full[1] * w * full[2] * depth) / (oh * ow * oc)  # padding
                if math.prod(ifm) < ih * iw * idp * 2:
                    cost /= 2
                if cost <= best:
                    take = False
                    if cost == best:
                        cov = (ifm[1] * ifm[2]) / (min(ifm[1], ih) * min(ifm[2], iw))
                        if cov <= best_cov and h <= 4 and w <= 4:
                            best_cov, take = cov, True
                    else:
                        best_cov, take = math.inf, True
                    if take:
                        best = cost
                        chosen = BlockConfig((1, h, w, depth), (1, ih, iw, idp), partk, acc_bits)
        depth += ud
        if depth < oc:
            depth = _up(depth, OFM_SPLIT_DEPTH)
    return chosen


# -- compute ----------------------------------------------------------------------------------------
def _min4(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(min(x, y) for x, y in zip(a, b, strict=True))


def _transfer(arch: EthosUArch, read: bool, area: str, brick: bool, bits: int,
              block: tuple[int, ...], nbytes: float, shape: tuple[int, ...] | None = None) -> float:
    """Bytes as the memory sees them: ``nbytes * burst / min(burst, contiguous bytes)`` (vela's
    EstimateMemoryTransfer). One access of a ``block`` of a tensor of ``shape`` is contiguous over
    the block's depth (NHWC) or 16 channels times its width (NHCWB16), and over the whole block row
    (width x depth) when the tensor's row stride equals the block depth (vela compares the stride in
    bytes with the depth in elements: a block as deep as an 8-bit tensor)."""
    _, _, bw, bd = block
    row = shape is not None and (shape[2] * bits * 16 // 8 if brick else shape[3] * bits // 8) == bd
    if row and (brick or read or bd <= 16):
        burst = bits * bw * bd
    elif brick:
        burst = 16 * bits * bw if read else 16 * bits * bw * arch.cores
    elif read:
        burst = bits * bd
    else:
        burst = min(64 * 8, 16 * bits * arch.cores, bd * bits)
    mem = arch.memory(area)
    burst = min(mem.burst_bytes, max(1, burst // 8))
    return nbytes * (mem.burst_bytes / burst)


def _block_memory_cycles(arch: EthosUArch, q: LayerQuery, cfg: BlockConfig) -> tuple[float, float]:
    """Latency plus transfer cycles of one IFM block read and one OFM block write."""
    ib = _min4(q.ifm, cfg.ifm_block)
    ob = _min4(q.ofm, cfg.ofm_block)
    mi, mo = arch.memory(q.ifm_area), arch.memory(q.ofm_area)
    ifm = mi.read_latency + _transfer(arch, True, q.ifm_area, q.ifm_brick, q.ifm_bits, cfg.ifm_block,
                                      math.prod(ib), q.ifm) / mi.bytes_per_cycle
    ofm = mo.write_latency + _transfer(arch, False, q.ofm_area, q.ofm_brick, q.ofm_bits, cfg.ofm_block,
                                       math.prod(ob), q.ofm) / mo.bytes_per_cycle
    return ifm, ofm


def output_cycles_per_elem(arch: EthosUArch, q: LayerQuery, cfg: BlockConfig) -> float:
    """Cycles per OFM element of the output stage: the op's row of ``output_cycles_per_elem``
    or its activation's, whichever is slower; elementwise ops at least a quarter of one block's
    memory command per element."""
    if q.block_type == "elementwise" and q.ifm_bits == 32:
        kind = "ew_unary_32" if q.ifm2 is None else "ew_binary_32"
    elif q.output_kind == "mul" and q.ofm_bits == 32:
        kind = "mul_32"
    elif q.output_kind == "mul" or (q.block_type != "elementwise" and cfg.acc_bits == 40):
        kind = "mul"
    else:
        kind = q.output_kind
    act = arch.activation_cycles_per_elem[ACTIVATION_KINDS.index(q.activation)]
    if q.lut_pass and arch.lut_pass_cycles_per_elem is not None:
        act = arch.lut_pass_cycles_per_elem
    per = max(arch.output_cycles_per_elem[OUTPUT_KINDS.index(kind)], act)
    if q.block_type == "elementwise":
        n_blk = math.prod(cfg.ofm_block)
        i_c, o_c = _block_memory_cycles(arch, q, cfg)
        per = max(per, (i_c + o_c + per * n_blk) / 4 / n_blk)
    return per


def _delay(arch: EthosUArch, acc40: bool, steps: int, ux: int, uy: int, uz: int) -> int:
    d = 3 if (acc40 and arch.macs in (64, 128) and arch.cores == 1) else 2
    if ux == 1 and uy == 1:
        if uz == 1:
            return d * steps
        if steps > 1:
            return d * (steps - 1) * uz
    return 0


def conv_cycles(arch: EthosUArch, q: LayerQuery, cfg: BlockConfig, const_area: str | None = None) -> float:
    """Equations (3) and (4): cycles of a convolution, depthwise, vector product or pooling;
    ``const_area`` is the memory the op reads its scales and biases from (default: constants)."""
    ib = _min4(q.ifm, cfg.ifm_block)
    ob = list(_min4(q.ofm, cfg.ofm_block))
    uw, uh, ud = arch.ofm_ublock
    if (uh == 2 and q.block_type in ("conv", "depthwise", "vector") and q.ofm[1] == 1 and q.ofm[2] % 2 == 0
            and q.kernel[0] == 1):
        uw, uh = 4, 1
        ob[1] = 1
    ux, uy, uz = _div(ob[2], uw), _div(ob[1], uh), _div(ob[3], ud)
    uxy = ux * uy
    acc40 = cfg.acc_bits == 40
    sub_y = [min(q.kernel[0] - i * SUBKERNEL_MAX[0], SUBKERNEL_MAX[0]) for i in range(_div(q.kernel[0], SUBKERNEL_MAX[0]))]
    sub_x = [min(q.kernel[1] - i * SUBKERNEL_MAX[1], SUBKERNEL_MAX[1]) for i in range(_div(q.kernel[1], SUBKERNEL_MAX[1]))]
    wb = 32 * ud // 8
    dpu = 0.0
    for ky in sub_y:
        for kx in sub_x:
            elems = ky * kx
            if q.block_type == "pooling":  # vela 5.2: max(4, kernel) x IFM bits / 2 per micro-block
                steps = 1
                cyc = max(4, elems) * uxy * uz * (q.ifm_bits // 2 if arch.macs > 32 else 1)
            elif q.block_type == "depthwise":
                steps = _div(elems, 4)
                cyc = max(wb, 4 * uxy * (2 if q.ifm_bits == 16 else 1)) * steps * uz
            elif q.block_type in ("vector", "reduce_sum") or not cfg.partkernel:
                steps = elems
                cyc = max(wb, 4 * uxy) * steps * uz
            else:
                steps = _div(elems, 2 if q.ifm_bits == 16 else 4)
                cyc = max(wb, 4 * uxy) * steps * _div(ib[3], 8) * uz
            delay = _delay(arch, acc40, steps, ux, uy, uz)
            if q.block_type == "conv" and cfg.partkernel:
                delay *= _div(ib[3], 8)
            dpu += cyc + delay
    if q.block_type in ("conv", "vector", "reduce_sum"):
        dpu *= _div(q.ifm[3], ib[3])
    dpu /= arch.cores
    n_blocks = math.prod(_div(a, b) for a, b in zip(q.ofm, ob, strict=True))
    out = int(output_cycles_per_elem(arch, q, cfg) * math.prod(ob))  # the block clipped to the OFM
    if q.has_bias:
        out = max(out, 10 * ob[3] * arch.memory(const_area or arch.constants).read_latency // 256)
    i_c, o_c = _block_memory_cycles(arch, q, cfg)
    cmd = (i_c + o_c + out + dpu) / 4
    dpu, out = max(dpu, cmd), max(out, cmd)
    return max(dpu, out) * n_blocks + min(dpu, out)


def macs_of(q: LayerQuery) -> int:
    """MACs as vela counts them (kernel x IFM depth x OFM elements; depthwise and pooling: kernel x
    OFM elements)."""
    if q.block_type == "elementwise":
        return 0
    k = q.kernel[0] * q.kernel[1]
    per = k if q.block_type in ("depthwise", "pooling") else k * q.ifm[3]
    return int(per * math.prod(q.ofm)) * q.repeats


# -- memory -----------------------------------------------------------------------------------------
def _round_c(shape: tuple[int, ...], brick: bool) -> tuple[int, ...]:
    return (*shape[:3], _up(shape[3], 16)) if brick else tuple(shape)


def access_cycles(arch: EthosUArch, q: LayerQuery, cfg: BlockConfig | None,
                  buffered: bool = False) -> dict[str, float]:
    """Access cycles per memory area: bytes read and written (vela's ``measure_element_access``),
    scaled by burst efficiency, over each memory's bytes per cycle. Weights read in place count
    once per OFM block; ``buffered`` weights (DMA'd into SRAM first) count in the DMA instead."""
    scaled: dict[str, float] = {}

    def add(area: str, nbytes: float) -> None:
        scaled[area] = scaled.get(area, 0.0) + nbytes

    ofm_elems = math.prod(_round_c(q.ofm, q.ofm_brick))
    blk_o = cfg.ofm_block if cfg is not None else (1, 1, 1, q.ofm[3])
    blk_i = cfg.ifm_block if cfg is not None else (1, 1, 1, q.ifm[3])
    add(q.ofm_area, _transfer(arch, False, q.ofm_area, q.ofm_brick, q.ofm_bits, blk_o, ofm_elems * q.ofm_bits / 8,
                              q.ofm))
    if q.block_type == "elementwise":
        rounded = math.prod(_round_c(q.ofm, q.ifm_brick))
        if math.prod(q.ifm) > 1:
            add(q.ifm_area, _transfer(arch, True, q.ifm_area, q.ifm_brick, q.ifm_bits, blk_i,
                                      rounded * q.ifm_bits / 8, q.ifm))
        if q.ifm2 is not None and (math.prod(q.ifm2) > 1 or math.prod(q.ifm) == 1):
            n2 = math.prod(_round_c(q.ofm, q.ifm2_brick))
            if q.ifm2_const_mul:
                # measured on vela 5.2: a Mul's broadcast constant streams 2 bytes per OFM element
                # in bursts of one row of the constant (its depth in bytes)
                add(q.ifm2_area, n2 * 2 * arch.memory(q.ifm2_area).burst_bytes
                    / min(arch.memory(q.ifm2_area).burst_bytes, max(1, q.ifm2[3])))
            else:
                add(q.ifm2_area, _transfer(arch, True, q.ifm2_area, q.ifm2_brick, q.ifm_bits, blk_i,
                                           n2 * q.ifm_bits / 8, q.ifm2))
    else:
        ob = _min4(q.ofm, cfg.ofm_block)
        ib = _min4(q.ifm, cfg.ifm_block)
        blocks = [_div(a, b) for a, b in zip(q.ofm, ob, strict=True)]
        ofm_block_depth = ob[3]
        if q.block_type in ("depthwise", "pooling"):
            blocks[3] = 1
            ofm_block_depth = q.ifm[3]
        n_blocks = math.prod(blocks)
        subk = _div(q.kernel[1], SUBKERNEL_MAX[0]) * _div(q.kernel[0], SUBKERNEL_MAX[1])
        ifm_fetch = ib[1] * ib[2] * _round_c(q.ifm, q.ifm_brick)[3]
        add(q.ifm_area, _transfer(arch, True, q.ifm_area, q.ifm_brick, q.ifm_bits, cfg.ifm_block,
                                  ifm_fetch * subk * n_blocks * q.ifm_bits / 8, q.ifm))
        if q.block_type not in ("pooling", "reduce_sum") and not buffered:
            k = q.kernel[0] * q.kernel[1]
            kernel_read = k if q.block_type == "depthwise" else k * q.ifm[3]
            add(arch.constants, kernel_read * ofm_block_depth * n_blocks * arch.weight_compression)
            add(arch.constants, q.ofm[3] * BIAS_BYTES)
    return {area: b / arch.memory(area).bytes_per_cycle * q.repeats for area, b in scaled.items()}


def encoded_weight_bytes(arch: EthosUArch, q: LayerQuery) -> float:
    """Weights as vela stores them: compressed weights plus 10 bytes of scale and bias per channel."""
    return q.weight_bytes * arch.weight_compression + q.ofm[3] * BIAS_BYTES


def weight_dma_cycles(arch: EthosUArch, nbytes: float) -> float:
    """One DMA of ``nbytes`` from constant memory into SRAM (vela's measure_mem2mem_cycles)."""
    src, dst = arch.memory(arch.constants), arch.memory(arch.feature_maps)
    return max(nbytes / src.bytes_per_cycle + src.read_latency, nbytes / dst.bytes_per_cycle)


def _dependency_fit(shape: tuple[int, int, int, int], arch: EthosUArch) -> tuple[int, int, int, int]:
    """The shape vela searches a MatMul part's block on: its W (or H when H exceeds the block
    limit) cut in three or two, so that several blocks hide the dependency between the parts."""
    n, h, w, c = shape
    axis, limit = (1, arch.ofm_block_max[1]) if h > arch.ofm_block_max[1] else (2, arch.ofm_block_max[0])
    dims = [n, h, w, c]
    if dims[axis] <= limit:
        for divider in (3, 2):
            if dims[axis] >= 4 * divider:
                dims[axis] = _div(dims[axis], divider)
                break
    return (dims[0], dims[1], dims[2], dims[3])


def _matmul(arch: EthosUArch, q: LayerQuery) -> LayerCycles:
    """A MatMul of two feature maps as vela's C++ core runs it on an Ethos-U55/U65, which has no
    matrix engine for a second activation operand (regor's EstimateMatMulCycles): for each of the
    N columns of the output, an elementwise Mul of A (1 x B x M x K) by that column of the other
    operand broadcast over the M rows, its 32-bit products in a scratch buffer, then a ReduceSum
    over K into the column:

        npu = N * (cycles(Mul: A x A -> int32) + cycles(ReduceSum: A -> 1 x B x M x 1))      (6)

    Each part's block is searched on the dependency-fitted shape (``_dependency_fit``). The scratch
    lives in ``memory.scratch`` (vela's arena: DRAM in the Dedicated_Sram modes, whose latency the
    Mul's and the ReduceSum's per-block commands then wait on). Memory (vela's
    MeasureElementAccess): A is read once per column, the other operand once, the scratch written
    and read once per column (A x N elements each way), the output written once."""
    n_cols = q.ifm2[2] if q.ifm2 is not None else 1
    a = q.ifm
    nhwc = {"ifm_brick": False, "ifm2_brick": False, "ofm_brick": False, "activation": "none", "repeats": 1}
    mul = replace(q, block_type="elementwise", ifm2=a, ofm=a, ofm_bits=32, output_kind="mul",
                  ofm_area=arch.scratch, **nhwc)
    red = replace(q, block_type="reduce_sum", ifm2=None, ofm=(a[0], a[1], a[2], 1), ifm_area=arch.scratch, **nhwc)
    fit = _dependency_fit(a, arch)
    mul_cfg = block_config(arch, replace(mul, ifm=fit, ifm2=(1, a[1], 1, a[3]), ofm=fit))
    red_cfg = block_config(arch, replace(red, ifm=fit, ofm=_dependency_fit(red.ofm, arch)))
    if mul_cfg is None or red_cfg is None:
        raise ValueError(f"no OFM block of a MatMul with OFM {q.ofm} fits {arch.shram_banks} SHRAM banks")
    mul_npu = math.ceil(output_cycles_per_elem(arch, mul, mul_cfg) * math.prod(a))
    npu = (mul_npu + int(conv_cycles(arch, red, red_cfg))) * n_cols
    ofm = replace(q, **nhwc)
    scaled = {q.ofm_area: _transfer(arch, False, q.ofm_area, False, q.ofm_bits, red_cfg.ofm_block,
                                    math.prod(q.ofm) * q.ofm_bits / 8, ofm.ofm)}
    reads = [(q.ifm_area, a, math.prod(a) * n_cols), (q.ifm2_area, q.ifm2 or a, math.prod(q.ifm2 or a))]
    for area, shape, elems in reads:
        scaled[area] = scaled.get(area, 0.0) + _transfer(arch, True, area, False, q.ifm_bits, red_cfg.ifm_block,
                                                         elems * q.ifm_bits / 8, shape)
    scaled[arch.scratch] = scaled.get(arch.scratch, 0.0) + 2 * math.prod(a) * n_cols
    access = {area: b / arch.memory(area).bytes_per_cycle * q.repeats for area, b in scaled.items()}
    k = a[3]
    return LayerCycles(npu * q.repeats, access, int(math.prod(q.ofm) * k) * q.repeats)


def _transpose(arch: EthosUArch, q: LayerQuery) -> LayerCycles:
    """A Transpose (a compound operation of vela's C++ core, costed on its memory traffic): the
    slower of reading the IFM and writing the OFM, each with its memory's latency, against the
    access cycles of both (NHWC, burst-scaled on the copy's block):

        npu = max(ifm_bytes / bw + read_latency, ofm_bytes / bw + write_latency)               (7)"""
    t = replace(q, block_type="pooling", ifm=q.ofm, ifm_brick=False, ofm_brick=False, activation="none")
    cfg = block_config(arch, t)
    blk = cfg.ofm_block if cfg is not None else (1, 1, 1, q.ofm[3])
    mi, mo = arch.memory(q.ifm_area), arch.memory(q.ofm_area)
    rd = _transfer(arch, True, q.ifm_area, False, q.ifm_bits, blk, math.prod(q.ifm) * q.ifm_bits / 8, q.ifm)
    wr = _transfer(arch, False, q.ofm_area, False, q.ofm_bits, blk, math.prod(q.ofm) * q.ofm_bits / 8, q.ofm)
    npu = max(rd / mi.bytes_per_cycle + mi.read_latency, wr / mo.bytes_per_cycle + mo.write_latency)
    access: dict[str, float] = {}
    for area, nbytes in ((q.ifm_area, rd), (q.ofm_area, wr)):
        access[area] = access.get(area, 0.0) + nbytes / arch.memory(area).bytes_per_cycle * q.repeats
    return LayerCycles(int(npu) * q.repeats, access, 0)


def estimate(arch: EthosUArch, q: LayerQuery, slack: float = 0.0) -> LayerCycles:
    """The cycles of one operation (equation 1); raises ValueError when no block fits SHRAM.
    ``slack``: cycles of the operation before it, under which its weights' DMA can start
    (equation 5)."""
    if q.block_type == "matmul":
        return _matmul(arch, q)
    if q.block_type == "transpose":
        return _transpose(arch, q)
    cfg = block_config(arch, q)
    if cfg is None:
        raise ValueError(f"no OFM block of a {q.block_type} layer with OFM {q.ofm} fits {arch.shram_banks} "
                         "SHRAM banks")
    if q.block_type == "elementwise":
        per = output_cycles_per_elem(arch, q, cfg)
        npu = math.ceil(per * math.prod(_round_c(q.ofm, q.ofm_brick)))
    else:
        npu = int(conv_cycles(arch, q, cfg))
    direct = LayerCycles(npu * q.repeats, access_cycles(arch, q, cfg), macs_of(q))
    if not q.weight_bytes or q.block_type not in ("conv", "depthwise", "vector") or arch.constants == arch.feature_maps:
        return direct
    # Weight buffering: DMA the encoded weights into SRAM in OFM-depth slices, double-buffered,
    # so the transfer overlaps compute except for what the previous operation's cycles (slack)
    # could not pre-buffer of the first slice:
    #     npu' = max(full transfer - pre-buffered, npu + max(0, first slice's transfer - slack))
    full = weight_dma_cycles(arch, encoded_weight_bytes(arch, q))
    first = full * min(1.0, cfg.ofm_block[3] / max(1, q.ofm[3])) if q.ofm[3] > cfg.ofm_block[3] else full
    npu = int(conv_cycles(arch, q, cfg, arch.feature_maps))  # scales and biases now in SRAM
    pre = min(full, slack)
    buffered = LayerCycles(max(full - pre, npu + max(0.0, first - pre)) * q.repeats,
                           access_cycles(arch, q, cfg, buffered=True), macs_of(q))
    return buffered if (arch.always_buffer_weights or buffered.total < direct.total) else direct
