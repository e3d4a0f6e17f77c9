"""Gather/scatter/indexing ops: Gather*, Scatter*, OneHot, NonZero, Compress, TopK, ArgMax/ArgMin,
CumSum/CumProd, Unique and Einsum."""

from __future__ import annotations

import numpy as np

from nodes._util import broadcast_shapes, norm_axis, prod
from nodes.registry import register
from nodes.spec import (
    REQUIRED,
    AttrSpec,
    NodeContext,
    OpError,
    OpSpec,
    Port,
    RunContext,
    Work,
)
from nodes.types import Dim, TensorType

INT64 = np.dtype(np.int64)


def _wrap(idx: np.ndarray, dims: object) -> np.ndarray:
    """Indices as int64 with negative entries counted from the end of their axis."""
    idx = np.asarray(idx).astype(np.int64, copy=False)
    return np.where(idx < 0, idx + np.asarray(dims, dtype=np.int64), idx)


# -- Gather family -------------------------------------------------------------------------------
@register("Gather", since=1)
class Gather(OpSpec):
    """Take entries of ``data`` along ``axis`` at ``indices`` (negative indices wrap)."""

    doc = "Gather slices of data along an axis."
    inputs = (Port("data"), Port("indices"))
    outputs = (Port("output"),)
    attrs = (AttrSpec("axis", "int", 0, "axis to gather along"),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """data.shape[:axis] + indices.shape + data.shape[axis+1:]."""
        ds, is_, dt = ctx.shape(0), ctx.shape(1), ctx.dtype(0)
        if ds is None or is_ is None:
            return [TensorType(dt)]
        a = norm_axis(int(ctx.attrs["axis"]), len(ds))
        return [TensorType(dt, tuple(ds[:a]) + tuple(is_) + tuple(ds[a + 1:]))]

    def reference(self, ctx: RunContext, data: np.ndarray, indices: np.ndarray) -> np.ndarray:
        """numpy take."""
        a = norm_axis(int(ctx.attrs.get("axis", 0)), data.ndim)
        return np.asarray(np.take(data, np.asarray(indices).astype(np.int64, copy=False), axis=a))


@register("GatherElements", since=11)
class GatherElements(OpSpec):
    """out[i][j][k] = data[i][index[i][j][k]][k] for axis 1 (take along an axis)."""

    doc = "Gather single elements along an axis."
    inputs = (Port("data"), Port("indices"))
    outputs = (Port("output"),)
    attrs = (AttrSpec("axis", "int", 0, "axis to gather along"),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Shape of indices."""
        return [TensorType(ctx.dtype(0), ctx.shape(1))]

    def reference(self, ctx: RunContext, data: np.ndarray, indices: np.ndarray) -> np.ndarray:
        """numpy take_along_axis (advanced indexing when indices are smaller off-axis)."""
        a = norm_axis(int(ctx.attrs.get("axis", 0)), data.ndim)
        idx = _wrap(indices, data.shape[a])
        if idx.shape[:a] + idx.shape[a + 1:] == data.shape[:a] + data.shape[a + 1:]:
            return np.take_along_axis(data, idx, axis=a)
        key = list(np.indices(idx.shape, sparse=True))  # indices may be smaller than data off-axis
        key[a] = idx
        return data[tuple(key)]


@register("GatherND", since=11)
class GatherND(OpSpec):
    """Gather slices addressed by the last dim of ``indices``, after ``batch_dims`` shared dims."""

    doc = "Gather slices by N-dimensional indices."
    inputs = (Port("data"), Port("indices"))
    outputs = (Port("output"),)
    attrs = (AttrSpec("batch_dims", "int", 0, "number of leading batch dims shared by data and indices"),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """indices.shape[:-1] + data.shape[batch_dims + k:]."""
        ds, is_, dt = ctx.shape(0), ctx.shape(1), ctx.dtype(0)
        if ds is None or is_ is None:
            return [TensorType(dt)]
        b, k = int(ctx.attrs["batch_dims"]), is_[-1] if is_ else None
        if not isinstance(k, int):
            return [TensorType(dt)]
        if b + k > len(ds):
            raise OpError(f"GatherND: index depth {k} + batch_dims {b} exceeds data rank {len(ds)}")
        return [TensorType(dt, tuple(is_[:-1]) + tuple(ds[b + k:]))]

    def reference(self, ctx: RunContext, data: np.ndarray, indices: np.ndarray) -> np.ndarray:
        """Advanced indexing over the flattened batch dims."""
        b = int(ctx.attrs.get("batch_dims", 0))
        k = indices.shape[-1]
        bshape = data.shape[:b]
        nb = prod(bshape)
        d = data.reshape((nb, *data.shape[b:]))
        idx = _wrap(indices, data.shape[b:b + k]).reshape(nb, -1, k)
        key = (np.arange(nb)[:, None], *(idx[..., j] for j in range(k)))
        out = d[key]
        return out.reshape(indices.shape[:-1] + data.shape[b + k:])


# -- Scatter family ------------------------------------------------------------------------------
_REDUCE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter_at(out: np.ndarray, key: tuple, updates: np.ndarray, reduction: str) -> np.ndarray:
    if reduction in ("none", "", None):
        out[key] = updates
    elif reduction in _REDUCE:
        _REDUCE[reduction].at(out, key, updates)
    else:
        raise OpError(f"unknown scatter reduction {reduction!r}")
    return out


def scatter_elements(data: np.ndarray, indices: np.ndarray, updates: np.ndarray, axis: int,
                     reduction: str = "none") -> np.ndarray:
    """ScatterElements: data with updates written (or reduced) at indices along axis."""
    a = norm_axis(axis, data.ndim)
    key = list(np.indices(indices.shape, sparse=True))
    key[a] = _wrap(indices, data.shape[a])
    return _scatter_at(data.copy(), tuple(key), updates, reduction)


class _ScatterBase(OpSpec):
    inputs = (Port("data"), Port("indices"), Port("updates"))
    outputs = (Port("output"),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Same as data."""
        return [ctx.type(0)]


@register("Scatter", since=9)
class Scatter(_ScatterBase):
    """Deprecated (opset 9-10) name of ScatterElements without reduction."""

    doc = "Write updates into a copy of data at indices along an axis (deprecated)."
    attrs = (AttrSpec("axis", "int", 0, "axis to scatter along"),)

    def reference(self, ctx: RunContext, data: np.ndarray, indices: np.ndarray, updates: np.ndarray) -> np.ndarray:
        """Element scatter."""
        return scatter_elements(data, indices, updates, int(ctx.attrs.get("axis", 0)))


@register("ScatterElements", since=11)
class ScatterElements(_ScatterBase):
    """Write (or reduce: add, mul, max, min) updates into a copy of data at indices along axis."""

    doc = "Scatter updates along an axis, with an optional reduction."
    attrs = (AttrSpec("axis", "int", 0, "axis to scatter along"),
             AttrSpec("reduction", "string", "none", "", ("none", "add", "mul", "max", "min")))

    def reference(self, ctx: RunContext, data: np.ndarray, indices: np.ndarray, updates: np.ndarray) -> np.ndarray:
        """Element scatter with unbuffered reductions for repeated indices."""
        return scatter_elements(data, indices, updates, int(ctx.attrs.get("axis", 0)),
                                ctx.attrs.get("reduction", "none"))


@register("ScatterND", since=11)
class ScatterND(_ScatterBase):
    """Write (or reduce) update slices at the N-dimensional ``indices`` of a copy of data."""

    doc = "Scatter slices by N-dimensional indices, with an optional reduction."
    attrs = (AttrSpec("reduction", "string", "none", "", ("none", "add", "mul", "max", "min")),)

    def reference(self, ctx: RunContext, data: np.ndarray, indices: np.ndarray, updates: np.ndarray) -> np.ndarray:
        """Advanced-index assignment or ufunc.at."""
        k = indices.shape[-1]
        idx = _wrap(indices, data.shape[:k])
        key = tuple(idx[..., j] for j in range(k))
        return _scatter_at(data.copy(), key, updates, ctx.attrs.get("reduction", "none"))


# -- OneHot / NonZero / Compress -----------------------------------------------------------------
@register("OneHot", since=9)
class OneHot(OpSpec):
    """One-hot encode ``indices`` into ``depth`` classes with values [off, on]; out-of-range: all off."""

    doc = "One-hot encoding of indices."
    inputs = (Port("indices"), Port("depth"), Port("values"))
    outputs = (Port("output"),)
    attrs = (AttrSpec("axis", "int", -1, "where the new axis goes in the output"),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """indices shape with depth inserted at axis; dtype of values."""
        s, dt = ctx.shape(0), ctx.dtype(2)
        if s is None:
            return [TensorType(dt)]
        dc = ctx.const(1)
        depth: Dim = int(np.asarray(dc).reshape(-1)[0]) if dc is not None else None
        a = norm_axis(int(ctx.attrs["axis"]), len(s) + 1)
        out = list(s)
        out.insert(a, depth)
        return [TensorType(dt, tuple(out))]

    def reference(self, ctx: RunContext, indices: np.ndarray, depth: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Compare against arange(depth), then move the class axis into place."""
        d = int(np.asarray(depth).reshape(-1)[0])
        idx = _wrap(np.asarray(indices).astype(np.int64), d)
        hot = idx[..., None] == np.arange(d)
        hot = np.moveaxis(hot, -1, norm_axis(int(ctx.attrs.get("axis", -1)), idx.ndim + 1))
        v = np.asarray(values).reshape(-1)
        return np.where(hot, v[1], v[0]).astype(v.dtype)


@register("NonZero", since=9)
class NonZero(OpSpec):
    """Indices of the non-zero elements, shape (rank, count), int64."""

    doc = "Indices of non-zero elements."
    inputs = (Port("X"),)
    outputs = (Port("Y"),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """(rank, count when the input value is known)."""
        s, c = ctx.shape(0), ctx.const(0)
        n = int(np.count_nonzero(c)) if c is not None else None
        return [TensorType(INT64, (len(s) if s is not None else None, n))]

    def reference(self, ctx: RunContext, x: np.ndarray) -> np.ndarray:
        """numpy nonzero stacked."""
        if x.ndim == 0:
            return np.zeros((0, int(bool(x))), dtype=np.int64)
        return np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)


@register("Compress", since=9)
class Compress(OpSpec):
    """Keep the slices along axis (or elements of the flattened input) where condition is true."""

    doc = "Select slices where a boolean condition holds."
    inputs = (Port("input"), Port("condition"))
    outputs = (Port("output"),)
    attrs = (AttrSpec("axis", "int", None, "axis to select along (default: flatten)"),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Selected count along axis when the condition is known."""
        s, dt, c = ctx.shape(0), ctx.dtype(0), ctx.const(1)
        n = int(np.count_nonzero(c)) if c is not None else None
        if ctx.attrs.get("axis") is None:
            return [TensorType(dt, (n,))]
        if s is None:
            return [TensorType(dt)]
        a = norm_axis(int(ctx.attrs["axis"]), len(s))
        return [TensorType(dt, tuple(n if k == a else d for k, d in enumerate(s)))]

    def reference(self, ctx: RunContext, x: np.ndarray, condition: np.ndarray) -> np.ndarray:
        """numpy compress."""
        ax = ctx.attrs.get("axis")
        a = None if ax is None else norm_axis(int(ax), x.ndim)
        return np.compress(np.asarray(condition).astype(bool).reshape(-1), x, axis=a)


# -- TopK / ArgMax / ArgMin ----------------------------------------------------------------------
@register("TopK", since=1)
class TopK(OpSpec):
    """The k largest (or smallest) values along axis and their int64 indices; ties: lower index first."""

    doc = "Top-k values and indices along an axis."
    inputs = (Port("X"), Port("K", optional=True, doc="int64 [1] (opset >= 10)"))
    outputs = (Port("Values"), Port("Indices"))
    attrs = (AttrSpec("axis", "int", -1, "axis to select along"),
             AttrSpec("k", "int", None, "opset < 10"),
             AttrSpec("largest", "int", 1, "1: largest, 0: smallest (opset >= 11)"),
             AttrSpec("sorted", "int", 1, "outputs are always sorted"))

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Input shape with k along axis."""
        s, dt = ctx.shape(0), ctx.dtype(0)
        if s is None:
            return [TensorType(dt), TensorType(INT64)]
        if ctx.has_input(1):
            c = ctx.const(1)
            k: Dim = int(np.asarray(c).reshape(-1)[0]) if c is not None else None
        else:
            k = ctx.attrs.get("k")
        a = norm_axis(int(ctx.attrs["axis"]), len(s))
        if isinstance(k, int) and isinstance(s[a], int) and k > s[a]:
            raise OpError(f"TopK: k={k} exceeds the axis size {s[a]}")
        out = tuple(k if i == a else d for i, d in enumerate(s))
        return [TensorType(dt, out), TensorType(INT64, out)]

    def reference(self, ctx: RunContext, x: np.ndarray, K: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
        """Stable argsort (of the reversed axis for largest, which keeps lower indices first)."""
        k = int(np.asarray(K).reshape(-1)[0]) if K is not None else int(ctx.attrs["k"])
        a = norm_axis(int(ctx.attrs.get("axis", -1)), x.ndim)
        n = x.shape[a]
        if k > n or k < 0:
            raise OpError(f"TopK: k={k} out of range for an axis of size {n}")
        if ctx.attrs.get("largest", 1):
            order = np.argsort(np.flip(x, a), axis=a, kind="stable")
            idx = (n - 1) - np.flip(order, a)
        else:
            idx = np.argsort(x, axis=a, kind="stable")
        idx = np.take(idx, np.arange(k), axis=a)
        return np.take_along_axis(x, idx, axis=a), idx.astype(np.int64)


class _ArgBase(OpSpec):
    inputs = (Port("data"),)
    outputs = (Port("reduced"),)
    attrs = (AttrSpec("axis", "int", 0, "axis to reduce"),
             AttrSpec("keepdims", "int", 1, "keep the reduced axis as size 1"),
             AttrSpec("select_last_index", "int", 0, "on ties pick the last index (opset >= 12)"))
    fn = staticmethod(np.argmax)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """int64; the axis becomes 1 or is removed."""
        s = ctx.shape(0)
        if s is None:
            return [TensorType(INT64)]
        a = norm_axis(int(ctx.attrs["axis"]), len(s))
        if ctx.attrs["keepdims"]:
            return [TensorType(INT64, tuple(1 if i == a else d for i, d in enumerate(s)))]
        return [TensorType(INT64, tuple(d for i, d in enumerate(s) if i != a))]

    def reference(self, ctx: RunContext, x: np.ndarray) -> np.ndarray:
        """numpy arg-reduction (on the flipped axis for the last index)."""
        a = norm_axis(int(ctx.attrs.get("axis", 0)), x.ndim)
        if ctx.attrs.get("select_last_index", 0):
            idx = (x.shape[a] - 1) - self.fn(np.flip(x, a), axis=a)
        else:
            idx = self.fn(x, axis=a)
        idx = np.asarray(idx, dtype=np.int64)
        return np.expand_dims(idx, a) if ctx.attrs.get("keepdims", 1) else idx


@register("ArgMax", since=1)
class ArgMax(_ArgBase):
    """Index of the largest element along axis (first one on ties unless select_last_index)."""

    doc = "Indices of the maximum along an axis."
    fn = staticmethod(np.argmax)


@register("ArgMin", since=1)
class ArgMin(_ArgBase):
    """Index of the smallest element along axis (first one on ties unless select_last_index)."""

    doc = "Indices of the minimum along an axis."
    fn = staticmethod(np.argmin)


# -- CumSum / CumProd ----------------------------------------------------------------------------
class _CumBase(OpSpec):
    inputs = (Port("x"), Port("axis", doc="int scalar"))
    outputs = (Port("y"),)
    attrs = (AttrSpec("exclusive", "int", 0, "1: exclude the current element"),
             AttrSpec("reverse", "int", 0, "1: accumulate from the end"))
    fn = staticmethod(np.cumsum)
    identity = 0

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Same as the input."""
        return [ctx.type(0)]

    def reference(self, ctx: RunContext, x: np.ndarray, axis: np.ndarray) -> np.ndarray:
        """numpy cumulative op with flips and a shift for exclusive."""
        a = norm_axis(int(np.asarray(axis).reshape(-1)[0]), x.ndim)
        rev = ctx.attrs.get("reverse", 0)
        y = np.flip(x, a) if rev else x
        c = self.fn(y, axis=a, dtype=x.dtype)
        if ctx.attrs.get("exclusive", 0):
            head = np.full(tuple(1 if i == a else d for i, d in enumerate(x.shape)), self.identity, dtype=x.dtype)
            c = np.concatenate([head, np.take(c, np.arange(x.shape[a] - 1), axis=a)], axis=a)
        return np.flip(c, a) if rev else c


@register("CumSum", since=11)
class CumSum(_CumBase):
    """Cumulative sum along axis (exclusive / reverse options)."""

    doc = "Cumulative sum along an axis."


@register("CumProd", since=26)
class CumProd(_CumBase):
    """Cumulative product along axis (exclusive / reverse options)."""

    doc = "Cumulative product along an axis."
    fn = staticmethod(np.cumprod)
    identity = 1


# -- Unique --------------------------------------------------------------------------------------
@register("Unique", since=11)
class Unique(OpSpec):
    """Unique elements (or slices along axis), sorted or in first-occurrence order, with indices,
    inverse indices and counts."""

    doc = "Unique values with first indices, inverse indices and counts."
    inputs = (Port("X"),)
    outputs = (Port("Y"), Port("indices", optional=True), Port("inverse_indices", optional=True),
               Port("counts", optional=True))
    attrs = (AttrSpec("axis", "int", None, "axis of the slices (default: flatten)"),
             AttrSpec("sorted", "int", 1, "1: ascending, 0: order of first occurrence"))

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Y: count unknown along axis; the rest 1-D int64."""
        s, dt = ctx.shape(0), ctx.dtype(0)
        ax = ctx.attrs.get("axis")
        if ax is None:
            y = TensorType(dt, (None,))
        elif s is None:
            y = TensorType(dt)
        else:
            a = norm_axis(int(ax), len(s))
            y = TensorType(dt, tuple(None if i == a else d for i, d in enumerate(s)))
        n = s[norm_axis(int(ax), len(s))] if ax is not None and s is not None else (
            prod(s) if s is not None and all(isinstance(d, int) for d in s) else None)  # type: ignore[arg-type]
        outs = [y, TensorType(INT64, (None,)), TensorType(INT64, (n,)), TensorType(INT64, (None,))]
        return outs[:len(ctx.node.outputs)]

    def reference(self, ctx: RunContext, x: np.ndarray) -> tuple[np.ndarray, ...]:
        """numpy unique, re-ordered by first occurrence when not sorted."""
        ax = ctx.attrs.get("axis")
        a = None if ax is None else norm_axis(int(ax), x.ndim)
        y, first, inv, cnt = np.unique(x.reshape(-1) if a is None else x, return_index=True,
                                       return_inverse=True, return_counts=True, axis=a)
        inv = np.asarray(inv).reshape(-1)
        if not ctx.attrs.get("sorted", 1):
            order = np.argsort(first, kind="stable")
            y = np.take(y, order, axis=0 if a is None else a)
            first, cnt = first[order], cnt[order]
            remap = np.empty_like(order)
            remap[order] = np.arange(order.size)
            inv = remap[inv]
        return y, first.astype(np.int64), inv.astype(np.int64), cnt.astype(np.int64)


# -- Einsum --------------------------------------------------------------------------------------
def parse_einsum(equation: str, n_inputs: int) -> tuple[list[str], str]:
    """Input terms and the output term (implicit output: '...' then letters used once, sorted)."""
    eq = equation.replace(" ", "")
    lhs, _, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != n_inputs:
        raise OpError(f"Einsum: equation {equation!r} has {len(terms)} terms for {n_inputs} inputs")
    if "->" not in eq:
        letters = "".join(t.replace("...", "") for t in terms)
        once = sorted(c for c in set(letters) if letters.count(c) == 1)
        rhs = ("..." if any("..." in t for t in terms) else "") + "".join(once)
    return terms, rhs


def _einsum_dims(terms: list[str], shapes: list[tuple]) -> tuple[dict[str, Dim], tuple[Dim, ...] | None]:
    dims: dict[str, Dim] = {}
    ell: list[tuple] = []
    for t, s in zip(terms, shapes):
        letters = t.replace("...", "")
        if "..." in t:
            head = t.index("...")
            n_ell = len(s) - len(letters)
            if n_ell < 0:
                raise OpError(f"Einsum: term {t!r} does not fit rank {len(s)}")
            ell.append(tuple(s[head:head + n_ell]))
            s = tuple(s[:head]) + tuple(s[head + n_ell:])
        elif len(letters) != len(s):
            raise OpError(f"Einsum: term {t!r} has {len(letters)} letters for rank {len(s)}")
        for c, d in zip(letters, s):
            old = dims.get(c)
            if c not in dims or old is None or (isinstance(d, int) and not isinstance(old, int)):
                dims[c] = d
            elif isinstance(old, int) and isinstance(d, int) and old != d:
                if 1 not in (old, d):
                    raise OpError(f"Einsum: index {c!r} has sizes {old} and {d}")
                dims[c] = max(old, d)
    return dims, broadcast_shapes(*ell) if ell else ()


@register("Einsum", since=12)
class Einsum(OpSpec):
    """Einstein summation (numpy.einsum semantics, ellipsis broadcasting)."""

    doc = "Einstein summation over the inputs."
    inputs = (Port("Inputs", variadic=True),)
    outputs = (Port("Output"),)
    attrs = (AttrSpec("equation", "string", REQUIRED, "e.g. 'bij,bjk->bik'"),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Output dims looked up from the equation's letters."""
        n = ctx.n_inputs
        shapes = [ctx.shape(i) for i in range(n)]
        dt = ctx.dtype(0)
        terms, rhs = parse_einsum(ctx.attrs["equation"], n)
        if any(s is None for s in shapes):
            return [TensorType(dt, None if "..." in rhs else (None,) * len(rhs))]
        dims, ell = _einsum_dims(terms, shapes)  # type: ignore[arg-type]
        head, _, tail = rhs.partition("...")
        out: list[Dim] = [dims.get(c) for c in head]
        if "..." in rhs:
            out += [*(ell or ()), *(dims.get(c) for c in tail)]
        return [TensorType(dt, tuple(out))]

    def work(self, ctx: NodeContext) -> Work:
        """MACs: the product of every index size (for two or more operands)."""
        w = super().work(ctx)
        shapes = [ctx.shape(i) for i in range(ctx.n_inputs)]
        if ctx.n_inputs >= 2 and all(s is not None for s in shapes):
            try:
                dims, ell = _einsum_dims(parse_einsum(ctx.attrs["equation"], ctx.n_inputs)[0], shapes)  # type: ignore[arg-type]
            except OpError:
                return w
            sizes = [*dims.values(), *(ell or ())]
            if all(isinstance(d, int) for d in sizes):
                w.macs = prod(sizes)  # type: ignore[arg-type]
        return w

    def reference(self, ctx: RunContext, *xs: np.ndarray) -> np.ndarray:
        """numpy einsum (contraction order optimized for several operands)."""
        eq = ctx.attrs["equation"].replace(" ", "")
        dt = xs[0].dtype
        if dt.kind == "V":  # bfloat16 / float8 (ml_dtypes): numpy einsum cannot loop over them
            xs = tuple(x.astype(np.float32) for x in xs)
        out = np.einsum(eq, *xs, optimize=len(xs) > 1)
        return np.asarray(out).astype(dt, copy=False)
