"""Node items: one per IR node (op type, name, key attributes, ports, placement colour) and one
per graph input or output. Items hold a reference to the IR object and read it when painting;
they never write to it and keep no copy of it.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QFont, QFontMetricsF, QPainter, QPainterPath, QPen
from PySide6.QtWidgets import QGraphicsItem, QStyleOptionGraphicsItem

from app import style
from app.canvas.port_item import PortItem, port_x
from nodes import registry

if TYPE_CHECKING:
    from engine.ir.graph import Node, Value



def canvas_font(point_size: float, bold: bool = False) -> QFont:
    """A font for text drawn on the canvas (call it once a QApplication exists)."""
    f = style.font(point_size, bold)
    f.setHintingPreference(QFont.HintingPreference.PreferNoHinting)
    return f


class CanvasFonts:
    """The canvas fonts and their metrics, made on first use: a QFont made before the
    QApplication exists (at import time) measures text with another font than the one that
    is painted, and every elided label then overflows its node."""

    def __init__(self) -> None:
        self.op = canvas_font(10.5, bold=True)
        self.op_narrow = canvas_font(8.5, bold=True)  # long op types (BatchNormalization) fit
        self.small = canvas_font(8.0)
        self.badge = canvas_font(7.0, bold=True)
        self.fm_op = QFontMetricsF(self.op)
        self.fm_op_narrow = QFontMetricsF(self.op_narrow)
        self.fm_small = QFontMetricsF(self.small)


@functools.cache
def fonts() -> CanvasFonts:
    """The canvas fonts (see CanvasFonts)."""
    return CanvasFonts()


_RADIUS = 7.0
# Combining Qt flags costs a Python enum operation; made once, not per item.
_MOVABLE = QGraphicsItem.GraphicsItemFlag.ItemIsSelectable | QGraphicsItem.GraphicsItemFlag.ItemIsMovable


def _fmt(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"tensor{list(value.shape)}" if value.size > 4 else _fmt(value.reshape(-1).tolist())
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        if len(value) > 6:
            return "[" + ",".join(_fmt(v) for v in value[:5]) + ",…]"
        return "[" + ",".join(_fmt(v) for v in value) + "]"
    if hasattr(value, "nodes") and hasattr(value, "inputs"):
        return "graph"
    return str(value)


def _badge_width(status: Any, device: str) -> float:
    return 40.0 if status is not None and status.pinned else 30.0


def key_attr_parts(node: Node) -> list[str]:
    """The attributes a reader wants at a glance (kernel, stride, group, axis, perm ...)."""
    a = node.attrs
    parts: list[str] = []
    if "kernel_shape" in a:
        parts.append("×".join(str(k) for k in a["kernel_shape"]))
    if "strides" in a and any(int(s) != 1 for s in a["strides"]):
        parts.append("/" + "×".join(str(s) for s in a["strides"]))
    if int(a.get("group", 1) or 1) != 1:
        parts.append(f"g{a['group']}")
    if "dilations" in a and any(int(d) != 1 for d in a["dilations"]):
        parts.append("d" + "×".join(str(d) for d in a["dilations"]))
    if parts:
        return parts
    skip = {"pads", "auto_pad", "kernel_shape", "strides", "group", "dilations"}
    for k in sorted(a):
        if k in skip or len(parts) >= 2:
            continue
        parts.append(f"{k}={_fmt(a[k])}")
    return parts


def detail_line(node: Node, room: float) -> str:
    """Key attributes and the output shape within ``room`` pixels: the shape always shows,
    attributes only as many as fit whole (a cut-off "epsilon=…" says nothing)."""
    fm = fonts().fm_small
    out = node.output(0)
    parts = key_attr_parts(node)
    shape = style.shape_text(out.type.shape) if out is not None and out.type.shape is not None else ""
    if not shape:
        return fm.elidedText(" ".join(parts), Qt.TextElideMode.ElideRight, room)
    tail = f"→ {shape}"
    while parts:
        line = f"{' '.join(parts)}  {tail}"
        if fm.horizontalAdvance(line) <= room:
            return line
        parts.pop()
    return fm.elidedText(tail, Qt.TextElideMode.ElideRight, room)


def node_port_counts(node: Node) -> tuple[int, int]:
    """Input and output ports a node shows: its slots, the schema's fixed inputs, and one
    free slot more for variadic ops (Concat, Sum ...)."""
    spec = registry.get(node.op_type, node.domain)
    n_in = len(node.inputs)
    n_out = len(node.outputs)
    if spec is not None:
        fixed = [p for p in spec.inputs if not p.variadic]
        if any(p.variadic for p in spec.inputs):
            n_in = max(n_in + 1, len(spec.inputs) + 1)
        else:
            n_in = max(n_in, len(fixed))
    return n_in, max(n_out, 1)


def is_constant_input(v: Value | None) -> bool:
    """True for an initializer (a weight): drawn as a small square, not as an edge."""
    return v is not None and v.const is not None and v.producer() is None


def input_port_xs(node: Node, width: float, n_in: int) -> list[float]:
    """x of each of ``n_in`` input ports: data inputs (connected, or required and still
    free) spread over the top edge (one: centred); constant inputs (weights) and free optional
    slots (a Conv's bias, Concat's next input) sit in the top-right corner, so the data flow
    stays straight. The canvas items and the layout (snapshot) both use this."""
    spec = registry.get(node.op_type, node.domain)
    schema = spec.inputs if spec is not None else ()
    aside = []
    for i in range(n_in):
        v = node.input(i)
        if v is None:
            p = schema[min(i, len(schema) - 1)] if schema else None
            aside.append(p is None or p.optional or (p.variadic and i >= len(node.inputs)))
        else:
            aside.append(is_constant_input(v))
    data = [i for i in range(n_in) if not aside[i]]
    consts = [i for i in range(n_in) if aside[i]]
    xs = [0.0] * n_in
    for k, i in enumerate(data):
        xs[i] = port_x(width, len(data), k)
    for k, i in enumerate(consts):
        xs[i] = width - 12.0 - 11.0 * (len(consts) - 1 - k)
    return xs


def value_label(v: Value | None) -> str:
    """``name: float32[1x3x224x224]`` (what an edge says on hover)."""
    if v is None:
        return "(not connected)"
    return f"{v.name}: {v.type}"


class _PortedItem(QGraphicsItem):
    """Common geometry of items with ports on the top (inputs) and bottom (outputs) edges."""

    width = style.NODE_WIDTH
    height = style.NODE_HEIGHT

    def __init__(self) -> None:
        super().__init__()
        self._in_ports: list[PortItem] = []
        self._out_ports: list[PortItem] = []
        self._counts: tuple[int, int] | None = None
        self._counts_for: Any = None
        self._input_xs: list[float] | None = None
        self._input_xs_for: Any = None
        self._ports_made = False

    # Port items are created on first hover (or first use): a 50,000-node graph needs none of
    # them to be drawn, and each QGraphicsItem costs time to create. Ports are painted by the
    # node itself; the items add hover feedback, tooltips and the start of connection drags.
    @property
    def in_ports(self) -> list[PortItem]:
        self.ensure_ports()
        return self._in_ports

    @property
    def out_ports(self) -> list[PortItem]:
        self.ensure_ports()
        return self._out_ports

    def ensure_ports(self) -> None:
        if not self._ports_made:
            self._ports_made = True
            self.sync_ports()

    def counts_key(self) -> Any:
        """What the port counts depend on; the cached counts are recomputed when it changes."""
        return None

    def counts(self) -> tuple[int, int]:
        """port_counts, cached while ``counts_key()`` is unchanged.

        The cache must never go stale: an edge to an input slot that ``Node.set_input`` just
        appended asks for that port's position before anything else refreshed the item."""
        key = self.counts_key()
        if self._counts is None or key != self._counts_for:
            self._counts = self.port_counts()
            self._counts_for = key
        return self._counts

    def boundingRect(self) -> QRectF:
        r = self.__dict__.get("_bounds")
        if r is None:
            r = self._bounds = QRectF(-3, -3, self.width + 6, self.height + 6)
        return r

    def shape(self) -> QPainterPath:
        p = QPainterPath()
        p.addRoundedRect(QRectF(0, 0, self.width, self.height), _RADIUS, _RADIUS)
        return p

    def port_counts(self) -> tuple[int, int]:
        return 0, 0

    def sync_ports(self) -> None:
        """Create or drop port items to match the current number of inputs and outputs."""
        self._counts = None
        self._input_xs = None
        if not self._ports_made:
            return
        n_in, n_out = self.counts()
        for ports, n, is_input in ((self._in_ports, n_in, True), (self._out_ports, n_out, False)):
            while len(ports) > n:
                p = ports.pop()
                p.setParentItem(None)
                if p.scene() is not None:
                    p.scene().removeItem(p)
            while len(ports) < n:
                ports.append(PortItem(self, is_input, len(ports)))
            for p in ports:
                p.setPos(self.port_pos(is_input, p.index))

    def port_pos(self, is_input: bool, index: int) -> QPointF:
        """Port position in item coordinates."""
        n_in, n_out = self.counts()
        n = n_in if is_input else n_out
        return QPointF(port_x(self.width, n, index), 0.0 if is_input else self.height)

    def port_scene_pos(self, is_input: bool, index: int) -> QPointF:
        """Port position in scene coordinates (edges attach here)."""
        return self.mapToScene(self.port_pos(is_input, index))

    def input_is_constant(self, index: int) -> bool:
        return False

    def port_tooltip(self, is_input: bool, index: int) -> str:
        return ""

    def hoverEnterEvent(self, event) -> None:
        self.ensure_ports()
        super().hoverEnterEvent(event)

    def paint_ports(self, painter: QPainter) -> None:
        """Port markers (circles for data, small squares for constants) drawn by the node."""
        n_in, n_out = self.counts()
        painter.setPen(QPen(style.PORT_BORDER, 1.1))
        r = style.PORT_RADIUS
        for i, x in enumerate(self.input_xs(n_in)):
            if self.input_is_constant(i):
                painter.setBrush(QBrush(style.CONST_PORT))
                painter.drawRect(QRectF(x - r * 0.8, -r * 0.8, 1.6 * r, 1.6 * r))
            else:
                painter.setBrush(QBrush(style.PORT_FILL))
                painter.drawEllipse(QPointF(x, 0.0), r, r)
        painter.setBrush(QBrush(style.PORT_FILL))
        for i in range(n_out):
            painter.drawEllipse(QPointF(port_x(self.width, n_out, i), self.height), r, r)

    def input_xs(self, n_in: int) -> list[float]:
        """x of every input port (what ``port_pos`` gives one by one)."""
        return [port_x(self.width, n_in, i) for i in range(n_in)]


class NodeItem(_PortedItem):
    """An op on the canvas, filled by placement (NPU, CPU fallback, not placed)."""

    kind = "node"

    def __init__(self, node: Node) -> None:
        super().__init__()
        self.node = node
        self.setFlags(_MOVABLE)
        self.setAcceptHoverEvents(True)
        self.setZValue(1)
        self.group = None  # a GroupItem when the node is a fused group

    @property
    def key(self) -> int:
        return id(self.node)

    def counts_key(self) -> Any:
        return len(self.node.inputs), len(self.node.outputs)

    def port_counts(self) -> tuple[int, int]:
        return node_port_counts(self.node)

    def port_pos(self, is_input: bool, index: int) -> QPointF:
        """See ``input_port_xs`` (inputs) and ``port_x`` (outputs)."""
        if not is_input:
            return super().port_pos(is_input, index)
        n_in = max(self.counts()[0], index + 1)
        return QPointF(self.input_xs(n_in)[index], 0.0)

    def input_xs(self, n_in: int) -> list[float]:
        # Cached until the inputs change (the scene calls sync_ports on every EdgeChanged).
        cached = self._input_xs
        if cached is None or len(cached) != n_in or self._input_xs_for != self._counts_for:
            cached = self._input_xs = input_port_xs(self.node, self.width, n_in)
            self._input_xs_for = self._counts_for
        return cached

    def input_is_constant(self, index: int) -> bool:
        return is_constant_input(self.node.input(index))

    def port_tooltip(self, is_input: bool, index: int) -> str:
        node = self.node
        spec = registry.get(node.op_type, node.domain)
        ports = (spec.inputs if is_input else spec.outputs) if spec is not None else ()
        pname = ports[min(index, len(ports) - 1)].name if ports else ("in" if is_input else "out")
        v = node.input(index) if is_input else node.output(index)
        what = "constant " if is_input and self.input_is_constant(index) else ""
        return f"{'input' if is_input else 'output'} {index} ({pname}): {what}{value_label(v)}"

    def _status(self):
        scene = self.scene()
        return scene.status_of(self.node) if scene is not None and hasattr(scene, "status_of") else None

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget=None) -> None:
        lod = option.levelOfDetailFromTransform(painter.worldTransform())  # type: ignore[attr-defined]
        status = self._status()
        device = status.device if status is not None else "unplaced"
        errors = status.errors if status is not None else ()
        strong, light = style.PLACEMENT_COLORS.get(device, style.PLACEMENT_COLORS["unplaced"])
        rect = QRectF(0, 0, self.width, self.height)
        selected = self.isSelected()
        if lod < 0.3:
            painter.setPen(QPen(style.SELECTION if selected else (style.ERROR if errors else strong), 0))
            painter.setBrush(QBrush(strong if not selected else style.SELECTION))
            painter.drawRect(rect)
            return
        border = style.SELECTION if selected else (style.ERROR if errors else strong.darker(115))
        painter.setPen(QPen(border, 2.4 if (selected or errors) else 1.1))
        painter.setBrush(QBrush(light))
        painter.drawRoundedRect(rect, _RADIUS, _RADIUS)
        # Placement bar on the left.
        bar = QPainterPath()
        bar.addRoundedRect(QRectF(0.6, 0.6, 7, self.height - 1.2), 3, 3)
        painter.fillPath(bar, strong)
        if lod >= 0.45:
            self.paint_ports(painter)
        painter.setPen(style.TEXT)
        painter.setFont(fonts().op)
        op = self.node.op_type if not self.node.domain else f"{self.node.domain}.{self.node.op_type}"
        if lod < 0.5:
            painter.drawText(rect.adjusted(10, 0, -4, 0), Qt.AlignmentFlag.AlignCenter, op)
            return
        room = self.width - 22 - (_badge_width(status, device) if device not in style.UNBADGED else 0)
        fm = fonts().fm_op
        if fm.horizontalAdvance(op) > room:
            painter.setFont(fonts().op_narrow)
            fm = fonts().fm_op_narrow
        painter.drawText(QRectF(14, 5, room, 18), Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                         fm.elidedText(op, Qt.TextElideMode.ElideRight, room))
        self._paint_badge(painter, device, status)
        painter.setFont(fonts().small)
        painter.setPen(style.TEXT_DIM)
        # Text is measured at 100% but drawn scaled, where hinting widens glyphs: keep a margin.
        inner = self.width - 26
        # Names are paths ("/features/features.0/Conv"): their end says most.
        painter.drawText(QRectF(14, 23, inner, 14), Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                         fonts().fm_small.elidedText(self.node.name, Qt.TextElideMode.ElideLeft, inner))
        painter.setPen(style.TEXT)
        painter.drawText(QRectF(14, 37, inner, 14), Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                         detail_line(self.node, inner))
        if errors:
            painter.setBrush(QBrush(style.ERROR))
            painter.setPen(Qt.PenStyle.NoPen)
            painter.drawEllipse(QPointF(self.width - 2, 2), 8, 8)
            painter.setPen(QColor("white"))
            painter.setFont(fonts().op)
            painter.drawText(QRectF(self.width - 10, -6, 16, 16), Qt.AlignmentFlag.AlignCenter, "!")

    def _paint_badge(self, painter: QPainter, device: str, status) -> None:
        if device in style.UNBADGED:
            return
        strong, _ = style.PLACEMENT_COLORS[device]
        text = device.upper() + (" ⚲" if status is not None and status.pinned else "")
        w = _badge_width(status, device)
        r = QRectF(self.width - w - 6, 6, w, 14)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(QBrush(strong))
        painter.drawRoundedRect(r, 7, 7)
        painter.setPen(QColor("white"))
        painter.setFont(fonts().badge)
        painter.drawText(r, Qt.AlignmentFlag.AlignCenter, text)

    def tooltip_text(self) -> str:
        node = self.node
        lines = [f"<b>{node.op_type}</b> {node.name}"]
        status = self._status()
        if status is not None:
            label = {"npu": "runs on the NPU", "cpu": "falls back to the CPU", "unplaced": "not placed yet",
                     "removed": "optimized away: it does not run"}
            lines.append(label.get(status.device, status.device) + (" (pinned)" if status.pinned else ""))
            if status.reason:
                lines.append(f"<i>{status.reason}</i>")
            for e in status.errors:
                lines.append(f"<span style='color:#c0392b'>⚠ {e}</span>")
        for k in sorted(node.attrs):
            lines.append(f"{k} = {_fmt(node.attrs[k])}")
        for i, v in enumerate(node.outputs):
            lines.append(f"out {i}: {value_label(v)}")
        return "<br>".join(lines)

    def hoverEnterEvent(self, event) -> None:
        self.setToolTip(self.tooltip_text())
        super().hoverEnterEvent(event)  # creates the port items


class IOItem(_PortedItem):
    """A graph input (one output port) or graph output (one input port), drawn as a pill."""

    width = style.IO_WIDTH
    height = style.IO_HEIGHT

    def __init__(self, is_input: bool, index: int, value: Value) -> None:
        super().__init__()
        self.is_graph_input = is_input
        self.index = index
        self.value = value
        self.kind = "input" if is_input else "output"
        self.setFlags(_MOVABLE)
        self.setAcceptHoverEvents(True)
        self.setZValue(1)

    @property
    def key(self) -> tuple[str, Any]:
        return ("in", self.value.name) if self.is_graph_input else ("out", self.index)

    def port_counts(self) -> tuple[int, int]:
        return (0, 1) if self.is_graph_input else (1, 0)

    def port_tooltip(self, is_input: bool, index: int) -> str:
        return value_label(self.value)

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget=None) -> None:
        lod = option.levelOfDetailFromTransform(painter.worldTransform())  # type: ignore[attr-defined]
        rect = QRectF(0, 0, self.width, self.height)
        painter.setPen(QPen(style.SELECTION if self.isSelected() else style.IO_BORDER, 1.4))
        painter.setBrush(QBrush(style.IO_FILL))
        painter.drawRoundedRect(rect, self.height / 2, self.height / 2)
        if lod < 0.45:
            return
        self.paint_ports(painter)
        painter.setPen(style.TEXT)
        painter.setFont(fonts().small)
        head = ("input " if self.is_graph_input else "output ") + self.value.name
        painter.drawText(QRectF(10, 3, self.width - 20, 14), Qt.AlignmentFlag.AlignCenter,
                         fonts().fm_small.elidedText(head, Qt.TextElideMode.ElideMiddle, self.width - 20))
        painter.setPen(style.TEXT_DIM)
        painter.drawText(QRectF(10, 16, self.width - 20, 14), Qt.AlignmentFlag.AlignCenter,
                         fonts().fm_small.elidedText(style.type_text(self.value.type), Qt.TextElideMode.ElideRight,
                                                              self.width - 20))
