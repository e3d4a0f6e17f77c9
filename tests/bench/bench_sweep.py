"""Sweep speed-up: the acceptance spec (2 real models x ethos-u55 over 2 SRAM sizes x 2 methods,
8 points) on a LocalCluster of 1 worker and one of 2 workers, side by side in one process.

Run: `python -m tests.bench.bench_sweep`. Prints, for each cluster, the wall time of the whole
`run_sweep` (calibration shards, merge, 8 points; the clusters are started beforehand and their
start-up is printed apart), the task compute time summed over the workers, the ratio
1-worker / 2-workers, whether both produced the same numbers, and the machine load (uptime)
before and after. Workers run one BLAS thread each (the
dask nanny sets OMP/OPENBLAS/MKL_NUM_THREADS=1). The acceptance asks for a ratio >= 1.4 on a
quiet 2-core machine.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from tests.bench._common import fresh_blas_env, one_blas_thread

FIGURES = ("latency_us", "npu_ops", "cpu_ops", "sram_peak_kib", "output_sqnr_db", "cosine", "error")


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _spin(n: int) -> float:
    t = time.perf_counter()
    x = 0
    for i in range(n):
        x += i * i
    return time.perf_counter() - t


def machine_parallelism(n: int = 3_000_000) -> float:
    """How much faster two CPU-bound processes finish two equal jobs than one process doing both:
    about 2 on a quiet 2-core machine, about 1 when others already use the cores."""
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1) as one:
        one.submit(_spin, 1000).result()
        t = time.perf_counter()
        list(one.map(_spin, [n, n]))
        serial = time.perf_counter() - t
    with ProcessPoolExecutor(2) as two:
        list(two.map(_spin, [1000, 1000]))
        t = time.perf_counter()
        list(two.map(_spin, [n, n]))
        parallel = time.perf_counter() - t
    return serial / parallel


def main() -> None:
    fresh_blas_env()
    from distributed import Client, LocalCluster, get_task_stream

    from engine.sweep.runner import run_sweep
    from engine.sweep.spec import load_spec
    from tests.engine.sweep_util import acceptance_spec

    with one_blas_thread(), tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        spec = load_spec(acceptance_spec(folder, heavy=True))
        sys.stdout.write(f"load average before: {_load()}\n")
        sys.stdout.write(f"machine check: 2 processes ran 2 equal pure-Python jobs {machine_parallelism():.2f}x "
                         "faster than 1 process (about 2 when the cores are free)\n")
        times, rows = {}, {}
        for workers in (1, 2, 1, 2):  # interleaved, twice: load from other users hits both alike
            t = time.perf_counter()
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0")
            client = Client(cluster, set_as_default=False)
            started = time.perf_counter() - t
            out = folder / f"out{workers}"
            shutil.rmtree(out, ignore_errors=True)
            t = time.perf_counter()
            with get_task_stream(client=client) as ts:
                summary = run_sweep(spec, out, client=client)
            dt = time.perf_counter() - t
            busy = sum(ss["stop"] - ss["start"] for task in ts.data for ss in task["startstops"]
                       if ss["action"] == "compute")
            client.close()
            cluster.close()
            times.setdefault(workers, []).append(dt)
            rows[workers] = {r["key"]: tuple(str(r.get(k)) for k in FIGURES) for r in summary.rows}
            sys.stdout.write(f"{workers} worker(s): cluster start {started:.1f} s, sweep {dt:.1f} s "
                             f"({summary.computed} points, {summary.failed} failed); task compute summed over "
                             f"workers {busy:.1f} s\n")
        one, two = min(times[1]), min(times[2])
        sys.stdout.write(f"best of 2: 1 worker {one:.1f} s, 2 workers {two:.1f} s, speed-up {one / two:.2f}x "
                         f"(acceptance: >= 1.4x on a quiet machine)\n")
        sys.stdout.write(f"same numbers from 1 and 2 workers: {rows[1] == rows[2]}\n")
        sys.stdout.write("(the same tasks run in both; when the summed task compute of 2 workers is well above "
                         "that of 1, the two processes were sharing the CPU of one: a busy machine)\n")
        sys.stdout.write(f"load average after: {_load()}\n")


if __name__ == "__main__":
    main()
