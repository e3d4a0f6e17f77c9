"""Sampling a tensor at computed positions: GridSample and AffineGrid.

GridSample reads X (N, C, D1..Dr) at the positions in grid (N, O1..Ok, r), normalized to
[-1, 1] with grid[..., 0] along the last spatial axis (x, then y, then z). A normalized n
maps to pixel (n + 1) / 2 * (d - 1) with align_corners (-1 and 1 are the corner pixels'
centres), else ((n + 1) * d - 1) / 2 (-1 and 1 are the outer edges). Positions outside the
image are clamped (padding "border"), mirrored at the edges (padding "reflection", repeatedly,
about -0.5 and d - 0.5, or 0 and d - 1 with align_corners) or read as 0 ("zeros"). "nearest"
rounds half to even, "linear" weights the 2^r neighbours by (1 - t, t), "cubic" the 4^r
neighbours by Keys' cubic convolution with a = -0.75.

AffineGrid builds such a grid from affine matrices theta (N, r, r + 1) applied to the
normalized coordinates of every output position: [x, y(, z), 1] @ theta^T.
"""

from __future__ import annotations

import itertools

import numpy as np

from nodes.registry import register
from nodes.spec import AttrSpec, NodeContext, OpError, OpSpec, Port, RunContext, ints
from nodes.types import TensorType

_MODES = {"bilinear": "linear", "linear": "linear", "nearest": "nearest", "bicubic": "cubic", "cubic": "cubic"}
_A = -0.75


def _denormalize(n: np.ndarray, d: int, align: bool) -> np.ndarray:
    return (n + 1) / 2.0 * (d - 1) if align else ((n + 1) * d - 1) / 2.0


def _reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Mirror x into [lo, hi] about the nearer edge, as often as needed."""
    span = hi - lo
    if span <= 0:
        return np.full_like(x, lo)
    below, above = x < lo, x > hi
    dx = np.where(below, lo - x, np.where(above, x - hi, 0.0))
    k = np.floor(dx / span)
    r = dx - k * span
    even = (k % 2) == 0
    low_side = np.where(even, lo + r, hi - r)
    high_side = np.where(even, hi - r, lo + r)
    return np.where(below, low_side, np.where(above, high_side, x))


def _cubic_weights(t: np.ndarray) -> list[np.ndarray]:
    """Keys' weights of the neighbours at offsets -1, 0, 1, 2 for a fraction t in [0, 1)."""
    def near(x):  # |x| <= 1
        return ((_A + 2) * x - (_A + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((_A * x - 5 * _A) * x + 8 * _A) * x - 4 * _A

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


class _Sampler:
    """Fetches X[n, :, i1, .., ir] with the padding rule, for integer index arrays."""

    def __init__(self, x: np.ndarray, padding: str, align: bool) -> None:
        self.x = x
        self.padding = padding
        self.dims = x.shape[2:]
        self.bounds = [(0.0, d - 1.0) if align else (-0.5, d - 0.5) for d in self.dims]
        self.n = x.shape[0]

    def fetch(self, idx: list[np.ndarray]) -> np.ndarray:
        """(N, C, *O) values at the integer positions ``idx`` (each (N, *O))."""
        shape = idx[0].shape
        batch = np.arange(self.n).reshape((self.n,) + (1,) * (len(shape) - 1))
        valid = np.ones(shape, bool)
        safe = []
        for i, d, (lo, hi) in zip(idx, self.dims, self.bounds):
            if self.padding == "zeros":
                valid &= (i >= 0) & (i < d)
                safe.append(np.clip(i, 0, d - 1))
            elif self.padding == "border":
                safe.append(np.clip(i, 0, d - 1))
            else:
                safe.append(np.clip(np.trunc(_reflect(i.astype(np.float64), lo, hi)).astype(np.int64), 0, d - 1))
        vals = self.x[(batch, slice(None), *safe)]  # (N, *O, C)
        vals = np.moveaxis(vals, -1, 1)
        if self.padding == "zeros":
            vals = np.where(valid[:, None], vals, 0)
        return vals


@register("GridSample", since=16)
class GridSampleSpec(OpSpec):
    """Sample X at normalized grid positions (nearest, linear or cubic; zeros/border/reflection padding)."""

    family = "resize"
    doc = ("Reads X at the grid's normalized positions (x first) with nearest, (bi/tri)linear or "
           "cubic interpolation; outside positions are zeros, clamped to the border or reflected.")
    inputs = (Port("X"), Port("grid"))
    outputs = (Port("Y"),)
    attrs = (AttrSpec("mode", "string", None, "linear/bilinear, nearest or cubic/bicubic."),
             AttrSpec("padding_mode", "string", "zeros", "zeros, border or reflection.",
                      choices=("zeros", "border", "reflection")),
             AttrSpec("align_corners", "int", 0, "1: -1 and 1 are the corner pixels' centres."))

    def _mode(self, attrs: dict) -> str:
        mode = attrs.get("mode") or "linear"
        if mode not in _MODES:
            raise OpError(f"GridSample: unknown mode {mode!r}")
        return _MODES[mode]

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """(N, C, *grid's spatial dims)."""
        x, g = ctx.shape(0), ctx.shape(1)
        if x is None or g is None:
            return [TensorType(ctx.dtype(0))]
        if len(g) != len(x) or (isinstance(g[-1], int) and g[-1] != len(x) - 2):
            raise OpError(f"GridSample: grid {tuple(g)} does not fit X {tuple(x)}")
        return [TensorType(ctx.dtype(0), (x[0], x[1], *g[1:-1]))]

    def reference(self, ctx: RunContext, x: np.ndarray, grid: np.ndarray) -> np.ndarray:
        """Denormalize, pre-clamp/reflect, then gather and weight the neighbours."""
        mode = self._mode(ctx.attrs)
        padding = ctx.attrs.get("padding_mode") or "zeros"
        align = bool(int(ctx.attrs.get("align_corners") or 0))
        r = x.ndim - 2
        if grid.shape[-1] != r or grid.shape[0] != x.shape[0]:
            raise OpError(f"GridSample: grid {grid.shape} does not fit X {x.shape}")
        out_shape = (x.shape[0], x.shape[1], *grid.shape[1:-1])
        if 0 in out_shape:
            return np.zeros(out_shape, x.dtype)
        s = _Sampler(x, padding, align)
        g = grid.astype(np.float64)
        coords = []
        for k, d in enumerate(s.dims):  # spatial axis k reads grid component r - 1 - k
            c = _denormalize(g[..., r - 1 - k], d, align)
            if mode == "nearest":
                c = np.rint(c)
            lo, hi = s.bounds[k]
            if padding == "border":
                c = np.where((c < lo) | (c > hi), np.clip(c, 0, d - 1), c)
            elif padding == "reflection":
                c = _reflect(c, lo, hi)
            coords.append(c)
        if mode == "nearest":
            y = s.fetch([c.astype(np.int64) for c in coords])
            return y.astype(x.dtype)
        base = [np.floor(c).astype(np.int64) for c in coords]
        frac = [c - b for c, b in zip(coords, base)]
        if mode == "linear":
            offsets, weights = (0, 1), [[1 - t, t] for t in frac]
        else:
            offsets, weights = (-1, 0, 1, 2), [_cubic_weights(t) for t in frac]
        y = np.zeros(out_shape, np.float64)
        for combo in itertools.product(range(len(offsets)), repeat=r):
            w = np.ones(base[0].shape)
            for k, j in enumerate(combo):
                w = w * weights[k][j]
            vals = s.fetch([b + offsets[j] for b, j in zip(base, combo)])
            y += w[:, None] * vals
        return y.astype(x.dtype)


@register("AffineGrid", since=20)
class AffineGridSpec(OpSpec):
    """The sampling grid of affine transforms theta over an output of a given size."""

    family = "resize"
    doc = "A GridSample grid: every output position's normalized coordinates transformed by theta."
    inputs = (Port("theta"), Port("size"))
    outputs = (Port("grid"),)
    attrs = (AttrSpec("align_corners", "int", 0, "1: -1 and 1 are the corner pixels' centres."),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """(N, *spatial, r) when size is a constant."""
        size = ctx.const(1)
        if size is None:
            return [TensorType(ctx.dtype(0))]
        dims = ints(size)
        return [TensorType(ctx.dtype(0), (dims[0], *dims[2:], len(dims) - 2))]

    def reference(self, ctx: RunContext, theta: np.ndarray, size: np.ndarray) -> np.ndarray:
        """Normalized base grid (x first, with a 1 appended) times theta^T, per batch."""
        dims = ints(size)
        r = len(dims) - 2
        if r not in (2, 3) or theta.shape != (dims[0], r, r + 1):
            raise OpError(f"AffineGrid: theta {theta.shape} does not fit size {dims}")
        align = bool(int(ctx.attrs.get("align_corners") or 0))
        axes = []
        for d in dims[2:]:
            if align:
                axes.append(np.linspace(-1.0, 1.0, d) if d > 1 else np.zeros(1))
            else:
                axes.append((np.arange(d) * 2.0 + 1.0) / d - 1.0)
        mesh = np.meshgrid(*axes, indexing="ij")  # spatial order (z,) y, x
        base = np.stack([*mesh[::-1], np.ones_like(mesh[0])], axis=-1)  # x first, then 1
        grid = np.einsum("...j,nij->n...i", base, theta.astype(np.float64))
        return grid.astype(theta.dtype)
