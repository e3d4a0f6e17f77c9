"""Element types of a model's own tensors checked against the ONNX op schemas, at load time.

A graph input, initializer or Constant of a non-arithmetic or sub-byte kind (string, bool,
int4/uint4, float8, complex) that the op's ONNX type constraints do not allow (a string Reshape
shape, an int4 BatchNormalization variance, a bool MaxPool input) is refused when the model is
loaded, naming the node, its input and the types the op accepts,
instead of reaching a pass or a kernel that was never meant to see it. Values computed inside
the graph are left to shape inference: only tensors the file itself types are judged here.
One plain numeric kind where the schema wants another (int32 for BitShift's unsigned inputs)
is left to the kernels, which compute it as numpy does.
"""

from __future__ import annotations

from functools import lru_cache

import onnx
from onnx import TensorProto

from engine.ir.graph import Graph, Node
from nodes.types import onnx_elem_type

_TYPE_NAMES = {code: f"tensor({TensorProto.DataType.Name(code).lower()})" for code in TensorProto.DataType.values()}
_TYPE_NAMES.update({TensorProto.FLOAT: "tensor(float)", TensorProto.DOUBLE: "tensor(double)",
                    TensorProto.FLOAT16: "tensor(float16)", TensorProto.BFLOAT16: "tensor(bfloat16)",
                    TensorProto.STRING: "tensor(string)", TensorProto.BOOL: "tensor(bool)"})


_NUMERIC = {"tensor(float)", "tensor(double)", "tensor(float16)", "tensor(bfloat16)", "tensor(int8)",
            "tensor(int16)", "tensor(int32)", "tensor(int64)", "tensor(uint8)", "tensor(uint16)",
            "tensor(uint32)", "tensor(uint64)"}


@lru_cache(maxsize=4096)
def _allowed(op_type: str, opset: int) -> tuple[tuple[frozenset[str] | None, bool], ...] | None:
    """Per formal input: (allowed type strings or None for any, variadic); None without a schema."""
    try:
        schema = onnx.defs.get_schema(op_type, opset, "")
    except Exception:  # no such op or opset: the loader's other checks speak for it
        return None
    constraints = {c.type_param_str: frozenset(c.allowed_type_strs) for c in schema.type_constraints}
    out = []
    for formal in schema.inputs:
        allowed = constraints.get(formal.type_str)
        if allowed is None and formal.type_str.startswith("tensor("):
            allowed = frozenset({formal.type_str})
        variadic = formal.option == onnx.defs.OpSchema.FormalParameterOption.Variadic
        out.append((allowed, variadic))
    return tuple(out)


def _own_tensors(graph: Graph) -> set[str]:
    names = set(graph.initializers) | {v.name for v in graph.inputs}
    for n in graph.nodes:
        if n.op_type == "Constant" and n.domain == "":
            names.update(v.name for v in n.outputs if v is not None)
    return names


def type_errors(graph: Graph) -> list[str]:
    """One message per input that breaks its op's ONNX type constraint (empty when none)."""
    errors: list[str] = []
    _check(graph, errors)
    return errors


def _check(graph: Graph, errors: list[str]) -> None:
    own = _own_tensors(graph)
    opset = graph.opset("")
    for node in graph.nodes:
        if node.domain == "":
            _check_node(node, opset, own, errors)
            if errors:
                return
        for sg in node.subgraphs():
            _check(sg, errors)
            if errors:
                return


def _check_node(node: Node, opset: int, own: set[str], errors: list[str]) -> None:
    formals = _allowed(node.op_type, opset)
    if not formals:
        return
    for k, v in enumerate(node.inputs):
        if v is None or v.name not in own or v.type.dtype is None:
            continue
        allowed, _ = formals[min(k, len(formals) - 1)] if (k < len(formals) or formals[-1][1]) else (None, False)
        if allowed is None:
            continue
        try:
            name = _TYPE_NAMES.get(onnx_elem_type(v.type.dtype))
        except KeyError:
            continue
        if name is not None and name not in allowed and name not in _NUMERIC:
            kinds = sorted(a[7:-1] for a in allowed if a.startswith("tensor("))
            shown = ", ".join(kinds[:6]) + (", ..." if len(kinds) > 6 else "")
            errors.append(f"node {node.name!r} ({node.op_type}) input {k} {v.name!r} is {name[7:-1]}, which "
                          f"{node.op_type}-{opset} does not accept (accepts {shown or 'other kinds'})")
            return


# The first schema lookup builds onnx's registry (about 30 ms holding the GIL): pay it when the
# loader is imported rather than inside a load running beside the GUI thread.
_allowed("Relu", 14)
