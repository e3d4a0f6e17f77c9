"""``npu-studio optimize MODEL -o OUT.onnx [--report R.json] [--disable PASS ...]``.

Loads the model, runs the default pipeline (engine/passes/pipeline.py), checks the result with
``onnx.checker.check_model(full_check=True)`` and only then writes it. If the checker refuses
the result, the pipeline runs again with the checker after every pass, so the pass responsible
is named in a diagnostic and its changes are dropped; a model that still fails is not written.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from engine.cli import EXIT_OK, Out, UsageError, add_model_args, extra_command, load_model_arg
from engine.cli_options import number
from engine.errors import InputError


@extra_command
def add_optimize_command(sub: argparse._SubParsersAction) -> None:
    """Register the ``optimize`` subcommand."""
    from engine.passes.pipeline import pass_names

    p = sub.add_parser("optimize", help="fold constants, clean up and fuse ops; write an optimized model",
                       description="Optimize an ONNX model: constant folding, cleanup and fusion passes. "
                                   f"Passes: {', '.join(pass_names())}.")
    add_model_args(p)
    p.add_argument("-o", "--output", required=True, metavar="OUT.onnx", help="where to write the optimized model")
    p.add_argument("--report", metavar="R.json", help="write the optimization report (JSON) here")
    p.add_argument("--disable", action="extend", nargs="+", default=[], metavar="PASS",
                   help="switch off passes or single rules by name (repeatable, or comma-separated)")
    p.add_argument("--no-raise-opset", action="store_true",
                   help="never raise the model's opset (fusions into newer ops are then skipped)")
    p.add_argument("--max-fold-mb", type=number(above=0, maximum=2**21), default=16.0, metavar="MB",
                   help="largest tensor constant folding may create (default 16)")
    p.add_argument("--keep-initializer-inputs", action="store_true",
                   help="treat initializers that are also graph inputs as overridable (not constant)")
    p.add_argument("--json", action="store_true", help="print the report on stdout instead of a summary")
    p.set_defaults(func=cmd_optimize)


def disabled_names(items: list[str] | None) -> tuple[str, ...]:
    """The --disable names (repeatable, comma-separated), each checked against the pipeline's."""
    from engine.passes.pipeline import known_names, pass_names

    disable = tuple(name.strip() for item in items or () for name in item.split(",") if name.strip())
    unknown = [d for d in disable if d not in known_names()]
    if unknown:
        from engine.limits import short
        from engine.passes.lower_npu import LOWERING_PASSES

        names = ", ".join([*pass_names(), *LOWERING_PASSES])
        raise UsageError(f"--disable {short(unknown[0])}: no such pass or rule (passes: {names}; "
                         "the lower_* passes run in compile and simulate, for the target)")
    return disable


def _options(args: argparse.Namespace) -> Any:
    from engine.passes.pipeline import OptimizeOptions

    disable = disabled_names(args.disable)
    return OptimizeOptions(disable=disable, max_fold_bytes=int(args.max_fold_mb * 2**20),
                           freeze_initializer_inputs=not args.keep_initializer_inputs,
                           allow_opset_raise=not args.no_raise_opset)


def _checked_model(graph: Any, options: Any) -> tuple[Any, Any]:
    """Optimize and convert; on a checker failure re-run with per-pass checks."""
    import onnx

    from engine.ir.onnx_io import to_onnx
    from engine.passes.pipeline import OptimizeOptions, optimize

    result = optimize(graph, options)
    model = to_onnx(result.graph)
    try:
        onnx.checker.check_model(model, full_check=True)
        return result, model
    except Exception as first:  # the checker raises several exception types
        strict = OptimizeOptions(**{**options.__dict__, "check_onnx": True})
        result = optimize(graph, strict)
        model = to_onnx(result.graph)
        try:
            onnx.checker.check_model(model, full_check=True)
        except Exception as exc:
            _input_must_pass_full_check(graph)
            raise RuntimeError(f"the optimized model fails the ONNX checker ({_first_line(exc)}); "
                               "nothing was written") from first
        return result, model


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return " ".join(text.splitlines()[0].split()) if text else type(exc).__name__


def _input_must_pass_full_check(graph: Any) -> None:
    """A model the full checker refuses before optimizing is bad input (exit 2), not our bug."""
    import onnx

    from engine.ir.onnx_io import to_onnx

    try:
        onnx.checker.check_model(to_onnx(graph), full_check=True)
    except Exception as exc:  # the checker raises several exception types
        where = graph.source_path or "model"
        raise InputError(f"{where}: the model fails the ONNX checker's full check (shape inference) "
                         f"before optimizing: {_first_line(exc)}") from None


def _write_outputs(model: Any, dest: Path, outputs: Any, report: tuple[Path, bytes] | None) -> None:
    """The model and the report, committed together (a model over 2 GiB with its .data file first)."""
    import onnx

    big = model.ByteSize() > 2**31 - 2**20
    if not big:
        files = {dest: model.SerializeToString()}
        if report is not None:
            files[report[0]] = report[1]
        outputs.commit(files)
        return
    fd, tmp = tempfile.mkstemp(prefix=".optimize-", suffix=".onnx", dir=str(dest.parent or Path(".")))
    os.close(fd)
    try:
        # over protobuf's 2 GiB: weights go to OUT.onnx.data beside the model
        onnx.save_model(model, tmp, save_as_external_data=True, all_tensors_to_one_file=True,
                        location=dest.name + ".data")
        if report is not None:
            outputs.commit({report[0]: report[1]})
        os.replace(tmp, dest)
    except OSError as exc:
        raise InputError(f"{dest}: cannot write: {exc.strerror}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def cmd_optimize(args: argparse.Namespace, out: Out) -> int:
    """Run the optimizer and write the model (and the report)."""
    from engine.outputs import Outputs

    options = _options(args)
    outputs = Outputs(inputs=[args.model])
    dest = outputs.add("-o", args.output)
    report_path = outputs.add("--report", args.report)
    graph = load_model_arg(args)
    result, model = _checked_model(graph, options)
    report = result.report()
    report["model"] = str(args.model)
    report["output"] = str(dest)
    report_bytes = (json.dumps(report, indent=2, default=str) + "\n").encode("utf-8")
    _write_outputs(model, dest, outputs, (report_path, report_bytes) if report_path else None)
    if args.json:
        out.json(report)
        return EXIT_OK
    out.line(f"{args.model}: {report['nodes_before']} -> {report['nodes_after']} nodes "
             f"({report['nodes_after_onnx']} in the written file), opset {report['opset']}")
    for rec in result.trace:
        if rec.modified or rec.restored:
            state = "RESTORED" if rec.restored else f"{len(rec.fired)} rewrites"
            out.line(f"  {rec.name:<34} {rec.nodes_before:>6} -> {rec.nodes_after:<6} {rec.ms:8.1f} ms  {state}")
    fused = report["fused"]
    if fused:
        example = fused[0]
        out.line(f"fused nodes: {len(fused)} (e.g. {example['node']} <- {', '.join(example['from'])})")
    notes = [d for d in result.diagnostics if d.severity == "info" and d.code == "rule-not-fired"]
    for d in result.diagnostics:
        if d not in notes:
            out.line(str(d))
    if notes:
        out.line(f"{len(notes)} rule matches did not fire (reasons in the report: passes[].not_fired)")
    out.line(f"wrote {dest}")
    if args.report:
        out.line(f"report: {args.report}")
    return EXIT_OK
