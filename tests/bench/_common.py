"""Shared set-up for benchmarks: one BLAS thread, optional OpenBLAS core-type override removal.

This machine sets OPENBLAS_CORETYPE (and OPENBLAS_L2_SIZE), which slows numpy's matmul about
2x. A benchmark may drop both for its own process only: `fresh_blas_env()` re-executes the
script without them (and says so). Tests and CI never change them.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable

_FLAG = "NPU_STUDIO_BENCH_REEXEC"


def fresh_blas_env() -> None:
    """Re-run this process without OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE (both together), once,
    when it is a benchmark run as ``python -m tests.bench.NAME``. A test that imports a
    benchmark's helpers keeps its process (and the machine's BLAS settings): a re-exec there
    restarted pytest mid-run, which then ended with status 0 and no summary."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is None or not str(spec.name).startswith("tests.bench."):
        return
    if os.environ.get(_FLAG) or not ({"OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"} & set(os.environ)):
        return
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    env[_FLAG] = "1"
    sys.stdout.write("note: this benchmark unsets OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE for its own process\n")
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def one_blas_thread():
    """Context manager pinning BLAS (and OpenMP) to one thread; reports the BLAS in use."""
    from threadpoolctl import threadpool_info, threadpool_limits

    info = [f"{i.get('internal_api')} {i.get('version')} ({i.get('architecture')})" for i in threadpool_info()
            if i.get("user_api") == "blas"]
    sys.stdout.write(f"BLAS: {', '.join(info) or 'unknown'}; pinned to 1 thread\n")
    return threadpool_limits(limits=1)


def median_time(fn: Callable[[], object], repeat: int = 5, warmup: int = 1) -> float:
    """Median wall time of ``fn`` in seconds."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def best_time(fn: Callable[[], object], repeat: int = 5) -> float:
    """Best (minimum) wall time of ``fn`` in seconds over ``repeat`` runs."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best
