"""``npu-studio simulate``: placement, partitions, transfers and simulated timing on a target.

    npu-studio simulate MODEL --target T [--calib C] [--json] [--pin NODE=npu|cpu ...]
                        [--stream FRAMES [--queue N] [--fps RATE]] [--thermal [RUNS]] [--all]
                        [--no-optimize]
    npu-studio simulate --list-targets

The default output is a readable report (summary, stage table, fallbacks with reasons,
transfers, suggestions, the slowest ops); ``--json`` prints the CONTRACTS.md document.
Without ``--calib`` the graph is simulated at the target's precision using the FP32 graph's
structure; calibration data only refines quantization parameters.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from engine.cli import EXIT_OK, Out, UsageError, add_model_args, extra_command, load_model_arg
from engine.cli_options import integer, number
from engine.errors import InputError
from engine.limits import excerpt

TIMELINE_BUDGET = 64 * 10**6
"""Memory --stream and --thermal may spend on their per-frame / per-run timelines."""
STREAM_BYTES_PER_FRAME = 7 * 8  # pre, infer, take, done, start, latency and a percentile copy (float64)
THERMAL_BYTES_PER_RUN = 2 * 8 + 32  # latency and clock arrays, and the per-run latency list of floats


def _fmt_us(us: float) -> str:
    if us >= 1000:
        return f"{us / 1000:.2f} ms"
    return f"{us:.1f} us"


def _table(rows: list[list[str]], align: str) -> list[str]:
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    out = []
    for r in rows:
        cells = [c.rjust(w) if a == "r" else c.ljust(w) for c, w, a in zip(r, widths, align)]
        out.append("  " + "  ".join(cells).rstrip())
    return out


def format_report(doc: dict[str, Any], all_ops: bool = False, top: int = 15) -> str:
    """The human-readable text of ``simulate`` from its JSON document."""
    s = doc["summary"]
    lines = [f"model    {doc['model']} on {doc['target']}: {doc['target_summary']['description']}",
             f"latency  {_fmt_us(doc['latency_us'])} per inference, end-to-end {_fmt_us(s['end_to_end_us'])} "
             "with host stages",
             f"ops      {s['npu_ops']} on the NPU, {s['cpu_ops']} on the CPU, in {s['partitions']} partitions; "
             f"{s['transfers']} transfers ({_fmt_us(s['transfer_us'])}), conversions {_fmt_us(s['conversion_us'])}, "
             f"dispatch {_fmt_us(s['dispatch_us'])}", ""]
    rows = [["stage", "time (ms)", "share", "note"]]
    for st in doc["stages"]:
        rows.append([st["stage"], f"{st['us'] / 1000:.3f}", f"{st['share'] * 100:.0f}%", st["note"]])
    total = sum(st["us"] for st in doc["stages"])
    rows.append(["end-to-end (serial)", f"{total / 1000:.3f}", "100%", ""])
    lines += _table(rows, "lrrl")
    cpu = [o for o in doc["ops"] if o["device"] == "cpu" and o["op_type"] != "Constant"]
    if cpu:
        lines += ["", f"CPU fallbacks ({len(cpu)})"]
        lines += _table([["node", "op", "us", "reason"]] + [[o["node"], o["op_type"], f"{o['latency_us']:.1f}",
                                                              o["fallback_reason"] or ""] for o in cpu[:40]], "llrl")
        if len(cpu) > 40:
            lines.append(f"  ... {len(cpu) - 40} more (--json lists all)")
    if doc["transfers"]:
        lines += ["", f"transfers ({len(doc['transfers'])})"]
        rows = [["from", "to", "direction", "bytes", "us"]]
        for t in doc["transfers"][:30]:
            rows.append([t["from"], t["to"], f"{t['from_device']}->{t['to_device']}", f"{t['bytes']:,}",
                         f"{t['latency_us'] + t['conversion_us']:.1f}"])
        lines += _table(rows, "lllrr")
    if doc["suggestions"]:
        lines += ["", "suggestions"]
        lines += [f"  - {sg['message']}" for sg in doc["suggestions"][:10]]
    ops = doc["ops"] if all_ops else sorted(doc["ops"], key=lambda o: -o["latency_us"])[:top]
    title = "every op in schedule order" if all_ops else f"slowest ops ({len(ops)} of {len(doc['ops'])}; --all for every op)"
    lines += ["", title]
    rows = [["node", "op", "device", "start us", "latency us", "bound"]]
    for o in ops:
        rows.append([o["node"], o["op_type"], o["device"], f"{o['start_us']:.1f}", f"{o['latency_us']:.1f}", o["bound"]])
    lines += _table(rows, "lllrrl")
    if "stream" in doc:
        st = doc["stream"]
        source = (f"camera at {st['arrival_fps']:g} fps" if st.get("arrival_fps")
                  else f"frames always ready; serial would give {st['serial_fps']:.1f} fps, x{st['speedup']:.2f}")
        lines += ["", f"stream   {st['frames']} frames, queue {st['queue_depth']}: {st['throughput_fps']:.1f} fps "
                      f"({source}); latency p50 {_fmt_us(st['p50_us'])}, p99 {_fmt_us(st['p99_us'])}"]
    if "thermal" in doc:
        th = doc["thermal"]
        lines += ["", f"thermal  {th['runs']} runs over {th['elapsed_s']:.1f} s: first run {_fmt_us(th['first_run_us'])} "
                      f"(cold start {_fmt_us(th['cold_start_us'])}), steady state {_fmt_us(th['steady_state_us'])} "
                      f"at {th['steady_clock_mhz']:.0f} of {th['peak_clock_mhz']:.0f} MHz (x{th['slowdown']:.2f})"]
    return "\n".join(lines)


def _parse_pins(items: list[str] | None) -> dict[str, str]:
    pins: dict[str, str] = {}
    for text in items or []:
        if "=" not in text:
            raise UsageError(f"--pin {excerpt(text)}: expected NODE=npu or NODE=cpu")
        name, dev = text.rsplit("=", 1)
        if dev.lower() not in ("npu", "cpu") or not name:
            raise UsageError(f"--pin {excerpt(text)}: expected NODE=npu or NODE=cpu")
        pins[name] = dev.lower()
    return pins


def _calibration(args: argparse.Namespace, graph: Any) -> dict[str, Any] | None:
    """Load and check --calib (the quantizer's loader when present); timing does not depend on it."""
    if not getattr(args, "calib", None):
        return None
    try:
        from engine.quant.cli import calib_from_args
    except ImportError:
        if not Path(args.calib).exists():
            raise InputError(f"{args.calib}: no such calibration file or folder (--calib)") from None
        return {"source": args.calib}
    data = calib_from_args(args, graph)
    return {"source": args.calib, "samples": len(data) if data is not None else 0}


def _optimize(graph: Any, target: Any) -> Any:
    """The compiled graph: the optimizer's default pipeline and the target's lowerings (as
    compile runs them) when they are available."""
    try:
        from engine.passes.lower_npu import lower_for_target
        from engine.passes.pipeline import optimize
    except ImportError:  # the optimizer is optional for simulation
        return graph
    return lower_for_target(optimize(graph).graph, target).graph


def cmd_simulate(args: argparse.Namespace, out: Out) -> int:
    """Run the simulate subcommand."""
    from engine.hw.target import list_targets, resolve_target
    from engine.sim.timeline import SimOptions, simulate

    if args.list_targets:
        for name, desc in list_targets():
            out.line(f"{name}  {desc}" if desc else name)
        return EXIT_OK
    if not args.model:
        raise UsageError("simulate: MODEL is required (or --list-targets)")
    check_work_options(args)
    if not args.target:
        raise UsageError("simulate: --target is required (see --list-targets)")
    target = resolve_target(args.target)
    graph = load_model_arg(args)
    calib = _calibration(args, graph)
    if not args.no_optimize:
        graph = _optimize(graph, target)
    result = simulate(graph, target, SimOptions(pins=_parse_pins(args.pin)))
    doc = result.to_json(events=args.json)
    if args.stream:
        from engine.sim.stream import simulate_stream

        if args.queue < 1:
            raise UsageError("--queue must be at least 1")
        if args.fps is not None and args.fps <= 0:
            raise UsageError("--fps must be positive")
        doc["stream"] = simulate_stream(result, frames=args.stream, queue_depth=args.queue,
                                        arrival_fps=args.fps).to_json()
    if args.thermal is not None:
        from engine.sim.thermal import simulate_thermal

        doc["thermal"] = simulate_thermal(result, runs=args.thermal or None).to_json()
    if calib is not None:
        doc["calibration"] = calib
    if args.json:
        out.json(doc)
    else:
        out.line(format_report(doc, all_ops=args.all))
    return EXIT_OK


def check_work_options(args: argparse.Namespace) -> None:
    """Refuse --stream / --thermal values whose timelines would exceed TIMELINE_BUDGET, at once."""
    from engine.limits import require_budget
    from engine.sim.thermal import MAX_RUNS

    if args.stream:
        require_budget("--stream", args.stream, STREAM_BYTES_PER_FRAME, "the frame timeline", TIMELINE_BUDGET)
    if args.thermal:
        require_budget("--thermal", args.thermal, THERMAL_BYTES_PER_RUN, "the run timeline",
                       min(TIMELINE_BUDGET, MAX_RUNS * THERMAL_BYTES_PER_RUN))


@extra_command
def add_simulate(sub: argparse._SubParsersAction) -> None:
    """Add the ``simulate`` subcommand."""
    p = sub.add_parser("simulate", help="place a model on a target and simulate its timing")
    add_model_args(p, model_required=False)
    p.add_argument("--target", metavar="T", help="bundled target name or a target .yaml path")
    try:
        from engine.quant.cli import add_calib_args
    except ImportError:
        p.add_argument("--calib", metavar="C", help="calibration data (.npz or image folder)")
    else:
        add_calib_args(p)  # --calib and the image preprocessing options, as quantize and compile take them
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--list-targets", action="store_true", help="list the bundled targets and exit")
    p.add_argument("--pin", action="append", metavar="NODE=npu|cpu", help="force a node onto a device (repeatable)")
    p.add_argument("--stream", type=integer(1), metavar="FRAMES", help="also simulate a stream of FRAMES frames")
    p.add_argument("--queue", type=integer(1, 1000), default=3, metavar="N", help="stream queue depth (default 3)")
    p.add_argument("--fps", type=number(above=0, maximum=1e6), metavar="RATE",
                   help="stream: a camera delivers RATE frames per second (default: frames always ready)")
    p.add_argument("--thermal", type=integer(0), nargs="?", const=0, metavar="RUNS",
                   help="also simulate sustained load (RUNS iterations; default: until steady)")
    p.add_argument("--all", action="store_true", help="list every op in the text report")
    p.add_argument("--no-optimize", action="store_true", help="simulate the graph as loaded, without optimizing")
    p.set_defaults(func=cmd_simulate)
