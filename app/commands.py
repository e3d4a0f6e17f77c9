"""Undo commands: every edit of the graph is one QUndoCommand that calls one engine method.

Compound edits (deleting a node with its edges, pasting a selection) are macros of these
commands, so undo replays the exact engine calls in reverse. The graph emits events for each
call; the scene and panels update from those events, never from the commands.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from onnx import AttributeProto
from PySide6.QtCore import QPointF
from PySide6.QtGui import QUndoCommand

from app import style
from engine.ir.graph import Node, Value
from nodes import registry
from nodes.spec import REQUIRED
from nodes.types import TensorType

if TYPE_CHECKING:
    from app.document import Document

_KIND_TO_ONNX = {"int": AttributeProto.INT, "float": AttributeProto.FLOAT, "string": AttributeProto.STRING,
                 "ints": AttributeProto.INTS, "floats": AttributeProto.FLOATS, "strings": AttributeProto.STRINGS}
_PLACEHOLDER = {"int": 0, "float": 0.0, "string": "", "ints": [], "floats": [], "strings": []}
MOVE_ID = 7001


def default_attrs(op_type: str, domain: str = "") -> dict[str, Any]:
    """Attributes a new node starts with: placeholders for the required ones."""
    spec = registry.get(op_type, domain)
    out: dict[str, Any] = {}
    if spec is None:
        return out
    for a in spec.attrs:
        if a.default is REQUIRED and a.kind in _PLACEHOLDER:
            out[a.name] = _PLACEHOLDER[a.kind]
    return out


def onnx_attr_kind(op_type: str, domain: str, key: str) -> int | None:
    """The ONNX attribute type of an op's attribute from its schema (None when unknown)."""
    spec = registry.get(op_type, domain)
    a = spec.attr_spec(key) if spec is not None else None
    return _KIND_TO_ONNX.get(a.kind) if a is not None else None


class GraphCommand(QUndoCommand):
    """Base class: a command editing the document's graph.

    Subclasses implement ``apply`` and ``revert``. QUndoStack calls ``redo``/``undo`` from C++,
    and a Python exception must not unwind into those C++ frames: PySide 6.11 on CPython 3.11
    segfaults while storing some of them (an exception raised by C code, such as
    ``list.index``, is not normalized and ``PepException_GetArgs`` crashes on it). So the
    exception is handed to the document, which raises it again once the stack call returned
    (``Document.push``/``undo``/``redo``): a bug in a listener shows as a traceback, not a crash.
    """

    def __init__(self, doc: Document, text: str) -> None:
        super().__init__(text)
        self.doc = doc

    def apply(self) -> None:
        """Do the edit (first time and every redo)."""
        raise NotImplementedError

    def revert(self) -> None:
        """Undo the edit."""
        raise NotImplementedError

    def redo(self) -> None:
        self._run(self.apply)

    def undo(self) -> None:
        self._run(self.revert)

    def _run(self, step: Any) -> None:
        try:
            step()
        except BaseException as exc:  # re-raised by the document, outside Qt's C++ frames
            self.doc.command_failed(self, exc)


class AddNodeCommand(GraphCommand):
    """Insert a new node (``Graph.make_node``); undo removes it, redo puts the same node back."""

    def __init__(self, doc: Document, op_type: str, domain: str = "", attrs: dict[str, Any] | None = None,
                 inputs: Sequence[Value | None] = (), n_outputs: int | None = None, name: str = "",
                 pos: QPointF | None = None) -> None:
        super().__init__(doc, f"Add {op_type}")
        spec = registry.get(op_type, domain)
        self.op_type = op_type
        self.domain = domain
        self.attrs = default_attrs(op_type, domain) if attrs is None else dict(attrs)
        self.inputs = list(inputs)
        required_outs = [o for o in spec.outputs if not o.optional] if spec is not None else []
        self.n_outputs = n_outputs or max(len(required_outs), 1)
        self.name = name
        self.pos = pos
        self.node: Node | None = None
        self.position = -1

    def apply(self) -> None:
        g = self.doc.graph
        self.doc.place_next_at(self.pos)
        if self.node is None:
            self.node = g.make_node(self.op_type, self.inputs, self.n_outputs, self.attrs, name=self.name,
                                    domain=self.domain)
            for key in self.attrs:
                kind = onnx_attr_kind(self.op_type, self.domain, key)
                if kind is not None:
                    self.node.attr_types[key] = kind
            self.position = g.node_index(self.node)
        else:
            g.reinsert_node(self.node, self.position)

    def revert(self) -> None:
        assert self.node is not None
        self.doc.graph.remove_node(self.node)


class RemoveNodeCommand(GraphCommand):
    """Take a node out (``Graph.remove_node``); undo reinserts it at its old place."""

    def __init__(self, doc: Document, node: Node) -> None:
        super().__init__(doc, f"Delete {node.name}")
        self.node = node
        self.position = -1

    def apply(self) -> None:
        g = self.doc.graph
        self.position = g.node_index(self.node)
        g.remove_node(self.node)

    def revert(self) -> None:
        self.doc.graph.reinsert_node(self.node, self.position)


class SetInputCommand(GraphCommand):
    """Connect (or with None, disconnect) input ``index`` of a node (``Node.set_input``)."""

    def __init__(self, doc: Document, node: Node, index: int, value: Value | None) -> None:
        text = f"Connect {value.name} to {node.name}" if value is not None else f"Disconnect {node.name} input {index}"
        super().__init__(doc, text)
        self.node = node
        self.index = index
        self.value = value
        self.before: tuple[Value | None, ...] = ()

    def apply(self) -> None:
        self.before = self.node.inputs
        self.node.set_input(self.index, self.value)

    def revert(self) -> None:
        if self.index >= len(self.before):
            self.node.set_inputs(self.before)  # also drops the slots redo appended
        else:
            self.node.set_input(self.index, self.before[self.index])


class SetAttrCommand(GraphCommand):
    """Change (or with None, delete) one attribute (``Node.set_attr``)."""

    def __init__(self, doc: Document, node: Node, key: str, value: Any) -> None:
        super().__init__(doc, f"Set {node.name}.{key}")
        self.node = node
        self.key = key
        self.value = value
        self.old = node.attrs.get(key)
        self.old_kind = node.attr_types.get(key)
        self.kind = self.old_kind if self.old_kind is not None else onnx_attr_kind(node.op_type, node.domain, key)

    def apply(self) -> None:
        self.node.set_attr(self.key, self.value, self.kind)

    def revert(self) -> None:
        self.node.set_attr(self.key, self.old, self.old_kind)


class SetPinCommand(GraphCommand):
    """Pin a node to "npu" or "cpu" (or unpin with None): ``meta["pin"]`` that placement reads."""

    def __init__(self, doc: Document, node: Node, device: str | None) -> None:
        super().__init__(doc, f"Pin {node.name} to {device.upper()}" if device else f"Unpin {node.name}")
        self.node = node
        self.device = device
        self.old = node.meta.get("pin")

    def apply(self) -> None:
        self.node.set_meta("pin", self.device)

    def revert(self) -> None:
        self.node.set_meta("pin", self.old)


class SetInputTypeCommand(GraphCommand):
    """Change the declared shape/dtype of a graph input."""

    def __init__(self, doc: Document, value: Value, new_type: TensorType) -> None:
        super().__init__(doc, f"Set shape of {value.name}")
        self.value = value
        self.new_type = new_type
        self.old_type = value.type

    def apply(self) -> None:
        self.value.set_type(self.new_type)

    def revert(self) -> None:
        self.value.set_type(self.old_type)


class SetTensorMethodCommand(QUndoCommand):
    """Calibrate one tensor with another method (an analysis setting, not a graph edit): on the
    undo stack like every change that reaches the compile options and the exported bundle."""

    def __init__(self, controller: Any, tensor: str, method: str | None, old: str | None) -> None:
        super().__init__(f"Calibrate {tensor} with {method}" if method else f"Calibrate {tensor} as the rest")
        self.controller, self.tensor, self.method, self.old = controller, tensor, method, old

    def redo(self) -> None:
        self.controller.set_tensor_method(self.tensor, self.method)

    def undo(self) -> None:
        self.controller.set_tensor_method(self.tensor, self.old)


class MoveItemsCommand(GraphCommand):
    """Move canvas items (view state: positions live in the scene, not in the graph)."""

    def __init__(self, doc: Document, moves: dict[Any, tuple[QPointF, QPointF]]) -> None:
        super().__init__(doc, "Move" if len(moves) != 1 else "Move node")
        self.moves = dict(moves)

    def id(self) -> int:
        return MOVE_ID

    def apply(self) -> None:
        self.doc.positions_requested.emit({k: new for k, (_, new) in self.moves.items()})

    def revert(self) -> None:
        self.doc.positions_requested.emit({k: old for k, (old, _) in self.moves.items()})


# -- compound edits ----------------------------------------------------------------------------
def reaches(start: Node, goal: Node) -> bool:
    """True when ``goal`` is ``start`` or downstream of it (connecting would make a cycle)."""
    seen = {id(start)}
    stack = [start]
    while stack:
        n = stack.pop()
        if n is goal:
            return True
        for v in n.outputs:
            if v is None:
                continue
            for user, _ in v.uses():
                if id(user) not in seen:
                    seen.add(id(user))
                    stack.append(user)
    return False


def connect(doc: Document, value: Value, node: Node, index: int) -> str | None:
    """Connect ``value`` to input ``index`` of ``node``; returns why not, or None when done."""
    producer = value.producer()
    if producer is not None and reaches(node, producer):
        return f"connecting {value.name} to {node.name} would create a cycle"
    if node.input(index) is value:
        return None
    doc.push(SetInputCommand(doc, node, index, value))
    return None


def delete_nodes(doc: Document, nodes: Iterable[Node]) -> None:
    """Delete nodes with their edges, as one macro (undo restores the edges exactly)."""
    doomed = {id(n): n for n in nodes if n.graph is doc.graph}
    if not doomed:
        return
    order = [n for n in _safe_order(doc) if id(n) in doomed]
    stack = doc.undo_stack
    stack.beginMacro(f"Delete {style.count(len(order), 'node')}")
    try:
        for n in order:
            for v in n.outputs:
                if v is None:
                    continue
                for user, idx in v.uses():
                    if id(user) not in doomed:
                        doc.push(SetInputCommand(doc, user, idx, None))
        for n in reversed(order):  # consumers first, so each removal drops its values cleanly
            doc.push(RemoveNodeCommand(doc, n))
    finally:
        stack.endMacro()


def _safe_order(doc: Document) -> list[Node]:
    try:
        return doc.graph.toposort()
    except ValueError:
        return list(doc.graph.nodes)


def delete_edges(doc: Document, edges: Iterable[tuple[Node, int]]) -> None:
    """Disconnect input slots (node, index), as one macro."""
    edges = [(n, i) for n, i in edges if n.input(i) is not None]
    if not edges:
        return
    doc.undo_stack.beginMacro(f"Delete {style.count(len(edges), 'edge')}")
    try:
        for n, i in edges:
            doc.push(SetInputCommand(doc, n, i, None))
    finally:
        doc.undo_stack.endMacro()


@dataclass
class ClipNode:
    """A copied node: op, attributes, and where each input came from."""

    op_type: str
    domain: str
    attrs: dict[str, Any]
    n_outputs: int
    # per input: None, ("const", Value) for an initializer, ("node", k, out_index) for a copied node
    inputs: list[Any]
    offset: QPointF = field(default_factory=QPointF)


def copy_nodes(nodes: Sequence[Node], positions: dict[int, QPointF]) -> list[ClipNode]:
    """What the clipboard holds for a selection: internal edges and constant inputs survive."""
    if nodes and nodes[0].graph is not None:
        try:
            order = {id(n): i for i, n in enumerate(nodes[0].graph.toposort())}
        except ValueError:
            order = {id(n): i for i, n in enumerate(nodes[0].graph.nodes)}
        nodes = sorted(nodes, key=lambda n: order.get(id(n), 0))
    index = {id(n): k for k, n in enumerate(nodes)}
    origin = None
    for n in nodes:
        p = positions.get(id(n))
        if p is not None and (origin is None or p.y() < origin.y() or (p.y() == origin.y() and p.x() < origin.x())):
            origin = p
    origin = origin or QPointF()
    clip = []
    for n in nodes:
        ins: list[Any] = []
        for v in n.inputs:
            if v is None:
                ins.append(None)
            elif v.producer() is not None and id(v.producer()) in index:
                ins.append(("node", index[id(v.producer())], v.producer_index()))
            elif v.const is not None and v.producer() is None:
                ins.append(("const", v))
            else:
                ins.append(None)
        clip.append(ClipNode(n.op_type, n.domain, dict(n.attrs), len(n.outputs), ins,
                             positions.get(id(n), origin) - origin))
    return clip


def paste_nodes(doc: Document, clip: Sequence[ClipNode], at: QPointF) -> list[Node]:
    """Insert copies of clipboard nodes at ``at`` as one macro; returns the new nodes."""
    if not clip:
        return []
    stack = doc.undo_stack
    adds: list[AddNodeCommand] = []
    stack.beginMacro(f"Paste {style.count(len(clip), 'node')}")
    try:
        for c in clip:
            consts = [i[1] if isinstance(i, tuple) and i[0] == "const" and i[1].graph is doc.graph else None
                      for i in c.inputs]
            while consts and consts[-1] is None:
                consts.pop()
            cmd = AddNodeCommand(doc, c.op_type, c.domain, c.attrs, consts, c.n_outputs, pos=at + c.offset)
            doc.push(cmd)
            adds.append(cmd)
        for cmd, c in zip(adds, clip):
            for idx, src in enumerate(c.inputs):
                if isinstance(src, tuple) and src[0] == "node":
                    producer = adds[src[1]].node
                    assert producer is not None
                    assert cmd.node is not None
                    value = producer.output(src[2])
                    if value is not None:
                        doc.push(SetInputCommand(doc, cmd.node, idx, value))
    finally:
        stack.endMacro()
    return [cmd.node for cmd in adds if cmd.node is not None]
