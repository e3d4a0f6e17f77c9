"""What crosses between the editor and its worker process: pickles that are quick to read.

Plain pickling of an IR graph walks its use-def links object by object (light_densenet121's
1,746 nodes: 0.6 MB, 270 ms to write, 185 ms to read) and fails on what the IR keeps for its
observers (listener closures) or derived caches (op specs with kernel functions). Here a
``Graph`` is written as flat tables instead (values by index, nodes as tuples of value indices,
subgraphs as further tables) and rebuilt by Python code on the reading side; a ``Node`` or
``Value`` referenced from elsewhere (placement facts, simulation records) is written as its
place in such a table, so the reader gets the very objects of the rebuilt graph, as the writer
had them. Op specs are written as their registry key, event sources as fresh ones.

Reading is most of the work on the editor's side, and a long C call (``pickle.loads``) holds the
GIL for its whole duration; the rebuild here is Python bytecode, which yields to the GUI thread
every switch interval (app/runtime.py).
"""

from __future__ import annotations

import copyreg
import io
import itertools
import pickle
import time
import weakref
from collections.abc import Iterable
from typing import Any

import numpy as np

from engine.ir.events import EventSource
from engine.ir.graph import Graph, Node, Value
from nodes.spec import OpSpec
from nodes.types import TensorType

PROTOCOL = 5
CHUNK = 250  # table rows per pickle: reading one holds the GIL for a few milliseconds at most
FLAT_CHUNK = 4000  # names or numbers per pickle (of names written before: memo references)
# A writer in the editor's process sleeps this long after each chunk. Without it the GUI thread
# got the GIL only every other 5 ms switch interval while a graph was written: on
# light_densenet121 (19 chunks of up to 4 ms) 35-43 ms of GUI work took 103-129 ms wall.
YIELD_S = 0.005
_STRUCT = frozenset({"parent", "inputs", "outputs", "initializers", "values", "_nodes", "_node_cache", "_names",
                     "events", "_taken"})


class _Sub:
    """A subgraph held in an attribute: the index of its table."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __reduce__(self) -> tuple:
        return _Sub, (self.index,)


def _type_key(t: TensorType | None) -> Any:
    if t is None:
        return None
    return (None if t.dtype is None else t.dtype.str, t.shape)


class _Flat:
    """The tables of one root graph (and its subgraphs), and where each node and value sits."""

    def __init__(self, root: Graph) -> None:
        self.graphs: list[Graph] = []
        self.value_index: dict[int, int] = {}
        self.node_index: dict[int, tuple[int, int]] = {}
        self.values: list[Value] = []
        stack = [root]
        while stack:
            g = stack.pop(0)
            gi = len(self.graphs)
            self.graphs.append(g)
            for v in (*g.values.values(), *g.inputs, *g.outputs, *g.initializers.values()):
                self._add(v)
            for k, n in enumerate(g._nodes.values()):
                self.node_index[id(n)] = (gi, k)
                for v in (*n._inputs, *n.outputs):
                    if v is not None:
                        self._add(v)
                stack.extend(n.subgraphs())

    def _add(self, v: Value) -> None:
        if id(v) not in self.value_index:
            self.value_index[id(v)] = len(self.values)
            self.values.append(v)

    def state(self) -> tuple:
        graph_index = {id(g): k for k, g in enumerate(self.graphs)}
        vi = self.value_index
        tables = []
        for g in self.graphs:
            nodes = []
            for n in g._nodes.values():
                attrs = {k: _encode_attr(a, graph_index) for k, a in n.attrs.items()} if n.attrs else {}
                nodes.append((n.op_type, n.name, n.domain, [None if v is None else vi[id(v)] for v in n._inputs],
                              [None if v is None else vi[id(v)] for v in n.outputs], attrs, n.attr_types,
                              n.doc_string, n.meta, n.activation))
            extra = {k: v for k, v in vars(g).items() if k not in _STRUCT}
            tables.append((extra, _count_of(g._names), list(g._taken), [vi[id(v)] for v in g.values.values()],
                           [vi[id(v)] for v in g.inputs], [vi[id(v)] for v in g.outputs],
                           [(k, vi[id(v)]) for k, v in g.initializers.items()], nodes))
        types: dict[Any, int] = {}
        type_table: list[Any] = []
        values = []
        for v in self.values:
            key = _type_key(v.type)
            t = types.get(key)
            if t is None:
                t = types[key] = len(type_table)
                type_table.append(key)
            values.append((v.name, t, v.const, v.doc_string, graph_index.get(id(v.graph), -1)))
        return tables, type_table, values


def _count_of(counter: Any) -> int:
    text = repr(counter)  # "count(7)"
    return int(text[text.index("(") + 1:-1])


def _encode_attr(a: Any, graph_index: dict[int, int]) -> Any:
    if isinstance(a, Graph):
        return _Sub(graph_index[id(a)])
    if isinstance(a, list) and any(isinstance(x, Graph) for x in a):
        return [_Sub(graph_index[id(x)]) if isinstance(x, Graph) else x for x in a]
    return a


def _decode_attr(a: Any, graphs: list[Graph]) -> Any:
    if isinstance(a, _Sub):
        return graphs[a.index]
    if isinstance(a, list) and any(isinstance(x, _Sub) for x in a):
        return [graphs[x.index] if isinstance(x, _Sub) else x for x in a]
    return a


# What a rebuilt root graph was read from: its graphs, their nodes in table order and its values,
# for the references to them that follow in the same pickle (_node_at, _value_at, _graph_at).
_TABLES: weakref.WeakKeyDictionary[Graph, tuple[list[Graph], list[tuple[Node, ...]], list[Value]]] = \
    weakref.WeakKeyDictionary()


def _rebuild(tables: list, type_table: list, values: list) -> Graph:
    graphs = [Graph.__new__(Graph) for _ in tables]
    types = [None if k is None else TensorType(None if k[0] is None else np.dtype(k[0]), k[1]) for k in type_table]
    vals = []
    for name, t, const, doc, owner in values:
        v = Value(name, types[t], const)
        v.doc_string = doc
        v.graph = graphs[owner] if owner >= 0 else None
        vals.append(v)
    parents: dict[int, Graph] = {}
    for gi, table in enumerate(tables):
        for node in table[7]:
            for a in node[5].values():
                for x in (a if isinstance(a, list) else [a]):
                    if isinstance(x, _Sub):
                        parents[x.index] = graphs[gi]
    node_lists: list[tuple[Node, ...]] = []
    for gi, (extra, count, taken, gvalues, inputs, outputs, inits, nodes) in enumerate(tables):
        g = graphs[gi]
        g.__dict__.update(extra)
        g.parent = parents.get(gi)
        g.events = EventSource()
        g._names = itertools.count(count)
        g._taken = set(taken)
        g._node_cache = None
        g.values = {vals[i].name: vals[i] for i in gvalues}
        g.inputs = [vals[i] for i in inputs]
        g.outputs = [vals[i] for i in outputs]
        g.initializers = {k: vals[i] for k, i in inits}
        g._nodes = {}
        made = []
        for op_type, name, domain, ins, outs, attrs, attr_types, doc, meta, activation in nodes:
            n = Node.__new__(Node)
            n.op_type, n.name, n.domain, n.doc_string, n.meta, n.activation = op_type, name, domain, doc, meta, activation
            n._inputs = [None if i is None else vals[i] for i in ins]
            n.outputs = [None if i is None else vals[i] for i in outs]
            n.attrs = {k: _decode_attr(a, graphs) for k, a in attrs.items()} if attrs else {}
            n.attr_types = attr_types
            n.graph = g
            for k, i in enumerate(ins):
                if i is not None:
                    vals[i]._uses.append((n, k))
            for k, i in enumerate(outs):
                if i is not None:
                    vals[i]._producer, vals[i]._producer_index = n, k
            g._nodes[id(n)] = n
            made.append(n)
        node_lists.append(tuple(made))
    _TABLES[graphs[0]] = (graphs, node_lists, vals)
    return graphs[0]


def _node_at(root: Graph, graph_index: int, node_index: int) -> Node:
    return _TABLES[root][1][graph_index][node_index]


def _graph_at(root: Graph, graph_index: int) -> Graph:
    return _TABLES[root][0][graph_index]


def _value_at(root: Graph, index: int) -> Value:
    return _TABLES[root][2][index]


class Pickler(pickle.Pickler):
    """Writes graphs as tables, their nodes and values as places in them, op specs by name."""

    def __init__(self, f: io.BytesIO) -> None:
        super().__init__(f, protocol=PROTOCOL)
        self._flats: dict[int, _Flat] = {}
        self._states: dict[int, tuple] = {}
        self._written: dict[int, tuple[list, ...]] = {}  # id of a list written ahead -> its chunks
        self.dispatch_table = copyreg.dispatch_table.copy()
        self.dispatch_table[EventSource] = _fresh_events

    def _flat(self, root: Graph) -> _Flat:
        flat = self._flats.get(id(root))
        if flat is None:
            flat = self._flats[id(root)] = _Flat(root)
        return flat

    def _state(self, root: Graph) -> tuple:
        state = self._states.get(id(root))
        if state is None:
            state = self._states[id(root)] = self._flat(root).state()
        return state

    def dump_ahead(self, obj: Any) -> None:
        """Write the bulk of ``obj`` (a root graph's tables, a long list's items) as pickles of
        CHUNK entries each, which the final object then refers to (one memo across pickles)."""
        if type(obj) is Graph and obj.parent is None:
            tables, _types, values = self._state(obj)
            parts: list[tuple[list, int]] = [(values, CHUNK), *((t[7], CHUNK) for t in tables)]
            parts += [(t[k], FLAT_CHUNK) for t in tables for k in (2, 3)]  # its names, its values' places
        elif type(obj) is list:
            parts = [(obj, CHUNK)]
        else:
            parts = []
        for part, size in parts:
            chunks = tuple(part[k:k + size] for k in range(0, len(part), size))
            for chunk in chunks:
                self.dump(chunk)
                time.sleep(YIELD_S)  # the GUI thread gets the GIL between chunks, not half of it
            self._written[id(part)] = chunks  # (the memo holds the chunks, and the state the part)

    def _joined(self, part: list) -> Any:
        """A graph table written ahead, as its chunks (refers to one memo entry per chunk: as the
        list itself, the last pickle referred to each of its 50,000 rows, one 35 ms call)."""
        chunks = self._written.get(id(part))
        return part if chunks is None else _Joined(chunks)

    def reducer_override(self, obj: Any) -> Any:
        cls = type(obj)
        if cls is Graph:
            if obj.parent is None:
                tables, types, values = self._state(obj)
                joined = [(t[0], t[1], self._joined(t[2]), self._joined(t[3]), *t[4:7], self._joined(t[7])) for t in tables]
                return _rebuild, (joined, types, self._joined(values))
            root = obj.root  # a subgraph: its place in the root's tables
            return _graph_at, (root, self._flat(root).graphs.index(obj))
        if cls is Node and obj.graph is not None:
            root = obj.graph.root
            where = self._flat(root).node_index.get(id(obj))
            if where is not None:
                return _node_at, (root, *where)
        elif cls is Value:
            owner = obj.graph if obj.graph is not None else (obj._producer.graph if obj._producer is not None else None)
            if owner is not None:
                root = owner.root
                index = self._flat(root).value_index.get(id(obj))
                if index is not None:
                    return _value_at, (root, index)
        elif isinstance(obj, OpSpec):  # subclasses too (BinarySpec ...): kernels are closures
            return _spec, (obj.op_type, obj.domain)
        return NotImplemented


class _Joined:
    """A list written ahead in chunks; read back as one list."""

    __slots__ = ("chunks",)

    def __init__(self, chunks: tuple[list, ...]) -> None:
        self.chunks = chunks

    def __reduce__(self) -> tuple:
        return _join, (self.chunks,)


def _join(chunks: tuple[list, ...]) -> list:
    return list(itertools.chain.from_iterable(chunks))


def _fresh_events(_events: EventSource) -> tuple:
    return EventSource, ()


def _spec(op_type: str, domain: str) -> OpSpec:
    from nodes import registry

    spec = registry.get(op_type, domain)
    if spec is None:
        raise pickle.UnpicklingError(f"no op spec {domain or 'ai.onnx'}:{op_type} in this process")
    return spec


def dumps(obj: Any, pickler: type[Pickler] | None = None, ahead: Iterable[Any] = ()) -> bytes:
    """``obj`` as bytes (graphs as tables, see the module docstring); the bulk of the graphs and
    lists in ``ahead`` is written first, in chunks (``Pickler.dump_ahead``)."""
    f = io.BytesIO()
    p = (pickler or Pickler)(f)
    for part in ahead:
        p.dump_ahead(part)
        time.sleep(0)  # a writer in the editor's process lets the GUI thread in between
    p.dump(obj)
    return f.getvalue()


def loads(data: bytes) -> Any:
    """The object ``dumps`` wrote: its pickles read one by one, the GIL released in between, so
    that no single C call holds it for long."""
    f = io.BytesIO(data)
    u = pickle.Unpickler(f)
    while True:
        obj = u.load()
        if f.tell() >= len(data):
            return obj
        time.sleep(0)


def bulk_of(obj: Any) -> list[Any]:
    """The graphs and long lists of a result to write ahead (see ``dumps``): a compile's, or what
    an object's own ``wire_bulk()`` names."""
    own = getattr(obj, "wire_bulk", None)
    if callable(own):
        return list(own())
    out: list[Any] = []
    for path in ("compile.source", "compile.optimized", "compile.quant.graph", "compile.sim.ops",
                 "compile.sim.events", "compile.sim.placement.facts.order", "optimized"):
        part = obj
        for name in path.split("."):
            part = getattr(part, name, None)
        if isinstance(part, (Graph, list)) and all(part is not x for x in out):
            out.append(part)
    return out
