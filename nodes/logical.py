"""Comparison, boolean logic, bitwise, selection and float-class ops (bool or integer outputs)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nodes._util import broadcast_infer, broadcast_shapes
from nodes.elementwise import BinarySpec, UnarySpec, check_same_dtype, is_ext
from nodes.registry import register, register_spec
from nodes.spec import REQUIRED, AttrSpec, NodeContext, OpError, OpSpec, Port, RunContext
from nodes.types import TensorType

BOOL = np.dtype(bool)


def _cmp(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """A comparison that also handles string (object) and extension-float inputs; bool out."""

    def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if is_ext(a.dtype):
            a = a.astype(np.float32)
        if is_ext(b.dtype):
            b = b.astype(np.float32)
        out = np.asarray(fn(a, b))
        return out if out.dtype == BOOL else out.astype(bool)

    return run


for _name, _fn, _since in (
    ("Equal", np.equal, 19),
    ("Less", np.less, 13),
    ("Greater", np.greater, 13),
    ("LessOrEqual", np.less_equal, 16),
    ("GreaterOrEqual", np.greater_equal, 16),
):
    register_spec(BinarySpec(_name, _cmp(_fn), _since, out_dtype=BOOL,
                             doc=f"Elementwise {_name} comparison with broadcasting; bool output."))

for _name, _fn, _since in (("And", np.logical_and, 7), ("Or", np.logical_or, 7), ("Xor", np.logical_xor, 7)):
    register_spec(BinarySpec(_name, _fn, _since, out_dtype=BOOL,
                             doc=f"Elementwise logical {_name.lower()} of bool tensors with broadcasting."))

for _name, _fn, _since in (("BitwiseAnd", np.bitwise_and, 18), ("BitwiseOr", np.bitwise_or, 18),
                           ("BitwiseXor", np.bitwise_xor, 18)):
    register_spec(BinarySpec(_name, _fn, _since,
                             doc=f"Elementwise {_name[7:].lower()} of the bits of integer tensors."))


class _BoolUnarySpec(UnarySpec):
    """A unary op with a bool output."""

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Input shape, bool dtype."""
        return [TensorType(BOOL, ctx.shape(0))]


def _classifiable(x: np.ndarray) -> np.ndarray | None:
    """``x`` as an array numpy's isnan/isinf accept (extension floats in float32); None for bool
    and integer input, where no element is NaN or infinite."""
    if is_ext(x.dtype):
        x = x.astype(np.float32)
    return None if x.dtype.kind in "biu" else x


def _isnan(x: np.ndarray) -> np.ndarray:
    xf = _classifiable(x)
    return np.zeros(x.shape, dtype=bool) if xf is None else np.asarray(np.isnan(xf))


register_spec(UnarySpec("Not", np.logical_not, 1, doc="Logical negation of a bool tensor."))
register_spec(UnarySpec("BitwiseNot", np.invert, 18, doc="Bitwise complement of an integer tensor."))
register_spec(_BoolUnarySpec("IsNaN", _isnan, 20, doc="True where the element is NaN."))


@register("IsInf", since=20)
class IsInfSpec(OpSpec):
    """True where the element is +inf and/or -inf (``detect_positive`` / ``detect_negative``)."""

    family = "elementwise"
    doc = "True where the element is infinite; the attributes select which sign counts."
    inputs = (Port("X"),)
    outputs = (Port("Y"),)
    attrs = (
        AttrSpec("detect_negative", "int", 1, "report -inf", (0, 1)),
        AttrSpec("detect_positive", "int", 1, "report +inf", (0, 1)),
    )

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Input shape, bool dtype."""
        return [TensorType(BOOL, ctx.shape(0))]

    def reference(self, ctx: RunContext, x: np.ndarray) -> np.ndarray:
        """Compare with +/-inf."""
        xf = _classifiable(x)
        if xf is None:
            return np.zeros(x.shape, dtype=bool)
        neg, pos = int(ctx.attrs["detect_negative"]), int(ctx.attrs["detect_positive"])
        if neg and pos:
            return np.asarray(np.isinf(xf))
        if pos:
            return np.asarray(xf == np.inf)
        if neg:
            return np.asarray(xf == -np.inf)
        return np.zeros(x.shape, dtype=bool)


@register("BitShift", since=11)
class BitShiftSpec(OpSpec):
    """Shift the bits of X by Y places; arithmetic right shift for signed integers."""

    family = "elementwise"
    doc = "Shift integer X left or right by Y bits; out-of-range shift amounts give 0 (or -1 for negative X shifted right)."
    inputs = (Port("X"), Port("Y"))
    outputs = (Port("Z"),)
    attrs = (AttrSpec("direction", "string", REQUIRED, "LEFT or RIGHT", ("LEFT", "RIGHT")),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Broadcast shape, dtype of X."""
        if str(ctx.attrs["direction"]).upper() not in ("LEFT", "RIGHT"):
            raise OpError(f"BitShift direction must be LEFT or RIGHT, got {ctx.attrs['direction']!r}")
        check_same_dtype(ctx)
        return broadcast_infer(ctx)

    def reference(self, ctx: RunContext, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Shift with the ONNX out-of-range rules."""
        dt = x.dtype
        bits = dt.itemsize * 8
        right = str(ctx.attrs["direction"]).upper() == "RIGHT"
        y64 = y.astype(np.int64) if y.dtype != np.uint64 else np.minimum(y, bits).astype(np.int64)
        valid = (y64 >= 0) & (y64 < bits)
        amount = np.where(valid, y64, 0).astype(dt)
        out = np.asarray(np.right_shift(x, amount) if right else np.left_shift(x, amount))
        if out.dtype != dt:
            out = out.astype(dt)
        if valid.all():
            return out
        if right and dt.kind == "i":
            fill = np.where(x < 0, dt.type(-1), dt.type(0))
        else:
            fill = dt.type(0)
        return np.asarray(np.where(valid, out, fill)).astype(dt, copy=False)


@register("Where", since=16)
class WhereSpec(OpSpec):
    """Pick X where the condition holds, else Y (three-way broadcasting)."""

    family = "elementwise"
    doc = "Elementwise select: X where condition is true, else Y."
    inputs = (Port("condition"), Port("X"), Port("Y"))
    outputs = (Port("output"),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Broadcast of the three shapes; dtype of X."""
        if ctx.dtype(0) is not None and ctx.dtype(0) != BOOL:
            raise OpError(f"Where condition must be bool, got {np.dtype(ctx.dtype(0)).name}")
        check_same_dtype(ctx, (1, 2))
        shape = broadcast_shapes(ctx.shape(0), ctx.shape(1), ctx.shape(2))
        return [TensorType(ctx.dtype(1), shape)]

    def reference(self, ctx: RunContext, cond: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """numpy.where keeping X's dtype."""
        out = np.asarray(np.where(cond.astype(bool, copy=False), x, y))
        return out if out.dtype == x.dtype else out.astype(x.dtype)
