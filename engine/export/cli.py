"""``npu-studio compile``: one command from ONNX (or a project file) to the deployable bundle."""

from __future__ import annotations

import argparse
from pathlib import Path

from engine.cli import EXIT_OK, Out, UsageError, add_model_args, extra_command, load_model_arg
from engine.cli_options import integer
from engine.limits import excerpt
from engine.quant.cli import TerminalProgress, add_calib_args, calib_from_args


def _pins(items: list[str] | None) -> dict[str, str]:
    pins = {}
    for item in items or []:
        if "=" not in item:
            raise UsageError(f"--pin {excerpt(item)}: expected NODE=npu or NODE=cpu")
        node, dev = item.rsplit("=", 1)
        if dev not in ("npu", "cpu"):
            raise UsageError(f"--pin {excerpt(item)}: device must be npu or cpu")
        pins[node] = dev
    return pins


def options_from_args(args: argparse.Namespace):
    """CompileOptions from the parsed command line."""
    from engine.compiler import CompileOptions
    from engine.quant.config import QuantConfig

    quant = QuantConfig(method=args.method, per_channel=args.per_channel, symmetric=args.symmetric,
                        dtype=args.dtype, reduce_range=args.reduce_range)
    from engine.passes.cli import disabled_names

    return CompileOptions(quant=quant, disabled_passes=disabled_names(args.disable), pins=_pins(args.pin),
                          allow_synthetic_calibration=args.allow_synthetic_calibration,
                          analysis_samples=args.analysis_samples, vela=bool(getattr(args, "vela", False)),
                          require_tflite=not getattr(args, "no_tflite", False),
                          allow_float_ops=bool(getattr(args, "allow_float_ops", False)))


def _from_project(args: argparse.Namespace):
    """(graph, target, options, calibration path) from a .npuproj file; command-line flags win."""
    import dataclasses

    from engine.project import open_project

    graph, proj = open_project(args.model)
    options = options_from_args(args)
    q = proj.quantization or {}
    quant_fields = {k: q[k] for k in ("method", "per_channel", "symmetric", "dtype", "percentile", "reduce_range")
                    if k in q}
    flags_given = {k for k in quant_fields if getattr(args, k, None) not in (None, False, _DEFAULTS.get(k))}
    quant = dataclasses.replace(options.quant, **{k: v for k, v in quant_fields.items() if k not in flags_given})
    disabled = tuple(options.disabled_passes) + tuple(k for k, on in (proj.passes or {}).items() if on is False)
    pins = {**proj.pins, **options.pins}
    options = dataclasses.replace(options, quant=quant, disabled_passes=disabled, pins=pins)
    return graph, args.target or proj.target, options, q.get("calibration")


def _inputs_outside(outdir: Path, inputs: list) -> None:
    """Refuse an OUTDIR that holds an input: replacing the folder (--force) would delete it."""
    root = outdir.resolve()
    for item in inputs:
        if item and Path(item).exists():
            p = Path(item).resolve()
            if p == root or root in p.parents:
                raise UsageError(f"-o {outdir}: holds the input {item}; write the bundle to another folder")


_DEFAULTS = {"method": "percentile", "dtype": "int8", "percentile": 99.99}


def cmd_compile(args: argparse.Namespace, out: Out) -> int:
    """Compile and write the bundle."""
    from engine.compiler import compile_model
    from engine.export.artifacts import check_outdir, write_bundle

    outdir = Path(args.output)
    check_outdir(outdir, args.force)  # fail before any long work
    _inputs_outside(outdir, [args.model, args.calib, args.target])
    if str(args.model).endswith(".npuproj"):
        graph, target, options, calib_path = _from_project(args)
        if calib_path and not args.calib:
            args.calib = calib_path
    else:
        graph = load_model_arg(args)
        target, options = args.target, options_from_args(args)
    if target is None:
        raise UsageError("--target is required (a bundled name, see `npu-studio simulate --list-targets`, or a YAML)")
    data = calib_from_args(args, graph)
    progress = TerminalProgress(out, args.quiet)
    result = compile_model(graph, target, data, options, progress=progress)
    hashes = write_bundle(result, outdir, force=args.force)
    summ = result.sim.summary()
    out.line(f"target {result.target.name}: simulated latency {result.sim.latency_us:.1f} us, "
             f"{summ['npu_ops']} NPU ops, {summ['cpu_ops']} CPU ops, {summ['transfers']} transfers")
    if result.quant is not None:
        for name, o in result.quant.report()["outputs"].items():
            out.line(f"output {name}: SQNR {o['sqnr_db']:.2f} dB vs FP32 ({result.quant.config.method})")
    for d in result.diagnostics:
        if d.severity == "warning":
            out.info(f"warning: {d.message}")
    if result.vela is not None:
        v = result.vela
        out.line(f"vela: {v.total_cycles} cycles ({v.latency_us:.1f} us), {v.npu_ops} NPU ops, {v.cpu_ops} CPU ops")
    out.line(f"wrote {len(hashes)} files to {outdir}: {', '.join(sorted(hashes))}")
    out.line(f"report: {outdir / 'report.html'}")
    return EXIT_OK


@extra_command
def _add_compile(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compile", help="optimize, quantize, place and simulate; write the deployable bundle")
    add_model_args(p)
    p.add_argument("--target", metavar="T", help="bundled target name or target YAML")
    add_calib_args(p)
    p.add_argument("-o", "--output", required=True, metavar="OUTDIR", help="folder the bundle is written to")
    p.add_argument("--force", action="store_true", help="replace an existing non-empty OUTDIR")
    p.add_argument("--allow-synthetic-calibration", action="store_true",
                   help="quantize with random inputs when no --calib is given (the report warns)")
    p.add_argument("--method", choices=("minmax", "percentile", "entropy", "mse"), default="percentile",
                   help="calibration method of activation ranges")
    p.add_argument("--per-channel", action="store_true", help="per-output-channel weight scales")
    p.add_argument("--symmetric", action="store_true", help="symmetric activations (zero point 0)")
    p.add_argument("--dtype", choices=("int8", "uint8", "int16"), default="int8", help="activation type")
    p.add_argument("--reduce-range", action="store_true", help="7-bit weights (for x86 CPUs without VNNI)")
    p.add_argument("--disable", action="append", metavar="PASS", help="switch off an optimizer pass (repeatable)")
    p.add_argument("--pin", action="append", metavar="NODE=npu|cpu", help="force a node's device (repeatable)")
    p.add_argument("--analysis-samples", type=integer(0, 10_000), default=8)
    p.add_argument("--vela", action="store_true",
                   help="run Arm's vela on model.tflite (needs the ethos-u extra); its outputs go to OUTDIR/vela/")
    p.add_argument("--allow-float-ops", action="store_true",
                   help="for a target that exports TFLite: keep an op with no int8 TFLite form float between "
                        "DEQUANTIZE and QUANTIZE in model.tflite (plan.json and report.html list them)")
    p.add_argument("--no-tflite", action="store_true",
                   help="for a target that exports TFLite: write the bundle without model.tflite when an op "
                        "has no TFLite int8 form (a warning instead of an error)")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    p.set_defaults(func=cmd_compile)
