"""The one boundary between ONNX protobuf and the IR: ModelProto <-> Graph.

Round-trips names, attributes (with their ONNX types), initializers, Constant nodes, opset
imports, metadata_props, value_info and the subgraphs of If/Loop/Scan. Nodes need not be
sorted in the file; cycles and undefined inputs are left for ``verify`` to name.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, GraphProto, ModelProto, TensorProto, helper, numpy_helper

from engine.ir.graph import Graph, Node, Value
from nodes.types import ConversionError, Dim, TensorType, np_dtype, onnx_elem_type, tensor_to_array


# -- ModelProto -> Graph -------------------------------------------------------------------------
def _type_from_proto(tp: onnx.TypeProto, name: str = "") -> TensorType:
    """The IR type of a value; a dim_value of -1 ("any size", as Paddle2ONNX writes it) becomes
    a symbolic dimension named after the value and axis, exactly like a dim_param."""
    if not tp.HasField("tensor_type"):
        return TensorType()
    tt = tp.tensor_type
    try:
        dtype = np_dtype(tt.elem_type) if tt.elem_type else None
    except KeyError:
        raise ConversionError(f"unknown element type {tt.elem_type}") from None
    shape: tuple[Dim, ...] | None = None
    if tt.HasField("shape"):
        dims: list[Dim] = []
        for k, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value"):
                if d.dim_value == -1:
                    dims.append(f"{name or 'dim'}_d{k}")
                    continue
                if d.dim_value < 0:
                    raise ConversionError(f"dimension {k} is {d.dim_value}: a size must be >= 0 "
                                          f"(-1 means any size)")
                dims.append(int(d.dim_value))
            elif d.HasField("dim_param") and d.dim_param:
                dims.append(d.dim_param)
            else:
                dims.append(None)
        shape = tuple(dims)
    return TensorType(dtype, shape)


def _attr_value(a: AttributeProto, graph: Graph) -> Any:
    t = a.type
    if t == AttributeProto.FLOAT:
        return float(a.f)
    if t == AttributeProto.INT:
        return int(a.i)
    if t == AttributeProto.STRING:
        return a.s.decode("utf-8", errors="replace")
    if t == AttributeProto.TENSOR:
        return tensor_to_array(a.t)
    if t == AttributeProto.GRAPH:
        return _graph_from_proto(a.g, graph)
    if t == AttributeProto.FLOATS:
        return [float(x) for x in a.floats]
    if t == AttributeProto.INTS:
        return [int(x) for x in a.ints]
    if t == AttributeProto.STRINGS:
        return [s.decode("utf-8", errors="replace") for s in a.strings]
    if t == AttributeProto.TENSORS:
        return [tensor_to_array(x) for x in a.tensors]
    if t == AttributeProto.GRAPHS:
        return [_graph_from_proto(x, graph) for x in a.graphs]
    # SPARSE_TENSOR(S), TYPE_PROTO(S): kept as protos, written back verbatim.
    return helper.get_attribute_value(a)


def _graph_from_proto(gp: GraphProto, parent: Graph | None) -> Graph:
    g = Graph(gp.name or "graph", parent)
    g.doc_string = gp.doc_string
    types: dict[str, TensorType] = {}
    for vi in list(gp.value_info) + list(gp.input) + list(gp.output):
        try:
            types[vi.name] = _type_from_proto(vi.type, vi.name)
        except ConversionError as exc:
            raise ConversionError(f"value {vi.name!r} of graph {gp.name!r}: {exc}") from None

    for t in gp.initializer:
        arr = tensor_to_array(t)
        if t.name in g.values:
            raise ConversionError(f"initializer {t.name!r} is defined twice")
        v = g.add_value(Value(t.name, TensorType.of(arr), const=arr))
        g.initializers[t.name] = v
    g.sparse_initializers = list(gp.sparse_initializer)
    for vi in gp.input:
        if vi.name in g.initializers:
            g.overridable.append(vi.name)
            continue
        if vi.name in g.values:
            raise ConversionError(f"graph input {vi.name!r} is declared twice")
        g.inputs.append(g.add_value(Value(vi.name, types[vi.name])))

    # Pass 1: every node output exists before any input is resolved (nodes may be unsorted,
    # and subgraphs may read outputs of nodes listed after the node that holds them).
    for np_ in gp.node:
        for name in np_.output:
            if not name:
                continue
            if name in g.values:
                raise ConversionError(f"value {name!r} is produced twice (node {np_.name or np_.op_type!r})")
            g.add_value(Value(name, types.get(name)))

    for np_ in gp.node:
        inputs: list[Value | None] = []
        for name in np_.input:
            if not name:
                inputs.append(None)
                continue
            v = g.lookup(name)
            if v is None:  # an undefined value: kept dangling, verify() names it
                v = g.add_value(Value(name, types.get(name)))
            inputs.append(v)
        outputs = [g.values[name] if name else None for name in np_.output]
        node = Node(np_.op_type, inputs, outputs, name=np_.name, domain=np_.domain)
        node.doc_string = np_.doc_string
        g.add_node(node)  # registers uses; subgraph attrs below look up this graph
        for a in np_.attribute:
            if a.ref_attr_name:
                node.attrs[a.name] = ("ref", a.ref_attr_name)
                node.attr_types[a.name] = a.type
                continue
            node.attrs[a.name] = _attr_value(a, g)
            node.attr_types[a.name] = a.type
        for sg in node.subgraphs():
            sg.parent = g

    for vi in gp.output:
        v = g.lookup(vi.name)
        if v is None:
            v = g.add_value(Value(vi.name, types[vi.name]))
        elif v.type.dtype is None and types[vi.name].dtype is not None:
            v.type = types[vi.name]
        g.outputs.append(v)
    g.version = 0
    return g


def from_onnx(model: ModelProto) -> Graph:
    """Convert a ModelProto (external data already loaded) into an IR Graph."""
    g = _graph_from_proto(model.graph, None)
    g.opset_imports = {("" if o.domain == "ai.onnx" else o.domain): int(o.version) for o in model.opset_import}
    if "" not in g.opset_imports and not model.opset_import:
        g.opset_imports[""] = 1
    g.ir_version = int(model.ir_version)
    g.producer_name = model.producer_name
    g.producer_version = model.producer_version
    g.model_version = int(model.model_version)
    g.model_doc_string = model.doc_string
    g.metadata_props = {p.key: p.value for p in model.metadata_props}
    g.functions = list(model.functions)
    return g


# -- Graph -> ModelProto -------------------------------------------------------------------------
def array_to_tensor(arr: np.ndarray, name: str) -> TensorProto:
    """A numpy array as a TensorProto (strings, bfloat16 and float8 included)."""
    arr = np.asarray(arr)
    if arr.dtype == np.dtype(object) or arr.dtype.kind in "US":
        t = helper.make_tensor(name, TensorProto.STRING, arr.shape,
                               [str(s).encode("utf-8") for s in arr.ravel()])
        return t
    code = onnx_elem_type(arr.dtype)
    if arr.dtype.kind in "biuf" and arr.dtype.name in {"bool", "int8", "int16", "int32", "int64", "uint8",
                                                       "uint16", "uint32", "uint64", "float16", "float32",
                                                       "float64"}:
        return numpy_helper.from_array(arr, name)
    # Extension dtypes (bfloat16, float8, int4): raw little-endian bytes of the stored bits.
    t = TensorProto()
    t.name = name
    t.data_type = code
    t.dims.extend(arr.shape)
    if code in (getattr(TensorProto, "INT4", -1), getattr(TensorProto, "UINT4", -1)):
        return helper.make_tensor(name, code, arr.shape, arr.astype(np.int8).ravel().tolist())
    t.raw_data = np.ascontiguousarray(arr).tobytes()
    return t


def _type_to_proto(name: str, t: TensorType) -> onnx.ValueInfoProto:
    if t.dtype is None:
        vi = onnx.ValueInfoProto()
        vi.name = name
        return vi
    shape = None if t.shape is None else [d if d is not None else "" for d in t.shape]
    if shape is not None:
        shape = [None if d == "" else d for d in shape]
    return helper.make_tensor_value_info(name, onnx_elem_type(t.dtype), shape)


def _attr_to_proto(key: str, value: Any, kind: int | None) -> AttributeProto:
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "ref":
        a = AttributeProto()
        a.name = key
        a.ref_attr_name = value[1]
        a.type = kind or AttributeProto.UNDEFINED
        return a
    if isinstance(value, Graph):
        return helper.make_attribute(key, _graph_to_proto(value))
    if isinstance(value, np.ndarray):
        return helper.make_attribute(key, array_to_tensor(value, ""))
    if isinstance(value, list) and value and isinstance(value[0], Graph):
        return helper.make_attribute(key, [_graph_to_proto(g) for g in value])
    if isinstance(value, list) and value and isinstance(value[0], np.ndarray):
        return helper.make_attribute(key, [array_to_tensor(v, "") for v in value])
    if kind is not None:
        if kind == AttributeProto.FLOAT:
            return helper.make_attribute(key, float(value), attr_type=kind)
        if kind == AttributeProto.INT:
            return helper.make_attribute(key, int(value), attr_type=kind)
        if kind == AttributeProto.FLOATS:
            return helper.make_attribute(key, [float(x) for x in value], attr_type=kind)
        if kind == AttributeProto.INTS:
            return helper.make_attribute(key, [int(x) for x in value], attr_type=kind)
        if kind in (AttributeProto.STRING, AttributeProto.STRINGS):
            return helper.make_attribute(key, value, attr_type=kind)
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, (list, tuple)) and not value:
        return helper.make_attribute(key, [], attr_type=AttributeProto.INTS)
    return helper.make_attribute(key, value)


def _graph_to_proto(g: Graph) -> GraphProto:
    try:
        order = g.toposort()
    except ValueError:
        order = list(g.nodes)
    nodes = []
    fused_names = ({x.name for x in g.nodes} | set(g.values)
                   if any(x.activation for x in g.nodes) else set())
    fused_inits: list[TensorProto] = []
    for n in order:
        np_ = helper.make_node(
            n.op_type,
            [v.name if v is not None else "" for v in n.inputs],
            [v.name if v is not None else "" for v in n.outputs],
            name=n.name,
            domain=n.domain or None,
        )
        if n.doc_string:
            np_.doc_string = n.doc_string
        for key in sorted(n.attrs):
            np_.attribute.append(_attr_to_proto(key, n.attrs[key], n.attr_types.get(key)))
        nodes.append(np_)
        if n.activation:  # a fused activation is written back as its standard ops
            nodes.extend(_activation_protos(g, n, np_, fused_names, fused_inits))
    overridable = [n for n in g.overridable if n in g.initializers]
    inputs = [_type_to_proto(v.name, v.type) for v in g.inputs]
    inputs += [_type_to_proto(n, g.initializers[n].type) for n in overridable]
    outputs = [_type_to_proto(v.name, v.type) for v in g.outputs]
    io_names = {v.name for v in g.inputs} | {v.name for v in g.outputs} | set(g.initializers)
    value_info = []
    for n in order:
        for v in n.outputs:
            if v is not None and v.name not in io_names and v.type.dtype is not None:
                value_info.append(_type_to_proto(v.name, v.type))
    inits = [array_to_tensor(v.const, name) for name, v in g.initializers.items()]  # type: ignore[arg-type]
    inits += fused_inits
    gp = helper.make_graph(nodes, g.name, inputs, outputs, initializer=inits, value_info=value_info,
                           doc_string=g.doc_string or None)
    gp.sparse_initializer.extend(g.sparse_initializers)
    return gp


def _activation_protos(g: Graph, n: Node, np_: onnx.NodeProto, taken: set[str],
                       inits: list[TensorProto]) -> list[onnx.NodeProto]:
    """The standard ONNX nodes of ``n``'s fused activation; ``np_`` (the op itself) is renamed to
    write a fresh ``<output>_preact`` value, the last activation node writes the original output
    and the activation nodes take their original names (``n.activation.names``)."""
    from engine.ir.fused import PREV, X

    def fresh(base: str) -> str:
        name, k = base, 0
        while name in taken or g.lookup(name) is not None:
            k += 1
            name = f"{base}_{k}"
        taken.add(name)
        return name

    act = n.activation
    assert act is not None
    out = np_.output[0]
    pre = fresh(f"{out}_preact")
    np_.output[0] = pre
    dtype = n.outputs[0].type.dtype if n.outputs and n.outputs[0] is not None else None
    steps = act.steps(g.opset(""), dtype)
    names = list(act.names)
    protos, prev = [], pre
    for k, step in enumerate(steps):
        node_name = fresh(names[k] if k < len(names) else f"{n.name}_{step.op_type.lower()}")
        inputs = []
        for j, a in enumerate(step.inputs):
            if a is X:
                inputs.append(pre)
            elif a is PREV:
                inputs.append(prev)
            elif a is None:
                inputs.append("")
            else:
                init_name = fresh(f"{node_name}_in{j}")
                inits.append(array_to_tensor(a, init_name))
                inputs.append(init_name)
        result = out if k == len(steps) - 1 else fresh(f"{node_name}_out")
        protos.append(helper.make_node(step.op_type, inputs, [result], name=node_name, **step.attrs))
        prev = result
    return protos


def to_onnx(g: Graph) -> ModelProto:
    """Convert an IR Graph back into a ModelProto."""
    gp = _graph_to_proto(g)
    opsets = [helper.make_opsetid(d, v) for d, v in sorted(g.opset_imports.items())]
    model = helper.make_model(gp, opset_imports=opsets, producer_name=g.producer_name or "npu-studio")
    # IR < 4 requires every initializer to be a graph input; rewritten graphs add initializers, and
    # IR 4 reads everything IR 3 did, so older files are written as IR 4.
    model.ir_version = max(g.ir_version, 4) if g.ir_version else model.ir_version
    if g.producer_version:
        model.producer_version = g.producer_version
    model.model_version = g.model_version
    if g.model_doc_string:
        model.doc_string = g.model_doc_string
    for k, v in g.metadata_props.items():
        p = model.metadata_props.add()
        p.key, p.value = k, v
    model.functions.extend(g.functions)
    return model
