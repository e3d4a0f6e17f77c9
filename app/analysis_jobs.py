"""The analysis work that runs in worker threads (see app/workers.py): the live compile
(``engine.compiler.compile_model``, the CLI's driver, handed cached calibration statistics or
an earlier result so an undo or a quantization-only change does not redo what is known), re-simulation
for hardware and placement what-ifs, slider sweeps, sustained (thermal and stream) runs, the
tensor values behind the inspector's histograms and the mixed-precision candidates.

Nothing here touches Qt widgets. A job gets its own graph (a clone taken on the GUI thread) or
reads a published result's graphs without changing them; jobs that execute a graph build their
own Executor (the engine's per-graph executor cache is not meant for concurrent runs).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from app.workers import Cancelled, TaskControl, clone_unchanged
from engine.compiler import (
    INTEGER_PRECISIONS,
    CompileOptions,
    CompileResult,
    compile_model,
    quant_config_for,
    require_static,
)
from engine.errors import InputError
from engine.hw.target import HardwareTarget
from engine.ir.graph import Graph
from engine.quant.api import QuantResult
from engine.quant.config import QuantConfig
from engine.quant.data import CalibrationSet, ImagePreprocess
from engine.sim.timeline import OpRecord, SimOptions, SimResult, simulate

THRESHOLD_METHODS = ("minmax", "percentile", "entropy")
HIST_BINS = 80
TENSOR_SAMPLES = 2
THERMAL_POINTS = 1500


class AnalysisBlocked(ValueError):
    """The edited graph cannot be compiled as it is (the message says why, in one line)."""


@dataclass(frozen=True)
class AnalysisSettings:
    """What the compile panel sets: the same knobs as ``npu-studio compile`` (same defaults)."""

    target: str | None = None
    calibration: str | None = None
    preprocess: ImagePreprocess = field(default_factory=ImagePreprocess)
    quant: QuantConfig = field(default_factory=lambda: QuantConfig(method="percentile"))
    disabled_passes: tuple[str, ...] = ()
    analysis_samples: int = 8

    def options(self, pins: dict[str, str]) -> CompileOptions:
        """The CompileOptions the CLI would build from the same flags."""
        return CompileOptions(quant=self.quant, disabled_passes=tuple(self.disabled_passes), pins=dict(pins),
                              allow_synthetic_calibration=self.calibration is None,
                              analysis_samples=self.analysis_samples)


@dataclass
class Sustained:
    """Thermal (latency per iteration) and stream (throughput) figures of one simulation."""

    thermal: Any
    iterations: np.ndarray
    latency_us: np.ndarray
    stream: Any


@dataclass
class AnalysisResult:
    """One published analysis: the compile result and how the canvas maps onto it."""

    request_id: int
    graph_version: int
    compile: CompileResult
    settings: AnalysisSettings
    seconds: float
    op_of_source: dict[str, str]
    sources_of_op: dict[str, list[str]]
    cached: bool = False
    what_if_hardware: bool = False
    sustained: Sustained | None = None
    tensor_cache: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def sim(self) -> SimResult:
        """The simulation."""
        return self.compile.sim

    @property
    def quant(self) -> QuantResult | None:
        """The quantization (None for float targets)."""
        return self.compile.quant

    @property
    def latency_us(self) -> float:
        """Simulated latency of one inference."""
        return float(self.compile.sim.latency_us)

    def op(self, name: str) -> OpRecord | None:
        """The simulated record of an op of the compiled graph."""
        return next((o for o in self.compile.sim.ops if o.node == name), None)

    def layer_row(self, name: str) -> dict | None:
        """The quantization report's row of a node (CONTRACTS.md keys), or None."""
        q = self.compile.quant
        le = q.analysis.layer(name) if q is not None and q.analysis is not None else None
        return le.to_json() if le is not None else None


@dataclass
class AnalysisRequest:
    """Everything a compile job needs, captured on the GUI thread."""

    request_id: int
    graph_version: int
    graph: Graph  # the document's (compile_job works on a copy of it at graph_version)
    settings: AnalysisSettings
    target: HardwareTarget
    source_pins: dict[str, str]
    what_if_hardware: bool = False
    owner: str = ""  # the controller asking (a newer request of the same owner supersedes this one)


# -- caches ----------------------------------------------------------------------------------
class _Lru(OrderedDict):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def get_item(self, key: Any) -> Any:
        if key in self:
            self.move_to_end(key)
            return self[key]
        return None

    def put(self, key: Any, value: Any) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)


class AnalysisCache:
    """Calibration data, calibration statistics and whole optimize+quantize fronts, by content.

    Keys hash the serialized source model without the nodes nothing reads (the optimizer removes
    them), so undoing an edit finds the result of before it, and so does wiring a node nobody
    reads yet. A front being compiled is "in flight": a request for the same key waits for it
    (``front_or_compute``) instead of compiling it a second time, and a request that compiles a
    front of its own stops the older requests of the same controller (they are superseded).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data = _Lru(4)
        self._calib = _Lru(6)
        self._front = _Lru(8)
        self._flight: dict[Any, threading.Event] = {}
        self._requests: dict[tuple[str, int], TaskControl] = {}

    def __reduce__(self) -> tuple:
        # Sent to the worker process (app/worker_process.py) as that process's own cache: the jobs
        # that fill and read it run there.
        return shared_cache, ()

    def data(self, settings: AnalysisSettings, graph: Graph) -> tuple[CalibrationSet, bool]:
        """(calibration samples, synthetic?) for ``graph``'s inputs."""
        sig = tuple((v.name, tuple(v.type.shape or ()), str(v.type.dtype)) for v in graph.inputs)
        key = (settings.calibration, settings.preprocess if settings.calibration else None, sig)
        with self._lock:
            hit = self._data.get_item(key)
        if hit is not None:
            return hit
        if settings.calibration:
            from engine.quant.data import load_calibration

            value = (load_calibration(settings.calibration, graph, settings.preprocess), False)
        else:
            from engine.compiler import synthetic_calibration

            value = (synthetic_calibration(graph, CompileOptions().synthetic_samples), True)
        with self._lock:
            self._data.put(key, value)
        return value

    def calibration(self, key: Any) -> Any:
        with self._lock:
            return self._calib.get_item(key)

    def put_calibration(self, key: Any, value: Any) -> None:
        with self._lock:
            self._calib.put(key, value)

    def front(self, key: Any) -> Any:
        with self._lock:
            return self._front.get_item(key)

    def put_front(self, key: Any, value: Any) -> None:
        with self._lock:
            self._front.put(key, value)

    @contextlib.contextmanager
    def request(self, owner: str, request_id: int, control: TaskControl) -> Iterator[None]:
        """Register a running compile request (for ``front_or_compute`` to supersede)."""
        with self._lock:
            self._requests[(owner, request_id)] = control
        try:
            yield
        finally:
            with self._lock:
                self._requests.pop((owner, request_id), None)

    def front_or_compute(self, key: Any, owner: str, request_id: int, control: TaskControl,
                         compute: Callable[[], CompileResult]) -> tuple[CompileResult, bool]:
        """(the front of ``key``, cached?): the cached one, the one in flight once it lands
        (polling ``control`` for a cancel meanwhile), else ``compute()``'s, after cancelling
        the older requests of ``owner`` (only the newest one's result is shown)."""
        while True:
            with self._lock:
                hit = self._front.get_item(key)
                if hit is not None:
                    return hit, True
                landed = self._flight.get(key)
                if landed is None:
                    landed = self._flight[key] = threading.Event()
                    older = [c for (o, r), c in self._requests.items() if o == owner and r < request_id]
                    break
            while not landed.wait(0.05):  # another request compiles this very front
                control.check()
            control.check()  # landed: cached now, or that request was cancelled (compile it here)
        for c in older:
            c.cancel()
        try:
            front = compute()
            self.put_front(key, front)
            return front, False
        finally:
            with self._lock:
                self._flight.pop(key, None)
            landed.set()


_SHARED: AnalysisCache | None = None


def shared_cache() -> AnalysisCache:
    """This process's cache of the jobs sent to it (one per worker process)."""
    global _SHARED
    if _SHARED is None:
        _SHARED = AnalysisCache()
    return _SHARED


def graph_key(graph: Graph, live_only: bool = False) -> str | None:
    """A content hash of the graph as ONNX (None when it cannot be serialized); ``live_only``:
    of the graph without the nodes nothing reads (``graph`` itself is not changed)."""
    from engine.ir.onnx_io import to_onnx

    try:
        if live_only:
            from engine.ir.clone import clone_graph
            from engine.passes.eliminate import EliminateDeadCode

            graph = EliminateDeadCode().call(clone_graph(graph)).graph
        data = to_onnx(graph).SerializeToString(deterministic=True)
    except Exception:  # an edited graph may not serialize; it is then simply not cached
        return None
    return hashlib.sha256(data).hexdigest()


# -- the compile job ---------------------------------------------------------------------------
_STAGES = {"optimize": (0.0, 0.1), "calibrate": (0.1, 0.5), "analyze": (0.5, 0.92), "simulate": (0.92, 1.0)}
_STAGE_WORDS = {"optimize": "optimizing", "calibrate": "calibrating", "analyze": "measuring the int8 error",
                "simulate": "simulating", "tflite": "lowering to TFLite", "vela": "running vela"}


def stage_text(stage: str, done: int, total: int) -> str:
    """What the progress says of a compile stage: "calibrating 3/8", "simulating"."""
    word = _STAGE_WORDS.get(stage, stage)
    return f"{word} {done}/{total}" if total > 1 else word


def _progress(control: TaskControl) -> Callable[[str, int, int], None]:
    def step(stage: str, done: int, total: int) -> None:
        if control.cancelled():
            raise Cancelled()
        lo, hi = _STAGES.get(stage, (0.0, 1.0))
        control.progress(lo + (hi - lo) * (done / total if total else 1.0), stage_text(stage, done, total))
    return step


def structural_problems(graph: Graph) -> list[str]:
    """Why the graph cannot be compiled as it is: broken links, unconnected required inputs."""
    from engine.ir.verify import verify
    from nodes import registry

    out = [d.message for d in verify(graph)]
    for n in graph.nodes:
        spec = registry.get(n.op_type, n.domain)
        if spec is None:
            continue
        for i, port in enumerate(spec.inputs):
            if port.variadic:
                break
            if not port.optional and n.input(i) is None:
                out.append(f"input {i} ({port.name}) of {n.name} ({n.op_type}) is not connected")
    for v in graph.outputs:
        if v.producer() is None and v.name not in graph.initializers and v not in graph.inputs:
            out.append(f"graph output {v.name} is not produced by any node")
    return out


def source_mapping(source: Graph, sim: SimResult) -> tuple[dict[str, str], dict[str, list[str]]]:
    """(source node -> compiled op, compiled op -> source nodes) through names and provenance."""
    names = {n.name for n in source.nodes}
    op_of: dict[str, str] = {}
    sources_of: dict[str, list[str]] = {}
    for o in sim.ops:
        srcs = [p for p in (o.provenance or []) if p in names]
        if o.node in names and o.node not in srcs:
            srcs.insert(0, o.node)
        sources_of[o.node] = srcs
        for s in srcs:
            op_of.setdefault(s, o.node)
    return op_of, sources_of


def effective_pins(optimized: Graph, source_pins: dict[str, str]) -> dict[str, str]:
    """Pins of the compiled graph: a node keeps its own; a fused node takes the pin all of its
    original nodes agree on."""
    out: dict[str, str] = {}
    for n in optimized.nodes:
        if n.name in source_pins:
            out[n.name] = source_pins[n.name]
            continue
        prov = n.meta.get("provenance") or []
        devs = {source_pins.get(p) for p in prov}
        if prov and len(devs) == 1 and None not in devs:
            out[n.name] = devs.pop()  # type: ignore[assignment]
    return out


def compile_job(control: TaskControl, req: AnalysisRequest, cache: AnalysisCache) -> AnalysisResult:
    """Compile a clone of the document's graph with the engine's driver (``compile_model``),
    handing it what the cache knows: the calibration statistics of this graph and data (a
    quantization-only change does not observe the samples again) or a whole earlier result
    (an undo, a pin, a node nothing reads: only the simulation runs again), also one still
    being compiled for an older request (AnalysisCache.front_or_compute)."""
    with cache.request(req.owner, req.request_id, control):
        return _compile(control, req, cache)


def _compile(control: TaskControl, req: AnalysisRequest, cache: AnalysisCache) -> AnalysisResult:
    t0 = time.perf_counter()
    req = dataclasses.replace(req, graph=clone_unchanged(req.graph, req.graph_version))
    problems = structural_problems(req.graph)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise AnalysisBlocked(f"the graph cannot be compiled: {problems[0]}{more}")
    require_static(req.graph)
    s, target = req.settings, req.target
    key = graph_key(req.graph, live_only="eliminate_dead_code" not in s.disabled_passes)
    qcfg = quant_config_for(s.quant, target)
    # The optimized graph (whose tensors the statistics name) depends on the target's rules and
    # lowerings: statistics are reused only for the same target (the worker's cache outlives a
    # target switch and a window).
    tkey = hashlib.sha256(repr(target).encode()).hexdigest()
    ckey = (key, tkey, s.disabled_passes, s.calibration, s.preprocess, qcfg.bins) if key else None
    fkey = (key, tkey, s.disabled_passes, s.calibration, s.preprocess, repr(qcfg), s.analysis_samples,
            target.npu.precision) if key else None
    step = _progress(control)

    def compute() -> CompileResult:
        data = cache.data(s, req.graph)[0] if s.calibration and target.npu.precision in INTEGER_PRECISIONS else None
        front = compile_model(req.graph, target, data, s.options(req.source_pins), progress=step,
                              cancel=control.cancelled, calibration_stats=cache.calibration(ckey) if ckey else None,
                              histograms=True)
        if ckey and front.quant is not None:
            cache.put_calibration(ckey, front.quant.calibration)
        return front

    if fkey:
        front, cached = cache.front_or_compute(fkey, req.owner, req.request_id, control, compute)
    else:
        front, cached = compute(), False
    pins = effective_pins(front.optimized, req.source_pins)
    result = front
    if cached or pins != dict(front.options.pins):
        result = compile_model(req.graph, target, options=s.options(pins), progress=step, reuse=front)
    op_of, sources_of = source_mapping(req.graph, result.sim)
    return AnalysisResult(req.request_id, req.graph_version, result, s, time.perf_counter() - t0, op_of,
                          sources_of, cached=cached, what_if_hardware=req.what_if_hardware)


# -- re-simulation and what-ifs --------------------------------------------------------------
def precisions_of(base: AnalysisResult) -> dict[str, str] | None:
    """The per-node precisions the compile priced its ops by (as compile_model simulates)."""
    q = base.compile.quant
    return dict(q.model.node_precision) if q is not None else None


def resimulate(base: AnalysisResult, target: HardwareTarget, pins: dict[str, str] | None = None,
               request_id: int | None = None, what_if: bool = True) -> AnalysisResult:
    """``base`` simulated again on another target (or with other pins); no recompile."""
    t0 = time.perf_counter()
    pins = dict(base.compile.options.pins) if pins is None else pins
    sim = simulate(base.compile.optimized, target, SimOptions(pins=pins or None, precisions=precisions_of(base)))
    comp = dataclasses.replace(base.compile, target=target, sim=sim,
                               options=dataclasses.replace(base.compile.options, pins=dict(pins)))
    op_of, sources_of = source_mapping(base.compile.source, sim)
    return AnalysisResult(base.request_id if request_id is None else request_id, base.graph_version, comp,
                          base.settings, time.perf_counter() - t0, op_of, sources_of, cached=True,
                          what_if_hardware=what_if)


def resimulate_job(control: TaskControl, base: AnalysisResult, target: HardwareTarget, request_id: int) -> AnalysisResult:
    """Worker form of ``resimulate`` (hardware sliders)."""
    control.progress(0.2, "simulating")
    return resimulate(base, target, request_id=request_id)


@dataclass
class PinPreview:
    """What pinning some ops would change, before it is applied."""

    ops: list[str]
    device: str | None
    before_us: float
    after_us: float
    added: list[tuple[str, str, str, float]]  # (tensor, from device, to device, us)
    removed: list[tuple[str, str, str, float]]
    moved: list[tuple[str, str, str]]  # (op, device before, device after)
    ignored: list[str]

    @property
    def delta_us(self) -> float:
        """Latency change (negative: faster)."""
        return self.after_us - self.before_us


def _transfer_set(sim: SimResult) -> dict[tuple[str, str, str], float]:
    return {(t.transfer.value, t.transfer.from_device, t.transfer.to_device):
            t.transfer.latency_us + t.transfer.conversion_us for t in sim.transfers}


def pin_preview_job(control: TaskControl, base: AnalysisResult, ops: list[str], device: str | None) -> PinPreview:
    """Simulate ``base`` with ``ops`` pinned to ``device`` (None: unpinned)."""
    control.progress(0.2, "what-if")
    pins = dict(base.compile.options.pins)
    for op in ops:
        if device is None:
            pins.pop(op, None)
        else:
            pins[op] = device
    after = simulate(base.compile.optimized, base.compile.target,
                     SimOptions(pins=pins or None, precisions=precisions_of(base)))
    before_t, after_t = _transfer_set(base.sim), _transfer_set(after)
    added = [(*k, after_t[k]) for k in after_t if k not in before_t]
    removed = [(*k, before_t[k]) for k in before_t if k not in after_t]
    dev_before = {o.node: o.device for o in base.sim.ops}
    moved = [(o.node, dev_before.get(o.node, "?"), o.device) for o in after.ops if dev_before.get(o.node) != o.device]
    ignored = [d.node for d in after.diagnostics if d.code == "pin-ignored" and d.node in ops]
    return PinPreview(list(ops), device, base.latency_us, float(after.latency_us), added, removed, moved, ignored)


def sustained_job(control: TaskControl, sim: SimResult) -> Sustained:
    """Thermal iterations and stream throughput of one simulation (the CLI's defaults)."""
    from engine.sim.stream import simulate_stream
    from engine.sim.thermal import simulate_thermal

    control.progress(0.1, "thermal")
    th = simulate_thermal(sim)
    per = np.asarray(th.per_run_us, dtype=np.float64)
    if per.size > THERMAL_POINTS:
        idx = np.unique(np.geomspace(1, per.size, THERMAL_POINTS).astype(np.int64) - 1)
    else:
        idx = np.arange(per.size)
    control.check()
    control.progress(0.8, "stream")
    st = simulate_stream(sim)
    return Sustained(th, idx + 1, per[idx], st)


# -- hardware sweeps -------------------------------------------------------------------------
def memory_bound_share(sim: SimResult) -> float:
    """Share of the NPU op time spent in memory-bound ops."""
    npu = [o for o in sim.ops if o.device == "npu"]
    total = sum(o.latency_us for o in npu)
    return sum(o.latency_us for o in npu if o.cost.bound == "memory") / total if total else 0.0


def sweep_job(control: TaskControl, base: AnalysisResult, targets: list[tuple[float, HardwareTarget]]
              ) -> list[tuple[float, float, float]]:
    """(value, latency us, memory-bound share) of ``base`` on each target."""
    pins = dict(base.compile.options.pins) or None
    out = []
    for k, (value, tgt) in enumerate(targets):
        control.check()
        sim = simulate(base.compile.optimized, tgt, SimOptions(pins=pins, suggest=False, precisions=precisions_of(base)))
        out.append((value, float(sim.latency_us), memory_bound_share(sim)))
        control.progress((k + 1) / len(targets), "sweep")
    return out


# -- the inspector's tensors -----------------------------------------------------------------
@dataclass
class TensorView:
    """One tensor of an op: FP32 vs quantized value histograms and the methods' thresholds."""

    tensor: str
    role: str
    edges: np.ndarray
    fp32: np.ndarray
    quantized: np.ndarray | None
    thresholds: dict[str, tuple[float, float]]
    method: str


def _visible(qgraph: Graph, name: str) -> str:
    dq = f"{name}_dequantized"
    return dq if dq in qgraph.values else name


def _tensor_values(result: AnalysisResult, data: CalibrationSet) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """FP32 and QDQ values of every tensor on the first samples (computed once per result)."""
    hit = result.tensor_cache.get("values")
    if hit is not None:
        return hit
    from engine.sim.executor import Executor
    from engine.sim.feeds import check_feeds

    comp = result.compile
    assert comp.quant is not None
    fp_ex, q_ex = Executor(comp.optimized), Executor(comp.quant.graph)
    fp: dict[str, list[np.ndarray]] = {}
    q: dict[str, list[np.ndarray]] = {}
    for i in range(min(TENSOR_SAMPLES, len(data))):
        feeds = check_feeds(comp.optimized, data.sample(i))
        ref = fp_ex.run(feeds, keep_all=True)
        got = q_ex.run(check_feeds(comp.quant.graph, feeds), keep_all=True)
        for name, arr in ref.items():
            fp.setdefault(name, []).append(np.asarray(arr).ravel())
            vis = _visible(comp.quant.graph, name)
            if vis in got:
                q.setdefault(name, []).append(np.asarray(got[vis]).ravel())
    values = ({k: np.concatenate(v) for k, v in fp.items()}, {k: np.concatenate(v) for k, v in q.items()})
    result.tensor_cache["values"] = values
    return values


def op_tensors(result: AnalysisResult, op: str) -> list[tuple[str, str]]:
    """(tensor, role) of an op that have activation parameters: inputs first, then the output."""
    qr = result.quant
    node = result.compile.optimized.node_by_name(op)
    if qr is None or node is None:
        return []
    out = [(t, "input") for t in qr.model.node_params.get(op, {})]
    y = node.outputs[0].name if node.outputs and node.outputs[0] is not None else None
    if y is not None and (y in qr.model.activations or y in qr.calibration.stats):
        out.append((y, "output"))
    return out


def tensor_view_job(control: TaskControl, result: AnalysisResult, op: str, tensor: str, role: str,
                    cache: AnalysisCache) -> TensorView:
    """Histograms of ``tensor`` (FP32 and quantized) and the MinMax/Percentile/Entropy ranges."""
    from engine.quant.observers import HistogramObserver
    from engine.quant.params import type_limits

    qr = result.quant
    assert qr is not None
    control.progress(0.1, "running FP32 and quantized models")
    data = cache.data(result.settings, result.compile.source)[0]
    fp_vals, q_vals = _tensor_values(result, data)
    control.check()
    fp = fp_vals.get(tensor, np.zeros(0, np.float32))
    qv = q_vals.get(tensor) if tensor in qr.model.activations else None
    if qv is not None and qv.size != fp.size:
        qv = None
    lo = float(min(fp.min() if fp.size else 0.0, qv.min() if qv is not None and qv.size else 0.0))
    hi = float(max(fp.max() if fp.size else 0.0, qv.max() if qv is not None and qv.size else 0.0))
    if hi <= lo:
        hi = lo + 1.0
    edges = np.linspace(lo, hi, HIST_BINS + 1)
    h_fp = np.histogram(fp, edges)[0].astype(np.float64)
    h_q = np.histogram(qv, edges)[0].astype(np.float64) if qv is not None else None
    thresholds: dict[str, tuple[float, float]] = {}
    obs = qr.calibration.stats.get(tensor)
    cfg = qr.config
    precision = qr.model.node_precision.get(op, cfg.dtype)
    dtype = precision if precision in ("int8", "uint8", "int16") else cfg.dtype
    _, qmin, qmax = type_limits(dtype)
    nlevels = qmax - qmin + 1
    if isinstance(obs, HistogramObserver):
        for m in THRESHOLD_METHODS:
            control.check()
            r = obs.range_for(m, min(nlevels, 256) if dtype != "int16" else nlevels, cfg.percentile)
            thresholds[m] = (float(r[0]), float(r[1]))
    control.progress(1.0, "done")
    return TensorView(tensor, role, edges, h_fp, h_q, thresholds, cfg.method_overrides.get(tensor, cfg.method))


# -- mixed precision -------------------------------------------------------------------------
@dataclass
class PrecisionCandidates:
    """Layers that could run at a higher precision: output SQNR gain and latency cost each."""

    precision: str
    base_sqnr_db: float
    candidates: list[Any]
    raised: dict[str, str]


def raise_precision_for(target: HardwareTarget) -> str | None:
    """The precision a layer is raised to on this target (int16 when the NPU has it)."""
    for p in ("int16", "fp16", "bf16"):
        if p in target.npu.precisions:
            return p
    return None


def precision_job(control: TaskControl, result: AnalysisResult, cache: AnalysisCache, top_k: int = 10
                  ) -> PrecisionCandidates:
    """Output SQNR gained by raising each of the ``top_k`` most sensitive layers alone, and the
    latency that costs on the simulated target (engine.quant.mixed.latency_cost_from_sim)."""
    from engine.ir.clone import clone_graph
    from engine.quant.mixed import candidate_gains, latency_cost_from_sim, output_quality

    comp = result.compile
    qr = comp.quant
    if qr is None or qr.analysis is None:
        raise InputError("no quantization to refine: choose an integer target and calibration data")
    prec = raise_precision_for(comp.target)
    if prec is None:
        raise InputError(f"target {comp.target.name!r} has no higher precision than {comp.target.npu.precision}")
    cfg = qr.config
    ranking = [le.node for le in qr.analysis.sensitivity() if cfg.node_precision(le.node) != prec][:top_k]
    cost = latency_cost_from_sim(comp.sim, comp.target)  # the pricing `npu-studio quantize` uses
    data = cache.data(result.settings, comp.source)[0]
    graph = clone_graph(comp.optimized)
    samples = max(1, min(8, result.settings.analysis_samples))
    base, _ = output_quality(graph, data, cfg, qr.calibration, samples)

    def step(k: int, total: int, node: str) -> None:
        control.check()
        control.progress(0.05 + 0.95 * k / max(total, 1), f"trying {node} at {prec}")

    out = candidate_gains(graph, data, cfg, qr.calibration, ranking, prec, samples, cost, base_sqnr_db=base,
                          progress=step)
    raised = {n: p for n, p in cfg.precision.items()}
    return PrecisionCandidates(prec, base, out, raised)


def calibration_guess(model_path: Path | None) -> str | None:
    """A calibration file that goes with a model: NAME_calib.npz beside it or in ../data, also
    with the model's last word dropped (mobilenet_demo -> mobilenet_calib.npz)."""
    if model_path is None:
        return None
    stem = model_path.stem
    stems = [stem]
    if "_" in stem:
        stems.append(stem.rsplit("_", 1)[0])
    for folder in (model_path.parent, model_path.parent.parent / "data"):
        for s in stems:
            p = folder / f"{s}_calib.npz"
            if p.is_file():
                return str(p)
    return None
