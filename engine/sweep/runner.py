"""Run a sweep on dask.distributed: a LocalCluster of processes, or a scheduler someone runs.

The task graph is submitted up front. Per model: calibration shards (pass 1 min/max, pass 2
histograms when a setting needs them), their exact merge (engine.sweep.shard), then one task per
point that takes the merged calibration. Rows are written by this process only, as points finish.

Faults: a worker that dies is replaced by its nanny and the scheduler reruns what it held (our
LocalCluster allows one death per task before the scheduler gives up with KilledWorker); a point
whose task errs is resubmitted once, and a point that fails twice gets the error in its row.
Ctrl+C cancels what is running and keeps every finished row (the file is replaced atomically).
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from distributed.diagnostics.plugin import WorkerPlugin

from engine.errors import InputError
from engine.sweep import worker
from engine.sweep.results import ResultsFile, columns, read_rows
from engine.sweep.shard import shard_ranges
from engine.sweep.spec import Point, SweepSpec, TargetVariant

Progress = Callable[[int, int, int, float | None], None]  # done, total, failed, eta seconds
CONNECT_TIMEOUT_S = 3
_ADDRESS = re.compile(r"^(tcp|tls|inproc|ucx|ws|wss)://[^\s/]+$")


@dataclass
class SweepSummary:
    """What one run did: the ``--json`` document and the rows."""

    points: int
    computed: int
    skipped: int
    failed: int
    seconds: float = 0.0
    rows: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """``{"points", "computed", "skipped", "failed"}`` (and the wall time)."""
        return {"points": self.points, "computed": self.computed, "skipped": self.skipped,
                "failed": self.failed, "seconds": round(self.seconds, 3)}


def check_address(address: str) -> None:
    """A scheduler address must look like tcp://HOST:PORT."""
    if not _ADDRESS.match(address):
        raise InputError(f"--scheduler {address}: expected an address like tcp://HOST:PORT")


def probe(address: str) -> None:
    """Ask ``address`` who it is before making a Client (which, given something else than a
    scheduler, can hang, read garbage or leave a half-made client behind). An address that does
    not answer as a dask scheduler within CONNECT_TIMEOUT_S seconds is an InputError."""
    import asyncio

    from distributed.comm import connect as comm_connect

    check_address(address)
    hostport = address.split("://", 1)[1]
    if address.startswith(("tcp://", "tls://")) and ":" in hostport:
        import socket

        host, _, port = hostport.rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
        except (OSError, ValueError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
            raise InputError(f"--scheduler {address}: no dask scheduler answers there ({why})") from None

    async def ask() -> object:
        comm = await comm_connect(address, timeout=CONNECT_TIMEOUT_S)
        try:
            await comm.write({"op": "identity"})
            return await comm.read()
        finally:
            comm.abort()

    try:
        reply = asyncio.run(asyncio.wait_for(ask(), CONNECT_TIMEOUT_S))
    except Exception as exc:
        why = (" ".join(str(exc).split())[:120] or type(exc).__name__) if isinstance(exc, (OSError, TimeoutError)) \
            else "what answered does not speak dask's protocol"
        raise InputError(f"--scheduler {address}: no dask scheduler answered within {CONNECT_TIMEOUT_S} s "
                         f"({why})") from None
    if not isinstance(reply, dict) or reply.get("type") != "Scheduler":
        raise InputError(f"--scheduler {address}: something answered, but not a dask scheduler")


class IgnoreInterrupt(WorkerPlugin):
    """Worker plugin of our own LocalCluster: Ctrl+C in a terminal signals the whole process group,
    and the workers would each die with a KeyboardInterrupt traceback. Only this process handles
    it (cancel, keep the rows, close the cluster); restarted workers get the plugin again."""

    name = "npu-studio-ignore-sigint"

    def setup(self, worker: Any) -> None:
        """Ignore SIGINT in the worker process."""
        import signal

        with contextlib.suppress(ValueError):  # not the main thread: nothing to do
            signal.signal(signal.SIGINT, signal.SIG_IGN)

    def teardown(self, worker: Any) -> None:
        """Nothing to undo."""


def connect(scheduler: str | None, workers: int) -> tuple[Any, Any]:
    """(client, cluster): join ``scheduler``, or start a LocalCluster of ``workers`` processes
    (cluster is None when joining). A scheduler that does not answer is an InputError after
    CONNECT_TIMEOUT_S seconds."""
    import dask
    from distributed import Client, LocalCluster

    if scheduler:
        probe(scheduler)
        try:
            return Client(scheduler, timeout=f"{CONNECT_TIMEOUT_S}s", set_as_default=False), None
        except Exception as exc:  # it answered the probe, then went away
            raise InputError(f"--scheduler {scheduler}: cannot join the dask cluster "
                             f"({str(exc).splitlines()[0][:120]})") from None
    if workers < 1:
        raise InputError(f"--workers must be at least 1, got {workers}")
    with dask.config.set({"distributed.scheduler.allowed-failures": 1}):
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                               silence_logs=logging.ERROR)
    client = Client(cluster, set_as_default=False)
    client.register_plugin(IgnoreInterrupt())
    return client, cluster


def target_file(outdir: Path, variant: TargetVariant) -> Path:
    """Where a hardware configuration is written as a target YAML (the editor opens it)."""
    return outdir / "targets" / f"{variant.base}-{variant.key[:10]}.yaml"


def write_targets(spec: SweepSpec, outdir: Path) -> None:
    """One YAML per hardware configuration, loadable with --target PATH."""
    (outdir / "targets").mkdir(exist_ok=True)
    for v in spec.targets:
        p = target_file(outdir, v)
        if not p.exists():
            doc = dict(v.doc)
            if v.varied:
                doc["description"] = f"{doc.get('description', '')} [sweep: {v.label}]".strip()
            p.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")


def base_row(point: Point, outdir: Path) -> dict[str, Any]:
    """The identifying cells of a point's row."""
    row: dict[str, Any] = {"model": point.model.name, "target": point.target.base,
                           **dict(point.target.varied), **point.quant.to_json(), "key": point.key,
                           "target_file": str(target_file(outdir, point.target).relative_to(outdir))}
    return row


def _error_text(exc: BaseException | None) -> str:
    from distributed.scheduler import KilledWorker

    if isinstance(exc, KilledWorker):
        return "a worker died while running this point (twice)"
    if exc is None:
        return "cancelled"
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:300]


def run_sweep(spec: SweepSpec, outdir: str | Path, workers: int = 2, scheduler: str | None = None,
              progress: Progress | None = None, client: Any = None) -> SweepSummary:
    """Compute every point of ``spec`` that has no row in OUTDIR/results.csv, then write sweep.html.

    ``client``: an existing dask Client to use (tests); otherwise one is made by ``connect``.
    Nothing is written before the cluster answers and the existing results file checks out.
    """
    from engine.sweep.html import write_html

    t0 = time.perf_counter()
    out = Path(outdir)
    if out.exists() and not out.is_dir():
        raise InputError(f"{out}: exists and is not a folder")
    points = spec.points()
    rf_path = out / "results.csv"
    previous = read_rows(rf_path)
    results = ResultsFile(rf_path, columns(spec.varied_fields), previous)
    done_keys = results.keys
    todo = [p for p in points if p.key not in done_keys]
    summary = SweepSummary(len(points), 0, len(points) - len(todo), 0)
    own = client is None
    cluster = None
    if todo and own:
        client, cluster = connect(scheduler, workers)
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_targets(spec, out)
        if todo:
            _compute(client, todo, spec, out, results, summary, progress)
    finally:
        if own and client is not None:
            with contextlib.suppress(Exception):
                client.close(timeout=5)
            if cluster is not None:
                with contextlib.suppress(Exception):
                    cluster.close(timeout=5)
        if out.is_dir():
            results.write()
            write_html(out / "sweep.html", results.header, results.rows, spec.varied_fields)
    summary.seconds = time.perf_counter() - t0
    summary.rows = results.rows
    return summary


def _compute(client: Any, todo: list[Point], spec: SweepSpec, out: Path, results: ResultsFile,
             summary: SweepSummary, progress: Progress | None) -> None:
    from distributed import as_completed

    models = {p.model.key: p.model for p in todo}
    probes = {key: client.submit(worker.sizes, m, pure=False) for key, m in models.items()}
    sizes: dict[str, tuple[int, int]] = {}
    broken: dict[str, str] = {}  # model key -> why its model or data cannot be used
    for key, fut in probes.items():
        try:
            sizes[key] = fut.result()
        except Exception as exc:
            broken[key] = _error_text(exc)
    for p in todo:
        if p.model.key in broken:
            results.add({**base_row(p, out), "error": broken[p.model.key]})
            summary.computed += 1
            summary.failed += 1
    todo = [p for p in todo if p.model.key not in broken]
    models = {k: m for k, m in models.items() if k not in broken}
    calibrations = {}
    for key, m in models.items():
        hist = any(p.quant.method != "minmax" for p in todo if p.model.key == key)
        ranges = shard_ranges(sizes[key][0], spec.shard_samples)
        stats = client.submit(worker.merge, [client.submit(worker.minmax_shard, m, lo, hi) for lo, hi in ranges])
        if hist:
            stats = client.submit(worker.merge, [client.submit(worker.histogram_shard, m, lo, hi, stats)
                                                 for lo, hi in ranges])
        calibrations[key] = client.submit(worker.finish_calibration, stats, m)

    attempt: dict[Any, tuple[Point, int]] = {}
    waiting = {fut: key for key, fut in calibrations.items()}

    def submit(p: Point, n: int) -> Any:
        cal = calibrations[p.model.key]
        errors = None
        shards = shard_ranges(sizes[p.model.key][1], spec.shard_samples)
        if len(shards) > 1 and p.quant.target_sqnr is None:  # a big held-out set: its shards on all workers
            errors = [client.submit(worker.error_shard, p, cal, lo, hi, key=f"errors-{p.key}-{n}-{lo}", pure=False)
                      for lo, hi in shards]
        fut = client.submit(worker.run_point, p, cal, errors, key=f"point-{p.key}-{n}", pure=False)
        attempt[fut] = (p, n)
        return fut

    def report() -> None:
        if progress is not None:
            elapsed = time.perf_counter() - start
            left = total - summary.computed
            progress(summary.computed, total, summary.failed,
                     elapsed / summary.computed * left if summary.computed else None)

    total, start = summary.computed + len(todo), time.perf_counter()
    if progress is not None:
        progress(0, total, 0, None)
        if summary.computed:
            progress(summary.computed, total, summary.failed, None)
    ac = as_completed(list(waiting), loop=client.loop)
    try:
        for fut in ac:
            if fut in waiting:  # a model's merged calibration: now its points can start anywhere
                key = waiting.pop(fut)
                mine = [p for p in todo if p.model.key == key]
                if fut.status == "finished":
                    with contextlib.suppress(Exception):  # a copy on every worker: points spread freely
                        client.replicate([fut])
                    for p in mine:
                        ac.add(submit(p, 0))
                    continue
                text = _error_text(fut.exception())
                for p in mine:
                    results.add({**base_row(p, out), "error": f"calibration failed: {text}"})
                    summary.computed += 1
                    summary.failed += 1
                report()
                continue
            p, n = attempt.pop(fut)
            if fut.status == "finished":
                results.add({**base_row(p, out), **fut.result(), "error": None})
                summary.computed += 1
            elif n == 0:
                ac.add(submit(p, 1))
                continue
            else:
                results.add({**base_row(p, out), "error": _error_text(fut.exception())})
                summary.computed += 1
                summary.failed += 1
            report()
    except BaseException:
        for f in [*attempt, *waiting]:
            f.cancel()
        raise
