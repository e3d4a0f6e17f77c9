"""Stream mode: CPU preprocessing of frame N+1 overlaps inference of frame N through a queue.

A producer thread on one CPU core decodes and preprocesses frames and puts them into a
bounded queue of ``queue_depth`` frames (the field notes recommend 2 to 4); it blocks while
the queue is full. The inference thread takes frames in order and runs the simulated
inference (NPU partitions, CPU fallback ops on its own core, transfers) followed by
postprocessing. Per-frame host times vary by a seeded log-normal jitter (image content
changes decode time), so the latency distribution has a p50 and a p99; the same seed gives
the same result. Throughput is compared with running the same frames strictly serially.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.sim.timeline import SimResult


@dataclass
class StreamResult:
    """What a stream simulation measured."""

    frames: int
    queue_depth: int
    throughput_fps: float
    serial_fps: float
    p50_us: float
    p99_us: float
    mean_us: float
    max_queue: int
    latencies_us: list[float] = field(repr=False, default_factory=list)
    arrival_fps: float | None = None

    @property
    def speedup(self) -> float:
        """Throughput gain of the overlapped pipeline over serial execution."""
        return self.throughput_fps / self.serial_fps if self.serial_fps else 0.0

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready summary (latencies left out)."""
        return {"frames": self.frames, "queue_depth": self.queue_depth, "arrival_fps": self.arrival_fps,
                "throughput_fps": round(self.throughput_fps, 3), "serial_fps": round(self.serial_fps, 3),
                "speedup": round(self.speedup, 3), "p50_us": round(self.p50_us, 3),
                "p99_us": round(self.p99_us, 3), "mean_us": round(self.mean_us, 3), "max_queue": self.max_queue}


def simulate_stream(result: SimResult, frames: int = 200, queue_depth: int = 3, jitter: float = 0.15,
                    seed: int = 0, arrival_fps: float | None = None) -> StreamResult:
    """Simulate ``frames`` frames through the two-thread pipeline (see the module docstring).

    ``arrival_fps`` None means frames are always available (throughput-bound); otherwise a
    camera delivers one every 1/arrival_fps seconds and latency counts from its arrival.
    """
    if frames < 1:
        raise ValueError("frames must be at least 1")
    if queue_depth < 1:
        raise ValueError("queue_depth must be at least 1")
    rng = np.random.default_rng(seed)
    host = result.host_us
    pre_base = host.get("decode", 0.0) + host.get("preprocess", 0.0)
    post = host.get("postprocess", 0.0)
    sigma = max(0.0, jitter)
    pre = pre_base * rng.lognormal(-sigma * sigma / 2, sigma, frames)
    infer = result.latency_us * rng.lognormal(-(sigma / 4) ** 2 / 2, sigma / 4, frames) + post
    period = None if not arrival_fps else 1e6 / arrival_fps
    p_free = 0.0
    c_end_prev = 0.0
    take = np.zeros(frames)  # when the consumer takes frame i from the queue
    done = np.zeros(frames)
    start = np.zeros(frames)
    max_queue = 0
    for i in range(frames):
        arrival = i * period if period is not None else None
        s = max(p_free, arrival) if arrival is not None else p_free
        start[i] = arrival if arrival is not None else s
        ready = s + pre[i]
        put = ready if i < queue_depth else max(ready, take[i - queue_depth])  # blocks while full
        p_free = put
        take[i] = max(c_end_prev, put)
        c_end_prev = take[i] + infer[i]
        done[i] = c_end_prev
        waiting = int(np.sum(take[max(0, i - queue_depth):i + 1] > put))  # queued at put time
        max_queue = max(max_queue, min(waiting, queue_depth))
    lat = done - start
    span = done[-1] - done[0]
    fps = (frames - 1) / span * 1e6 if frames > 1 and span > 0 else 1e6 / max(done[-1], 1e-9)
    serial = 1e6 / float(np.mean(pre) + np.mean(infer)) if frames else 0.0
    return StreamResult(frames, queue_depth, float(fps), serial, float(np.percentile(lat, 50)),
                        float(np.percentile(lat, 99)), float(np.mean(lat)), max_queue,
                        [float(x) for x in lat], arrival_fps)
