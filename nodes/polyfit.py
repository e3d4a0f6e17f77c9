"""Polynomial fits of special functions, shared by the numpy and the compiled erf."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np


def fit_poly(f: Callable[[float], float], lo: float, hi: float, deg: int) -> np.ndarray:
    """Power-basis coefficients (highest first) of a Chebyshev fit of f on [lo, hi] in s in [-1, 1]."""
    n = 4 * (deg + 1)
    x = (np.cos(np.pi * (np.arange(n) + 0.5) / n) + 1.0) / 2.0 * (hi - lo) + lo
    cheb = np.polynomial.chebyshev.chebfit((x - lo) / (hi - lo) * 2.0 - 1.0, [f(float(v)) for v in x], deg)
    return np.polynomial.chebyshev.cheb2poly(cheb)[::-1].copy()


ERF_NEAR = fit_poly(lambda u: math.erf(math.sqrt(u)) / math.sqrt(u) if u > 0 else 2.0 / math.sqrt(math.pi),
                    0.0, 1.0, 11)
"""erf(x) = x * A(2x^2 - 1) for |x| < 1: the coefficients of A (relative error < 1e-15)."""
