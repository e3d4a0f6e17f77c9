"""HardwareTarget: an NPU, the CPU beside it and the link between them, loaded from YAML.

A target is plain data passed explicitly to placement, the cost model and the simulator (no
globals), so two open documents can aim at two chips. The YAML schema (one section each):

``npu``       MAC array (rows x cols, dataflow os|ws|is), clock, precision in use and the
              MACs/cycle of every supported precision, vector unit width, on-chip SRAM, DRAM
              bandwidth and latency (optionally a separate weight port, e.g. flash), the
              per-dispatch and per-op overheads, the preferred layout, global constraints and
              the supported op types with per-op constraint overrides.
``cpu``       peak GFLOPS and memory bandwidth of the core running fallback ops.
``transfer``  CPU<->NPU bandwidth and fixed cost per transfer (sync, cache maintenance).
``thermal``   sustained clock under continuous load and the time constant to reach it.
``exports``   (optional) the deployable formats compile writes: onnx-qdq (always), tflite.
``vela``      (optional) how Arm's vela compiles the TFLite file for this NPU: accelerator
              config, system config and memory mode (names in vela's own vela.ini), config file.
``ethos_u``   (optional) the Ethos-U micro-architecture as vela tabulates it (MACs, OFM/IFM
              micro-blocks, SHRAM banks and granules, output and activation cycles per element):
              with it the NPU's ops are costed by ``engine.hw.ethos_u`` (vela's estimate).
``memory``    (with ``ethos_u``) the memory system of vela.ini's system config and memory mode:
              AXI port width, each memory's clock scale, burst length and latencies, and where
              feature maps and constants (weights, constant operands) live.
``base``      (optional) a bundled target name or a YAML path (relative to this file) whose
              document this one extends: mappings merge key by key, other values replace, null
              removes a key of the base.
``aliases``   (optional) other names of this bundled target for ``--target``.

Loading validates everything and raises ``InputError("FILE: field X: ...")`` naming the file
and the field, which the CLI prints as one ``error:`` line (exit 2).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from engine.errors import InputError
from engine.hw.ethos_u import EthosUArch, MemoryArea
from engine.hw.schema import Field, check, check_value, fail, unknown_key
from engine.limits import excerpt
from nodes.constraints import PRECISION_DTYPES, OpConstraints

TARGETS_DIR = Path(__file__).resolve().parents[2] / "assets" / "targets"

DTYPE_BYTES: dict[str, int] = {
    "bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4,
    "int64": 8, "uint64": 8, "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8,
}
DATAFLOWS = ("os", "ws", "is")
MAX_TARGET_BYTES = 2**20  # bundled targets are a few kB; a megabyte parses in well under a second
LAYOUTS = ("NCHW", "NHWC")

CONSTRAINT_SCHEMA: dict[str, Field] = {
    "dtypes": Field("str_list", "tensor element types the NPU can hold", required=False),
    "static_shapes": Field("bool", "every shape must be known at compile time", required=False),
    "max_rank": Field("int", "largest tensor rank", required=False, minimum=1),
    "max_tensor_kib": Field("number", "largest single tensor in KiB", required=False, above=0),
    "max_kernel": Field("int", "largest kernel height/width of window ops", required=False, minimum=1),
    "max_stride": Field("int", "largest stride of window ops", required=False, minimum=1),
    "max_dilation": Field("int", "largest dilation of window ops", required=False, minimum=1),
    "max_stride_valid": Field("int", "largest stride of an unpadded, undilated, ungrouped window", required=False,
                              minimum=1),
    "max_kernel_padded": Field("int", "largest kernel height/width of a padded window", required=False, minimum=1),
    "resize_factors": Field("number_list", "the scale factors Resize may have", required=False),
    "max_weight_rank": Field("int", "largest activation rank of a MatMul by a constant weight (fully connected)",
                             required=False, minimum=1),
    "max_matmul_dim": Field("int", "largest reduced axis and output depth of a MatMul of two activations",
                            required=False, minimum=1),
    "max_reduce_axis": Field("int", "largest reduced axis of a reduction", required=False, minimum=1),
    "max_reduce_elements": Field("int", "most elements one output of a reduction sums", required=False, minimum=1),
    "exponents": Field("number_list", "the constant exponents Pow may have", required=False),
    "lut": Field("bool", "the NPU evaluates the op as a lookup table (int8 unary functions)", required=False),
}

NPU_SCHEMA: dict[str, Any] = {
    "array": {
        "rows": Field("int", "MAC array rows", minimum=1),
        "cols": Field("int", "MAC array columns", minimum=1),
        "dataflow": Field("str", "systolic dataflow: os (output stationary), ws (weight), is (input)",
                          required=False, default="os", choices=DATAFLOWS),
    },
    "clock_mhz": Field("number", "NPU peak clock in MHz", above=0),
    "precision": Field("str", "compute precision used for the model", choices=tuple(PRECISION_DTYPES)),
    "precisions": Field("map", "MACs per cycle of each supported precision"),
    "vector_ops_per_cycle": Field("number", "element ops per cycle of the vector unit", above=0),
    "sram_kib": Field("number", "on-chip SRAM in KiB", above=0),
    "dram_bandwidth_gbps": Field("number", "DRAM bandwidth in GB/s", above=0),
    "dram_latency_ns": Field("number", "DRAM access latency in ns", minimum=0),
    "weight_bandwidth_gbps": Field("number", "bandwidth of a separate weight port (e.g. flash) in GB/s",
                                   required=False, above=0),
    "dispatch_overhead_us": Field("number", "host cost of submitting one NPU partition in us", minimum=0),
    "op_overhead_us": Field("number", "per-op command overhead in us", minimum=0),
    "layout": Field("str", "preferred activation layout", required=False, default="NHWC", choices=LAYOUTS),
    "residency_fraction": Field("number", "share of SRAM that may hold activations between fused ops",
                                required=False, default=0.5, minimum=0),
    "constraints": Field("map", "global constraints of every op"),
    "ops": Field("mapping_or_list", "supported op types, each with optional constraint overrides"),
}

EXPORT_FORMATS = ("onnx-qdq", "tflite")
VELA_ACCELERATORS = ("ethos-u55-32", "ethos-u55-64", "ethos-u55-128", "ethos-u55-256", "ethos-u65-256",
                     "ethos-u65-512", "ethos-u85-128", "ethos-u85-256", "ethos-u85-512", "ethos-u85-1024",
                     "ethos-u85-2048")
VELA_SCHEMA: dict[str, Field] = {
    "accelerator_config": Field("str", "vela --accelerator-config", choices=VELA_ACCELERATORS),
    "system_config": Field("str", "vela --system-config (a section of the config file)"),
    "memory_mode": Field("str", "vela --memory-mode (a section of the config file)"),
    "config": Field("str", "vela --config file, relative to vela's config_files folder or absolute",
                    required=False, default="Arm/vela.ini"),
}

ETHOS_U_SCHEMA: dict[str, Field] = {
    "macs": Field("int", "MACs per cycle (vela's accelerator table)", minimum=1),
    "cores": Field("int", "NPU cores", required=False, default=1, minimum=1),
    "ofm_ublock": Field("int_list", "OFM micro-block width, height, depth", length=3, minimum=1),
    "ifm_ublock": Field("int_list", "IFM micro-block width, height, depth", length=3, minimum=1),
    "shram_banks": Field("int", "shared buffer (SHRAM) banks of 1 KiB (default: npu.sram_kib, the NPU's own buffer)",
                         required=False, minimum=1),
    "shram_granules": Field("int_list", "bank granules of ifm8, ifm16, ifm8 and ifm16 elementwise, ifm32, acc16, "
                            "acc32, acc40", length=8, minimum=1),
    "output_cycles_per_elem": Field("number_list", "output-stage cycles per OFM element: 32-bit unary and binary "
                                    "elementwise, 32-bit mul, mul, simple add, add, max pool, other", length=8,
                                    minimum=0),
    "activation_cycles_per_elem": Field("number_list", "activation cycles per element: LUT, ReLU, none", length=3,
                                        minimum=0),
    "lut_pass_cycles_per_elem": Field("number", "cycles per element of a LUT activation that runs alone (not fused "
                                      "into the op before it)", required=False, minimum=0),
    "weight_compression": Field("number", "encoded weight bytes per int8 weight after vela's compression",
                                required=False, default=1.0, above=0),
}
MEMORY_AREAS = ("sram", "flash", "dram")
MEMORY_AREA_SCHEMA: dict[str, Field] = {
    "clock_scale": Field("number", "memory clock over the NPU clock (vela.ini *_clock_scale)", above=0),
    "burst_length": Field("int", "burst length in bytes", minimum=1),
    "read_latency": Field("int", "read latency in NPU cycles", minimum=0),
    "write_latency": Field("int", "write latency in NPU cycles", minimum=0),
    "size_kib": Field("number", "size in KiB (the arena must hold the largest layer's IFM and OFM)",
                      required=False, above=0),
}
MEMORY_SCHEMA: dict[str, Field] = {
    "axi_bytes_per_cycle": Field("number", "bytes per cycle of one AXI port (Ethos-U55: 8, U65 and U85: 16)",
                                 above=0),
    "areas": Field("map", "memories by name: sram, flash, dram"),
    "feature_maps": Field("str", "memory holding feature maps (vela's arena)", choices=MEMORY_AREAS),
    "constants": Field("str", "memory holding weights and constant tensors", choices=MEMORY_AREAS),
    "graph_io": Field("str", "memory holding the graph's inputs and outputs (default: feature_maps)",
                      required=False, choices=MEMORY_AREAS),
    "buffer_weights": Field("str", "when weights are DMA'd into SRAM before use: when_faster (than reading them in "
                            "place) or always (vela's Dedicated_Sram modes)", required=False, default="when_faster",
                            choices=("when_faster", "always")),
    "spill": Field("str", "memory holding feature maps larger than half of the feature-map memory's size_kib "
                   "(vela's arena behind an SRAM cache; default: none, all fit)", required=False,
                   choices=MEMORY_AREAS),
    "scratch": Field("str", "memory holding the scratch tensors an op writes and reads back itself, such as a "
                     "MatMul's 32-bit products (vela's arena; default: feature_maps)", required=False,
                     choices=MEMORY_AREAS),
}

SCHEMA: dict[str, Any] = {
    "name": Field("str", "short target name"),
    "base": Field("str", "target this one extends (bundled name or YAML path)", required=False),
    "aliases": Field("str_list", "other names of this target", required=False, default=[]),
    "ethos_u": Field("map", "Ethos-U micro-architecture (vela's tables)", required=False),
    "memory": Field("map", "Ethos-U memory system (vela.ini)", required=False),
    "exports": Field("str_list", "deployable formats compile writes (onnx-qdq, tflite)", required=False,
                     default=["onnx-qdq"]),
    "vela": Field("map", "how vela compiles model.tflite for this NPU", required=False),
    "description": Field("str", "one-line description", required=False, default=""),
    "npu": NPU_SCHEMA,
    "cpu": {
        "name": Field("str", "CPU description", required=False, default="CPU"),
        "peak_gflops": Field("number", "CPU peak GFLOPS of the inference thread", above=0),
        "memory_bandwidth_gbps": Field("number", "CPU memory bandwidth in GB/s", above=0),
        "op_overhead_us": Field("number", "per-op dispatch overhead on the CPU in us", minimum=0),
        "cache_kib": Field("number", "last-level cache the inference thread can use, in KiB", required=False,
                           default=0.0, minimum=0),
        "cache_bandwidth_gbps": Field("number", "bandwidth of that cache in GB/s", required=False, above=0),
    },
    "transfer": {
        "bandwidth_gbps": Field("number", "CPU<->NPU transfer bandwidth in GB/s", above=0),
        "fixed_us": Field("number", "fixed cost of one transfer in us", minimum=0),
    },
    "thermal": {
        "sustained_clock_mhz": Field("number", "NPU clock under sustained load in MHz", above=0),
        "time_constant_s": Field("number", "seconds of continuous load to approach the sustained clock",
                                 above=0),
    },
}


@dataclass(frozen=True)
class NpuProfile:
    """The accelerator: MAC array, clock, precisions, memories and overheads."""

    rows: int
    cols: int
    dataflow: str
    clock_mhz: float
    precision: str
    precisions: dict[str, float]
    vector_ops_per_cycle: float
    sram_kib: float
    dram_bandwidth_gbps: float
    dram_latency_ns: float
    dispatch_overhead_us: float
    op_overhead_us: float
    layout: str = "NHWC"
    residency_fraction: float = 0.5
    weight_bandwidth_gbps: float | None = None

    @property
    def sram_bytes(self) -> int:
        """On-chip SRAM in bytes."""
        return int(self.sram_kib * 1024)

    @property
    def macs_per_cycle(self) -> float:
        """MACs per cycle at the precision in use."""
        return self.precisions[self.precision]

    @property
    def rate(self) -> float:
        """MACs per cycle per processing element at the precision in use (1.0 for int8 on most)."""
        return self.macs_per_cycle / (self.rows * self.cols)

    @property
    def peak_tops(self) -> float:
        """Peak tera-ops per second (2 ops per MAC) at the precision in use."""
        return 2 * self.macs_per_cycle * self.clock_mhz * 1e6 / 1e12


@dataclass(frozen=True)
class CpuProfile:
    """The CPU core that runs fallback ops."""

    name: str
    peak_gflops: float
    memory_bandwidth_gbps: float
    op_overhead_us: float
    cache_kib: float = 0.0
    cache_bandwidth_gbps: float | None = None

    def memory_us(self, nbytes: float) -> float:
        """Time to move ``nbytes``: the part that fits the cache at cache bandwidth, the rest at DRAM's."""
        if self.cache_kib > 0 and self.cache_bandwidth_gbps:
            cached = min(nbytes, self.cache_kib * 1024)
            return cached / (self.cache_bandwidth_gbps * 1e3) + (nbytes - cached) / (self.memory_bandwidth_gbps * 1e3)
        return nbytes / (self.memory_bandwidth_gbps * 1e3)


@dataclass(frozen=True)
class TransferProfile:
    """The CPU<->NPU link."""

    bandwidth_gbps: float
    fixed_us: float

    def latency_us(self, nbytes: int) -> float:
        """Time of one transfer of ``nbytes``."""
        return self.fixed_us + nbytes / (self.bandwidth_gbps * 1e3)


@dataclass(frozen=True)
class ThermalProfile:
    """Simple thermal model: the clock decays from peak toward ``sustained_clock_mhz``."""

    sustained_clock_mhz: float
    time_constant_s: float


@dataclass(frozen=True)
class HardwareTarget:
    """A complete target profile; build it with ``load_target`` or ``resolve_target``."""

    name: str
    description: str
    npu: NpuProfile
    cpu: CpuProfile
    transfer: TransferProfile
    thermal: ThermalProfile
    constraints: dict[str, Any]
    ops: dict[str, dict[str, Any]]
    source: str = ""
    exports: tuple[str, ...] = ("onnx-qdq",)
    vela: dict[str, str] | None = None
    ethos_u: EthosUArch | None = None
    aliases: tuple[str, ...] = ()
    _cache: dict[str, OpConstraints] = field(default_factory=dict, repr=False, compare=False)

    def exports_tflite(self) -> bool:
        """True when compile writes model.tflite for this target."""
        return "tflite" in self.exports

    def supports(self, op_type: str) -> bool:
        """True when the target lists the op type."""
        return op_type in self.ops

    def constraints_for(self, op_type: str) -> OpConstraints:
        """The merged constraints of an op type (cached per target)."""
        c = self._cache.get(op_type)
        if c is None:
            merged = {**self.constraints, **self.ops.get(op_type, {})}
            c = OpConstraints(
                op_type=op_type, listed=op_type in self.ops,
                dtypes=tuple(merged.get("dtypes") or ()), precision=self.npu.precision,
                static_shapes=bool(merged.get("static_shapes", True)),
                max_rank=merged.get("max_rank"), max_tensor_kib=merged.get("max_tensor_kib"),
                max_kernel=merged.get("max_kernel"), max_stride=merged.get("max_stride"),
                max_dilation=merged.get("max_dilation"), max_stride_valid=merged.get("max_stride_valid"),
                max_kernel_padded=merged.get("max_kernel_padded"),
                resize_factors=tuple(float(e) for e in merged.get("resize_factors") or ()),
                max_weight_rank=merged.get("max_weight_rank"),
                max_matmul_dim=merged.get("max_matmul_dim"), max_reduce_axis=merged.get("max_reduce_axis"),
                max_reduce_elements=merged.get("max_reduce_elements"),
                exponents=tuple(float(e) for e in merged.get("exponents") or ()), lut=bool(merged.get("lut", False)),
                target=self.name)
            self._cache[op_type] = c
        return c

    def with_cpu(self, **changes: Any) -> HardwareTarget:
        """A copy with CPU fields changed (e.g. peak_gflops and memory_bandwidth_gbps measured
        on the host by a micro-benchmark)."""
        return dataclasses.replace(self, cpu=dataclasses.replace(self.cpu, **changes), _cache={})

    def with_npu(self, **changes: Any) -> HardwareTarget:
        """A copy with some NPU fields changed (what-if studies, tests)."""
        return dataclasses.replace(self, npu=dataclasses.replace(self.npu, **changes), _cache={})

    def with_ops(self, ops: dict[str, dict[str, Any]]) -> HardwareTarget:
        """A copy listing other op types (tests, what-if studies)."""
        return dataclasses.replace(self, ops={k: dict(v) for k, v in ops.items()}, _cache={})

    def summary(self) -> dict[str, Any]:
        """A JSON-ready description of the key figures."""
        n = self.npu
        return {
            "name": self.name, "description": self.description,
            "npu": {"array": f"{n.rows}x{n.cols} {n.dataflow}", "clock_mhz": n.clock_mhz,
                    "precision": n.precision, "peak_tops": round(n.peak_tops, 3),
                    "sram_kib": n.sram_kib, "dram_bandwidth_gbps": n.dram_bandwidth_gbps,
                    "layout": n.layout, "ops": len(self.ops)},
            "cpu": {"name": self.cpu.name, "peak_gflops": self.cpu.peak_gflops,
                    "memory_bandwidth_gbps": self.cpu.memory_bandwidth_gbps},
            "transfer": {"bandwidth_gbps": self.transfer.bandwidth_gbps, "fixed_us": self.transfer.fixed_us},
        }


# -- loading -------------------------------------------------------------------------------------
def _check_constraints(doc: Any, where: str, path: str) -> dict[str, Any]:
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise fail(where, path, f"expected a mapping of constraints, got {type(doc).__name__}")
    out: dict[str, Any] = {}
    for key, value in doc.items():
        spec = CONSTRAINT_SCHEMA.get(str(key))
        if spec is None:
            raise unknown_key(str(key), list(CONSTRAINT_SCHEMA), where, f"{path}.{key}")
        value = check_value(value, spec, where, f"{path}.{key}")
        if key == "dtypes":
            for k, dt in enumerate(value):
                if dt not in DTYPE_BYTES:
                    raise fail(where, f"{path}.dtypes[{k}]",
                               f"unknown dtype {dt!r} (known: {', '.join(DTYPE_BYTES)})")
            value = tuple(value)
        out[str(key)] = value
    return out


def _check_ops(doc: Any, where: str, known_ops: set[str] | None) -> dict[str, dict[str, Any]]:
    if isinstance(doc, list):
        doc = {name: None for name in doc}
    if not isinstance(doc, dict):
        raise fail(where, "npu.ops", "expected a mapping (or list) of op type names")
    out: dict[str, dict[str, Any]] = {}
    for name, over in doc.items():
        path = f"npu.ops.{name}"
        if not isinstance(name, str) or len(name) > 64:
            raise fail(where, f"npu.ops[{len(out)}]", f"op names are short strings, got {excerpt(name)}")
        if known_ops is not None and name not in known_ops:
            import difflib

            close = difflib.get_close_matches(name, sorted(known_ops), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise fail(where, path, f"unknown op name {name!r}{hint}")
        out[name] = _check_constraints(over, where, path)
    return out


def target_from_dict(doc: Any, where: str, known_ops: set[str] | None = None) -> HardwareTarget:
    """Validate a parsed YAML document and build the target (``where`` names it in errors).

    ``known_ops`` defaults to the op types NPU Studio defines (nodes.registry).
    """
    if known_ops is None:
        from nodes import registry

        known_ops = registry.op_types()
    d = check(doc, SCHEMA, where)
    n = d["npu"]
    precisions: dict[str, float] = {}
    for key, value in n["precisions"].items():
        if key not in PRECISION_DTYPES:
            raise fail(where, f"npu.precisions.{key}",
                       f"unknown precision {key!r} (known: {', '.join(PRECISION_DTYPES)})")
        precisions[key] = check_value(value, Field("number", "MACs per cycle", above=0), where,
                                      f"npu.precisions.{key}")
    if n["precision"] not in precisions:
        raise fail(where, "npu.precision", f"{n['precision']!r} is not among npu.precisions "
                   f"({', '.join(precisions) or 'none'})")
    if n["residency_fraction"] > 1:
        raise fail(where, "npu.residency_fraction", f"must be at most 1, got {n['residency_fraction']}")
    constraints = _check_constraints(n["constraints"], where, "npu.constraints")
    constraints.setdefault("dtypes", (PRECISION_DTYPES[n["precision"]],))
    ops = _check_ops(n["ops"], where, known_ops)
    npu = NpuProfile(
        rows=n["array"]["rows"], cols=n["array"]["cols"], dataflow=n["array"]["dataflow"],
        clock_mhz=n["clock_mhz"], precision=n["precision"], precisions=precisions,
        vector_ops_per_cycle=n["vector_ops_per_cycle"], sram_kib=n["sram_kib"],
        dram_bandwidth_gbps=n["dram_bandwidth_gbps"], dram_latency_ns=n["dram_latency_ns"],
        weight_bandwidth_gbps=n["weight_bandwidth_gbps"], dispatch_overhead_us=n["dispatch_overhead_us"],
        op_overhead_us=n["op_overhead_us"], layout=n["layout"], residency_fraction=n["residency_fraction"])
    th = d["thermal"]
    if th["sustained_clock_mhz"] > npu.clock_mhz:
        raise fail(where, "thermal.sustained_clock_mhz",
                   f"{th['sustained_clock_mhz']:g} MHz is above the peak npu.clock_mhz {npu.clock_mhz:g}")
    exports = tuple(d["exports"])
    for k, fmt in enumerate(exports):
        if fmt not in EXPORT_FORMATS:
            raise fail(where, f"exports[{k}]", f"unknown format {fmt!r} (known: {', '.join(EXPORT_FORMATS)})")
    if "tflite" in exports and npu.precision != "int8":
        raise fail(where, "exports", f"tflite export needs npu.precision int8, got {npu.precision!r}")
    vela = check(d["vela"], VELA_SCHEMA, where, "vela") if d["vela"] is not None else None
    if vela is not None and "tflite" not in exports:
        raise fail(where, "vela", "vela compiles TFLite: list tflite in exports")
    ethos_u = _check_ethos_u(d, npu, vela, where)
    return HardwareTarget(
        name=d["name"], description=d["description"], npu=npu,
        cpu=CpuProfile(**d["cpu"]), transfer=TransferProfile(**d["transfer"]),
        thermal=ThermalProfile(**th), constraints=constraints, ops=ops, source=where,
        exports=exports, vela=vela, ethos_u=ethos_u, aliases=tuple(d["aliases"]))


def _check_ethos_u(d: dict[str, Any], npu: NpuProfile, vela: dict[str, str] | None, where: str) -> EthosUArch | None:
    """The ``ethos_u`` and ``memory`` sections as an EthosUArch (None without them)."""
    if d["ethos_u"] is None:
        if d["memory"] is not None:
            raise fail(where, "memory", "the memory system needs an ethos_u section beside it")
        return None
    e = check(d["ethos_u"], ETHOS_U_SCHEMA, where, "ethos_u")
    if d["memory"] is None:
        raise fail(where, "memory", "missing (required with ethos_u: where feature maps and constants live)")
    m = check(d["memory"], MEMORY_SCHEMA, where, "memory")
    areas: dict[str, MemoryArea] = {}
    for name, sub in m["areas"].items():
        if name not in MEMORY_AREAS:
            raise unknown_key(str(name), list(MEMORY_AREAS), where, f"memory.areas.{name}")
        a = check(sub, MEMORY_AREA_SCHEMA, where, f"memory.areas.{name}")
        areas[name] = MemoryArea(name, m["axi_bytes_per_cycle"] * a["clock_scale"], a["burst_length"],
                                 a["read_latency"], a["write_latency"], a["size_kib"])
    m["graph_io"] = m["graph_io"] or m["feature_maps"]
    m["scratch"] = m["scratch"] or m["feature_maps"]
    for key in ("feature_maps", "constants", "graph_io", "spill", "scratch"):
        if m[key] is not None and m[key] not in areas:
            raise fail(where, f"memory.{key}", f"names {m[key]!r}, which memory.areas does not define "
                       f"({', '.join(areas) or 'none'})")
    w, h, c = e["ofm_ublock"]
    if vela is not None and not vela["accelerator_config"].startswith("ethos-u85"):
        want = int(vela["accelerator_config"].rsplit("-", 1)[1])
        if e["macs"] * e["cores"] != want:
            raise fail(where, "ethos_u.macs", f"{e['macs']} x {e['cores']} core(s) does not match "
                       f"vela.accelerator_config {vela['accelerator_config']} ({want} MACs per cycle)")
    if w * h * c * 8 != e["macs"]:
        raise fail(where, "ethos_u.ofm_ublock", f"{w}x{h}x{c} micro-blocks with 8-wide dot products make "
                   f"{w * h * c * 8} MACs per cycle, not ethos_u.macs {e['macs']}")
    banks = e["shram_banks"] if e["shram_banks"] is not None else int(npu.sram_kib)
    banks_field = "ethos_u.shram_banks" if e["shram_banks"] is not None else "npu.sram_kib"
    arch = EthosUArch(
        macs=e["macs"], cores=e["cores"], ofm_ublock=(w, h, c), ifm_ublock=tuple(e["ifm_ublock"]),
        shram_banks=banks, shram_granules=tuple(e["shram_granules"]),
        output_cycles_per_elem=tuple(e["output_cycles_per_elem"]),
        activation_cycles_per_elem=tuple(e["activation_cycles_per_elem"]), memories=areas,
        lut_pass_cycles_per_elem=e["lut_pass_cycles_per_elem"],
        feature_maps=m["feature_maps"], constants=m["constants"], graph_io=m["graph_io"],
        spill=m["spill"], scratch=m["scratch"], always_buffer_weights=m["buffer_weights"] == "always",
        weight_compression=e["weight_compression"])
    need = arch.smallest_block_banks()
    if arch.shram_banks < need:
        raise fail(where, banks_field, f"{arch.shram_banks} banks of 1 KiB of SHRAM cannot hold the smallest layer "
                   f"(one {w}x{h}x{c} OFM micro-block with its IFM and accumulators, double-buffered, needs {need})")
    return arch


def load_target(path: str | Path, known_ops: set[str] | None = None) -> HardwareTarget:
    """Load and validate a target YAML file; InputError names the file and the field."""

    p = Path(path)
    where = str(path)
    if not p.exists():
        raise InputError(f"{where}: no such target file")
    doc = _extend(_read_yaml(p, where), p, where, (p.resolve(),))
    return target_from_dict(doc, where, known_ops)


def _read_yaml(p: Path, where: str) -> Any:
    """The parsed document of a target file; InputError names the file (and the line)."""
    from engine.limits import parse_document, read_document

    text = read_document(p, "target file", MAX_TARGET_BYTES)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return parse_document(text, where, "target file", lambda t: yaml.load(t, Loader=loader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise InputError(f"{where}: not valid YAML{line}: {excerpt(problem, 80)[1:-1]}") from None


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``: mappings merge key by key, every other value replaces, null
    removes the base's key."""
    out = dict(base)
    for key, value in over.items():
        if value is None:
            out.pop(key, None)
            continue
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _extend(doc: Any, path: Path, where: str, seen: tuple[Path, ...]) -> Any:
    """A target document with its ``base`` (a bundled name or a path beside it) merged under it."""
    if not isinstance(doc, dict) or "base" not in doc:
        return doc
    name = doc["base"]
    if not isinstance(name, str):
        raise fail(where, "base", f"expected a target name or a path, got {excerpt(name)}")
    bundled = bundled_targets()
    base_path = bundled[name] if name in bundled else (path.parent / name)
    if not base_path.is_file():
        raise fail(where, "base", f"no bundled target or file {name!r} (bundled: {', '.join(bundled)})")
    if base_path.resolve() in seen:
        raise fail(where, "base", f"{name!r} extends itself (through {' -> '.join(p.name for p in seen)})")
    base = _read_yaml(base_path, str(base_path))
    if not isinstance(base, dict):
        raise fail(where, "base", f"{name!r} is not a target file")
    base = _extend(base, base_path, str(base_path), (*seen, base_path.resolve()))
    base = {k: v for k, v in base.items() if k not in ("aliases", "base")}
    return _merge(base, {k: v for k, v in doc.items() if k != "base"})


def target_aliases() -> dict[str, str]:
    """Alias -> bundled target name (the ``aliases`` of each bundled YAML)."""
    out: dict[str, str] = {}
    for name, path in bundled_targets().items():
        try:
            doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError):
            continue
        for alias in (doc.get("aliases") or []) if isinstance(doc, dict) else []:
            if isinstance(alias, str) and alias not in out:
                out[alias] = name
    return out


def bundled_targets() -> dict[str, Path]:
    """Name -> path of every bundled profile (assets/targets/NAME.yaml), sorted by name."""
    if not TARGETS_DIR.is_dir():
        return {}
    return {p.stem: p for p in sorted(TARGETS_DIR.glob("*.yaml"))}


def resolve_target(name_or_path: str | Path | HardwareTarget) -> HardwareTarget:
    """A bundled profile by name, or a YAML file by path (a HardwareTarget passes through)."""
    if isinstance(name_or_path, HardwareTarget):
        return name_or_path
    text = str(name_or_path)
    bundled = bundled_targets()
    if text in bundled:
        return load_target(bundled[text])
    alias = target_aliases().get(text)
    if alias is not None:
        return load_target(bundled[alias])
    p = Path(text)
    if p.suffix.lower() in (".yaml", ".yml") or p.exists() or "/" in text or "\\" in text:
        return load_target(p)
    names = ", ".join(bundled) or "none"
    raise InputError(f"--target {text}: no bundled target of that name (bundled: {names}; "
                     "or give the path of a .yaml file)")


def list_targets() -> list[tuple[str, str]]:
    """(name, description) of every bundled target, read without full validation."""
    rows = []
    for name, path in bundled_targets().items():
        try:
            doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            desc = str(doc.get("description", "")) if isinstance(doc, dict) else ""
            aliases = [a for a in (doc.get("aliases") or []) if isinstance(a, str)] if isinstance(doc, dict) else []
            if aliases:
                desc += f" (also named {', '.join(aliases)})"
        except (OSError, yaml.YAMLError):
            desc = "(unreadable)"
        rows.append((name, desc))
    return rows
