"""The IR: Graph, Node and Value with use-def links and change events.

Values are SSA: a value has at most one producer and a list of uses (node, input index).
Initializers are values with a constant array and no producer. A subgraph (the body of If
or Loop) is a Graph whose ``parent`` is the enclosing graph; its nodes may read values of
enclosing graphs directly (outer-scope references), exactly as in ONNX.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from engine.diagnostics import Diagnostic
from engine.ir.events import (
    EdgeChanged,
    EventSource,
    GraphIOChanged,
    NodeAdded,
    NodeChanged,
    NodeRemoved,
)
from engine.ir.fused import FusedActivation
from nodes.types import TensorType


class GraphError(ValueError):
    """A structural problem in a graph: a cycle, an undefined value, a duplicate name."""


class Value:
    """A tensor flowing between nodes: produced once, used many times."""

    __slots__ = ("_producer", "_producer_index", "_uses", "const", "doc_string", "graph", "name", "type")

    def __init__(self, name: str, type: TensorType | None = None, const: np.ndarray | None = None) -> None:
        self.name = name
        self.type = type or (TensorType.of(const) if const is not None else TensorType())
        self.const = const
        self.doc_string = ""
        self.graph: Graph | None = None
        self._producer: Node | None = None
        self._producer_index = -1
        self._uses: list[tuple[Node, int]] = []

    def producer(self) -> Node | None:
        """The node that computes this value (None for inputs and initializers)."""
        return self._producer

    def producer_index(self) -> int:
        """Which output of its producer this value is (-1 without a producer)."""
        return self._producer_index

    def uses(self) -> list[tuple[Node, int]]:
        """The (node, input index) pairs that read this value."""
        return list(self._uses)

    def consumers(self) -> list[Node]:
        """The distinct nodes that read this value, in use order."""
        seen: dict[int, Node] = {}
        for node, _ in self._uses:
            seen.setdefault(id(node), node)
        return list(seen.values())

    @property
    def is_graph_output(self) -> bool:
        """True when some graph lists this value among its outputs."""
        g = self.graph
        return g is not None and any(o is self for o in g.outputs)

    @property
    def is_graph_input(self) -> bool:
        """True when the owning graph lists this value among its inputs."""
        g = self.graph
        return g is not None and any(i is self for i in g.inputs)

    def set_type(self, new_type: TensorType) -> None:
        """Change the declared type (a graph input's shape in the inspector) and notify observers."""
        self.type = new_type
        g = self.graph
        if g is not None:
            g._touch()
            g.events.emit(GraphIOChanged("inputs" if self.is_graph_input else "types"))

    def replace_all_uses_with(self, other: Value, include_outputs: bool = True) -> None:
        """Make every reader of this value read ``other`` instead (graph outputs too)."""
        if other is self:
            return
        for node, index in list(self._uses):
            node.set_input(index, other)
        if include_outputs and self.graph is not None:
            g = self.graph
            for i, out in enumerate(g.outputs):
                if out is self:
                    g.set_output(i, other)

    def __repr__(self) -> str:
        return f"Value({self.name!r}, {self.type})"


class Node:
    """One operator application. ``attrs`` holds plain Python values (Graph for subgraphs)."""

    __slots__ = ("_inputs", "activation", "attr_types", "attrs", "doc_string", "domain", "graph", "meta",
                 "name", "op_type", "outputs")

    def __init__(self, op_type: str, inputs: Iterable[Value | None] = (), outputs: Iterable[Value | None] = (),
                 attrs: dict[str, Any] | None = None, name: str = "", domain: str = "") -> None:
        self.op_type = op_type
        self.domain = "" if domain == "ai.onnx" else domain
        self.name = name
        self._inputs: list[Value | None] = list(inputs)
        self.outputs: list[Value | None] = list(outputs)
        self.attrs: dict[str, Any] = dict(attrs or {})
        self.attr_types: dict[str, int] = {}
        self.doc_string = ""
        # Free-form metadata that passes and tools add (e.g. "provenance", "pin"); nothing in it
        # changes what the node computes.
        self.meta: dict[str, Any] = {}
        # An activation fused into this op (engine.ir.fused): it does change what the node
        # computes, so it is typed and validated, and every reader goes through it.
        self.activation: FusedActivation | None = None
        self.graph: Graph | None = None

    @property
    def inputs(self) -> tuple[Value | None, ...]:
        """The input values in order; None marks an omitted optional input."""
        return tuple(self._inputs)

    def input(self, i: int) -> Value | None:
        """Input ``i`` or None when absent."""
        return self._inputs[i] if i < len(self._inputs) else None

    def output(self, i: int = 0) -> Value | None:
        """Output ``i`` or None when absent."""
        return self.outputs[i] if i < len(self.outputs) else None

    def set_input(self, index: int, value: Value | None) -> None:
        """Rewire input ``index`` (appending Nones as needed) and keep use lists exact."""
        while len(self._inputs) <= index:
            self._inputs.append(None)
        old = self._inputs[index]
        if old is value:
            return
        if old is not None and self.graph is not None:
            _drop_use(old, self, index)
        self._inputs[index] = value
        if value is not None and self.graph is not None:
            value._uses.append((self, index))
        if self.graph is not None:
            self.graph._touch()
            self.graph.events.emit(EdgeChanged(self, index, old, value))

    def set_inputs(self, values: Iterable[Value | None]) -> None:
        """Replace the whole input list."""
        values = list(values)
        for i, v in enumerate(values):
            self.set_input(i, v)
        while len(self._inputs) > len(values):
            self.set_input(len(self._inputs) - 1, None)
            self._inputs.pop()
            if self.graph is not None:  # the slot itself is gone: tell observers
                self.graph._touch()
                self.graph.events.emit(NodeChanged(self, "inputs"))

    def set_attr(self, key: str, value: Any, kind: int | None = None) -> None:
        """Set (or with value None, delete) an attribute and notify observers.

        ``kind`` is the ONNX AttributeProto type to write (None: derived from the value), so an
        undo can restore an attribute exactly as it was read.
        """
        if value is None:
            self.attrs.pop(key, None)
            self.attr_types.pop(key, None)
        else:
            self.attrs[key] = value
            if kind is None:
                self.attr_types.pop(key, None)
            else:
                self.attr_types[key] = kind
        if self.graph is not None:
            self.graph._touch()
            self.graph.events.emit(NodeChanged(self, key))

    def set_meta(self, key: str, value: Any) -> None:
        """Set (or with None, delete) ``meta[key]`` (pins, provenance ...) and emit NodeChanged("meta:KEY")."""
        if value is None:
            self.meta.pop(key, None)
        else:
            self.meta[key] = value
        if self.graph is not None:
            self.graph._touch()
            self.graph.events.emit(NodeChanged(self, f"meta:{key}"))

    def subgraphs(self) -> Iterator[Graph]:
        """The subgraphs held in attributes (If branches, Loop body ...)."""
        for v in self.attrs.values():
            if isinstance(v, Graph):
                yield v
            elif isinstance(v, list):
                yield from (g for g in v if isinstance(g, Graph))

    def __repr__(self) -> str:
        return f"Node({self.op_type}, {self.name!r})"


def _drop_use(value: Value, node: Node, index: int) -> None:
    for k, (n, i) in enumerate(value._uses):
        if n is node and i == index:
            del value._uses[k]
            return


class Graph:
    """A computation graph: nodes, inputs, outputs, initializers and model-level properties."""

    def __init__(self, name: str = "graph", parent: Graph | None = None) -> None:
        self.name = name
        self.parent = parent
        self.doc_string = ""
        self.inputs: list[Value] = []
        self.outputs: list[Value] = []
        self.initializers: dict[str, Value] = {}
        self.values: dict[str, Value] = {}
        self._nodes: dict[int, Node] = {}
        self._node_cache: tuple[Node, ...] | None = None
        self._names = itertools.count()
        self._taken: set[str] = set()  # every node name ever used here (names stay unique)
        self.version = 0
        self.events = EventSource()
        # Model-level properties (meaningful on the main graph).
        self.opset_imports: dict[str, int] = {"": 17}
        self.ir_version = 8
        self.producer_name = ""
        self.producer_version = ""
        self.model_version = 0
        self.model_doc_string = ""
        self.metadata_props: dict[str, str] = {}
        self.functions: list[Any] = []  # FunctionProtos kept verbatim
        self.sparse_initializers: list[Any] = []  # SparseTensorProtos kept verbatim
        # Names of initializers that the file also lists as graph inputs: ONNX lets a caller
        # feed them, so passes must not fold them (engine.sim.feeds accepts them as inputs).
        self.overridable: list[str] = []
        # Where the model was loaded from ("" when built in memory) and what the loader found
        # (non-finite weights, shape-inference warnings): set by engine.loader, shown by the CLI
        # and the GUI, carried by clones and checkpoints like every field in COPIED_FIELDS.
        self.source_path = ""
        self.diagnostics: list[Diagnostic] = []

    COPIED_FIELDS = ("doc_string", "opset_imports", "ir_version", "producer_name", "producer_version",
                     "model_version", "model_doc_string", "metadata_props", "functions",
                     "sparse_initializers", "overridable", "source_path", "diagnostics")
    """The graph-level fields a clone copies (containers shallowly; nodes and values are rebuilt)."""

    # -- reading ---------------------------------------------------------------------------
    @property
    def nodes(self) -> tuple[Node, ...]:
        """The nodes in insertion order (see toposort for execution order)."""
        if self._node_cache is None:
            self._node_cache = tuple(self._nodes.values())
        return self._node_cache

    def __len__(self) -> int:
        return len(self._nodes)

    def opset(self, domain: str = "") -> int:
        """The imported opset version of a domain (looked up through enclosing graphs)."""
        g: Graph | None = self
        while g is not None:
            if domain in g.opset_imports:
                return g.opset_imports[domain]
            g = g.parent
        return 1

    @property
    def root(self) -> Graph:
        """The outermost graph."""
        g = self
        while g.parent is not None:
            g = g.parent
        return g

    def lookup(self, name: str) -> Value | None:
        """Find a value by name here or in an enclosing graph."""
        g: Graph | None = self
        while g is not None:
            v = g.values.get(name)
            if v is not None:
                return v
            g = g.parent
        return None

    def node_by_name(self, name: str) -> Node | None:
        """The first node with this name, or None."""
        for n in self._nodes.values():
            if n.name == name:
                return n
        return None

    def all_nodes(self) -> Iterator[Node]:
        """Every node, including those inside subgraphs (depth first)."""
        for n in self.nodes:
            yield n
            for sg in n.subgraphs():
                yield from sg.all_nodes()

    def toposort(self) -> list[Node]:
        """Nodes in a topological order, stable with respect to insertion order.

        Raises GraphError naming the nodes of a cycle when there is one.
        """
        nodes = self.nodes
        if self._insertion_order_is_topological(nodes):  # fast path, same result
            return list(nodes)
        index = {id(n): i for i, n in enumerate(nodes)}
        indeg = [0] * len(nodes)
        succ: list[list[int]] = [[] for _ in nodes]
        for i, n in enumerate(nodes):
            deps = set()
            for v in _reads(n):
                p = v._producer
                if p is not None and id(p) in index and p.graph is self:
                    deps.add(index[id(p)])
            for d in deps:
                succ[d].append(i)
            indeg[i] = len(deps)
        import heapq

        ready = [i for i in range(len(nodes)) if indeg[i] == 0]
        heapq.heapify(ready)
        order: list[Node] = []
        while ready:
            i = heapq.heappop(ready)
            order.append(nodes[i])
            for j in succ[i]:
                indeg[j] -= 1
                if indeg[j] == 0:
                    heapq.heappush(ready, j)
        if len(order) != len(nodes):
            stuck = [nodes[i] for i in range(len(nodes)) if indeg[i] > 0]
            names = ", ".join(n.name or n.op_type for n in stuck[:6])
            more = f" and {len(stuck) - 6} more" if len(stuck) > 6 else ""
            raise GraphError(f"graph {self.name!r} has a cycle through nodes {names}{more}")
        return order

    def _insertion_order_is_topological(self, nodes: tuple[Node, ...]) -> bool:
        seen: set[int] = set()
        for n in nodes:
            reads = _reads(n) if n.attrs and any(isinstance(a, (Graph, list)) for a in n.attrs.values()) \
                else n._inputs
            for v in reads:
                if v is None:
                    continue
                p = v._producer
                if p is not None and p.graph is self and id(p) not in seen:
                    return False
            seen.add(id(n))
        return True

    def sort_nodes(self) -> None:
        """Reorder the node table topologically (no semantic change; later toposorts are fast)."""
        nodes = self.nodes
        if self._insertion_order_is_topological(nodes):
            return
        order = self.toposort()
        self._nodes = {id(n): n for n in order}
        self._node_cache = None

    # -- naming ------------------------------------------------------------------------------
    def unique_name(self, base: str) -> str:
        """A value or node name not used anywhere in this graph or its enclosing graphs."""
        base = base or "v"
        if self.lookup(base) is None and not self._node_name_taken(base):
            return base
        while True:
            cand = f"{base}_{next(self._names)}"
            if self.lookup(cand) is None and not self._node_name_taken(cand):
                return cand

    def _node_name_taken(self, name: str) -> bool:
        g: Graph | None = self
        while g is not None:
            if name in g._taken:
                return True
            g = g.parent
        return False

    # -- building and editing -------------------------------------------------------------
    def _touch(self) -> None:
        self.version += 1
        self._node_cache = None
        if self.parent is not None:
            self.parent._touch()

    def add_value(self, value: Value) -> Value:
        """Register a value under its name (names are unique within a graph)."""
        if value.name in self.values and self.values[value.name] is not value:
            raise GraphError(f"duplicate value name {value.name!r}")
        value.graph = self
        self.values[value.name] = value
        return value

    def add_input(self, value: Value) -> Value:
        """Append a graph input."""
        self.add_value(value)
        self.inputs.append(value)
        self._touch()
        self.events.emit(GraphIOChanged("inputs"))
        return value

    def add_initializer(self, name: str, array: np.ndarray, unique: bool = True) -> Value:
        """Add a constant; with ``unique`` the name is made unique first."""
        array = np.asarray(array)
        if unique:
            name = self.unique_name(name)
        v = self.add_value(Value(name, TensorType.of(array), const=array))
        self.initializers[name] = v
        self._touch()
        self.events.emit(GraphIOChanged("initializers"))
        return v

    def remove_initializer(self, name: str) -> None:
        """Drop an initializer that nothing reads any more."""
        v = self.initializers.pop(name, None)
        if v is not None and not v._uses and not v.is_graph_input and not v.is_graph_output:
            self.values.pop(name, None)
        self._touch()
        self.events.emit(GraphIOChanged("initializers"))

    def set_output(self, index: int, value: Value) -> None:
        """Replace graph output ``index``."""
        self.outputs[index] = value
        self._touch()
        self.events.emit(GraphIOChanged("outputs"))

    def add_node(self, node: Node) -> Node:
        """Insert a node; its outputs become values of this graph, its inputs gain uses."""
        node.graph = self
        if not node.name:
            node.name = self.unique_name(node.op_type.lower())
        self._taken.add(node.name)
        for i, v in enumerate(node._inputs):
            if v is not None:
                if v.graph is None:
                    self.add_value(v)
                v._uses.append((node, i))
        for k, out in enumerate(node.outputs):
            if out is None:
                continue
            if out.name not in self.values:
                self.add_value(out)
            elif self.values[out.name] is not out or (out._producer is not None and out._producer is not node):
                raise GraphError(f"value {out.name!r} is already defined in graph {self.name!r}")
            out._producer = node
            out._producer_index = k
        for sg in node.subgraphs():
            sg.parent = self
        self._nodes[id(node)] = node
        self._touch()
        self.events.emit(NodeAdded(node))
        return node

    def make_node(self, op_type: str, inputs: Iterable[Value | None], n_outputs: int = 1,
                  attrs: dict[str, Any] | None = None, name: str = "", domain: str = "",
                  output_names: Iterable[str] | None = None) -> Node:
        """Create, name and insert a node with fresh output values."""
        name = self.unique_name(name or op_type.lower())
        self._taken.add(name)
        names = list(output_names) if output_names is not None else [
            f"{name}_out" if n_outputs == 1 else f"{name}_out{k}" for k in range(n_outputs)]
        outs = [Value(self.unique_name(n)) for n in names]
        return self.add_node(Node(op_type, inputs, outs, attrs, name=name, domain=domain))

    def remove_node(self, node: Node, detach_consumers: bool = False) -> None:
        """Take a node out. Its outputs lose their producer; with ``detach_consumers`` the
        inputs that read them are set to None (emitting EdgeChanged), otherwise they dangle."""
        if id(node) not in self._nodes:
            raise GraphError(f"node {node.name!r} is not in graph {self.name!r}")
        for out in node.outputs:
            if out is None:
                continue
            if detach_consumers:
                for user, idx in list(out._uses):
                    user.set_input(idx, None)
            out._producer = None
            out._producer_index = -1
            if not out._uses and not out.is_graph_output:
                self.values.pop(out.name, None)
                out.graph = None
        for i, v in enumerate(node._inputs):
            if v is not None:
                _drop_use(v, node, i)
        del self._nodes[id(node)]
        node.graph = None
        self._touch()
        self.events.emit(NodeRemoved(node))

    def node_index(self, node: Node) -> int:
        """Position of ``node`` in the insertion order (-1 when absent)."""
        for i, n in enumerate(self._nodes.values()):
            if n is node:
                return i
        return -1

    def reinsert_node(self, node: Node, position: int | None = None) -> None:
        """Put back a node removed earlier (undo): same object, same values, and with
        ``position`` at its old place in the node order (so a saved file is byte-identical)."""
        for out in node.outputs:
            if out is not None and out.graph is None:
                self.add_value(out)
        self.add_node(node)
        if position is not None and 0 <= position < len(self._nodes) - 1:
            items = list(self._nodes.items())
            items.insert(position, items.pop())
            self._nodes = dict(items)
            self._node_cache = None

    def prune_values(self) -> None:
        """Forget values nothing produces, reads or exports (leftovers of rewrites)."""
        keep = {v.name for v in self.inputs} | {v.name for v in self.outputs} | set(self.initializers)
        for name, v in list(self.values.items()):
            if name in keep:
                continue
            if v._producer is None and not v._uses:
                del self.values[name]
                v.graph = None

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self._nodes)} nodes)"


def _reads(node: Node) -> Iterator[Value]:
    """Values a node reads, including outer-scope values read inside its subgraphs."""
    for v in node._inputs:
        if v is not None:
            yield v
    for sg in node.subgraphs():
        yield from _outer_reads(sg)


def _outer_reads(graph: Graph) -> Iterator[Value]:
    for n in graph.nodes:
        for v in _reads(n):
            if v.graph is not None and v.graph is not graph and _is_ancestor(v.graph, graph):
                yield v


def _is_ancestor(a: Graph, g: Graph) -> bool:
    p = g.parent
    while p is not None:
        if p is a:
            return True
        p = p.parent
    return False
