"""``npu-studio quantize`` and the calibration options every command shares."""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from pathlib import Path

from engine.cli import EXIT_OK, Out, UsageError, add_model_args, extra_command, load_model_arg
from engine.cli_options import integer, number, numbers
from engine.errors import InputError
from engine.ir.graph import Graph
from engine.quant.data import CalibLimits, CalibrationSet, ImagePreprocess, load_calibration

IMAGE_BYTES_PER_PIXEL = 3 + 3 * 4 * 4  # the decoded RGB image and four float32 working copies


def add_calib_args(p: argparse.ArgumentParser, required: bool = False) -> None:
    """--calib and the image preprocessing options (CONTRACTS.md)."""
    p.add_argument("--calib", required=required, metavar="C",
                   help="calibration data: an .npz (N, *input_shape) per input name, or a folder of images/.npy")
    p.add_argument("--resize", metavar="H,W", help="resize images to H,W (default: the model input size)")
    p.add_argument("--mean", metavar="M[,M,M]", help="per-channel mean subtracted after scaling (default 0)")
    p.add_argument("--std", metavar="S[,S,S]", help="per-channel std divided after the mean (default 1)")
    p.add_argument("--scale", type=number(above=0, maximum=1e6), default=1 / 255,
                   help="pixel scale applied first (default 1/255)")
    p.add_argument("--layout", choices=("NCHW", "NHWC"), default="NCHW", help="model input layout")
    p.add_argument("--channels", choices=("RGB", "BGR", "GRAY"), default="RGB", help="channel order")
    p.add_argument("--max-samples", type=integer(1), default=None, help="use at most this many calibration samples")


def preprocess_from_args(args: argparse.Namespace) -> ImagePreprocess:
    """The ImagePreprocess of the parsed options."""
    from engine.limits import excerpt, require_budget

    resize = None
    if getattr(args, "resize", None):
        dims = numbers(args.resize, "--resize")
        if len(dims) != 2 or any(d <= 0 or d != int(d) for d in dims):
            raise UsageError(f"--resize {excerpt(args.resize)}: expected H,W (positive integers)")
        resize = (int(dims[0]), int(dims[1]))
        require_budget("--resize", resize[0] * resize[1], IMAGE_BYTES_PER_PIXEL, "each preprocessed image",
                       CalibLimits().max_sample_bytes, shown=f"{resize[0]},{resize[1]}")
    return ImagePreprocess(
        resize=resize,
        mean=numbers(args.mean, "--mean") if getattr(args, "mean", None) else (0.0,),
        std=numbers(args.std, "--std") if getattr(args, "std", None) else (1.0,),
        scale=getattr(args, "scale", 1 / 255),
        layout=getattr(args, "layout", "NCHW"),
        channels=getattr(args, "channels", "RGB"),
    )


def calib_from_args(args: argparse.Namespace, graph: Graph) -> CalibrationSet | None:
    """The calibration set named by --calib (None when not given)."""
    if not getattr(args, "calib", None):
        return None
    data = load_calibration(args.calib, graph, preprocess_from_args(args), CalibLimits())
    if getattr(args, "max_samples", None):
        data = data.take(args.max_samples)
    return data


class TerminalProgress:
    """A one-line progress display on stderr when it is a terminal (silent otherwise)."""

    def __init__(self, out: Out, quiet: bool = False) -> None:
        self.out = out
        self.enabled = not quiet and hasattr(out.stderr, "isatty") and out.stderr.isatty()
        self._last = ""

    def __call__(self, stage: str, done: int, total: int) -> None:
        """Show ``stage done/total``."""
        if not self.enabled:
            return
        width = 30
        fill = int(width * done / max(total, 1))
        self.out.stderr.write(f"\r{stage:10s} [{'#' * fill}{'.' * (width - fill)}] {done}/{total}")
        if done >= total:
            self.out.stderr.write("\n")
        self.out.stderr.flush()


def checked_model_bytes(graph: Graph) -> bytes:
    """The serialized QDQ model, checked by ONNX and for usable scales (never a broken model)."""
    import onnx

    from engine.ir.onnx_io import to_onnx
    from engine.quant.verify import check_qdq_scales

    model = to_onnx(graph)
    onnx.checker.check_model(model, full_check=True)
    check_qdq_scales(model)
    return model.SerializeToString()


def write_model_atomic(graph: Graph, dest: Path) -> None:
    """Check and write a graph as ONNX atomically (never a partial file)."""
    from engine.outputs import atomic_write

    atomic_write(dest, checked_model_bytes(graph))


def optimize_for_quantization(graph: Graph) -> Graph:
    """The optimizer's default pipeline (BN folding, fusion) before quantizing, when available."""
    try:
        from engine.passes.pipeline import optimize
    except ImportError:
        return graph
    return optimize(graph).graph


def cmd_quantize(args: argparse.Namespace, out: Out) -> int:
    """Calibrate, quantize to QDQ, write the model and the report."""
    from threadpoolctl import threadpool_limits

    from engine.outputs import Outputs
    from engine.quant.api import quantize
    from engine.quant.config import QuantConfig

    started = time.monotonic()  # --time-budget bounds the whole command when it searches
    outputs = Outputs(inputs=[args.model, args.calib])
    dest = outputs.add("-o", args.output)
    report_path = outputs.add("--report", args.report)
    graph = load_model_arg(args)
    from engine.quant.verify import check_quantizable

    check_quantizable(graph)
    config = QuantConfig(method=args.method, per_channel=args.per_channel, symmetric=args.symmetric,
                         dtype=args.dtype, percentile=args.percentile, cle=args.cle,
                         smoothquant=args.smoothquant, bias_correction=args.bias_correction,
                         adaround=args.adaround, output_ranges=args.output_ranges)
    data = calib_from_args(args, graph)
    assert data is not None  # --calib is required
    check_search_args(args, data)
    if not args.no_optimize:
        graph = optimize_for_quantization(graph)
    progress = TerminalProgress(out, args.quiet)
    searching = args.target_sqnr is not None or args.target_cosine is not None
    calib_data, check_idx = data, []
    marks = [("load", time.monotonic())]  # (phase, when it ended) of a search's whole command
    if searching:  # the check samples stay out of the ranges: the figure the search gives is held out
        from engine.quant.search import SearchOptions, held_out_split, subset

        rest, check_idx = held_out_split(len(data), SearchOptions.check_samples, data.groups)
        calib_data = subset(data, rest)
    # a search measures hundreds of small runs on one BLAS thread: two OpenBLAS threads spin against
    # each other and every other process (at load 20 each PP-OCRv6 rec run took 4.6x the wall time)
    with threadpool_limits(1, user_api="blas") if searching else contextlib.nullcontext():
        try:  # a search measures its own way and the final model is analysed: no analysis of the int8 one
            result = quantize(graph, calib_data, config, analysis_samples=0 if searching else args.analysis_samples,
                              progress=progress)
        except ValueError as exc:
            if "nothing to quantize" in str(exc):
                raise InputError(f"{args.model}: {exc}") from None
            raise
        if searching:
            marks.append(("calibrate", time.monotonic()))
            result = _mixed_precision(args, graph, data, check_idx, result, progress, out,
                                      args.time_budget - (time.monotonic() - started), marks)
    files = {dest: checked_model_bytes(result.graph)}
    if result.mixed_precision is not None:
        marks.append(("export", time.monotonic()))
        _command_phases(result.mixed_precision, started, marks)
    report = result.report()
    if report_path is not None:
        files[report_path] = (json.dumps(report, indent=2) + "\n").encode("utf-8")
    outputs.commit(files)
    for name, o in report["outputs"].items():
        out.line(f"output {name}: cosine {o['cosine']:.5f}  SQNR {o['sqnr_db']:.2f} dB")
    worst = sorted(report["layers"], key=lambda r: r["sqnr_db"])[:5]
    if worst:
        out.line("worst layers: " + ", ".join(f"{r['node']} ({r['sqnr_db']:.1f} dB)" for r in worst))
    if result.ptq is not None:
        for st in result.ptq.steps:
            held = f", held-out {st.heldout_db[1] - st.heldout_db[0]:+.2f} dB" if st.heldout_db else ""
            state = "applied" if st.applied else "not applied"
            out.line(f"ptq {st.algorithm}: {state}, {st.gain_db:+.2f} dB on calibration samples{held}"
                     + (f" ({st.note})" if st.note and not st.applied else ""))
    out.line(f"wrote {args.output} ({len(result.model.node_precision)} layers quantized, {report['samples']} samples)")
    missed = result.mixed_precision is not None and not result.mixed_precision.reached
    for d in result.diagnostics:
        # a missed target already said it in its one line; onnxruntime's rewrites are said whatever the figures
        if (d.code == "low-sqnr" and not missed) or d.code == "ort-rewrites":
            out.info(f"warning: {d.message}")
    return EXIT_OK


FINISH_MEASUREMENTS = 6.0
"""The search leaves this many check-sample measurements' time of --time-budget for what follows
it: observing the check samples for the final ranges, the final analysis (FINAL_ANALYSIS_SAMPLES
of them through the float and the QDQ model keeping every value, and each layer alone) and the
export. PP-OCRv6 rec and det 320 at load 13-17 (8 analysis samples, 4 measurements kept): those
took 15-20 s and the whole command 129-152 s of its 150; with two such commands at once 58 s and
183-194 s."""
FINAL_ANALYSIS_SAMPLES = 4


def _mixed_precision(args: argparse.Namespace, graph: Graph, data: CalibrationSet, held: list[int], result,
                     progress, out: Out, seconds_left: float, marks: list[tuple[str, float]]):
    """Search the raises that bring the held-out outputs to --target-sqnr / --target-cosine
    (engine.quant.search) in what is left of --time-budget, then quantize with the precisions it
    chose, with the ``held`` check samples added to the ranges, analysed on those samples."""
    from engine.quant.api import quantize
    from engine.quant.search import (
        SearchOptions,
        search_choices,
        search_mixed_precision,
        subset,
        with_samples,
    )

    target = None
    if args.target:
        from engine.hw.target import resolve_target

        target = resolve_target(args.target)
    base = result.float_build or graph  # what PTQ (CLE, bias correction ...) made of the graph
    choices = search_choices(target, args.raise_to)
    opts = SearchOptions(target_sqnr_db=args.target_sqnr, target_cosine=args.target_cosine, choices=choices,
                         time_budget_s=max(seconds_left, 1e-3), calibrated_without_check=True,
                         finish_measurements=FINISH_MEASUREMENTS if args.analysis_samples else 1.0)
    mp = search_mixed_precision(base, data, result.config, result.calibration, target, opts,
                                progress=lambda stage, done, total: progress(stage, done, total),
                                reference=result.reference)
    for st in mp.steps:
        extra = f", {st['latency_cost_us']:+.1f} us" if st["latency_cost_us"] is not None else ""
        out.line(f"raised {st['node']} ({st['kind']}, {len(st['nodes'])} op(s)) to {st['precision']}: "
                 f"held-out output SQNR {st['output_sqnr_db']:.2f} dB{extra}")
    warning = mp.warning()
    if warning is not None:
        out.info(f"warning: {warning}")
    marks.append(("search", time.monotonic()))
    # the written model's ranges cover every sample, the check samples too: with the same raises,
    # 8 new photos through PP-OCRv6 det 320 got 22.5 dB on the search's ranges and 35.3 dB with the
    # check samples added (4 of 16: fewer clips), 16 new PP-OCRv6 rec crops 0.9-3.4 dB less (8 of
    # 32: wider ranges)
    calibration = with_samples(base, result.calibration, data, held, result.config)
    marks.append(("calibrate check", time.monotonic()))
    final = quantize(base, subset(data, held), mp.config, analysis_samples=min(args.analysis_samples, len(held), FINAL_ANALYSIS_SAMPLES),
                     calibration=calibration, progress=progress)
    marks.append(("analyze", time.monotonic()))
    final.mixed_precision = mp
    final.ptq = result.ptq
    return final


def _command_phases(mp, started: float, marks: list[tuple[str, float]]) -> None:
    """The search's phases between the command's own (load, calibrate ... analyze, export): the
    whole command's seconds, which --time-budget bounds, are their sum."""
    spans, prev = {}, started
    for name, t in marks:
        spans[name], prev = t - prev, t
    own = [{"phase": k, "seconds": round(v, 2)} for k, v in spans.items() if k != "search"]
    mp.phases = own[:2] + mp.phases + own[2:]


def check_search_args(args: argparse.Namespace, data: CalibrationSet) -> None:
    """Bad input for a mixed-precision search, before any work: a precision the target lacks,
    too few samples to split into a search part and a held-out part."""
    from engine.quant.search import MIN_SAMPLES, search_choices

    if args.target_sqnr is None and args.target_cosine is None:
        return
    if args.target:
        from engine.hw.target import resolve_target

        search_choices(resolve_target(args.target), args.raise_to)
    if len(data) < MIN_SAMPLES:
        raise InputError(f"--calib {args.calib}: {len(data)} sample(s) cannot verify a mixed-precision search; "
                         f"it needs at least {MIN_SAMPLES} (it searches on some and verifies on the others)")


@extra_command
def _add_quantize(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("quantize", help="calibrate on real data and write a QDQ model")
    add_model_args(p)
    add_calib_args(p, required=True)
    p.add_argument("-o", "--output", required=True, metavar="OUT.onnx", help="where to write the QDQ model")
    p.add_argument("--method", choices=("auto", "minmax", "percentile", "entropy", "mse"), default="minmax",
                   help="how activation ranges are chosen from the calibration data (auto: per tensor, "
                        "by the error each range causes)")
    for flag, what in (("--cle", "cross-layer equalization of Conv -> [ReLU] -> Conv chains"),
                       ("--smoothquant", "SmoothQuant migration of LayerNorm -> MatMul activation outliers"),
                       ("--adaround", "AdaRound: each Conv/MatMul/Gemm weight rounded up or down by its layer's "
                                      "output error"),
                       ("--output-ranges", "the ranges of the tensors holding most of the output noise chosen "
                                           "by the model's output error"),
                       ("--bias-correction", "empirical bias correction of quantized Conv/Gemm")):
        p.add_argument(flag, choices=("auto", "on", "off"), default="off",
                       help=f"{what} (auto: kept where it raises the output SQNR on calibration and "
                            "held-out samples; off by default)")
    p.add_argument("--per-channel", action="store_true", help="per-output-channel weight scales")
    p.add_argument("--symmetric", action="store_true", help="symmetric activations (zero point 0)")
    p.add_argument("--dtype", choices=("int8", "uint8", "int16"), default="int8", help="activation type")
    p.add_argument("--percentile", type=number(above=0, maximum=100), default=99.99, help="for --method percentile")
    p.add_argument("--report", metavar="R.json", help="write the per-layer error report")
    p.add_argument("--analysis-samples", type=integer(0, 10_000), default=16,
                   help="samples used for the error analysis")
    p.add_argument("--no-optimize", action="store_true", help="quantize the graph as loaded (no BN folding/fusion)")
    p.add_argument("--target-sqnr", type=number(minimum=-1000, maximum=100), metavar="DB",
                   help="mixed precision: search the cheapest raises that bring every output to this SQNR "
                        "(at most 100 dB) on held-out calibration samples")
    p.add_argument("--target-cosine", type=number(minimum=-1, maximum=1), metavar="C",
                   help="mixed precision: ... this cosine")
    p.add_argument("--raise-to", choices=("auto", "int16", "fp16", "bf16", "fp32"), default="auto",
                   help="precision of raised layers (auto: int16, fp16 where the target has it, or float on the CPU, "
                        "whichever reaches the target for the fewest microseconds)")
    p.add_argument("--time-budget", type=number(above=0, maximum=86400), default=150.0, metavar="S",
                   help="with --target-sqnr/--target-cosine: seconds the whole command may take (calibration, "
                        "search, final analysis); the search then keeps the best model found")
    p.add_argument("--target", metavar="T", help="hardware target pricing each raise in latency")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    p.set_defaults(func=cmd_quantize)


__all__ = ["add_calib_args", "calib_from_args", "preprocess_from_args", "write_model_atomic"]

