"""The inspector: the selected node's attributes as widgets generated from its OpSpec schema,
its placement and problems, and the graph inputs' shapes. Values are read from the model each
time the panel refreshes; an edit becomes a command, and an invalid value is refused with a
message instead of reaching the graph."""

from __future__ import annotations

from typing import Any

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QDockWidget,
    QFormLayout,
    QLabel,
    QLineEdit,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app import commands, style
from app.document import Document
from engine.ir.graph import Node, Value
from nodes import registry
from nodes.spec import REQUIRED, AttrSpec
from nodes.types import TensorType, dtype_name

_DTYPES = ["float32", "float16", "int8", "uint8", "int16", "int32", "int64", "bool", "float64"]


class AttrValueError(ValueError):
    """Text that is not a valid value for an attribute (the message says what is expected)."""


def parse_attr(kind: str, text: str, choices: tuple[Any, ...] | None = None) -> Any:
    """Parse an inspector text field into an attribute value of ``kind`` (None: unset)."""
    t = text.strip()
    if not t:
        return None
    try:
        if kind == "int":
            value: Any = int(t)
        elif kind == "float":
            value = float(t)
        elif kind == "string":
            value = t
        elif kind in ("ints", "floats", "strings"):
            parts = [p.strip() for p in t.strip("[]()").replace(";", ",").split(",") if p.strip()]
            conv = {"ints": int, "floats": float, "strings": str}[kind]
            value = [conv(p) for p in parts]
        else:
            raise AttrValueError(f"{kind} attributes cannot be edited here")
    except ValueError as exc:
        if isinstance(exc, AttrValueError):
            raise
        what = {"int": "an integer", "float": "a number", "ints": "integers separated by commas",
                "floats": "numbers separated by commas"}.get(kind, kind)
        raise AttrValueError(f"{t!r} is not {what}") from None
    if choices and value not in choices:
        raise AttrValueError(f"{value!r} is not one of {', '.join(map(str, choices))}")
    return value


def format_attr(value: Any) -> str:
    """The text an attribute value is shown as."""
    if value is None:
        return ""
    if isinstance(value, np.ndarray):
        return f"tensor {value.dtype}{list(value.shape)}"
    if isinstance(value, (list, tuple)):
        return ", ".join(format_attr(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def parse_shape(text: str) -> tuple[int | str, ...]:
    """``1, 3, 224, 224`` (names allowed for symbolic dims) -> a shape tuple."""
    dims: list[int | str] = []
    for p in text.strip().strip("[]()").replace("x", ",").split(","):
        p = p.strip()
        if not p:
            continue
        if p.lstrip("-").isdigit():
            d = int(p)
            if d <= 0:
                raise AttrValueError(f"dimension {d} must be positive")
            dims.append(d)
        elif p.isidentifier():
            dims.append(p)
        else:
            raise AttrValueError(f"{p!r} is neither a size nor a dimension name")
    return tuple(dims)


def _wrapping_label(text: str) -> QLabel:
    """A label that wraps, also inside long paths ("/features/features.0/Conv" has no spaces):
    a long node or tensor name must not widen the Inspector past its dock (it was cut off)."""
    label = QLabel(text.replace("/", "/\u200b").replace(".", ".\u200b").replace("_", "_\u200b"))
    label.setWordWrap(True)
    label.setToolTip(text)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


class InspectorPanel(QDockWidget):
    """Dock showing and editing the selected node (or the graph inputs when none)."""

    def __init__(self, parent=None) -> None:
        super().__init__("Inspector", parent)
        self.setObjectName("InspectorPanel")
        self.doc: Document | None = None
        self.node: Node | None = None
        self.value: Value | None = None
        self.fields: dict[str, QLineEdit | QComboBox] = {}
        self.error = QLabel()
        self.error.setStyleSheet("color: #c0392b;")
        self.error.setWordWrap(True)
        self._scroll = QScrollArea(self)
        self._scroll.setWidgetResizable(True)
        self._scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setWidget(self._scroll)
        self._rebuild()

    def set_document(self, doc: Document | None) -> None:
        """Follow another document."""
        if self.doc is not None:
            self.doc.graph_edited.disconnect(self._on_graph_changed)
            self.doc.analysis_changed.disconnect(self._on_graph_changed)
        self.doc = doc
        self.node = None
        self.value = None
        if doc is not None:
            doc.graph_edited.connect(self._on_graph_changed)
            doc.analysis_changed.connect(self._on_graph_changed)
        self._rebuild()

    def show_node(self, node: Node | None) -> None:
        """Inspect ``node`` (None: show the graph inputs)."""
        self.node = node
        self.value = None
        self._rebuild()

    def show_value(self, value: Value | None) -> None:
        """Inspect a graph input or output."""
        self.node = None
        self.value = value
        self._rebuild()

    def _on_graph_changed(self, *args: object) -> None:
        if self.node is not None and self.node.graph is None:
            self.node = None
        focus = self.focusWidget()
        if isinstance(focus, QLineEdit) and focus.isModified():
            return  # do not rebuild under the user's typing
        self._rebuild(keep_error=True)

    # -- building --------------------------------------------------------------------------
    def _rebuild(self, keep_error: bool = False) -> None:
        body = QWidget()
        lay = QVBoxLayout(body)
        form = QFormLayout()
        lay.addLayout(form)
        self.fields = {}
        if not keep_error:
            self.error.setText("")
        doc = self.doc
        if doc is None:
            form.addRow(QLabel("No model open."))
        elif self.node is not None:
            self._node_rows(form, self.node)
        else:
            self._graph_rows(form)
        lay.addWidget(self.error)
        lay.addStretch(1)
        self._scroll.setWidget(body)

    def _node_rows(self, form: QFormLayout, node: Node) -> None:
        assert self.doc is not None
        spec = registry.get(node.op_type, node.domain)
        title = QLabel(f"<b>{node.op_type}</b>")
        form.addRow("Op", title)
        form.addRow("Name", _wrapping_label(node.name))
        status = self.doc.statuses.get(node.name)
        if status is not None:
            where = {"npu": "NPU", "cpu": "CPU fallback", "unplaced": "not placed",
                     "removed": "nowhere (optimized away)"}.get(status.device, status.device)
            label = QLabel(where + (f" — {status.reason}" if status.reason else ""))
            label.setWordWrap(True)
            form.addRow("Runs on", label)
            for e in status.errors:
                w = QLabel(f"⚠ {e}")
                w.setWordWrap(True)
                w.setStyleSheet("color: #c0392b;")
                form.addRow("Problem", w)
        pin = QComboBox()
        pin.addItems(["automatic", "NPU", "CPU"])
        pin.setCurrentIndex({"npu": 1, "cpu": 2}.get(node.meta.get("pin"), 0))
        pin.currentIndexChanged.connect(lambda i: self._on_pin_changed(node, i))
        self.fields["@pin"] = pin
        form.addRow("Pin", pin)
        schema: list[AttrSpec] = list(spec.attrs) if spec is not None else []
        known = {a.name for a in schema}
        for a in schema:
            self._attr_row(form, node, a.name, a.kind, a.choices, a.doc, a.default)
        for key in sorted(node.attrs):
            if key not in known:
                kind = _kind_of(node.attrs[key])
                self._attr_row(form, node, key, kind, None, "not in the op's schema", None)
        for i, v in enumerate(node.outputs):
            out = _wrapping_label(f"{v.name}: {style.type_text(v.type)}" if v is not None else "—")
            out.setToolTip(f"{v.name}: {v.type}" if v is not None else "")
            form.addRow(f"Output {i}", out)

    def _attr_row(self, form: QFormLayout, node: Node, key: str, kind: str, choices, doc: str, default) -> None:
        value = node.attrs.get(key)
        if choices:
            box = QComboBox()
            box.addItems([""] + [str(c) for c in choices])
            box.setCurrentText(format_attr(value))
            box.currentTextChanged.connect(lambda text, k=key, kd=kind, ch=choices: self._commit(node, k, kd, text, ch))
            widget: QLineEdit | QComboBox = box
        else:
            edit = QLineEdit(format_attr(value))
            if value is None and default is not None and default is not REQUIRED:
                edit.setPlaceholderText(f"default {format_attr(default)}")
            elif default is REQUIRED:
                edit.setPlaceholderText("required")
            editable = kind in ("int", "float", "string", "ints", "floats", "strings")
            edit.setReadOnly(not editable)
            edit.editingFinished.connect(lambda k=key, kd=kind, e=edit: self._commit(node, k, kd, e.text(), None, e))
            widget = edit
        widget.setToolTip(doc or "")
        self.fields[key] = widget
        form.addRow(key, widget)

    def _graph_rows(self, form: QFormLayout) -> None:
        assert self.doc is not None
        g = self.doc.graph
        values = [self.value] if self.value is not None else list(g.inputs)
        form.addRow(QLabel(f"<b>{self.doc.title()}</b> — {style.count(len(g.nodes), 'node')}"))
        for v in values:
            is_input = v.is_graph_input
            shape = QLineEdit(", ".join(str(d) if d is not None else "?" for d in (v.type.shape or ())))
            shape.setReadOnly(not is_input)
            shape.editingFinished.connect(lambda val=v, e=shape: self._commit_shape(val, e))
            self.fields[f"shape:{v.name}"] = shape
            form.addRow(f"{v.name} shape", shape)
            dt = QComboBox()
            dt.addItems(_DTYPES)
            dt.setCurrentText(dtype_name(v.type.dtype))
            dt.setEnabled(is_input)
            dt.currentTextChanged.connect(lambda text, val=v: self._commit_dtype(val, text))
            self.fields[f"dtype:{v.name}"] = dt
            form.addRow(f"{v.name} dtype", dt)

    # -- committing edits ------------------------------------------------------------------
    def _refuse(self, message: str) -> None:
        self.error.setText(message)
        if self.doc is not None:
            self.doc.message.emit(message)

    def _commit(self, node: Node, key: str, kind: str, text: str, choices, edit: QLineEdit | None = None) -> None:
        doc = self.doc
        if doc is None or node.graph is not doc.graph:
            return
        try:
            value = parse_attr(kind, text, choices)
            if choices and value is not None and kind == "int":
                value = int(value)
        except AttrValueError as exc:
            self._refuse(f"{node.name}.{key}: {exc}; kept {format_attr(node.attrs.get(key)) or 'unset'}")
            if edit is not None:
                edit.setText(format_attr(node.attrs.get(key)))
            return
        self.error.setText("")
        old = node.attrs.get(key)
        if _equal(old, value):
            return
        doc.push(commands.SetAttrCommand(doc, node, key, value))

    def _commit_shape(self, value: Value, edit: QLineEdit) -> None:
        doc = self.doc
        if doc is None or not value.is_graph_input:
            return
        try:
            shape = parse_shape(edit.text())
        except AttrValueError as exc:
            self._refuse(f"{value.name}: {exc}")
            edit.setText(", ".join(str(d) for d in value.type.shape or ()))
            return
        if value.type.shape is not None and tuple(value.type.shape) == shape:
            return
        doc.push(commands.SetInputTypeCommand(doc, value, TensorType(value.type.dtype, shape)))

    def _commit_dtype(self, value: Value, text: str) -> None:
        doc = self.doc
        if doc is None or not value.is_graph_input or dtype_name(value.type.dtype) == text:
            return
        doc.push(commands.SetInputTypeCommand(doc, value, TensorType(np.dtype(text), value.type.shape)))

    def _on_pin_changed(self, node: Node, index: int) -> None:
        doc = self.doc
        device = {1: "npu", 2: "cpu"}.get(index)
        if doc is None or node.graph is not doc.graph or node.meta.get("pin") == device:
            return
        doc.push(commands.SetPinCommand(doc, node, device))


def _kind_of(value: Any) -> str:
    if isinstance(value, bool | int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        return "ints"
    if isinstance(value, list) and value and all(isinstance(v, float | int) for v in value):
        return "floats"
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return "strings"
    return "other"


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return False
    return a == b and type(a) is type(b)
