"""Run one zoo model through every command and return its row of the compatibility matrix.

Shared by tests/engine/test_model_zoo.py and tools/gen_model_zoo.py so the test and
docs/MODEL_ZOO.md show the same matrix. One load per model is shared by the engine-level
commands; `gui --screenshot` goes through the real CLI in a subprocess.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

import engine
from tests.zoo import ZooEntry, locate

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ("inspect", "run", "optimize", "quantize", "simulate", "compile", "gui")
CALIB_SAMPLES = 2
TOL = 1e-3  # max abs error relative to the largest reference value


def targets() -> list[str]:
    """Every bundled target, as `simulate --list-targets` names them."""
    from engine.hw.target import list_targets

    return [name for name, _ in list_targets()]


def ort_run(model: onnx.ModelProto | str | Path, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime on one thread with its graph optimizations off (the second opinion)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    src = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    sess = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    return sess.run(None, {k: v for k, v in feed.items() if k in names})


def rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    """Max abs difference relative to the largest reference magnitude."""
    got = np.asarray(got)
    ref = np.asarray(ref)
    if got.shape != ref.shape:
        raise AssertionError(f"shape {got.shape} != onnxruntime's {ref.shape}")
    if ref.size == 0:
        return 0.0
    if ref.dtype.kind in "biu" or ref.dtype == bool:
        return float(np.mean(got != ref))
    g = got.astype(np.float64)
    r = ref.astype(np.float64)
    scale = max(float(np.abs(r).max()), 1e-6)
    return float(np.abs(g - r).max()) / scale


def _one_line(exc: BaseException) -> str:
    text = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {text}"[:200]


def _check(outputs: dict[str, np.ndarray], names: list[str], ref: list[np.ndarray], what: str,
           tol: float = TOL) -> float:
    worst = 0.0
    for name, r in zip(names, ref):
        err = rel_err(outputs[name], r)
        if not err <= tol:
            raise AssertionError(f"{what}: output {name!r} differs from onnxruntime by {err:.2e}")
        worst = max(worst, err)
    return worst


class ZooRun:
    """The matrix row of one entry: command -> "ok" / one-line error, plus measurements."""

    def __init__(self, entry: ZooEntry, workdir: Path) -> None:
        self.entry = entry
        self.workdir = workdir
        self.row: dict[str, str] = {}
        self.figures: dict[str, float | int | str] = {}
        self.seconds: dict[str, float] = {}

    def _do(self, command: str, fn: Callable[[], None]) -> bool:
        t0 = time.perf_counter()
        try:
            fn()
        except Exception as exc:  # the matrix records every failure as its one line
            self.row[command] = _one_line(exc)
            return False
        finally:
            self.seconds[command] = round(time.perf_counter() - t0, 2)
        self.row[command] = "ok"
        return True

    def run_all(self) -> dict[str, str]:
        """Fill `self.row` for every command (a command whose input failed is an error too)."""
        path, why = locate(self.entry)
        if path is None:
            return {c: f"skip: {why}" for c in COMMANDS}
        e = self.entry
        feed = e.feed()
        state: dict = {}

        def do_inspect() -> None:
            from engine.inspect import summarize

            g = engine.load(path, shapes=e.shapes)
            doc = summarize(g)
            state["graph"] = g
            self.figures["nodes"] = doc["nodes"]
            self.figures["macs"] = doc["macs"]
            if any(isinstance(d, str) and d == "?" for i in doc["inputs"] for d in i["shape"] or []):
                raise AssertionError("inspect shows an unnamed dynamic input dimension")

        def do_run() -> None:
            g = state["graph"]
            ours = engine.execute(g, feed)
            ref = ort_run(path, feed)
            names = [v.name for v in g.outputs]
            state["ref"] = ref
            state["names"] = names
            self.figures["run_err"] = _check(ours, names, ref, "run", e.tol)

        def do_optimize() -> None:
            from engine.ir.onnx_io import to_onnx

            res = engine.optimize(state["graph"])
            opt = res.graph
            self.figures["opt_nodes"] = f"{res.report()['nodes_before']}->{res.report()['nodes_after']}"
            proto = to_onnx(opt)
            ref = state.get("ref") or ort_run(path, feed)
            theirs = ort_run(proto, feed)
            names = [v.name for v in opt.outputs]
            self.figures["opt_err"] = _check(dict(zip(names, theirs)), names, ref, "optimized in onnxruntime", e.tol)
            state["opt"] = opt

        def calib() -> engine.quant.data.CalibrationSet:
            from engine.quant.data import CalibrationSet

            samples = [feed]
            for k in range(1, CALIB_SAMPLES):
                rng = np.random.default_rng(k)
                samples.append({n: (a + rng.normal(0, 0.05, a.shape).astype(a.dtype)
                                    if a.dtype.kind == "f" and a.ndim > 0 else a) for n, a in feed.items()})
            return CalibrationSet(f"{e.name} feed", len(samples), lambda i: samples[i])

        def do_quantize() -> None:
            from engine.ir.onnx_io import to_onnx

            g = state.get("opt") or state["graph"]
            from engine.quant.config import QuantConfig

            # per-channel weights, as a user of real models would ask (--per-channel): silero's
            # last encoder conv has channels whose weight ranges differ 600x (0.09 vs 54.9), and
            # one per-tensor scale drops its output cosine to 0.05
            res = engine.quantize(g, calib(), QuantConfig(per_channel=True), analysis_samples=1)
            proto = to_onnx(res.graph)
            outs = ort_run(proto, feed)
            if not all(np.all(np.isfinite(o)) for o in outs if o.dtype.kind == "f"):
                raise AssertionError("onnxruntime's run of the QDQ model has non-finite outputs")
            rep = res.report()
            cos = [v["cosine"] for v in rep["outputs"].values()]
            self.figures["quant_cos"] = round(min(cos), 4) if cos else ""

        def do_simulate() -> None:
            g = state.get("opt") or state["graph"]
            lat = {}
            for t in targets():
                r = engine.simulate(g, t)
                doc = r.to_json()
                lat[t] = round(doc["latency_us"], 1)
            self.figures["latency_us"] = ", ".join(f"{k} {v}" for k, v in lat.items())

        def do_compile() -> None:
            from engine.export.artifacts import write_bundle

            res = engine.compile(state["graph"], "phone-npu", calib())
            out = self.workdir / f"{e.name}.bundle"
            files = write_bundle(res, out, force=True)
            for name in ("model.opt.onnx", "model.qdq.onnx"):
                if name in files:
                    ort_run(out / name, feed)

        steps = [("inspect", do_inspect), ("run", do_run), ("optimize", do_optimize),
                 ("quantize", do_quantize), ("simulate", do_simulate), ("compile", do_compile)]
        for name, fn in steps:
            if "graph" not in state and name != "inspect":
                self.row[name] = "not run: the model did not load"
                continue
            self._do(name, fn)
        return self.row

    def run_gui(self) -> str:
        """`npu-studio gui MODEL --shape ... --calib FEED.npz --screenshot OUT.png` through the
        CLI's own entry point (argument parsing, error handling, exit status), in this process
        (offscreen Qt, main thread); records and returns the matrix cell."""
        path, why = locate(self.entry)
        if path is None:
            self.row["gui"] = f"skip: {why}"
            return self.row["gui"]
        e = self.entry

        def go() -> None:
            from io import StringIO

            from engine.cli import Out, main

            png = self.workdir / f"{e.name}.png"
            calib = self.workdir / f"{e.name}_calib.npz"
            np.savez(calib, **{k: v[None] for k, v in e.feed().items()})
            out, err = StringIO(), StringIO()
            rc = main(["gui", str(path), *e.shape_args(), "--target", "phone-npu", "--calib", str(calib),
                       "--screenshot", str(png)], Out(out, err))
            if rc != 0:
                last = (err.getvalue().strip().splitlines() or [f"exit {rc}"])[-1]
                raise RuntimeError(f"exit {rc}: {last}")
            if not png.is_file() or png.stat().st_size < 1000:
                raise AssertionError("no screenshot written")

        self._do("gui", go)
        return self.row["gui"]


def run_cli_subprocess(entry: ZooEntry, workdir: Path) -> str:
    """`python -m engine inspect MODEL --shape ... --json` in a fresh interpreter: the installed
    command line end to end (exit status 0 and one JSON document on stdout)."""
    import json

    path, why = locate(entry)
    if path is None:
        return f"skip: {why}"
    r = subprocess.run([sys.executable, "-m", "engine", "inspect", str(path), *entry.shape_args(), "--json"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        return (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
    json.loads(r.stdout)
    return "ok"


def run_matrix(entries: list[ZooEntry], workdir: Path | None = None) -> list[ZooRun]:
    """Every command on every entry, one model at a time (BLAS on one thread)."""
    from threadpoolctl import threadpool_limits

    workdir = Path(workdir or tempfile.mkdtemp(prefix="zoo_"))
    runs = [ZooRun(e, workdir) for e in entries]
    with threadpool_limits(1):
        for r in runs:
            r.run_all()
            r.run_gui()
    return runs


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def format_matrix(runs: list[ZooRun]) -> str:
    """The matrix as a Markdown table (model x command)."""
    head = "| model | " + " | ".join(COMMANDS) + " |"
    sep = "|---|" + "---|" * len(COMMANDS)
    lines = [head, sep]
    for r in runs:
        cells = [_cell(r.row.get(c, "")) for c in COMMANDS]
        lines.append(f"| {r.entry.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
