"""Shape manipulation ops: Reshape, Transpose, Flatten, (Un)Squeeze, Concat, Split, Slice, Expand,
Tile, Shape and Size.

Inference follows shape subgraphs: ``shape_value`` reads a 1-D integer input either from its known
value or, when that is not known, by tracing Shape -> Gather/Slice -> (Un)Squeeze -> Concat chains
back to the symbolic dims of the traced tensor, so ``Reshape(x, Concat(Shape(x)[0], [-1]))`` on an
input of shape ``(N, 3, 4)`` infers ``(N, 12)``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from nodes._util import broadcast_shapes, norm_axis, prod
from nodes.registry import register
from nodes.spec import (
    ELEMENTWISE_QUANT,
    REQUIRED,
    AttrSpec,
    NodeContext,
    OpError,
    OpSpec,
    Port,
    RunContext,
    ValueRef,
    ints,
)
from nodes.types import Dim, TensorType

INT64 = np.dtype(np.int64)
BIG = 2**31 - 1  # ends at or past this mean "to the end" when the dim is symbolic


# -- symbolic values of shape tensors ------------------------------------------------------------
def _int_array(a: object) -> list[int] | None:
    arr = np.asarray(a)
    if arr.dtype.kind not in "iu" or arr.ndim > 1 or arr.size > 64:
        return None
    return ints(arr)


def _combine(op: str, a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        if op == "Add":
            return a + b
        if op == "Sub":
            return a - b
        if op == "Mul":
            return a * b
        return a // b if b else None
    if op == "Mul" and (a == 1 or b == 1):
        return b if a == 1 else a
    if op in ("Add", "Sub") and b == 0:
        return a
    if op == "Add" and a == 0:
        return b
    if op == "Div" and b == 1:
        return a
    return None


def _trace(v: ValueRef | None, depth: int) -> list[Dim] | None:
    """Value of a small 1-D int tensor as dims (ints, symbols, None), or None when untraceable."""
    if v is None or depth > 32:
        return None
    if v.const is not None:
        return _int_array(v.const)
    p = v.producer()
    if p is None or p.domain not in ("", "ai.onnx"):
        return None
    op, ins, at = p.op_type, p.inputs, p.attrs
    if op == "Constant":
        for key in ("value", "value_ints", "value_int"):
            if at.get(key) is not None:
                return _int_array(at[key])
        return None
    if op == "Shape":
        shape = ins[0].type.shape if ins and ins[0] is not None else None
        if shape is None:
            return None
        lo, hi = shape_bounds(len(shape), at.get("start", 0), at.get("end"))
        return list(shape[lo:hi])
    if op in ("Identity", "Squeeze", "Unsqueeze", "Reshape", "Flatten") or (
            op == "Cast" and int(at.get("to", 0)) in (6, 7)):
        return _trace(ins[0] if ins else None, depth + 1)
    if op == "Concat":
        out: list[Dim] = []
        for x in ins:
            part = _trace(x, depth + 1)
            if part is None:
                return None
            out.extend(part)
        return out
    if op == "Gather" and int(at.get("axis", 0)) == 0 and len(ins) == 2:
        data, idx = _trace(ins[0], depth + 1), _trace(ins[1], depth + 1)
        if data is None or idx is None:
            return None
        res = []
        for k in idx:
            if not isinstance(k, int) or not -len(data) <= k < len(data):
                return None
            res.append(data[k])
        return res
    if op == "Slice" and len(ins) >= 3:
        data = _trace(ins[0], depth + 1)
        parts = [_trace(x, depth + 1) if x is not None else None for x in ins[1:5]]
        if data is None or any(q is None for q in parts[:2]):
            return None
        axes, steps = [*parts, None, None][2:4]
        if (axes is not None and ints(axes) not in ([0], [-1])) or any(
                not isinstance(q, int) for q in [*parts[0], *parts[1], *(steps or [1])]):
            return None
        sl = slice_bounds(parts[0][0], parts[1][0], (steps or [1])[0], len(data))[0]
        return data[sl]
    if op in ("Add", "Sub", "Mul", "Div") and len(ins) == 2:
        a, b = _trace(ins[0], depth + 1), _trace(ins[1], depth + 1)
        if a is None or b is None or (len(a) != len(b) and 1 not in (len(a), len(b))):
            return None
        n = max(len(a), len(b))
        a, b = (a * n if len(a) == 1 else a), (b * n if len(b) == 1 else b)
        return [_combine(op, x, y) for x, y in zip(a, b)]
    return None


def shape_value(ctx: NodeContext, i: int) -> list[Dim] | None:
    """Input ``i`` (a 1-D int tensor) as dims: its value when known, else traced symbolic dims."""
    c = ctx.const(i)
    if c is not None:
        return ints(c)
    if not ctx.has_input(i) or i >= len(ctx.node.inputs):
        return None
    return _trace(ctx.node.inputs[i], 0)


def dim_prod(dims: Sequence[Dim]) -> Dim:
    """Product of dims: an int when all are known, the symbol when only one symbol is left."""
    known = [d for d in dims if isinstance(d, int)]
    rest = [d for d in dims if not isinstance(d, int)]
    p = prod(known)
    if not rest:
        return p
    if p == 0:
        return 0
    if len(rest) == 1 and p == 1 and rest[0] is not None:
        return rest[0]
    return None


def _len_of(ctx: NodeContext, i: int) -> int | None:
    """Static length of a 1-D input (number of axes/dims it lists)."""
    s = ctx.shape(i)
    if s is not None and len(s) == 1 and isinstance(s[0], int):
        return s[0]
    return None


def axes_input(ctx: NodeContext, i: int, attr: str, since: int) -> tuple[bool, list[int] | None]:
    """(known, axes) from the attribute before opset ``since`` or from input ``i`` after it."""
    if ctx.opset < since or not ctx.has_input(i):
        val = ctx.attrs.get(attr)
        return True, (ints(val) if val is not None else None)
    c = ctx.const(i)
    return (True, ints(c)) if c is not None else (False, None)


def run_axes(ctx: RunContext, arr: np.ndarray | None, attr: str) -> list[int] | None:
    """Axes of a kernel call: the input when given, else the (old-opset) attribute."""
    if arr is not None:
        return ints(arr)
    val = ctx.attrs.get(attr)
    return ints(val) if val is not None else None


# -- Reshape -------------------------------------------------------------------------------------
def _minus_one(in_shape: Sequence[Dim] | None, others: Sequence[Dim]) -> Dim:
    if in_shape is None or None in in_shape or None in others:
        return None
    sin = Counter(d for d in in_shape if isinstance(d, str))
    sout = Counter(d for d in others if isinstance(d, str))
    if sout - sin:
        return None
    rem = sin - sout
    pin = prod([d for d in in_shape if isinstance(d, int)])
    pout = prod([d for d in others if isinstance(d, int)])
    if not rem:
        if pout == 0:
            if pin == 0:
                return None
            raise OpError(f"cannot reshape {tuple(in_shape)} to {list(others)} with a -1 dim")
        if pin % pout:
            raise OpError(f"cannot reshape {tuple(in_shape)} ({pin} elements) with known dims {list(others)}")
        return pin // pout
    if sum(rem.values()) == 1 and pin == pout:
        return next(iter(rem))
    return None


def reshape_dims(in_shape: Sequence[Dim] | None, target: Sequence[Dim], allowzero: bool) -> tuple[Dim, ...]:
    """Output shape of Reshape: 0 copies the input dim (unless ``allowzero``), -1 is inferred."""
    out: list[Dim] = []
    for k, d in enumerate(target):
        if isinstance(d, int) and d == 0 and not allowzero:
            if in_shape is not None and k >= len(in_shape):
                raise OpError(f"Reshape: shape {list(target)} copies dim {k} of a rank-{len(in_shape)} input")
            out.append(in_shape[k] if in_shape is not None else None)
        elif isinstance(d, int) and d < -1:
            raise OpError(f"Reshape: invalid dim {d} in shape {list(target)}")
        else:
            out.append(d)
    if out.count(-1) > 1:
        raise OpError(f"Reshape: shape {list(target)} has more than one -1")
    if -1 in out:
        j = out.index(-1)
        out[j] = _minus_one(in_shape, out[:j] + out[j + 1:])
    elif (in_shape is not None and all(isinstance(d, int) for d in [*in_shape, *out])
          and prod(in_shape) != prod(out)):  # type: ignore[arg-type]
        raise OpError(f"cannot reshape {tuple(in_shape)} into {tuple(out)}")
    return tuple(out)


@register("Reshape", since=1)
class Reshape(OpSpec):
    """Reshape to the ``shape`` input (attribute before opset 5); 0 copies, -1 infers a dim."""

    doc = "Give the data a new shape with the same number of elements."
    inputs = (Port("data"), Port("shape", optional=True, doc="int64 target shape (opset >= 5)"))
    outputs = (Port("reshaped"),)
    attrs = (AttrSpec("allowzero", "int", 0, "1: a 0 in shape means a zero-sized dim (opset >= 14)"),
             AttrSpec("shape", "ints", None, "target shape (opset < 5)"))

    def _target(self, ctx: NodeContext) -> list[Dim] | None:
        if ctx.has_input(1):
            return shape_value(ctx, 1)
        return ints(ctx.attrs["shape"]) if ctx.attrs.get("shape") is not None else None

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Exact shape when the target is known (symbolic dims traced); else the rank."""
        target = self._target(ctx)
        if target is None:
            n = _len_of(ctx, 1)
            return [TensorType(ctx.dtype(0), None if n is None else (None,) * n)]
        return [TensorType(ctx.dtype(0), reshape_dims(ctx.shape(0), target, bool(ctx.attrs["allowzero"])))]

    def reference(self, ctx: RunContext, data: np.ndarray, shape: np.ndarray | None = None) -> np.ndarray:
        """numpy reshape after resolving 0 entries."""
        target = ints(shape) if shape is not None else ints(ctx.attrs.get("shape"))
        if not ctx.attrs.get("allowzero", 0):
            target = [data.shape[k] if d == 0 else d for k, d in enumerate(target)]
        return data.reshape(target)


# -- Transpose / Flatten -------------------------------------------------------------------------
@register("Transpose", since=1)
class Transpose(OpSpec):
    """Permute the axes (default: reverse them)."""

    doc = "Permute the dimensions of the input (reversed when perm is not given)."
    inputs = (Port("data"),)
    outputs = (Port("transposed"),)
    attrs = (AttrSpec("perm", "ints", None, "output axis k is input axis perm[k]"),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """The input dims permuted."""
        shape = ctx.shape(0)
        if shape is None:
            n = len(ctx.attrs["perm"]) if ctx.attrs.get("perm") is not None else None
            return [TensorType(ctx.dtype(0), None if n is None else (None,) * n)]
        perm = ints(ctx.attrs["perm"]) if ctx.attrs.get("perm") is not None else list(range(len(shape)))[::-1]
        if sorted(perm) != list(range(len(shape))):
            raise OpError(f"Transpose: perm {perm} is not a permutation of the {len(shape)} input axes")
        return [TensorType(ctx.dtype(0), tuple(shape[p] for p in perm))]

    def reference(self, ctx: RunContext, data: np.ndarray) -> np.ndarray:
        """numpy transpose."""
        perm = ctx.attrs.get("perm")
        return np.transpose(data, ints(perm) if perm is not None else None)


@register("Flatten", since=1)
class Flatten(OpSpec):
    """Flatten to 2-D: dims before ``axis`` form the rows, the rest the columns."""

    doc = "Flatten the input into a 2-D matrix at axis."
    inputs = (Port("input"),)
    outputs = (Port("output"),)
    attrs = (AttrSpec("axis", "int", 1, "dims [0, axis) become the first output dim"),)

    def _axis(self, axis: int, rank: int) -> int:
        a = axis + rank if axis < 0 else axis
        if not 0 <= a <= rank:
            raise OpError(f"Flatten: axis {axis} out of range for rank {rank}")
        return a

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """(prod of leading dims, prod of trailing dims)."""
        shape = ctx.shape(0)
        if shape is None:
            return [TensorType(ctx.dtype(0), (None, None))]
        a = self._axis(int(ctx.attrs["axis"]), len(shape))
        return [TensorType(ctx.dtype(0), (dim_prod(shape[:a]), dim_prod(shape[a:])))]

    def reference(self, ctx: RunContext, x: np.ndarray) -> np.ndarray:
        """numpy reshape to 2-D."""
        a = self._axis(int(ctx.attrs["axis"]), x.ndim)
        return x.reshape(prod(x.shape[:a]), prod(x.shape[a:]))


# -- Squeeze / Unsqueeze -------------------------------------------------------------------------
@register("Squeeze", since=1)
class Squeeze(OpSpec):
    """Remove size-1 dims (``axes`` attribute before opset 13, input after; all 1-dims by default)."""

    doc = "Remove single-element dimensions."
    inputs = (Port("data"), Port("axes", optional=True, doc="int64 axes (opset >= 13)"))
    outputs = (Port("squeezed"),)
    attrs = (AttrSpec("axes", "ints", None, "axes to remove (opset < 13)"),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Input dims without the squeezed ones."""
        shape, dt = ctx.shape(0), ctx.dtype(0)
        known, axes = axes_input(ctx, 1, "axes", 13)
        if shape is None:
            return [TensorType(dt)]
        r = len(shape)
        if not known:
            n = _len_of(ctx, 1)
            return [TensorType(dt, None if n is None else (None,) * (r - n))]
        if axes is None:
            if any(d is None for d in shape):
                return [TensorType(dt)]
            return [TensorType(dt, tuple(d for d in shape if d != 1))]
        drop = {norm_axis(a, r) for a in axes}
        for a in drop:
            if isinstance(shape[a], int) and shape[a] != 1:
                raise OpError(f"Squeeze: axis {a} has size {shape[a]}, not 1")
        return [TensorType(dt, tuple(d for k, d in enumerate(shape) if k not in drop))]

    def reference(self, ctx: RunContext, data: np.ndarray, axes: np.ndarray | None = None) -> np.ndarray:
        """numpy squeeze."""
        ax = run_axes(ctx, axes, "axes")
        if ax is None:
            return np.squeeze(data)
        return np.squeeze(data, axis=tuple(norm_axis(a, data.ndim) for a in ax))


@register("Unsqueeze", since=1)
class Unsqueeze(OpSpec):
    """Insert size-1 dims at ``axes`` of the output (attribute before opset 13, input after)."""

    doc = "Insert single-element dimensions."
    inputs = (Port("data"), Port("axes", optional=True, doc="int64 axes (opset >= 13)"))
    outputs = (Port("expanded"),)
    attrs = (AttrSpec("axes", "ints", None, "output axes to insert (opset < 13)"),)

    @staticmethod
    def out_dims(shape: Sequence[Dim], axes: Sequence[int]) -> tuple[Dim, ...]:
        """Dims after inserting 1s at ``axes`` (axes of the output)."""
        r = len(shape) + len(axes)
        pos = sorted(norm_axis(a, r) for a in axes)
        if len(set(pos)) != len(pos):
            raise OpError(f"Unsqueeze: repeated axes {list(axes)}")
        it = iter(shape)
        return tuple(1 if k in pos else next(it) for k in range(r))

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Input dims with 1s inserted."""
        shape, dt = ctx.shape(0), ctx.dtype(0)
        known, axes = axes_input(ctx, 1, "axes", 13)
        if shape is None:
            return [TensorType(dt)]
        if not known or axes is None:
            n = _len_of(ctx, 1)
            return [TensorType(dt, None if n is None else (None,) * (len(shape) + n))]
        return [TensorType(dt, self.out_dims(shape, axes))]

    def reference(self, ctx: RunContext, data: np.ndarray, axes: np.ndarray | None = None) -> np.ndarray:
        """Reshape with the inserted 1s."""
        ax = run_axes(ctx, axes, "axes")
        if ax is None:
            raise OpError("Unsqueeze needs axes")
        return data.reshape(self.out_dims(data.shape, ax))


# -- Concat / Split ------------------------------------------------------------------------------
def _merge_dim(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int):
        return a
    if isinstance(b, int):
        return b
    return a if a is not None else b


@register("Concat", since=1)
class Concat(OpSpec):
    """Join inputs along ``axis``."""

    quant = ELEMENTWISE_QUANT

    doc = "Concatenate tensors along an axis."
    inputs = (Port("inputs", variadic=True),)
    outputs = (Port("concat_result"),)
    attrs = (AttrSpec("axis", "int", REQUIRED, "axis to join along (negative counts from the back)"),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Sum of the sizes along axis; other dims from whichever input knows them."""
        idx = [i for i in range(ctx.n_inputs) if ctx.has_input(i)]
        dt = next((ctx.dtype(i) for i in idx if ctx.dtype(i) is not None), None)
        shapes = [ctx.shape(i) for i in idx]
        known = [s for s in shapes if s is not None]
        if not known:
            return [TensorType(dt)]
        r = len(known[0])
        if any(len(s) != r for s in known):
            raise OpError(f"Concat: inputs have different ranks {[len(s) for s in known]}")
        a = norm_axis(int(ctx.attrs["axis"]), r)
        out: list[Dim] = []
        for k in range(r):
            if k == a:
                parts = [s[k] if s is not None else None for s in shapes]
                out.append(sum(parts) if all(isinstance(p, int) for p in parts) else None)  # type: ignore[arg-type]
                continue
            d: Dim = None
            for s in known:
                if isinstance(d, int) and isinstance(s[k], int) and d != s[k]:
                    raise OpError(f"Concat: inputs differ in dim {k} ({d} vs {s[k]})")
                d = _merge_dim(d, s[k])
            out.append(d)
        return [TensorType(dt, tuple(out))]

    def reference(self, ctx: RunContext, *xs: np.ndarray | None) -> np.ndarray:
        """numpy concatenate."""
        arrs = [x for x in xs if x is not None]
        return np.concatenate(arrs, axis=norm_axis(int(ctx.attrs["axis"]), arrs[0].ndim))


def split_sizes(dim: int, n: int, split: Sequence[int] | None, num_outputs: int | None) -> list[int]:
    """Sizes of the parts: explicit, or ceil(dim / n) chunks with a smaller last chunk."""
    if split is not None and len(split):
        if len(split) != n:
            raise OpError(f"Split: {len(split)} sizes for {n} outputs")
        if dim >= 0 and sum(split) != dim:
            raise OpError(f"Split: sizes {list(split)} do not add up to {dim}")
        return list(split)
    parts = num_outputs or n
    chunk = -(-dim // parts)
    sizes = [max(0, min(chunk, dim - k * chunk)) for k in range(parts)]
    return sizes


@register("Split", since=1)
class Split(OpSpec):
    """Split along ``axis`` into the given sizes (attribute < 13, input >= 13) or equal chunks."""

    doc = "Split a tensor into several along an axis."
    inputs = (Port("input"), Port("split", optional=True, doc="int64 sizes (opset >= 13)"))
    outputs = (Port("outputs", variadic=True),)
    attrs = (AttrSpec("axis", "int", 0, "axis to split"),
             AttrSpec("split", "ints", None, "sizes of the parts (opset < 13)"),
             AttrSpec("num_outputs", "int", None, "number of equal chunks, last one smaller (opset >= 18)"))

    def _split(self, attrs: dict, arr: np.ndarray | None) -> list[int] | None:
        if arr is not None:
            return ints(arr)
        return ints(attrs["split"]) if attrs.get("split") is not None else None

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """One type per output; sizes along axis when known."""
        n, shape, dt = len(ctx.node.outputs), ctx.shape(0), ctx.dtype(0)
        if shape is None:
            return [TensorType(dt) for _ in range(n)]
        a = norm_axis(int(ctx.attrs["axis"]), len(shape))
        if ctx.has_input(1) and ctx.const(1) is None:
            sizes: list[Dim] = [None] * n
        else:
            sp = self._split(ctx.attrs, ctx.const(1))
            d = shape[a]
            if sp is not None:
                sizes = list(split_sizes(d if isinstance(d, int) else -1, n, sp, None))
            elif isinstance(d, int):
                sizes = list(split_sizes(d, n, None, ctx.attrs.get("num_outputs")))
            else:
                sizes = [None] * n
        return [TensorType(dt, tuple(s if k == a else shape[k] for k in range(len(shape)))) for s in sizes[:n]]

    def reference(self, ctx: RunContext, x: np.ndarray, split: np.ndarray | None = None) -> list[np.ndarray]:
        """numpy split at the cumulative sizes."""
        a = norm_axis(int(ctx.attrs["axis"]), x.ndim)
        sizes = split_sizes(x.shape[a], len(ctx.node.outputs), self._split(ctx.attrs, split),
                            ctx.attrs.get("num_outputs"))
        return np.split(x, np.cumsum(sizes)[:-1], axis=a)


# -- Slice ---------------------------------------------------------------------------------------
def slice_bounds(start: int, end: int, step: int, dim: int) -> tuple[slice, int]:
    """A Python slice and its length for ONNX Slice bounds (negatives wrap, then clamp)."""
    if step == 0:
        raise OpError("Slice: step 0")
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        n = max(0, -(-(end - start) // step))
    else:
        start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
        n = max(0, -(-(start - end) // -step))
    if n == 0:
        return slice(0, 0, 1), 0
    return slice(start, end if end >= 0 else None, step), n


def _slice_params(attrs: dict, opset: int, vals: Sequence[object | None],
                  rank: int) -> list[tuple[int, int, int, int]] | None:
    """[(axis, start, end, step)], or None when an input's value is unknown."""
    if opset < 10:
        starts, ends, axes, steps = attrs.get("starts"), attrs.get("ends"), attrs.get("axes"), None
    else:
        starts, ends, axes, steps = vals
        if starts is None or ends is None:
            return None
    s, e = ints(starts), ints(ends)
    ax = ints(axes) if axes is not None else list(range(len(s)))
    st = ints(steps) if steps is not None else [1] * len(s)
    if not len(s) == len(e) == len(ax) == len(st):
        raise OpError(f"Slice: starts/ends/axes/steps lengths differ ({len(s)}, {len(e)}, {len(ax)}, {len(st)})")
    return [(norm_axis(a, rank), b, c, d) for a, b, c, d in zip(ax, s, e, st)]


@register("Slice", since=1)
class Slice(OpSpec):
    """Strided slice with ONNX clamping (attributes before opset 10, inputs after)."""

    doc = "Take a strided slice of the input along some axes."
    inputs = (Port("data"), Port("starts", optional=True), Port("ends", optional=True),
              Port("axes", optional=True), Port("steps", optional=True))
    outputs = (Port("output"),)
    attrs = (AttrSpec("starts", "ints", None, "opset < 10"), AttrSpec("ends", "ints", None, "opset < 10"),
             AttrSpec("axes", "ints", None, "opset < 10"))

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Sliced sizes when bounds are known; symbolic dims kept for full-range slices."""
        shape, dt = ctx.shape(0), ctx.dtype(0)
        if shape is None:
            return [TensorType(dt)]
        unknown = ctx.opset >= 10 and any(ctx.has_input(i) and ctx.const(i) is None for i in range(1, 5))
        params = None if unknown else _slice_params(ctx.attrs, ctx.opset, [ctx.const(i) for i in range(1, 5)],
                                                    len(shape))
        if params is None:
            known, axes = (True, ints(ctx.const(3))) if ctx.const(3) is not None else (False, None)
            if ctx.opset >= 10 and known and axes is not None:
                cut = {norm_axis(a, len(shape)) for a in axes}
                return [TensorType(dt, tuple(None if k in cut else d for k, d in enumerate(shape)))]
            return [TensorType(dt, (None,) * len(shape))]
        out = list(shape)
        for a, s, e, st in params:
            d = shape[a]
            if isinstance(d, int):
                out[a] = slice_bounds(s, e, st, d)[1]
            elif st == 1 and e >= BIG and s == 0:
                out[a] = d
            elif st == 1 and e >= BIG and s < 0:
                out[a] = -s
            else:
                out[a] = None
        return [TensorType(dt, tuple(out))]

    def reference(self, ctx: RunContext, data: np.ndarray, *vals: np.ndarray | None) -> np.ndarray:
        """Basic numpy slicing (a view)."""
        vals = tuple(vals) + (None,) * (4 - len(vals))
        params = _slice_params(ctx.attrs, ctx.opset if vals[0] is None else 10, vals, data.ndim)
        if params is None:
            raise OpError("Slice needs starts and ends")
        idx = [slice(None)] * data.ndim
        for a, s, e, st in params:
            idx[a] = slice_bounds(s, e, st, data.shape[a])[0]
        return data[tuple(idx)]


# -- Expand / Tile -------------------------------------------------------------------------------
@register("Expand", since=8)
class Expand(OpSpec):
    """Broadcast the input to ``shape`` (numpy rules; a 1 in shape keeps the input dim)."""

    doc = "Broadcast the input to a shape."
    inputs = (Port("input"), Port("shape"))
    outputs = (Port("output"),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Broadcast of the input shape and the (possibly symbolic) target."""
        shape, dt = ctx.shape(0), ctx.dtype(0)
        target = shape_value(ctx, 1)
        if target is not None:
            return [TensorType(dt, broadcast_shapes(shape, tuple(target)))]
        n = _len_of(ctx, 1)
        if n is None or shape is None:
            return [TensorType(dt)]
        r = max(n, len(shape))
        pad = (1,) * (r - len(shape)) + tuple(shape)
        return [TensorType(dt, tuple(d if isinstance(d, int) and d != 1 else None for d in pad))]

    def reference(self, ctx: RunContext, x: np.ndarray, shape: np.ndarray) -> np.ndarray:
        """A broadcast copy."""
        out = np.broadcast_shapes(x.shape, tuple(ints(shape)))
        return np.array(np.broadcast_to(x, out))


@register("Tile", since=1)
class Tile(OpSpec):
    """Repeat the input ``repeats[k]`` times along each axis k."""

    doc = "Tile the input by repeating it along every axis."
    inputs = (Port("input"), Port("repeats"))
    outputs = (Port("output"),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Each dim times its repeat count."""
        shape, dt = ctx.shape(0), ctx.dtype(0)
        if shape is None:
            return [TensorType(dt)]
        reps = ctx.const(1)
        if reps is None:
            return [TensorType(dt, (None,) * len(shape))]
        r = ints(reps)
        if len(r) != len(shape):
            raise OpError(f"Tile: {len(r)} repeats for a rank-{len(shape)} input")
        return [TensorType(dt, tuple(_combine("Mul", d, k) for d, k in zip(shape, r)))]

    def reference(self, ctx: RunContext, x: np.ndarray, repeats: np.ndarray) -> np.ndarray:
        """numpy tile."""
        return np.tile(x, ints(repeats))


# -- Shape / Size --------------------------------------------------------------------------------
def shape_bounds(rank: int, start: int | None, end: int | None) -> tuple[int, int]:
    """Clamped [start, end) of Shape's start/end attributes."""
    lo = int(start or 0)
    hi = rank if end is None else int(end)
    lo = min(max(lo + rank if lo < 0 else lo, 0), rank)
    hi = min(max(hi + rank if hi < 0 else hi, 0), rank)
    return lo, max(lo, hi)


@register("Shape", since=1)
class Shape(OpSpec):
    """The input's shape as a 1-D int64 tensor (``start``/``end`` select a range, opset >= 15)."""

    doc = "Output the shape of the input."
    inputs = (Port("data"),)
    outputs = (Port("shape"),)
    attrs = (AttrSpec("start", "int", 0, "first axis (opset >= 15)"),
             AttrSpec("end", "int", None, "one past the last axis (opset >= 15)"))

    def _dims(self, ctx: NodeContext) -> tuple[Dim, ...] | None:
        shape = ctx.shape(0)
        if shape is None:
            return None
        lo, hi = shape_bounds(len(shape), ctx.attrs.get("start"), ctx.attrs.get("end"))
        return tuple(shape[lo:hi])

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """int64 of length rank (or end - start)."""
        dims = self._dims(ctx)
        return [TensorType(INT64, (None if dims is None else len(dims),))]

    def static_value(self, ctx: NodeContext) -> list[np.ndarray | None] | None:
        """The shape itself when the selected dims are known."""
        dims = self._dims(ctx)
        if dims is None or not all(isinstance(d, int) for d in dims):
            return None
        return [np.array(dims, dtype=np.int64)]

    def reference(self, ctx: RunContext, data: np.ndarray) -> np.ndarray:
        """The array's shape."""
        lo, hi = shape_bounds(data.ndim, ctx.attrs.get("start"), ctx.attrs.get("end"))
        return np.array(data.shape[lo:hi], dtype=np.int64)


@register("Size", since=1)
class Size(OpSpec):
    """Number of elements of the input, an int64 scalar."""

    doc = "Output the number of elements of the input."
    inputs = (Port("data"),)
    outputs = (Port("size"),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """An int64 scalar."""
        return [TensorType(INT64, ())]

    def static_value(self, ctx: NodeContext) -> list[np.ndarray | None] | None:
        """The element count when the input shape is static."""
        n = ctx.type(0).numel()
        return None if n is None else [np.array(n, dtype=np.int64)]

    def reference(self, ctx: RunContext, data: np.ndarray) -> np.ndarray:
        """The array's size."""
        return np.array(data.size, dtype=np.int64)


__all__ = ["dim_prod", "reshape_dims", "shape_bounds", "shape_value", "slice_bounds", "split_sizes"]
