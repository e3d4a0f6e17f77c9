"""Sequences and optionals: values that are not one tensor.

At run time a sequence is a Python list of arrays (never mutated: every op returns a new
list), an optional is its element (an array or a list) or None when empty. Types are
``SequenceType(elem)`` and ``OptionalType(elem)`` (nodes/types.py), so tensor-only code sees
an unknown tensor. Positions may be negative (counted from the end), as in ONNX.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TypeProto

from nodes._util import norm_axis
from nodes.control import merge_types
from nodes.registry import register
from nodes.spec import REQUIRED, AttrSpec, NodeContext, OpError, OpSpec, Port, RunContext, ints
from nodes.types import OptionalType, SequenceType, TensorType, is_tensor_type, np_dtype

Seq = list


def _seq(x: Any, op: str) -> Seq:
    if not isinstance(x, list):
        raise OpError(f"{op} expects a sequence, got {type(x).__name__}")
    return x


def _position(pos: np.ndarray | None, n: int, op: str, allow_end: bool) -> int:
    """A position in [-n, n) (or [-n, n] when inserting) as an index from the start."""
    p = int(np.asarray(pos).reshape(()))
    hi = n if allow_end else n - 1
    if p < -n or p > hi:
        raise OpError(f"{op}: position {p} is out of range for a sequence of {n}")
    return p + n if p < 0 else p


def _elem(t: TensorType) -> TensorType:
    """The element type of a sequence type (unknown for anything else)."""
    return t.elem if isinstance(t, SequenceType) else TensorType()


def _unknown_dims(t: TensorType) -> TensorType:
    """A tensor type keeping dtype and rank (dims unknown): what elements of a sequence share."""
    return TensorType(t.dtype, None if t.shape is None else tuple(None for _ in t.shape))


def type_from_proto(tp: TypeProto) -> TensorType:
    """An IR type from a TypeProto attribute (Optional's ``type``)."""
    kind = tp.WhichOneof("value")
    if kind == "sequence_type":
        return SequenceType(elem=type_from_proto(tp.sequence_type.elem_type))
    if kind == "optional_type":
        return OptionalType(elem=type_from_proto(tp.optional_type.elem_type))
    if kind == "tensor_type":
        tt = tp.tensor_type
        dtype = np_dtype(tt.elem_type) if tt.elem_type else None
        shape = None
        if tt.HasField("shape"):
            shape = tuple(int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or None)
                          for d in tt.shape.dim)
        return TensorType(dtype, shape)
    return TensorType()


class _SeqSpec(OpSpec):
    family = "sequence"
    deterministic = True


@register("SequenceEmpty", since=11)
class SequenceEmptySpec(_SeqSpec):
    """An empty sequence of a given element type."""

    doc = "An empty sequence whose elements would have element type ``dtype`` (default float)."
    inputs = ()
    outputs = (Port("output"),)
    attrs = (AttrSpec("dtype", "int", 1, "ONNX element type of the (future) elements."),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """A sequence of ``dtype`` tensors of unknown shape."""
        return [SequenceType(elem=TensorType(np_dtype(int(ctx.attrs["dtype"]))))]

    def reference(self, ctx: RunContext) -> list[Seq]:
        """[]."""
        return [[]]


@register("SequenceConstruct", since=11)
class SequenceConstructSpec(_SeqSpec):
    """A sequence of the input tensors, in order."""

    doc = "A sequence holding the inputs in order (all of one element type)."
    inputs = (Port("inputs", variadic=True),)
    outputs = (Port("output_sequence"),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Element type: the inputs' types merged (dims that differ become unknown)."""
        if ctx.n_inputs == 0:
            raise OpError("SequenceConstruct needs at least one input")
        t = ctx.type(0)
        for i in range(1, ctx.n_inputs):
            t = merge_types(t, ctx.type(i))
        return [SequenceType(elem=t)]

    def reference(self, ctx: RunContext, *tensors: np.ndarray) -> list[Seq]:
        """The inputs as a list."""
        dtypes = {np.asarray(t).dtype for t in tensors}
        if len(dtypes) > 1:
            raise OpError(f"SequenceConstruct inputs have different element types {sorted(map(str, dtypes))}")
        return [list(tensors)]


@register("SequenceInsert", since=11)
class SequenceInsertSpec(_SeqSpec):
    """A copy of the sequence with a tensor inserted at a position (default: the end)."""

    doc = "Inserts tensor at position (default: appended); returns a new sequence."
    inputs = (Port("input_sequence"), Port("tensor"), Port("position", optional=True))
    outputs = (Port("output_sequence"),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """The sequence's element type merged with the tensor's."""
        elem = _elem(ctx.type(0))
        t = ctx.type(1)
        merged = t if elem.dtype is None and elem.shape is None else merge_types(elem, t)
        return [SequenceType(elem=merged)]

    def reference(self, ctx: RunContext, seq: Seq, tensor: np.ndarray,
                  position: np.ndarray | None = None) -> list[Seq]:
        """list.insert on a copy."""
        seq = list(_seq(seq, "SequenceInsert"))
        if seq and np.asarray(seq[0]).dtype != np.asarray(tensor).dtype:
            raise OpError(f"SequenceInsert: tensor of {np.asarray(tensor).dtype} into a sequence of "
                          f"{np.asarray(seq[0]).dtype}")
        k = len(seq) if position is None else _position(position, len(seq), "SequenceInsert", True)
        seq.insert(k, tensor)
        return [seq]


@register("SequenceAt", since=11)
class SequenceAtSpec(_SeqSpec):
    """The tensor at a position of a sequence."""

    doc = "The element at position (negative counts from the end)."
    inputs = (Port("input_sequence"), Port("position"))
    outputs = (Port("tensor"),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """The sequence's element type."""
        return [_elem(ctx.type(0))]

    def reference(self, ctx: RunContext, seq: Seq, position: np.ndarray) -> list[np.ndarray]:
        """seq[position]."""
        seq = _seq(seq, "SequenceAt")
        return [seq[_position(position, len(seq), "SequenceAt", False)]]


@register("SequenceErase", since=11)
class SequenceEraseSpec(_SeqSpec):
    """A copy of the sequence without the element at a position (default: the last)."""

    doc = "Removes the element at position (default: the last); returns a new sequence."
    inputs = (Port("input_sequence"), Port("position", optional=True))
    outputs = (Port("output_sequence"),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Same type as the input sequence."""
        return [ctx.type(0) if isinstance(ctx.type(0), SequenceType) else SequenceType()]

    def reference(self, ctx: RunContext, seq: Seq, position: np.ndarray | None = None) -> list[Seq]:
        """del on a copy."""
        seq = list(_seq(seq, "SequenceErase"))
        if not seq:
            raise OpError("SequenceErase on an empty sequence")
        k = len(seq) - 1 if position is None else _position(position, len(seq), "SequenceErase", False)
        del seq[k]
        return [seq]


@register("SequenceLength", since=11)
class SequenceLengthSpec(_SeqSpec):
    """The number of tensors in a sequence (an int64 scalar)."""

    doc = "Number of elements of the sequence, as an int64 scalar."
    inputs = (Port("input_sequence"),)
    outputs = (Port("length"),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """int64 scalar."""
        return [TensorType(np.dtype(np.int64), ())]

    def reference(self, ctx: RunContext, seq: Seq) -> np.ndarray:
        """len(seq)."""
        return np.array(len(_seq(seq, "SequenceLength")), dtype=np.int64)


@register("SplitToSequence", since=11)
class SplitToSequenceSpec(_SeqSpec):
    """Splits a tensor along an axis into a sequence of tensors."""

    doc = ("Splits input along axis: into pieces of the sizes in split (a 1-D tensor), into pieces of "
           "split elements (a scalar; the last may be shorter), or without split into single slices "
           "(squeezed unless keepdims=1).")
    inputs = (Port("input"), Port("split", optional=True))
    outputs = (Port("output_sequence"),)
    attrs = (AttrSpec("axis", "int", 0, "Axis to split along."),
             AttrSpec("keepdims", "int", 1, "Without split: keep the split axis (1) or squeeze it (0)."))

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Elements keep the input's dtype; the split axis varies (or is squeezed)."""
        t = ctx.type(0)
        if t.shape is None:
            return [SequenceType(elem=TensorType(t.dtype))]
        axis = norm_axis(int(ctx.attrs["axis"]), len(t.shape))
        shape = list(t.shape)
        if not ctx.has_input(1) and not int(ctx.attrs["keepdims"]):
            del shape[axis]
        elif not ctx.has_input(1):
            shape[axis] = 1
        else:
            shape[axis] = None
        return [SequenceType(elem=TensorType(t.dtype, tuple(shape)))]

    def reference(self, ctx: RunContext, x: np.ndarray, split: np.ndarray | None = None) -> list[Seq]:
        """np.split at the cumulative sizes."""
        axis = norm_axis(int(ctx.attrs["axis"]), x.ndim)
        n = x.shape[axis]
        if split is None:
            parts = np.split(x, n, axis=axis) if n else []
            if not int(ctx.attrs["keepdims"]):
                parts = [np.squeeze(p, axis=axis) for p in parts]
            return [parts]
        s = np.asarray(split)
        if s.ndim == 0:
            size = int(s)
            if size <= 0:
                raise OpError(f"SplitToSequence: split size must be positive, got {size}")
            sizes = [size] * (n // size) + ([n % size] if n % size else [])
        else:
            sizes = ints(s)
            if any(v < 0 for v in sizes) or sum(sizes) != n:
                raise OpError(f"SplitToSequence: split {sizes} does not add up to dimension {n}")
        cuts = np.cumsum(sizes)[:-1]
        return [list(np.split(x, cuts, axis=axis))]


@register("ConcatFromSequence", since=11)
class ConcatFromSequenceSpec(_SeqSpec):
    """Concatenates (or with new_axis=1 stacks) the tensors of a sequence."""

    doc = "Concatenates the sequence's tensors along axis; new_axis=1 stacks them along a new axis."
    inputs = (Port("input_sequence"),)
    outputs = (Port("concat_result"),)
    attrs = (AttrSpec("axis", "int", REQUIRED, "Axis to concatenate along (or to insert)."),
             AttrSpec("new_axis", "int", 0, "1: stack along a new axis instead of concatenating."))

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """The element's dtype and rank (+1 when stacking); the joined axis is unknown."""
        e = _elem(ctx.type(0))
        if e.shape is None:
            return [TensorType(e.dtype)]
        rank = len(e.shape) + (1 if int(ctx.attrs["new_axis"]) else 0)
        axis = norm_axis(int(ctx.attrs["axis"]), rank)
        shape = list(e.shape)
        if int(ctx.attrs["new_axis"]):
            shape.insert(axis, None)
        else:
            shape[axis] = None
        return [TensorType(e.dtype, tuple(shape))]

    def reference(self, ctx: RunContext, seq: Seq) -> np.ndarray:
        """np.concatenate / np.stack."""
        seq = _seq(seq, "ConcatFromSequence")
        if not seq:
            raise OpError("ConcatFromSequence of an empty sequence")
        new_axis = int(ctx.attrs["new_axis"])
        rank = np.ndim(seq[0]) + (1 if new_axis else 0)
        axis = norm_axis(int(ctx.attrs["axis"]), rank)
        return np.stack(seq, axis=axis) if new_axis else np.concatenate(seq, axis=axis)


@register("SequenceMap", since=17)
class SequenceMapSpec(_SeqSpec):
    """Runs a body graph once per element of the input sequence(s)."""

    doc = ("Applies body to each element of input_sequence; additional inputs are passed whole when "
           "they are tensors and element by element when they are sequences (of the same length). "
           "Each body output is collected into an output sequence.")
    inputs = (Port("input_sequence"), Port("additional_inputs", optional=True, variadic=True))
    outputs = (Port("out_sequence", variadic=True),)
    attrs = (AttrSpec("body", "graph", REQUIRED, "Graph run per element."),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """One sequence per body output, of the body output's dtype and rank."""
        body = ctx.attrs["body"]
        return [SequenceType(elem=_unknown_dims(v.type) if is_tensor_type(v.type) else TensorType())
                for v in body.outputs][:len(ctx.node.outputs)]

    def reference(self, ctx: RunContext, seq: Seq, *extra: Any) -> list[Seq]:
        """Run the body per element with the executor."""
        seq = _seq(seq, "SequenceMap")
        body = ctx.attrs["body"]
        if ctx.run_subgraph is None:
            raise OpError("SequenceMap needs an executor to run its body")
        names = [v.name for v in body.inputs]
        if len(names) != 1 + len(extra):
            raise OpError(f"SequenceMap body has {len(names)} inputs, expected {1 + len(extra)}")
        for e in extra:
            if isinstance(e, list) and len(e) != len(seq):
                raise OpError(f"SequenceMap: sequences of lengths {len(seq)} and {len(e)}")
        outs: list[Seq] = [[] for _ in body.outputs]
        for i, x in enumerate(seq):
            feeds = {names[0]: x}
            feeds.update((n, e[i] if isinstance(e, list) else e) for n, e in zip(names[1:], extra))
            for k, r in enumerate(ctx.run_subgraph(body, feeds)):
                outs[k].append(r)
        return outs


@register("Optional", since=15)
class OptionalSpec(_SeqSpec):
    """An optional holding the input, or an empty optional of a declared type."""

    doc = "Wraps input in an optional; without input, an empty optional of the type attribute."
    inputs = (Port("input", optional=True),)
    outputs = (Port("output"),)
    attrs = (AttrSpec("type", "type_proto", None, "Element type of an empty optional."),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """optional(input type) or optional(type attribute)."""
        if ctx.has_input(0):
            return [OptionalType(elem=ctx.type(0))]
        tp = ctx.attrs.get("type")
        if tp is None:
            raise OpError("Optional without input needs the type attribute")
        return [OptionalType(elem=type_from_proto(tp))]

    def reference(self, ctx: RunContext, x: Any = None) -> list[Any]:
        """The input itself (None when absent)."""
        return [x]


@register("OptionalHasElement", since=15)
class OptionalHasElementSpec(_SeqSpec):
    """True when the optional input holds an element (a bool scalar)."""

    doc = "A bool scalar: true when the input (an optional, tensor or sequence) is present."
    inputs = (Port("input", optional=True),)
    outputs = (Port("output"),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """bool scalar."""
        return [TensorType(np.dtype(bool), ())]

    def reference(self, ctx: RunContext, x: Any = None) -> np.ndarray:
        """x is not None."""
        return np.array(x is not None)


@register("OptionalGetElement", since=15)
class OptionalGetElementSpec(_SeqSpec):
    """The element of a non-empty optional (a tensor or sequence passes through)."""

    doc = "The element held by the optional; an empty optional is an error."
    inputs = (Port("input"),)
    outputs = (Port("output"),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """The optional's element type."""
        t = ctx.type(0)
        return [t.elem if isinstance(t, OptionalType) else t]

    def reference(self, ctx: RunContext, x: Any = None) -> list[Any]:
        """x, which must be present."""
        if x is None:
            raise OpError("OptionalGetElement of an empty optional")
        return [x]
