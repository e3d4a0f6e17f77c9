"""``npu-studio sweep SPEC.yaml -o OUTDIR [--workers N] [--scheduler ADDR] [--json]``."""

from __future__ import annotations

import argparse

from engine.cli import EXIT_OK, Out, UsageError, extra_command


def cmd_sweep(args: argparse.Namespace, out: Out) -> int:
    """Validate the spec, compute the points without a row, write results.csv and sweep.html."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise UsageError("sweep needs dask.distributed: pip install 'npu-studio[sweep]'") from None
    from engine.sweep.runner import check_address, run_sweep
    from engine.sweep.spec import load_spec

    if args.scheduler:
        check_address(args.scheduler)
    if args.workers < 1:
        raise UsageError(f"--workers must be at least 1, got {args.workers}")
    spec = load_spec(args.spec)

    def progress(done: int, total: int, failed: int, eta: float | None) -> None:
        if done == 0:
            out.info(f"sweep: {total} of {len(spec.points())} points to compute ({len(spec.models)} model(s) x "
                     f"{len(spec.targets)} hardware configuration(s) x {len(spec.quant)} setting(s))")
            return
        tail = f", ETA {eta:.0f} s" if eta is not None and done < total else ""
        out.info(f"sweep: {done}/{total} points done, {failed} failed{tail}")

    try:
        summary = run_sweep(spec, args.out, workers=args.workers, scheduler=args.scheduler, progress=progress)
    except KeyboardInterrupt:
        out.info("sweep: interrupted; finished rows are kept in results.csv, a rerun computes the rest")
        raise
    if args.json:
        out.json(summary.to_json())
    else:
        out.line(f"{summary.points} points: {summary.computed} computed, {summary.skipped} skipped, "
                 f"{summary.failed} failed in {summary.seconds:.1f} s")
        out.line(f"wrote {args.out}/results.csv and {args.out}/sweep.html")
    return EXIT_OK


@extra_command
def _add_sweep(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="models x targets x quantization settings on dask, with a Pareto page")
    p.add_argument("spec", metavar="SPEC.yaml", help="models, targets (with vary: grids) and quant settings")
    p.add_argument("-o", "--out", required=True, metavar="OUTDIR", help="results.csv and sweep.html go here")
    p.add_argument("--workers", type=int, default=2, help="processes of the local dask cluster (default 2)")
    p.add_argument("--scheduler", metavar="tcp://HOST:PORT", help="join a running dask scheduler instead")
    p.add_argument("--json", action="store_true", help='print {"points", "computed", "skipped", "failed"}')
    p.set_defaults(func=cmd_sweep)
