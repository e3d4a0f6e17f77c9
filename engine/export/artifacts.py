"""The compiled bundle: models, plan, runtime config, report and manifest, written atomically.

Files are built in a temporary folder beside OUTDIR and renamed into place at the end, so an
interrupted compile never leaves a bundle that looks complete. Nothing time-dependent is
written (same inputs, byte-identical files).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import onnx
import yaml

from engine.compiler import CompileResult
from engine.errors import InputError
from engine.ir.onnx_io import to_onnx

BUNDLE_FILES = ("model.opt.onnx", "model.qdq.onnx", "plan.json", "runtime.yaml", "report.html", "manifest.json")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _json(doc: Any) -> bytes:
    return (json.dumps(doc, indent=2, sort_keys=False, ensure_ascii=False) + "\n").encode("utf-8")


def fused_groups(result: CompileResult) -> list[dict[str, Any]]:
    """Every node the optimizer rewrote, with the original nodes it came from."""
    out = []
    for n in result.optimized.toposort():
        prov = n.meta.get("provenance")
        if prov:
            rec = {"node": n.name, "op_type": n.op_type, "from": list(prov)}
            if n.activation:
                rec["activation"] = n.activation.op_type
            out.append(rec)
    return out


def _tool_version() -> str:
    import engine

    return engine.__version__


def _model_entry(result: CompileResult) -> dict[str, Any]:
    src = result.source.source_path or result.source.name
    proto = to_onnx(result.source).SerializeToString()
    return {"name": Path(str(src)).stem if src else result.source.name, "sha256": _sha256(proto),
            "inputs": [{"name": v.name, "shape": list(v.type.shape or ()), "dtype": str(v.type.dtype)}
                       for v in result.source.inputs],
            "outputs": [v.name for v in result.source.outputs]}


def plan_document(result: CompileResult) -> dict[str, Any]:
    """plan.json: the simulate document plus quantization parameters and fusion provenance."""
    doc = result.sim.to_json(events=True)
    doc["precision"] = result.precision
    doc["fused"] = fused_groups(result)
    if result.quant is not None:
        qp = result.quant.model.params_json()
        doc["quantization"] = {"config": result.quant.config.to_json(), **qp}
        per_node = result.quant.model.node_params
        for op in doc["ops"]:
            node_p = per_node.get(op["node"])
            if node_p is not None:
                op["quant"] = {"precision": result.quant.model.node_precision.get(op["node"]),
                               "inputs": {k: v.to_json() for k, v in node_p.items()}}
    doc["optimize"] = {"passes": _trace_json(result)}
    if result.tflite is not None:
        doc["tflite"] = {"file": "model.tflite", **result.tflite.summary()}
    if result.vela is not None:
        from engine.export.vela import node_cycles

        doc["vela"] = result.vela.to_json(result.sim.latency_us)
        cycles = node_cycles(result.vela)
        for op in doc["ops"]:
            if op["node"] in cycles:
                op["vela_cycles"] = cycles[op["node"]]
    return doc


def _trace_json(result: CompileResult) -> list[dict[str, Any]]:
    """The pass trace without wall-clock times (they would make the bundle irreproducible)."""
    out = []
    for r in result.optimize_trace:
        rec = r.to_json()
        rec.pop("ms", None)
        out.append(rec)
    return out


def runtime_document(result: CompileResult, model: dict[str, Any]) -> dict[str, Any]:
    """runtime.yaml: what a deployment service reads (the field notes' sketch plus placement)."""
    summ = result.sim.summary()
    has_cpu = summ["cpu_ops"] > 0
    return {
        "model": {"id": f"{model['name']}-{model['sha256'][:12]}", "file": "model.qdq.onnx" if result.quantized
                  else "model.opt.onnx",
                  "inputs": [{"name": i["name"], "shape": i["shape"], "dtype": i["dtype"]} for i in model["inputs"]],
                  "outputs": model["outputs"]},
        "devices": {"primary": f"npu:{result.target.name}", "fallback": "cpu",
                    "fallback_enabled": True, "fallback_ops": sorted({o.op_type for o in result.sim.ops
                                                                      if o.device == "cpu"})},
        "precision": {"mode": result.precision,
                      "calibration_set": result.calibration_source or None,
                      "method": result.quant.config.method if result.quant else None,
                      "per_channel": result.quant.config.per_channel if result.quant else None},
        "runtime": {"fusion": True, "profiling": result.options.profiling, "max_batch": result.options.max_batch,
                    "queue_depth": 2},
        "placement": {"npu_ops": summ["npu_ops"], "cpu_ops": summ["cpu_ops"], "partitions": summ["partitions"],
                      "transfers": summ["transfers"], "heterogeneous": has_cpu,
                      "simulated_latency_us": round(result.sim.latency_us, 3)},
    }


def report_document(result: CompileResult, plan: dict[str, Any], model: dict[str, Any]) -> dict[str, Any]:
    """What report.html renders."""
    return {
        "tool_version": _tool_version(),
        "model": model,
        "precision": result.precision,
        "simulation": plan,
        "optimize": {"nodes_before": len(result.source.nodes), "nodes_after": len(result.optimized.nodes),
                     "passes": _trace_json(result)},
        "fused": plan["fused"],
        "quantization": result.quant.report() if result.quant is not None else None,
        "diagnostics": [d.to_json() for d in result.diagnostics] + plan.get("diagnostics", []),
    }


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return " ".join(text.splitlines()[0].split())[:300] if text else type(exc).__name__


def _source_must_pass_full_check(source: Any) -> None:
    """A source model that the full checker refuses at the given shapes is bad input (exit 2):
    e.g. an If branch that is invalid for the --shape chosen (silero VAD's 8 kHz branch at 512
    samples), which onnxruntime would refuse too."""
    try:
        onnx.checker.check_model(to_onnx(source), full_check=True)
    except Exception as exc:  # the checker raises several exception types
        where = getattr(source, "source_path", None) or "model"
        raise InputError(f"{where}: at the fixed input shapes the model fails the ONNX checker's full check "
                         f"(onnxruntime would refuse it too): {_first_line(exc)}") from None


def bundle_files(result: CompileResult) -> dict[str, bytes]:
    """Every bundle file's bytes (manifest last, hashing the others)."""
    from engine.export.report import render_report

    files: dict[str, bytes] = {}
    for name, graph in (("model.opt.onnx", result.optimized),
                        ("model.qdq.onnx", result.quant.graph if result.quant is not None else None)):
        if graph is None:
            continue
        proto = to_onnx(graph)
        try:
            onnx.checker.check_model(proto, full_check=True)
        except Exception as exc:  # the checker raises several exception types
            _source_must_pass_full_check(result.source)
            raise RuntimeError(f"{name} fails the ONNX checker: {_first_line(exc)}") from exc
        if name == "model.qdq.onnx":
            from engine.quant.verify import check_qdq_scales

            check_qdq_scales(proto)
        files[name] = proto.SerializeToString()
    if result.tflite is not None:
        from engine.export.tflite import export_bytes

        files["model.tflite"] = export_bytes(result.tflite)
    if result.vela is not None:
        files.update({f"vela/{k}": v for k, v in sorted(result.vela.files.items())})
    model = _model_entry(result)  # serializes and hashes the source once per bundle
    plan = plan_document(result)
    files["plan.json"] = _json(plan)
    files["runtime.yaml"] = yaml.safe_dump(runtime_document(result, model), sort_keys=False).encode("utf-8")
    files["report.html"] = render_report(report_document(result, plan, model)).encode("utf-8")
    manifest = {
        "files": {k: _sha256(v) for k, v in sorted(files.items())},
        "inputs": {"model": {"name": model["name"], "sha256": model["sha256"]},
                   "target": {"name": result.target.name, "summary": result.target.summary()},
                   "calibration": result.calibration_source or None,
                   "options": {"quant": result.options.quant.to_json(),
                               "disabled_passes": list(result.options.disabled_passes),
                               "pins": dict(sorted(result.options.pins.items()))}},
        "tool_version": _tool_version(),
    }
    files["manifest.json"] = _json(manifest)
    return files


def check_outdir(outdir: Path, force: bool) -> None:
    """Refuse an existing non-empty folder (unless forced) or an unwritable parent, before any work."""
    if outdir.exists() and not outdir.is_dir():
        raise InputError(f"{outdir}: exists and is not a folder")
    if outdir.exists() and any(outdir.iterdir()) and not force:
        raise InputError(f"{outdir}: folder exists and is not empty (use --force to replace it)")
    parent = outdir.resolve().parent
    if not parent.exists():
        raise InputError(f"{outdir}: parent folder {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise InputError(f"{outdir}: cannot write into {parent} (permission denied)")


def write_bundle(result: CompileResult, outdir: str | Path, force: bool = False) -> dict[str, str]:
    """Write the bundle atomically; returns name -> sha256."""
    outdir = Path(outdir)
    check_outdir(outdir, force)
    files = bundle_files(result)
    parent = outdir.resolve().parent
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{outdir.name}.", suffix=".partial", dir=parent))
    except OSError as exc:
        raise InputError(f"{outdir}: cannot write: {exc.strerror}") from None
    try:
        for name, data in files.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            with open(tmp / name, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        os.chmod(tmp, 0o755)
        if outdir.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{outdir.name}.", suffix=".old", dir=parent))
            os.rmdir(old)
            os.replace(outdir, old)
            os.replace(tmp, outdir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, outdir)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise InputError(f"{outdir}: cannot write: {exc.strerror}") from None
    return {k: _sha256(v) for k, v in files.items()}
