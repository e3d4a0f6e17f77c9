"""Thermal mode: many back-to-back inferences, first run versus steady state.

The target's thermal model is first order. A heat level h in [0, 1] rises while the NPU is
busy and decays while it idles, both with the target's time constant tau:

    busy for t:   h <- 1 - (1 - h) * exp(-t / tau)
    idle for t:   h <- h * exp(-t / tau)

and the NPU clock is ``peak - (peak - sustained) * h``. Compute time scales with the clock;
DRAM time does not (memory-bound models throttle less), host-side dispatch does not either.
The first run also pays the cold start: uploading every NPU weight once. Steady state is the
mean of the last fifth of the runs (at least ten); by default the simulation runs at least
100 iterations and until five time constants of load have passed (the field notes: measure
over 100+ runs, 20 ms can become 40 ms once the chip is hot).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.sim.timeline import SimResult

MAX_RUNS = 200_000


@dataclass
class ThermalResult:
    """Latency per run under the thermal model."""

    runs: int
    first_run_us: float
    cold_start_us: float
    steady_state_us: float
    peak_clock_mhz: float
    steady_clock_mhz: float
    elapsed_s: float
    per_run_us: list[float] = field(repr=False, default_factory=list)

    @property
    def slowdown(self) -> float:
        """Steady-state latency over the warm first-run latency."""
        warm = self.first_run_us - self.cold_start_us
        return self.steady_state_us / warm if warm > 0 else 1.0

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready summary (per-run latencies left out)."""
        return {"runs": self.runs, "first_run_us": round(self.first_run_us, 3),
                "cold_start_us": round(self.cold_start_us, 3), "steady_state_us": round(self.steady_state_us, 3),
                "slowdown": round(self.slowdown, 4), "peak_clock_mhz": self.peak_clock_mhz,
                "steady_clock_mhz": round(self.steady_clock_mhz, 3), "elapsed_s": round(self.elapsed_s, 4)}


def _npu_arrays(result: SimResult) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ops = [o.cost for o in result.ops if o.device == "npu"]
    c = np.array([x.compute_us for x in ops], dtype=np.float64)
    m = np.array([x.memory_us for x in ops], dtype=np.float64)
    o = np.array([x.overhead_us for x in ops], dtype=np.float64)
    return c, m, o


def cold_start_us(result: SimResult) -> float:
    """One-time upload of every NPU weight before the first inference."""
    facts = result.placement.facts
    seen: set[str] = set()
    nbytes = 0
    for f in facts.order:
        if result.placement.device[f.name] != "npu":
            continue
        for v in f.weight_values:
            if v.name not in seen:
                seen.add(v.name)
                nbytes += facts.npu_bytes(v)
    return result.target.transfer.latency_us(nbytes) if nbytes else 0.0


def simulate_thermal(result: SimResult, runs: int | None = None, period_us: float | None = None) -> ThermalResult:
    """Run inferences back to back (or one every ``period_us``) under the thermal model."""
    th = result.target.thermal
    peak = result.target.npu.clock_mhz
    s = th.sustained_clock_mhz / peak
    tau_us = th.time_constant_s * 1e6
    c, m, o = _npu_arrays(result)
    base_npu = float(np.sum(np.maximum(c, m) + o))
    rest = max(0.0, result.latency_us - base_npu)  # CPU ops, transfers, dispatch: not clocked
    if runs is None:
        per = max(result.latency_us, period_us or 0.0, 1e-3)
        runs = int(min(MAX_RUNS, max(100, math.ceil(5 * tau_us / per))))
    if runs < 1:
        raise ValueError("runs must be at least 1")
    # NPU time as a function of the clock ratio, tabulated once (the loop stays scalar).
    grid = np.linspace(s, 1.0, 257) if s < 1.0 else np.ones(1)
    table = (np.maximum(c[None, :] / grid[:, None], m[None, :]) + o[None, :]).sum(axis=1) if c.size \
        else np.zeros(grid.size)
    tab = [float(x) for x in table]
    step = (1.0 - s) / (grid.size - 1) if grid.size > 1 else 1.0
    h = 0.0
    lat = np.empty(runs)
    clocks = np.empty(runs)
    elapsed = 0.0
    decay_busy = 1.0 / tau_us
    for i in range(runs):
        r = 1.0 - (1.0 - s) * h
        if grid.size > 1:
            x = (r - s) / step
            k = min(int(x), grid.size - 2)
            npu = tab[k] + (tab[k + 1] - tab[k]) * (x - k)
        else:
            npu = tab[0]
        total = npu + rest
        lat[i] = total
        clocks[i] = r * peak
        h = 1.0 - (1.0 - h) * math.exp(-npu * decay_busy)
        idle = total - npu + (max(0.0, period_us - total) if period_us else 0.0)
        h *= math.exp(-idle * decay_busy)
        elapsed += max(total, period_us or 0.0)
    cold = cold_start_us(result)
    tail = max(10, runs // 5) if runs >= 10 else runs
    return ThermalResult(runs, float(lat[0] + cold), cold, float(np.mean(lat[-tail:])), peak,
                         float(np.mean(clocks[-tail:])), elapsed / 1e6, [float(x) for x in lat])
