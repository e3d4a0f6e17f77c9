"""Type conversion ops: Cast, CastLike and Identity.

Covers every numeric ONNX element type numpy + ml_dtypes know (float16, bfloat16, the float8
variants with the ``saturate`` attribute, float8 e8m0 with ``round_mode``, float4, int4/int2),
bool, and strings <-> numbers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto

from nodes.elementwise import is_ext as _is_ext
from nodes.elementwise import is_ext_float as _is_ext_float
from nodes.registry import register
from nodes.spec import REQUIRED, AttrSpec, NodeContext, OpError, OpSpec, Port, RunContext, Work
from nodes.types import TensorType, np_dtype

STRING = np.dtype(object)
_STD_FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
# float8 types whose overflow behaviour the ``saturate`` attribute controls.
_SATURATING_F8 = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")




def _to_std(x: np.ndarray) -> np.ndarray:
    """An ml_dtypes array as a standard numpy array (float32 for floats, int64 for ints)."""
    if not _is_ext(x.dtype):
        return x
    return x.astype(np.float32) if _is_ext_float(x.dtype) else x.astype(np.int64)


def _format_float(v: float) -> str:
    if v != v:
        return "NaN"
    if v in (np.inf, -np.inf):
        return "INF" if v > 0 else "-INF"
    return f"{v:.8g}"


def _format_numbers(x: np.ndarray) -> np.ndarray:
    """Numbers as decimal strings the way onnxruntime writes them ("0.5", "3", "1e-07", "INF", "NaN")."""
    if x.dtype == np.bool_ or x.dtype.kind in "iu" or (_is_ext(x.dtype) and not _is_ext_float(x.dtype)):
        flat = [str(int(v)) for v in x.ravel().tolist()]
    else:
        flat = [_format_float(float(v)) for v in x.astype(np.float64).ravel().tolist()]
    return np.array(flat, dtype=object).reshape(x.shape)


def _parse_number(s: Any, integer: bool) -> float | int:
    if isinstance(s, bytes):
        s = s.decode("utf-8", errors="replace")
    s = str(s).strip()
    if integer:
        try:
            return int(s)
        except ValueError:
            return int(float(s))
    try:
        return float(s)  # accepts INF/+INF/-INF/NaN in any case and scientific notation
    except ValueError:
        return float.fromhex(s)  # "0x1p-3", as C's strtod accepts


def _from_strings(x: np.ndarray, dt: np.dtype) -> np.ndarray:
    """Parse a string tensor into numbers of ``dt``."""
    integer = dt.kind in "iu" or (_is_ext(dt) and "int" in dt.name and "float" not in dt.name)
    flat = [_parse_number(s, integer) for s in x.ravel().tolist()]
    if dt == np.bool_:
        return (np.array(flat, dtype=np.float64) != 0).reshape(x.shape)
    if integer:
        arr = np.array(flat, dtype=np.uint64 if dt == np.uint64 else np.int64)
    else:
        arr = np.array(flat, dtype=np.float64)
    return cast_array(arr.reshape(x.shape), dt)


def _to_e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    """Cast to float8 e8m0 (a bare power-of-two exponent) with the given rounding."""
    import ml_dtypes

    f = np.ascontiguousarray(x, dtype=np.float32)
    bits = f.view(np.uint32) & np.uint32(0x7FFFFFFF)  # negative values are unspecified: use |x|
    exp = (bits >> np.uint32(23)).astype(np.int32)
    mant = (bits & np.uint32(0x7FFFFF)).astype(np.int32)
    nan = (exp == 255) & (mant != 0)
    inf = (exp == 255) & (mant == 0)
    if round_mode == "up":
        e = exp + (mant != 0)
    elif round_mode == "down":
        e = exp.copy()
    elif round_mode == "nearest":
        half = 0x400000
        e = exp + ((mant > half) | ((mant == half) & ((exp & 1) == 1)))
    else:
        raise OpError(f"Cast round_mode must be up, down or nearest, got {round_mode!r}")
    e = e.astype(np.int32)
    zero = bits == 0
    if saturate:
        e = np.where(inf | (e >= 255), 254, e)
        e = np.where(zero, 0, e)
    else:
        e = np.where(inf | zero, 255, e)
        e = np.minimum(e, 255)
    e = np.where(nan, 255, e)
    return e.astype(np.uint8).view(ml_dtypes.float8_e8m0fnu).reshape(x.shape)


def cast_array(x: np.ndarray, dt: np.dtype, saturate: bool = True, round_mode: str = "up") -> np.ndarray:
    """Convert ``x`` to dtype ``dt`` with ONNX Cast semantics."""
    dt = np.dtype(dt)
    src = x.dtype
    if src == dt:
        return x
    if dt == STRING:
        return _format_numbers(x)
    if src == STRING or src.kind in "US":
        return _from_strings(x, dt)
    if _is_ext(dt):
        name = dt.name
        if name == "float8_e8m0fnu":
            return _to_e8m0(_to_std(x), saturate, round_mode)
        if src.kind in "biu" or (_is_ext(src) and not _is_ext_float(src)):
            xs = _to_std(x)
            if _is_ext_float(dt):
                return xs.astype(np.float32).astype(dt)
            return xs.astype(np.int64).astype(dt)  # integers wrap around, as ONNX specifies
        xf = x if src in _STD_FLOATS else _to_std(x)
        if not _is_ext_float(dt):  # float -> int4 / int2
            # ONNX leaves an out-of-range float -> integer cast undefined; in range it truncates.
            # Out of range we do what ml_dtypes does, which is what onnx's reference evaluator
            # does too (ml_dtypes 0.6 wraps around, 0.7 gives 0), so the two always agree.
            with np.errstate(invalid="ignore", over="ignore"):
                return xf.astype(dt)
        if saturate and name in _SATURATING_F8:
            import ml_dtypes

            big = float(ml_dtypes.finfo(dt).max)
            xf = np.clip(xf, -big, big)
        return xf.astype(dt)
    if _is_ext(src):
        x = _to_std(x)
        if x.dtype == dt:
            return x
    with np.errstate(invalid="ignore", over="ignore"):
        return x.astype(dt)


def _target_dtype(to: Any) -> np.dtype:
    """The numpy dtype of a Cast ``to`` attribute (an element type code, or a name in opset 1)."""
    if isinstance(to, str):
        try:
            to = TensorProto.DataType.Value(to.upper())
        except ValueError:
            raise OpError(f"Cast to={to!r} is not an ONNX element type") from None
    try:
        return np_dtype(int(to))
    except KeyError:
        raise OpError(f"Cast to={to} is not a supported element type") from None


_CAST_ATTRS = (
    AttrSpec("saturate", "int", 1, "float8 targets: clamp out-of-range values to the largest finite value", (0, 1)),
    AttrSpec("round_mode", "string", "up", "float8 e8m0 targets: up, down or nearest", ("up", "down", "nearest")),
)


def _cast(ctx: RunContext, x: np.ndarray, dt: np.dtype) -> np.ndarray:
    """cast_array with the node's ``_CAST_ATTRS`` (saturate, round_mode)."""
    return cast_array(x, dt, bool(ctx.attrs.get("saturate", 1)), str(ctx.attrs.get("round_mode", "up")))


@register("Cast", since=24)
class CastSpec(OpSpec):
    """Convert a tensor to another element type."""

    family = "elementwise"
    doc = "Convert every element to the element type given by `to`."
    inputs = (Port("input"),)
    outputs = (Port("output"),)
    attrs = (AttrSpec("to", "int", REQUIRED, "target ONNX element type"), *_CAST_ATTRS)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Input shape; the dtype named by ``to``."""
        return [TensorType(_target_dtype(ctx.attrs["to"]), ctx.shape(0))]

    def reference(self, ctx: RunContext, x: np.ndarray) -> np.ndarray:
        """ONNX Cast conversion."""
        return _cast(ctx, x, _target_dtype(ctx.attrs["to"]))


@register("CastLike", since=24)
class CastLikeSpec(OpSpec):
    """Convert a tensor to the element type of a second tensor."""

    family = "elementwise"
    doc = "Convert every element of input to the element type of target_type."
    inputs = (Port("input"), Port("target_type"))
    outputs = (Port("output"),)
    attrs = _CAST_ATTRS

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Input shape; dtype of target_type."""
        return [TensorType(ctx.dtype(1), ctx.shape(0))]

    def reference(self, ctx: RunContext, x: np.ndarray, like: np.ndarray) -> np.ndarray:
        """ONNX Cast conversion to like's dtype."""
        return _cast(ctx, x, like.dtype)


@register("Identity", since=25)
class IdentitySpec(OpSpec):
    """Pass the input through unchanged."""

    family = "elementwise"
    doc = "Output equals input."
    inputs = (Port("input"),)
    outputs = (Port("output"),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Same type as the input."""
        return [ctx.type(0)]

    def reference(self, ctx: RunContext, x: Any) -> Any:
        """The input itself (kernels never write into their inputs)."""
        return x if isinstance(x, np.ndarray) or x is None else [x]

    def work(self, ctx: NodeContext) -> Work:
        """Identity moves bytes but does no arithmetic."""
        w = super().work(ctx)
        w.elem_ops = 0
        return w


@register("BitCast", since=26)
class BitCastSpec(OpSpec):
    """Reinterpret the bits of each element as another type of the same width."""

    doc = "Each element's bits read as element type ``to`` (same bit width; shape unchanged)."
    inputs = (Port("input"),)
    outputs = (Port("output"),)
    attrs = (AttrSpec("to", "int", REQUIRED, "ONNX element type of the same bit width."),)

    def _target(self, attrs: dict[str, Any]) -> np.dtype:
        to = int(attrs["to"])
        if to == TensorProto.STRING:
            raise OpError("BitCast to string is not defined")
        try:
            return np_dtype(to)
        except KeyError:
            raise OpError(f"BitCast: unknown element type {to}") from None

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Same shape, element type ``to``; the widths must agree."""
        dt = self._target(ctx.attrs)
        src = ctx.dtype(0)
        if src is not None and np.dtype(src).itemsize != dt.itemsize:
            raise OpError(f"BitCast from {np.dtype(src).name} to {dt.name}: bit widths differ")
        return [TensorType(dt, ctx.shape(0))]

    def reference(self, ctx: RunContext, x: np.ndarray) -> np.ndarray:
        """numpy view as the target dtype."""
        dt = self._target(ctx.attrs)
        if x.dtype == np.dtype(object):
            raise OpError("BitCast of strings is not defined")
        if x.dtype.itemsize != dt.itemsize:
            raise OpError(f"BitCast from {x.dtype.name} ({x.dtype.itemsize * 8} bits) to {dt.name} "
                          f"({dt.itemsize * 8} bits): bit widths differ")
        return (x if x.flags.c_contiguous else x.copy()).view(dt)
