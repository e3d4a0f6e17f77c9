"""OpSpec: everything the system knows about one ONNX op, declared in one place.

An OpSpec declares ports and an attribute schema (the GUI inspector is generated from it),
shape/type inference, a numpy reference kernel (the executor, constant folding and
calibration all run it), hardware-independent work (MACs, bytes, element ops) and NPU
support rules whose docstrings are the user-facing text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from nodes.types import TensorType


class ValueRef(Protocol):
    """What an op reads of a graph value (engine.ir.graph.Value has it)."""

    name: str
    type: TensorType
    const: np.ndarray | None

    def producer(self) -> NodeRef | None: ...


class NodeRef(Protocol):
    """What an op reads of a graph node (engine.ir.graph.Node has it)."""

    name: str
    op_type: str
    attrs: dict[str, Any]
    inputs: Sequence[ValueRef | None]
    outputs: Sequence[ValueRef]
    graph: GraphRef | None


class GraphRef(Protocol):
    """What an op reads of a subgraph (engine.ir.graph.Graph has it)."""

    inputs: Sequence[ValueRef]
    outputs: Sequence[ValueRef]

    def opset(self, domain: str = "") -> int: ...


Graph = GraphRef
Node = NodeRef


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()
"""Default of an attribute that a node must set."""


class OpError(ValueError):
    """A node cannot be inferred or executed with its inputs/attributes (names the problem)."""


@dataclass(frozen=True)
class Port:
    """An input or output of an op."""

    name: str
    optional: bool = False
    variadic: bool = False
    doc: str = ""


@dataclass(frozen=True)
class AttrSpec:
    """An attribute: its kind (int, float, string, ints, floats, strings, tensor, graph)."""

    name: str
    kind: str
    default: Any = None
    doc: str = ""
    choices: tuple[Any, ...] | None = None

    @property
    def required(self) -> bool:
        """True when the node must set the attribute."""
        return self.default is REQUIRED


@dataclass
class Work:
    """Hardware-independent work of one node execution."""

    macs: int = 0
    elem_ops: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    weight_bytes: int = 0


class NodeContext:
    """What inference, work and support rules see of one node."""

    def __init__(self, node: Node, spec: OpSpec, input_types: Sequence[TensorType | None],
                 consts: Sequence[np.ndarray | None], output_types: Sequence[TensorType | None] = ()) -> None:
        self.node = node
        self.spec = spec
        self.input_types = list(input_types)
        self.consts = list(consts)
        self.output_types = list(output_types)
        self.attrs = spec.resolve_attrs(node)
        self.opset = node.graph.opset(spec.domain) if node.graph is not None else spec.since

    @property
    def n_inputs(self) -> int:
        """Number of input slots (omitted optional ones included as None)."""
        return len(self.input_types)

    def has_input(self, i: int) -> bool:
        """True when input ``i`` is connected."""
        return i < len(self.input_types) and self.input_types[i] is not None

    def type(self, i: int) -> TensorType:
        """Type of input ``i`` (an unknown type when absent)."""
        t = self.input_types[i] if i < len(self.input_types) else None
        return t if t is not None else TensorType()

    def shape(self, i: int) -> tuple | None:
        """Shape of input ``i`` or None when unknown."""
        return self.type(i).shape

    def dtype(self, i: int) -> np.dtype | None:
        """Element type of input ``i`` or None when unknown."""
        return self.type(i).dtype

    def const(self, i: int) -> np.ndarray | None:
        """The value of input ``i`` when it is known before running (initializer or folded)."""
        return self.consts[i] if i < len(self.consts) else None

    def out_type(self, i: int = 0) -> TensorType:
        """Type of output ``i`` (known once inference ran)."""
        t = self.output_types[i] if i < len(self.output_types) else None
        return t if t is not None else TensorType()


class RunContext:
    """What a reference kernel sees besides its inputs: attributes, opset and subgraph runner."""

    __slots__ = ("attrs", "cache", "donate", "node", "opset", "run_subgraph")

    def __init__(self, node: Node, attrs: dict[str, Any], opset: int,
                 run_subgraph: Callable[[Graph, dict[str, np.ndarray]], list[np.ndarray]] | None = None) -> None:
        self.node = node
        self.attrs = attrs
        self.opset = opset
        self.run_subgraph = run_subgraph
        # Per-node memo for kernels (e.g. window geometry per input shape); lives as long as the plan.
        self.cache: dict[Any, Any] = {}
        # Index of an input the kernel may overwrite and return as its output (-1: none). The
        # executor sets it, for one call, on specs with ``inplace`` when that input dies at this
        # node and nothing else references its buffer (no view, no other holder).
        self.donate = -1

    def keep(self, key: str, source: Any, make: Callable[[], Any]) -> Any:
        """``make()``, kept in ``cache`` while the same ``source`` object comes in (identity): a
        kernel prepares a constant input (a transposed weight) once per plan, not once per run."""
        hit = self.cache.get(key)
        if hit is not None and hit[0] is source:
            return hit[1]
        value = make()
        self.cache[key] = (source, value)
        return value


@dataclass(frozen=True)
class Verdict:
    """Whether a node can run on the NPU of a target, and why not."""

    supported: bool
    reason: str = ""
    rule: str = ""


class OpSpec:
    """Base class of every op definition; subclasses set the class attributes below."""

    op_type: str = ""
    domain: str = ""
    since: int = 1
    family: str = ""
    doc: str = ""
    inputs: tuple[Port, ...] = ()
    outputs: tuple[Port, ...] = (Port("Y"),)
    attrs: tuple[AttrSpec, ...] = ()
    # NPU support rules: callables (ctx, target) -> bool; the docstring is the message shown
    # when a rule is not satisfied. Filled in by the placement layer (nodes/rules.py).
    rules: tuple[Callable[..., bool], ...] = ()
    # Ops whose output is not a pure function of the inputs must not be constant-folded.
    deterministic: bool = True
    # The reference kernel honours RunContext.donate (writes its output into that input).
    inplace: bool = False
    # How the quantizer treats the op (None: it stays float, between DequantizeLinear and
    # QuantizeLinear of its neighbours).
    quant: QuantSpec | None = None

    def __init__(self) -> None:
        self._attr_index = {a.name: a for a in self.attrs}

    # -- attributes --------------------------------------------------------------------------
    def attr_spec(self, name: str) -> AttrSpec | None:
        """The schema of attribute ``name`` or None."""
        return self._attr_index.get(name)

    def resolve_attrs(self, node: Node) -> dict[str, Any]:
        """The node's attributes with schema defaults filled in."""
        out = {a.name: a.default for a in self.attrs if a.default is not REQUIRED}
        out.update(node.attrs)
        missing = [a.name for a in self.attrs if a.required and a.name not in node.attrs]
        if missing:
            raise OpError(f"{self.op_type} node {node.name!r} lacks required attribute {missing[0]!r}")
        return out

    # -- behaviour ---------------------------------------------------------------------------
    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Output types from input types (override); default: unknown outputs."""
        return [TensorType() for _ in ctx.node.outputs]

    def reference(self, ctx: RunContext, *inputs: np.ndarray | None) -> Any:
        """Compute the outputs with numpy (override). Returns an array or a sequence of arrays."""
        raise NotImplementedError(f"{self.op_type} has no reference kernel")

    def static_value(self, ctx: NodeContext) -> list[np.ndarray | None] | None:
        """Outputs computable from input types alone (Shape, Size), else None."""
        return None

    def gemm(self, ctx: NodeContext) -> list[Gemm] | None:
        """The matrix products the op lowers to on a MAC array (override), or None when it is not
        a matrix product or its shapes are not static."""
        return None

    def work(self, ctx: NodeContext) -> Work:
        """Work of one execution: default is one element op per output element."""
        w = Work()
        for i in range(ctx.n_inputs):
            if ctx.has_input(i):
                nb = ctx.type(i).nbytes() or 0
                w.bytes_read += nb
                if ctx.const(i) is not None:
                    w.weight_bytes += nb
        for t in ctx.output_types:
            if t is not None:
                w.bytes_written += t.nbytes() or 0
                w.elem_ops += t.numel() or 0
        return w

    def __repr__(self) -> str:
        return f"<OpSpec {self.domain + '::' if self.domain else ''}{self.op_type}>"


@dataclass(frozen=True)
class QuantSpec:
    """How an integer NPU quantizes the op; the quantizer reads this and no list of op types.

    ``compute`` ops (Conv, Gemm, MatMul) get a quantized weight (input ``weight_input``, per
    output channel along ``weight_axis(node)``), an int32 bias (input ``bias_input``) and a
    requantized output. ``elementwise`` ops get quantized data inputs and output. Inputs in
    ``float_inputs`` stay float (Clip bounds, Resize scales and sizes, LayerNorm's gamma and
    beta). An ``epilogue`` op (Relu, Clip) that follows a compute op runs inside it, with no
    requantization in between.
    """

    role: str
    weight_input: int | None = None
    bias_input: int | None = None
    weight_axis: Callable[[Any], int] | None = None
    float_inputs: frozenset[int] = frozenset()
    epilogue: bool = False

    def __post_init__(self) -> None:
        if self.role not in ("compute", "elementwise"):
            raise ValueError(f"quantization role must be compute or elementwise, got {self.role!r}")


ELEMENTWISE_QUANT = QuantSpec("elementwise")
"""The quantization of an op whose inputs and output are simply quantized tensors."""


@dataclass(frozen=True)
class Gemm:
    """A matrix product an op computes: ``groups`` independent (m x k) @ (k x n) products per
    ``batch``. The cost model maps it onto a MAC array (how groups share columns is hardware)."""

    m: int
    k: int
    n: int
    groups: int = 1
    batch: int = 1


class FnSpec(OpSpec):
    """An OpSpec configured per instance (registered with ``register_spec``): one class serves
    every op of a family that differs only in op type, opset, numpy function ``fn``, doc and
    (when given) attributes."""

    def __init__(self, op_type: str, fn: Callable[..., Any], since: int, doc: str = "",
                 attrs: tuple[AttrSpec, ...] | None = None) -> None:
        self.op_type = op_type
        self.since = since
        self.fn = fn
        self.doc = doc
        if attrs is not None:
            self.attrs = attrs
        super().__init__()


def ints(x: Any) -> list[int]:
    """An attribute or tensor as a list of Python ints."""
    return [int(v) for v in np.asarray(x).ravel()] if x is not None else []

