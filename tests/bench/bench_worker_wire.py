"""What crosses to the editor's worker process (app/wire.py, app/worker_process.py), and what
reading it costs the editor: sizes, write and read times (best of 5) of plain pickle beside
app/wire, and the longest a ticking thread waits for the GIL while another thread reads (the GUI
thread's view of the reader thread).

Cases: light_densenet121 (1,746 nodes) as it is sent (the graph) and as Tools > Compile's outcome
comes back; PP-OCRv6 det at 1x3x64x64 as it is sent and as its phone-npu analysis comes back.

Run: ``python -m tests.bench.bench_worker_wire``
"""

from __future__ import annotations

import copyreg
import io
import os
import pickle
import sys
import threading
import time

from tests.bench._common import best_time, one_blas_thread


class _Control:
    def progress(self, *_a) -> None:
        pass

    def cancelled(self) -> bool:
        return False

    def check(self) -> None:
        pass


def _plain(obj) -> bytes:
    from engine.ir.events import EventSource

    f = io.BytesIO()
    p = pickle.Pickler(f, protocol=5)
    p.dispatch_table = {**copyreg.dispatch_table, EventSource: lambda _e: (EventSource, ())}
    p.dump(obj)
    return f.getvalue()


def _best(fn, repeat: int = 5) -> float:
    return best_time(fn, repeat)


def _longest_gil_wait(fn, repeat: int = 3) -> float:
    """The longest gap a thread sleeping 0.5 ms at a time sees while ``fn`` runs (best of ``repeat``)."""
    best = float("inf")
    for _ in range(repeat):
        gaps: list[float] = []
        stop = threading.Event()

        def tick(gaps=gaps, stop=stop) -> None:
            last = time.perf_counter()
            while not stop.is_set():
                time.sleep(0.0005)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        t = threading.Thread(target=tick)
        t.start()
        time.sleep(0.02)
        fn()
        stop.set()
        t.join()
        best = min(best, max(gaps))
    return best


def _row(name: str, obj) -> None:
    from app import wire
    from engine.ir.graph import Graph

    ahead = [obj] if isinstance(obj, Graph) else wire.bulk_of(obj)  # as the editor and the worker write them
    data = wire.dumps(obj, ahead=ahead)
    try:
        plain = _plain(obj)
        p_w, p_r = _best(lambda: _plain(obj)), _best(lambda: pickle.loads(plain))
        p_text = f"{len(plain) / 1e6:6.2f} MB write {p_w * 1000:5.0f} ms read {p_r * 1000:5.0f} ms"
    except (pickle.PicklingError, AttributeError, TypeError, RecursionError) as exc:
        p_text = f"cannot: {type(exc).__name__}"
    w_w, w_r = _best(lambda: wire.dumps(obj, ahead=ahead)), _best(lambda: wire.loads(data))
    hold_w = _longest_gil_wait(lambda: wire.dumps(obj, ahead=ahead))
    hold_r = _longest_gil_wait(lambda: wire.loads(data))
    sys.stdout.write(f"{name:34s} pickle: {p_text:44s} | wire: {len(data) / 1e6:6.2f} MB write {w_w * 1000:5.0f} ms "
                     f"read {w_r * 1000:5.0f} ms; longest GIL wait while written {hold_w * 1000:4.0f} ms, "
                     f"read {hold_r * 1000:4.0f} ms\n")
    sys.stdout.flush()


def main() -> int:
    import engine
    from app import jobs, placement
    from app.analysis_jobs import AnalysisCache, AnalysisRequest, AnalysisSettings, compile_job
    from tests.models import LIGHT_DIR
    from tests.zoo import BY_NAME, locate

    sys.setswitchinterval(0.001)  # as the editor (app/runtime.py)
    sys.setrecursionlimit(100_000)  # plain pickle follows use-def links depth first
    sys.stdout.write(f"load average {os.getloadavg()[0]:.2f}\n")
    g = engine.load(LIGHT_DIR / "light_densenet121.onnx")
    _row("densenet121 graph (sent)", g)
    _row("densenet121 Compile outcome (back)", jobs.optimize_and_place_job(_Control(), g, g.version, None))
    path, reason = locate(BY_NAME["ppocr_det"])
    if path is None:
        sys.stdout.write(f"ppocr_det: skipped ({reason})\n")
        return 0
    g = engine.load(path, shapes={"x": (1, 3, 64, 64)})
    _row("ppocr_det graph (sent)", g)
    target = placement.resolve_target("phone-npu")
    req = AnalysisRequest(1, g.version, g, AnalysisSettings(target="phone-npu"), target, {})
    result = compile_job(_Control(), req, AnalysisCache())
    _row("ppocr_det analysis (back)", result)
    sys.stdout.write(f"load average {os.getloadavg()[0]:.2f}\n")
    return 0


if __name__ == "__main__":
    with one_blas_thread():
        sys.exit(main())
