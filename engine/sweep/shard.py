"""Data-parallel calibration: shards of samples observed on workers, observers merged exactly.

MinMax statistics merge exactly in any split (min of mins, max of maxes, sum of counts). A
streaming histogram does not: it re-bins whenever a batch exceeds its range, so its counts
depend on the order the samples came in. Sharded histograms therefore take two passes:

1. every shard observes min/max per tensor; the merge gives each tensor's max |x| over all
   samples;
2. every shard fills a histogram whose range is preset to that max |x| (it never re-bins), so a
   value falls into the same bin whichever shard sees it, and the merged counts (integers in
   float64, exact below 2**53) equal those of one process over all samples.

Samples run one at a time (calibrate's ``batch=1``): a batched run sums in another order in
BLAS and changes activations in the last bits, so a sample's values would depend on the shard
it fell in. One at a time, every sample gives the same bits wherever it runs.

The same two functions run in one process (``calibrate_sharded`` with no client) and on dask
workers (``engine.sweep.runner``), so the scales are identical by construction; a test checks it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from engine.ir.graph import Graph
from engine.quant.calibrate import Calibration, calibrate, tensors_to_observe
from engine.quant.config import QuantConfig
from engine.quant.data import CalibrationSet
from engine.quant.observers import HistogramObserver, MinMaxObserver, Observer


def shard_ranges(total: int, size: int) -> list[tuple[int, int]]:
    """[start, stop) of consecutive shards of at most ``size`` samples."""
    return [(lo, min(lo + size, total)) for lo in range(0, total, max(size, 1))]


def subset(data: CalibrationSet, start: int, stop: int) -> CalibrationSet:
    """Samples ``start`` .. ``stop - 1`` of ``data``."""
    return CalibrationSet(f"{data.source}[{start}:{stop}]", stop - start, lambda i: data.sample(start + i))


def minmax_pass(graph: Graph, data: CalibrationSet, start: int, stop: int,
                config: QuantConfig | None = None) -> dict[str, Observer]:
    """Pass 1 over one shard: min/max/count of every tensor quantization needs."""
    config = config or QuantConfig()
    names = tensors_to_observe(graph, config)
    obs: dict[str, Observer] = {n: MinMaxObserver() for n in names}
    return calibrate(graph, subset(data, start, stop), config, observers=obs, batch=1).stats


def histogram_pass(graph: Graph, data: CalibrationSet, start: int, stop: int, ranges: dict[str, Observer],
                   config: QuantConfig | None = None) -> dict[str, Observer]:
    """Pass 2 over one shard: histograms over the range pass 1 found for all samples."""
    config = config or QuantConfig()
    obs: dict[str, Observer] = {}
    for name, mm in ranges.items():
        h = HistogramObserver(config.bins)
        h.preset_range(max(abs(mm.min), abs(mm.max)) if mm.count else 0.0)
        obs[name] = h
    return calibrate(graph, subset(data, start, stop), config, observers=obs, batch=1).stats


def merge_stats(parts: Sequence[dict[str, Observer]]) -> dict[str, Observer]:
    """Merge the observers of several shards (in any order: the result is the same)."""
    if not parts:
        raise ValueError("nothing to merge")
    names = set(parts[0])
    for p in parts[1:]:
        if set(p) != names:
            raise ValueError("shards observed different tensors (the optimized graphs differ)")
    out: dict[str, Observer] = {}
    for name in sorted(names):
        first = parts[0][name]
        acc: Observer = HistogramObserver(first.bins) if isinstance(first, HistogramObserver) else MinMaxObserver()
        for p in parts:
            acc.merge(p[name])
        out[name] = acc
    return out


def to_calibration(stats: dict[str, Observer], samples: int, source: str) -> Calibration:
    """The Calibration that quantization consumes."""
    hist = any(isinstance(o, HistogramObserver) for o in stats.values())
    return Calibration(stats, samples, source, hist)


Mapper = Callable[[Callable, list[tuple[int, int]]], list[dict[str, Observer]]]


def calibrate_sharded(graph: Graph, data: CalibrationSet, histograms: bool, shard_samples: int = 32,
                      config: QuantConfig | None = None, mapper: Mapper | None = None) -> Calibration:
    """Calibrate in shards of ``shard_samples``; ``mapper(fn, ranges)`` runs ``fn(start, stop)``
    over the shards (default: one after another in this process)."""

    def run(fn: Callable, ranges: list[tuple[int, int]]) -> list[dict[str, Observer]]:
        return mapper(fn, ranges) if mapper is not None else [fn(lo, hi) for lo, hi in ranges]

    ranges = shard_ranges(len(data), shard_samples)
    mm = merge_stats(run(lambda lo, hi: minmax_pass(graph, data, lo, hi, config), ranges))
    if histograms:
        mm = merge_stats(run(lambda lo, hi: histogram_pass(graph, data, lo, hi, mm, config), ranges))
    return to_calibration(mm, len(data), data.source)
