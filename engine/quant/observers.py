"""Range observers for calibration: MinMax, Percentile, Entropy (KL) and MSE.

Histogram observers stream: they keep a fixed-size histogram of |x| (2048 bins by default)
plus the running min and max, so memory stays flat however many samples are seen. When a
new batch exceeds the histogram's range, the old counts are re-binned into the wider range.

Entropy follows the TensorRT recipe: for each candidate threshold t (a bin edge), the clipped
reference distribution P (outliers folded into the last bin) is compared with Q, P merged into
the number of quantization levels and expanded back; t minimizes KL(P || Q).
MSE picks t minimizing the expected squared error sum_b count_b * (c_b - fq(c_b; t))^2 of the
bin centres c_b under round-to-nearest quantization with clipping at t.
"""

from __future__ import annotations

import numpy as np

METHODS = ("minmax", "percentile", "entropy", "mse")


class NonFiniteError(ValueError):
    """An observed tensor holds NaN or infinite values (the caller names the tensor)."""


class Observer:
    """Base class: ``update`` with batches, then ``range()`` gives (lo, hi)."""

    def __init__(self) -> None:
        self.min = np.inf
        self.max = -np.inf
        self.count = 0

    def update(self, x: np.ndarray) -> None:
        """Observe one tensor (any shape)."""
        if x.size == 0:
            return
        x = np.asarray(x)
        lo, hi = float(x.min()), float(x.max())
        if not (np.isfinite(lo) and np.isfinite(hi)):  # NaN propagates through min/max
            raise NonFiniteError(f"holds NaN or infinite values (range [{lo:.3g}, {hi:.3g}])")
        self.min = min(self.min, lo)
        self.max = max(self.max, hi)
        self.count += int(x.size)

    def range(self, nlevels: int = 256) -> tuple[float, float]:
        """The calibrated range [lo, hi] for a type with ``nlevels`` quantization levels."""
        if self.count == 0:
            return 0.0, 0.0
        return self.min, self.max

    def merge(self, other: Observer) -> None:
        """Add what ``other`` saw (another shard of the samples): min, max and count are exact."""
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)
        self.count += other.count


class MinMaxObserver(Observer):
    """The range is the smallest and largest value seen."""

    def range_for(self, method: str, nlevels: int = 256, percentile: float = 99.99) -> tuple[float, float]:
        """Only MinMax can be answered without a histogram."""
        if method != "minmax":
            raise ValueError(f"{method} needs histogram statistics; calibrate with histograms")
        return self.range(nlevels)


class HistogramObserver(Observer):
    """Keeps a histogram of |x| over [0, amax) with a fixed number of bins."""

    def __init__(self, bins: int = 2048) -> None:
        super().__init__()
        self.bins = bins
        self.hist = np.zeros(bins, np.float64)
        self.amax = 0.0
        self.zeros = 0  # exact zeros (ReLU outputs): counted apart so they don't dominate KL

    def update(self, x: np.ndarray) -> None:
        """Add |x| to the histogram, widening (and re-binning) when needed."""
        if x.size == 0:
            return
        super().update(x)
        a = np.abs(np.asarray(x, np.float32).ravel())
        self.zeros += int(a.size - np.count_nonzero(a))
        top = float(a.max())
        if top > self.amax:
            self._widen(top)
        if self.amax == 0.0:
            self.hist[0] += a.size
            return
        per_unit = self.bins / self.amax
        if per_unit > 1e30:  # a denormal range: float32 would overflow the bin arithmetic to inf
            a = a.astype(np.float64)
        idx = (a * per_unit).astype(np.int64)
        np.minimum(idx, self.bins - 1, out=idx)
        self.hist += np.bincount(idx, minlength=self.bins)

    def preset_range(self, absmax: float) -> None:
        """Fix the histogram's range from a known max |x| (a first pass over all samples), so it
        never re-bins: then the counts of any split of the samples add up exactly (see ``merge``)."""
        if self.count:
            raise ValueError("preset_range must come before the first update")
        self.amax = absmax * 1.0001 if absmax > 0 else 0.0

    def merge(self, other: Observer) -> None:
        """Add another shard's histogram. Exact when both share one preset range (counts are
        integers held in float64); histograms over different ranges cannot be merged exactly."""
        if not isinstance(other, HistogramObserver) or other.bins != self.bins:
            raise ValueError("only histograms with the same number of bins merge")
        if other.count and self.count and other.amax != self.amax:
            raise ValueError(f"histograms over different ranges ({self.amax!r} vs {other.amax!r}) do not "
                             "merge exactly; preset both with the range of all samples")
        if not self.count:
            self.amax = other.amax
        super().merge(other)
        self.hist = self.hist + other.hist
        self.zeros += other.zeros

    def _widen(self, top: float) -> None:
        new = top * 1.0001
        if self.amax > 0 and self.hist.any():
            width_old = self.amax / self.bins
            centres = (np.arange(self.bins) + 0.5) * width_old
            idx = np.minimum((centres * (self.bins / new)).astype(np.int64), self.bins - 1)
            self.hist = np.bincount(idx, weights=self.hist, minlength=self.bins).astype(np.float64)
        self.amax = new

    def _levels_on_abs(self, nlevels: int) -> int:
        """Levels available to |x|: all of them for a one-sided tensor, else half."""
        one_sided = self.min >= 0 or self.max <= 0
        return max(nlevels if one_sided else nlevels // 2, 2)

    def edges(self) -> np.ndarray:
        """Upper edge of each bin."""
        return (np.arange(1, self.bins + 1)) * (self.amax / self.bins)

    def threshold(self, nlevels: int) -> float:
        """The clipping threshold on |x| of this observer's method (override)."""
        return self.amax

    def range(self, nlevels: int = 256) -> tuple[float, float]:
        """[lo, hi] clipped to +-threshold (never wider than what was seen)."""
        return self._clip(self.threshold(nlevels))

    def range_for(self, method: str, nlevels: int = 256, percentile: float = 99.99) -> tuple[float, float]:
        """The range another method would pick from the same histogram (no recalibration); each
        answer is kept until the next update (a search asks for the same ranges many times)."""
        if self.count == 0:
            return 0.0, 0.0
        key = (method, nlevels, percentile, self.count, self.amax)
        cache = self.__dict__.setdefault("_ranges", {})
        if key not in cache:
            if len(cache) > 16:
                cache.clear()
            cache[key] = self._range_for(method, nlevels, percentile)
        return cache[key]

    def _range_for(self, method: str, nlevels: int, percentile: float) -> tuple[float, float]:
        if method == "minmax":
            return self.min, self.max
        if method == "percentile":
            return self._clip(self.percentile_threshold(percentile))
        if method == "entropy":
            return self._clip(self.entropy_threshold(nlevels))
        if method == "mse":
            return self._clip(self.mse_threshold(nlevels))
        raise ValueError(f"unknown calibration method {method!r}")

    def _clip(self, t: float) -> tuple[float, float]:
        if self.count == 0:
            return 0.0, 0.0
        return max(self.min, -t), min(self.max, t)

    def percentile_threshold(self, percentile: float) -> float:
        """Smallest bin edge with at least ``percentile`` % of the |x| mass below it."""
        total = self.hist.sum()
        if total == 0:
            return self.amax
        cdf = np.cumsum(self.hist) / total
        k = int(np.searchsorted(cdf, percentile / 100.0 - 1e-12))
        return float(self.edges()[min(k, self.bins - 1)])

    def entropy_threshold(self, nlevels: int, stride: int = 4) -> float:
        """TensorRT-style KL search over bin edges from nlevels/2 bins up."""
        hist = self.hist.copy()
        hist[0] = max(hist[0] - self.zeros, 0.0)  # zeros are exact at any threshold
        if hist.sum() == 0:
            return self.amax
        nq = self._levels_on_abs(nlevels)
        start = min(nq, self.bins)
        best_i, best_kl = self.bins, np.inf
        for i in range(start, self.bins + 1, stride):
            p = hist[:i].copy()
            p[-1] += hist[i:].sum()
            nz = p > 0
            if not nz.any():
                continue
            # merge the clipped bins (outliers excluded) into nq chunks and spread each chunk's
            # mass evenly over its bins that P holds mass in
            sliced = hist[:i]
            chunk = np.minimum((np.arange(i) * nq) // i, nq - 1)
            mass = np.bincount(chunk, weights=sliced, minlength=nq)
            nonempty = np.bincount(chunk, weights=nz.astype(np.float64), minlength=nq)
            q = np.where(nz, mass[chunk] / np.maximum(nonempty[chunk], 1), 0.0)
            ps = p[nz] / p.sum()
            qs = np.maximum(q[nz] / max(q.sum(), 1e-300), 1e-12)
            kl = float(np.sum(ps * np.log(ps / qs)))
            if kl < best_kl:
                best_kl, best_i = kl, i
        # KL only weighs the shape of |x|: on a tensor far from zero (a sigmoid gate in [0.4, 0.6])
        # it can pick a threshold below most of the data. Never clip more than 0.1% of values.
        return float(max(best_i * self.amax / self.bins, self.percentile_threshold(99.9)))

    def mse_threshold(self, nlevels: int, candidates: int = 128) -> float:
        """Threshold between 5% and 100% of max |x| minimizing the expected squared error."""
        if self.hist.sum() == 0 or self.amax == 0:
            return self.amax
        centres = (np.arange(self.bins) + 0.5) * (self.amax / self.bins)
        step_levels = max(self._levels_on_abs(nlevels) - 1, 1)
        best_t, best_err = self.amax, np.inf
        for t in np.linspace(0.05, 1.0, candidates) * self.amax:
            step = t / step_levels
            fq = np.minimum(np.rint(centres / step), step_levels) * step
            err = float(np.dot(self.hist, (centres - fq) ** 2))
            if err < best_err:
                best_err, best_t = err, float(t)
        return best_t


class PercentileObserver(HistogramObserver):
    """Clip at the given percentile of |x| (default 99.99)."""

    def __init__(self, percentile: float = 99.99, bins: int = 2048) -> None:
        super().__init__(bins)
        if not 0 < percentile <= 100:
            raise ValueError(f"percentile must be in (0, 100], got {percentile}")
        self.percentile = percentile

    def threshold(self, nlevels: int) -> float:
        """The percentile of |x|."""
        return self.percentile_threshold(self.percentile)


class EntropyObserver(HistogramObserver):
    """Threshold minimizing KL(P || Q) between the clipped and the quantized distribution."""

    def threshold(self, nlevels: int) -> float:
        """The KL-optimal threshold."""
        return self.entropy_threshold(nlevels)


class MSEObserver(HistogramObserver):
    """Threshold minimizing the expected squared quantization error over the histogram."""

    def threshold(self, nlevels: int) -> float:
        """The MSE-optimal threshold."""
        return self.mse_threshold(nlevels)


def make_observer(method: str, percentile: float = 99.99, bins: int = 2048) -> Observer:
    """An observer for a calibration method name."""
    if method == "minmax":
        return MinMaxObserver()
    if method == "percentile":
        return PercentileObserver(percentile, bins)
    if method == "entropy":
        return EntropyObserver(max(bins, 2048))
    if method == "mse":
        return MSEObserver(bins)
    raise ValueError(f"unknown calibration method {method!r} (choose from {', '.join(METHODS)})")
