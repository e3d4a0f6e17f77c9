"""The ``npu-studio`` command line. Every subcommand drives the same engine the GUI does.

Exit status: 0 success; 2 bad input (one ``error:`` line on stderr, no traceback); 1 internal
error.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import numpy as np

from engine.errors import ExecutionError, InputError, InternalError, ModelError

EXIT_OK, EXIT_INTERNAL, EXIT_USAGE = 0, 1, 2
MAX_ERROR_CHARS = 400


class UsageError(Exception):
    """Bad command-line usage: printed as one ``error:`` line, exit 2."""


class Out:
    """The CLI's only way to write (engine code never prints)."""

    def __init__(self, stdout=None, stderr=None) -> None:
        self.stdout = stdout or sys.stdout
        self.stderr = stderr or sys.stderr
        # Set by a command that made process-wide state whose teardown may crash (a Qt
        # application): main ends the process with the status once everything is written.
        self.end_process = False

    def line(self, text: str = "") -> None:
        """Write one line to stdout."""
        self.stdout.write(text + "\n")

    def json(self, doc: Any) -> None:
        """Write one JSON document to stdout."""
        self.stdout.write(json.dumps(doc, indent=2, default=_json_default) + "\n")

    def error(self, text: str) -> None:
        """Write the single error line to stderr."""
        first = " ".join(str(text).split("\n")[0].split()) if text else "unknown error"
        if len(first) > MAX_ERROR_CHARS:  # a safety net: messages quote short excerpts already
            first = first[:MAX_ERROR_CHARS - 3] + "..."
        self.stderr.write(f"error: {first}\n")

    def info(self, text: str) -> None:
        """Progress or notes on stderr (keeps stdout clean for --json)."""
        self.stderr.write(text + "\n")


def _json_default(o: Any) -> Any:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def parse_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """Parse ``NAME=D0,D1,...`` (the name may itself contain '=')."""
    from engine.limits import excerpt

    if "=" not in text:
        raise UsageError(f"--shape {excerpt(text)}: expected NAME=D0,D1,...")
    name, dims = text.rsplit("=", 1)
    try:
        values = tuple(int(d) for d in dims.split(",") if d.strip())
    except ValueError:
        raise UsageError(f"--shape {excerpt(text)}: dimensions must be integers") from None
    if not name or not values:
        raise UsageError(f"--shape {excerpt(text)}: expected NAME=D0,D1,...")
    return name, values


def _shapes(args: argparse.Namespace) -> dict[str, tuple[int, ...]]:
    return dict(parse_shape(s) for s in (getattr(args, "shape", None) or []))


def load_model_arg(args: argparse.Namespace):
    """Load the MODEL argument with the --shape options."""
    import engine

    return engine.load(args.model, shapes=_shapes(args))


# -- subcommands ----------------------------------------------------------------------------------
def cmd_inspect(args: argparse.Namespace, out: Out) -> int:
    from engine.inspect import format_summary, summarize

    graph = load_model_arg(args)
    doc = summarize(graph)
    if args.json:
        out.json(doc)
    else:
        out.line(format_summary(doc))
    return EXIT_OK


def cmd_run(args: argparse.Namespace, out: Out) -> int:
    import io

    import engine
    from engine.outputs import Outputs

    outputs = Outputs(inputs=[args.model, args.inputs])
    dest = outputs.add("--out", args.out)
    graph = load_model_arg(args)
    from engine.sim.feeds import read_npz

    feeds = read_npz(args.inputs, "--inputs")
    results = engine.execute(graph, feeds)
    buf = io.BytesIO()
    np.savez(buf, **results)
    outputs.commit({dest: buf.getvalue()})
    for name, arr in results.items():
        out.line(f"{name}: {arr.dtype}{list(arr.shape)}")
    out.line(f"wrote {dest}")
    return EXIT_OK


Command = Callable[[argparse.Namespace, Out], int]
_EXTRA_COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = []


def extra_command(fn: Callable[[argparse._SubParsersAction], None]) -> Callable[[argparse._SubParsersAction], None]:
    """Register a function that adds a subcommand (used by later modules)."""
    _EXTRA_COMMANDS.append(fn)
    return fn


def add_model_args(p: argparse.ArgumentParser, model_required: bool = True) -> None:
    """MODEL and --shape, shared by every command that takes a model."""
    if model_required:
        p.add_argument("model", metavar="MODEL", help="path to an .onnx file")
    else:
        p.add_argument("model", metavar="MODEL", nargs="?", help="path to an .onnx file")
    p.add_argument("--shape", action="append", metavar="NAME=D0,D1,...",
                   help="fix the shape of an input with dynamic dimensions (repeatable)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``npu-studio``."""
    parser = _Parser(prog="npu-studio", description="See, optimize, quantize, place and simulate ONNX models for NPUs.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    p = sub.add_parser("inspect", help="summarize a model")
    add_model_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("run", help="execute a model with the numpy executor")
    add_model_args(p)
    p.add_argument("--inputs", required=True, metavar="IN.npz", help="one array per input name")
    p.add_argument("--out", required=True, metavar="OUT.npz", help="where to write the outputs")
    p.set_defaults(func=cmd_run)

    _load_extra_commands()
    for add in _EXTRA_COMMANDS:
        add(sub)
    return parser


def _load_extra_commands() -> None:
    import importlib
    from importlib.metadata import entry_points

    # Each capability adds its subcommands from its own module (see extra_command). Packages
    # above the engine (the editor's `gui`) register themselves as entry points of the group
    # "npu_studio.commands" in pyproject.toml: engine never names app/ and never imports Qt, and
    # app/cli.py imports Qt only inside its functions, so the CLI works without a display.
    for mod in ("engine.passes.cli", "engine.quant.cli", "engine.sim.cli", "engine.export.cli", "engine.sweep.cli"):
        importlib.import_module(mod)
    for ep in entry_points(group="npu_studio.commands"):
        try:
            ep.load()
        except ModuleNotFoundError as exc:  # a plugin whose dependencies are not installed
            if not exc.name or not ep.value.startswith(exc.name):
                raise


def main(argv: Sequence[str] | None = None, out: Out | None = None) -> int:
    """Entry point of the console script; returns the exit status (or ends the process with it,
    when a command asked for that: ``Out.end_process``)."""
    out = out or Out()
    status = _main(argv, out)
    if out.end_process:
        for stream in (out.stdout, out.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(status)
    return status


def _main(argv: Sequence[str] | None, out: Out) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        parser = build_parser()
        if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--debug")):
            argv = ["gui", *argv]
        if argv == ["--debug"]:
            argv = ["--debug", "gui"]
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            args = parser.parse_args(["gui"])
        return int(args.func(args, out) or 0)
    except (UsageError, ModelError, InputError, ExecutionError) as exc:
        out.error(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        out.error("interrupted")
        return 130
    except SystemExit as exc:  # argparse --help
        return int(exc.code or 0)
    except Exception as exc:  # InternalError (a kernel bug) or any other bug of ours: exit 1
        what = str(exc) if isinstance(exc, InternalError) else f"{type(exc).__name__}: {exc}"
        what = " ".join(what.split())[:MAX_ERROR_CHARS]
        out.stderr.write(f"internal error: {what} (a bug in NPU Studio, please report; --debug shows where)\n")
        if debug:
            traceback.print_exc(file=out.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
