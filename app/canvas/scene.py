"""The graph scene: items for the nodes, graph inputs/outputs and edges of one graph.

It observes the graph's events and updates its items; it never edits the graph itself. User
gestures that edit (connecting ports, moving items) go through commands on the document's
undo stack. Items are created in time-sliced chunks so a large graph never freezes the GUI,
a graph too large to itemise gets items only where a view looks (app/canvas/on_demand.py),
and zoomed far out a single overview item replaces thousands of items (level of detail).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QLineF, QPointF, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import QPainterPath, QPen
from PySide6.QtWidgets import (
    QGraphicsItem,
    QGraphicsPathItem,
    QGraphicsScene,
    QGraphicsSceneMouseEvent,
)

from app import commands, style
from app.canvas.edge_item import EdgeItem, EdgeLabelItem, smooth_path
from app.canvas.group_item import GroupItem, provenance_of
from app.canvas.layout import LayoutResult
from app.canvas.node_item import IOItem, NodeItem, _PortedItem
from app.canvas.on_demand import OnDemandItems
from app.canvas.overview_item import OverviewItem
from app.canvas.populate import Populator
from app.canvas.port_item import PORT_HIT, PortItem
from app.canvas.snapshot import GraphSnapshot, routes_by_key
from app.placement import NodeStatus
from app.runtime import collections_paused
from engine.ir.events import (
    EdgeChanged,
    GraphEvent,
    GraphIOChanged,
    NodeAdded,
    NodeChanged,
    NodeRemoved,
)
from engine.ir.graph import Graph, Node, Value

if TYPE_CHECKING:
    from app.document import Document

log = logging.getLogger(__name__)

OVERVIEW_MIN_ITEMS = 600  # below this many nodes every item is always drawn
OVERVIEW_SCALE = 0.28  # zoomed out beyond this, large graphs are drawn by the overview item
SLICE_SECONDS = 0.015  # GUI time per chunk of item creation (other work shares the GIL)
LAZY_MIN_ITEMS = 4000  # from this many layout boxes on, items exist only where a view looks
ITEM_BUDGET = 3000  # on demand: beyond this many node items, those far from every view go
_UNPLACED = NodeStatus()


PORT_SNAP = 12.0  # scene units around the drop point searched for an input port

def _source_key(v: Value) -> Any:
    """The layout key of the item that draws the producer of ``v`` (its node or graph input)."""
    p = v.producer()
    return id(p) if p is not None else ("in", v.name)


class GraphScene(OnDemandItems, QGraphicsScene):
    """Items of one graph; see the module docstring."""

    view_ready = Signal()  # the items the views show exist (the rest are still being made)
    populated = Signal()
    populate_progress = Signal(float, str)
    message = Signal(str)
    relayout_requested = Signal()

    def __init__(self, doc: Document, graph: Graph | None = None, read_only: bool = False,
                 status_of: Callable[[Node], NodeStatus] | None = None) -> None:
        super().__init__()
        self.doc = doc
        self.graph = graph if graph is not None else doc.graph
        self.read_only = read_only
        self._status_fn = status_of
        self.setBackgroundBrush(style.CANVAS_BG)
        self.setItemIndexMethod(QGraphicsScene.ItemIndexMethod.BspTreeIndex)
        self.overview = OverviewItem(self)
        self.addItem(self.overview)
        self.overview.hide()
        self.edge_label = EdgeLabelItem()
        self.addItem(self.edge_label)
        self.node_items: dict[int, NodeItem] = {}
        self.input_items: dict[str, IOItem] = {}
        self.output_items: dict[int, IOItem] = {}
        self.edges: dict[tuple[Any, int], EdgeItem] = {}
        self.expanded: set[int] = set()
        self.overview_mode = False
        self._last_pos: dict[int, QPointF] = {}
        self._drag: tuple[PortItem, QGraphicsPathItem] | None = None
        self._press_pos: dict[Any, QPointF] = {}
        self._populating: Iterator[bool] | None = None
        self._populator: Populator | None = None  # the layout's items still to make
        self._view_ready_sent = False
        self._idle = True  # no populate slice is scheduled (on demand: the views' items exist)
        self._lazy_shown = False
        self._select_pending = False  # Select All also covers the nodes without items yet
        self._pop_context: tuple[list, dict, dict] = ([], {}, {})  # per layout index: node; inputs; routes
        self._stale_items: dict[int, _PortedItem] = {}
        self._kept_selection: list[Any] = []  # selected keys while the overview is shown
        self._bounds: QRectF | None = None  # of the node and IO items (graph_bounds)
        self._unsubscribe = self.graph.events.subscribe(self._on_graph_event)
        self.destroyed.connect(self._unsubscribe)
        if not read_only:
            doc.positions_requested.connect(self.apply_positions)
        doc.analysis_changed.connect(self._on_analysis_changed)

    def detach(self) -> None:
        """Stop observing the graph (before the scene is dropped)."""
        self._unsubscribe()
        self._populating = None
        self._populator = None

    # -- status ----------------------------------------------------------------------------
    def status_of(self, node: Node) -> NodeStatus:
        """Placement and problems of a node, as the document's analysis last found them."""
        if self._status_fn is not None:
            return self._status_fn(node)
        return self.doc.statuses.get(node.name, _UNPLACED)

    def _on_analysis_changed(self, names: object) -> None:
        if names is None or len(names) > 64:  # type: ignore[arg-type]
            # Many items (the first placement colours all): repaint what the views show
            # instead of marking every item dirty (the scene would then ask each one for
            # its bounding rectangle). The views' viewports are marked too: a whole-scene
            # update() alone left nodes painted in their old colours under X (walkthrough on
            # PP-OCRv6 det: Add.0 green after the pin put it on the CPU, until the next paint).
            self.update()
            for view in self.views():
                view.viewport().update()
        else:
            for it in self.node_items.values():
                if it.node.name in names:  # type: ignore[operator]
                    it.update()
        self.overview.invalidate()

    # -- building ----------------------------------------------------------------------------
    def populate(self, snapshot: GraphSnapshot, result: LayoutResult, chunked: bool = True) -> None:
        """Create every item at its laid-out position; in time slices unless ``chunked`` is False.

        Sliced, the items the views show come first (app/canvas/populate.py): ``view_ready``
        fires once they exist, ``populated`` once every item does; a graph of LAZY_MIN_ITEMS
        boxes or more gets items on demand only (app/canvas/on_demand.py): ``populated`` then
        fires once the views' items exist, and panning or zooming makes the others."""
        lazy = chunked and len(snapshot.keys) >= LAZY_MIN_ITEMS
        pop = Populator(snapshot, result, lazy=lazy, version=self.graph.version)
        self._populator = pop
        self._view_ready_sent = self._lazy_shown = False
        keys = snapshot.keys
        nodes = snapshot.nodes
        if len(nodes) != len(keys):  # a snapshot without them: one pass over the graph
            by_id = {id(n): n for n in self.graph.nodes}
            nodes = [None if isinstance(k, tuple) else by_id.get(k) for k in keys]
        routes = result.key_routes if result.key_routes is not None else routes_by_key(snapshot, result)
        self._pop_context = (nodes, {v.name: v for v in self.graph.inputs}, routes)
        # The scene rectangle first: changing it later rebuilds the item index over every item.
        self.setSceneRect(QRectF(0, 0, result.width, result.height).adjusted(-400, -300, 400, 300))
        self._bounds = QRectF(0.0, 0.0, result.width, result.height)  # where the layout puts them
        # On demand the steps never end (the next view may need items): collections are then
        # paused per slice, not for the generator's life.
        steps = self._populate_steps(pop)
        self._populating = steps if lazy else self._guarded(steps)
        if not chunked:
            for _ in self._populating:
                pass
            self._populating = None
            return
        self._schedule_slice()

    def _schedule_slice(self) -> None:
        if self._idle and self._populating is not None:
            self._idle = False
            QTimer.singleShot(0, self._populate_slice)

    def on_view_moved(self) -> None:
        """A view scrolled, zoomed or resized: make the items it now shows (on demand)."""
        pop = self._populator
        if pop is not None and pop.lazy and not self.overview_mode:
            self._schedule_slice()

    def _populate_slice(self) -> None:
        steps, pop = self._populating, self._populator
        if steps is None:
            self._idle = True
            return
        if pop is not None and not self.overview_mode:  # zoomed far out the overview shows it all
            pop.look_at([v.mapToScene(v.viewport().rect()).boundingRect() for v in self.views()])
        end = time.perf_counter() + SLICE_SECONDS
        idle = False
        try:
            with collections_paused():
                while time.perf_counter() < end:
                    if not next(steps):
                        idle = True  # on demand: what the views show exists
                        break
        except StopIteration:
            self._populating = None
            self._idle = True
            return
        finally:
            self._announce_view_ready()
        if idle:
            self._idle = True
            self.trim_items(ITEM_BUDGET)
            if not self._lazy_shown:
                self._lazy_shown = True
                QTimer.singleShot(0, self._announce_shown)  # its listeners get a slice of their own
            return
        QTimer.singleShot(0, self._populate_slice)

    def _announce_shown(self) -> None:
        if self._populator is None or not self._populator.lazy:
            return  # dropped or replaced meanwhile
        self.overview.invalidate()
        self.populate_progress.emit(1.0, "done")
        self.populated.emit()

    def _announce_view_ready(self) -> None:
        pop = self._populator
        if not self._view_ready_sent and (pop is None or not pop.in_view_pending()):
            self._view_ready_sent = True
            self.view_ready.emit()

    def _populate_steps(self, pop: Populator) -> Iterator[bool]:
        """Make the next item per step (True); on demand, False while nothing in view is left."""
        total, made = max(len(pop.snapshot.keys), 1), 0
        while True:
            i = pop.next_index()
            if i is None:
                if not pop.lazy:
                    break
                yield False
                continue
            self._make_index(pop, i)
            made += 1
            if made % 200 == 0 and not pop.lazy:
                self.populate_progress.emit(made / total, "drawing nodes")
            yield True
        self._populator = None
        self._bounds = QRectF(0.0, 0.0, pop.result.width, pop.result.height)
        self.overview.invalidate()
        yield True  # what listens to "populated" (analysis, panels) gets a slice of its own
        self.populate_progress.emit(1.0, "done")
        self.populated.emit()

    def _populate_edge(self, pop: Populator, j: int, routes: dict) -> None:
        """Make edge ``j`` of the layout, its curve as laid out when its source is the one the
        layout drew it from (the graph may have changed meanwhile)."""
        slot = pop.snapshot.slots[j]
        src_key = pop.snapshot.keys[pop.snapshot.data.edges[j][0]]
        if isinstance(slot[0], tuple):
            k = slot[0][1]
            item = self.output_items.get(k)
            v = self.graph.outputs[k] if item is not None and k < len(self.graph.outputs) else None
        else:
            item = self.node_items.get(slot[0])
            v = item.node.input(slot[1]) if item is not None else None
        if v is None:
            return
        u, w = pop.snapshot.data.edges[j]
        ends = (self.item_for_key(src_key), self.item_for_key(pop.snapshot.keys[w]))
        as_laid_out = all(e is not None and e.pos() == QPointF(*self._layout_pos(pop, k))
                          for e, k in zip(ends, (u, w)))  # else (an end moved) the path follows the ports
        paths = {slot: pop.path(j)} if _source_key(v) == src_key and as_laid_out else None
        if isinstance(slot[0], tuple):
            self._set_output_edge(slot[0][1], routes, paths)
        else:
            self._set_edge(item, slot[1], routes, paths)  # type: ignore[arg-type]

    @staticmethod
    def _guarded(steps: Iterator[None]) -> Iterator[None]:
        # No cyclic collections while tens of thousands of items appear (app/runtime.py); the
        # generator's context also ends when an unfinished populate is dropped.
        with collections_paused():
            yield from steps

    @property
    def is_populating(self) -> bool:
        """True while items are still being created (on demand: those the views show)."""
        return self._populating is not None and not (self._idle and self._lazy_shown)

    def apply_layout(self, snapshot: GraphSnapshot, result: LayoutResult) -> None:
        """Move existing items to a new layout (after "Lay out again" or expanding a group)."""
        if self._populator is not None and self._populator.lazy:  # on demand: made again where seen
            self._drop_all_items()
            self.populate(snapshot, result)
            self._lazy_shown = self._view_ready_sent = True  # on screen already: not announced again
            return
        if self._populating is not None:  # the old layout's items first, then they all move
            for _ in self._populating:
                pass
            self._populating = None
        routes = result.key_routes if result.key_routes is not None else routes_by_key(snapshot, result)
        for i, key in enumerate(snapshot.keys):
            item = self.item_for_key(key)
            if item is None:
                continue
            x, y = result.positions[i]
            dx, dy = snapshot.offsets.get(key, (0.0, 0.0))
            item.setPos(x + dx, y + dy)
        for (dst, _idx), e in self.edges.items():
            e.route = list(routes.get((e.source.key, dst), []))  # type: ignore[attr-defined]
            e.refresh()
        self._bounds = None
        self.setSceneRect(self.graph_bounds().adjusted(-400, -300, 400, 300))
        self.overview.invalidate()

    def graph_bounds(self) -> QRectF:
        """The rectangle the node and IO items cover, cached until one appears, goes or moves.

        Cheaper than ``childrenBoundingRect``, which asks every item (edges included) for its
        bounding rectangle through Python, one call per item."""
        if self._bounds is None:
            x0 = y0 = float("inf")
            x1 = y1 = float("-inf")
            for group in (self.node_items, self.input_items, self.output_items):
                for it in group.values():  # type: ignore[attr-defined]
                    p = it.pos()
                    x, y = p.x(), p.y()
                    x0, y0 = min(x0, x), min(y0, y)
                    x1, y1 = max(x1, x + it.width), max(y1, y + it.height)
            pending = self._populator.pending_extent() if self._populator is not None else None
            if pending is not None:  # on demand: where the layout puts the nodes without items
                x0, y0 = min(x0, pending[0]), min(y0, pending[1])
                x1, y1 = max(x1, pending[2]), max(y1, pending[3])
            self._bounds = QRectF(x0, y0, x1 - x0, y1 - y0) if x1 >= x0 else QRectF()
        return QRectF(self._bounds)

    def band_extent(self, top: float, bottom: float) -> tuple[float, float] | None:
        """(left, right) of the node and IO items that start between scene y ``top`` and
        ``bottom`` (the nodes a view of that band shows), or None when it has none."""
        x0, x1 = float("inf"), float("-inf")
        for group in (self.node_items, self.input_items, self.output_items):
            for it in group.values():  # type: ignore[attr-defined]
                p = it.pos()
                if top <= p.y() <= bottom:
                    x0, x1 = min(x0, p.x()), max(x1, p.x() + it.width)
        return (x0, x1) if x1 >= x0 else None

    def _add_graph_item(self, item: QGraphicsItem) -> None:
        # Top-level items, so the scene's index culls them: under a common parent item every
        # frame would ask each of them for its bounding rectangle (a call into Python per item).
        if self.overview_mode:
            item.setVisible(False)
        self.addItem(item)

    def _graph_items(self) -> Iterator[QGraphicsItem]:
        yield from self.node_items.values()
        yield from self.input_items.values()
        yield from self.output_items.values()
        yield from self.edges.values()

    def item_for_key(self, key: Any) -> _PortedItem | None:
        """The item of a layout key (``id(node)``, ``("in", name)`` or ``("out", k)``)."""
        if isinstance(key, tuple):
            return self.input_items.get(key[1]) if key[0] == "in" else self.output_items.get(key[1])
        return self.node_items.get(key)

    def _add_node_item(self, node: Node, pos: QPointF) -> NodeItem:
        item = NodeItem(node)
        if self.read_only:
            item.setFlag(QGraphicsItem.GraphicsItemFlag.ItemIsMovable, False)
        item.edges = []  # type: ignore[attr-defined]
        item.setPos(pos)
        self._add_graph_item(item)
        self.node_items[id(node)] = item
        if self._populator is None:  # while populating the layout's extent holds
            self._bounds = None
        prov = provenance_of(node)
        if prov:
            originals = [(self._original_op(name), name) for name in prov]
            item.group = GroupItem(item, originals)
            if id(node) in self.expanded:
                item.group.expanded = True
        return item

    def _original_op(self, name: str) -> str:
        source = getattr(self.doc, "source_graph", None)
        n = source.node_by_name(name) if source is not None else None
        return n.op_type if n is not None else "?"

    def _add_io_item(self, is_input: bool, key: Any, value: Value, pos: QPointF) -> IOItem:
        item = IOItem(is_input, key if not is_input else 0, value)
        if not is_input:
            item.index = key
        item.edges = []  # type: ignore[attr-defined]
        item.setPos(pos)
        self._add_graph_item(item)
        (self.input_items if is_input else self.output_items)[key] = item  # type: ignore[index]
        if self._populator is None:
            self._bounds = None
        return item

    # -- edges -------------------------------------------------------------------------------
    def _source_of(self, v: Value) -> tuple[_PortedItem, int] | None:
        p = v.producer()
        if p is not None:
            item = self.node_items.get(id(p))
            return (item, v.producer_index()) if item is not None else None
        item = self.input_items.get(v.name)
        return (item, 0) if item is not None else None

    def _drop_edge(self, key: tuple[Any, int]) -> None:
        e = self.edges.pop(key, None)
        if e is None:
            return
        for end in (e.source, e.target):
            lst = getattr(end, "edges", None)
            if lst is not None and e in lst:
                lst.remove(e)
        if self.edge_label.owner is e:
            self.hide_edge_label(e)
        self.removeItem(e)

    def _make_edge(self, key: tuple[Any, int], src: tuple[_PortedItem, int], target: _PortedItem, idx: int,
                   route: list[tuple[float, float]] | None, paths: dict | None = None) -> None:
        e = EdgeItem(src[0], src[1], target, idx, route, paths.get(key) if paths else None)
        e.key = key
        self._add_graph_item(e)
        self.edges[key] = e
        src[0].edges.append(e)  # type: ignore[attr-defined]
        target.edges.append(e)  # type: ignore[attr-defined]

    def _set_edge(self, item: NodeItem, idx: int, routes: dict | None = None, paths: dict | None = None) -> None:
        key = (id(item.node), idx)
        self._drop_edge(key)
        v = item.node.input(idx)
        if v is None:
            return
        src = self._source_of(v)
        if src is None:
            return
        route = (routes or {}).get((src[0].key, id(item.node)))
        self._make_edge(key, src, item, idx, route, paths)

    def _set_output_edge(self, k: int, routes: dict | None = None, paths: dict | None = None) -> None:
        key = (("out", k), 0)
        self._drop_edge(key)
        item = self.output_items.get(k)
        if item is None or k >= len(self.graph.outputs):
            return
        item.value = self.graph.outputs[k]
        src = self._source_of(item.value)
        if src is not None:
            self._make_edge(key, src, item, 0, (routes or {}).get((src[0].key, ("out", k))), paths)

    # -- graph events ------------------------------------------------------------------------
    def _on_graph_event(self, ev: GraphEvent) -> None:
        if self._populating is not None and not isinstance(ev, NodeChanged):
            log.debug("graph changed while populating; event %s applies once items exist", ev)
        if isinstance(ev, EdgeChanged):
            item = self.node_items.get(id(ev.node))
            if item is not None:
                item.sync_ports()  # first: the slot may be new (set_input appends)
                self._set_edge(item, ev.index)
                self._refresh_item(item)
                # Node.set_inputs drops trailing slots after their event: settle once it returns.
                self._stale_items[id(ev.node)] = item
                if len(self._stale_items) == 1:
                    QTimer.singleShot(0, self._settle_items)
        elif isinstance(ev, NodeAdded):
            self._on_node_added(ev.node)
        elif isinstance(ev, NodeRemoved):
            self._on_node_removed(ev.node)
        elif isinstance(ev, NodeChanged):
            item = self.node_items.get(id(ev.node))
            if item is not None:
                item.update()
        elif isinstance(ev, GraphIOChanged):
            for it in self.input_items.values():
                it.update()
            if ev.what == "outputs":
                for k in list(self.output_items):
                    self._set_output_edge(k)
        self.overview.invalidate()

    def _refresh_item(self, item: _PortedItem) -> None:
        item.sync_ports()
        for e in item.edges:  # type: ignore[attr-defined]
            e.refresh()
        item.update()

    def _settle_items(self) -> None:
        stale, self._stale_items = self._stale_items, {}
        for key, item in stale.items():
            if self.node_items.get(key) is item:
                self._refresh_item(item)

    def _on_node_added(self, node: Node) -> None:
        if node.graph is not self.graph or id(node) in self.node_items:
            return
        pos = self.doc.take_pending_position() if not self.read_only else None
        if pos is None:
            pos = self._last_pos.pop(id(node), None)
        if pos is None:
            pos = self.layout_position(id(node))  # on demand: it never had an item
        if pos is None:
            r = self.graph_bounds()
            pos = QPointF(r.right() + 60, r.top() + 40)
        self._connect_all(self._add_node_item(node, pos))
        self._bounds = None  # (on demand the layout's extent holds otherwise)

    def _connect_all(self, item: NodeItem) -> None:
        """Draw every edge of ``item``'s node whose other end has an item."""
        node = item.node
        for idx in range(len(node.inputs)):
            self._set_edge(item, idx)
        for v in node.outputs:
            if v is None:
                continue
            for user, idx in v.uses():
                uitem = self.node_items.get(id(user))
                if uitem is not None:
                    self._set_edge(uitem, idx)
        for k, out in enumerate(self.graph.outputs):
            if out.producer() is node:
                self._set_output_edge(k)

    def _on_node_removed(self, node: Node) -> None:
        item = self.node_items.pop(id(node), None)
        if item is None:
            return
        self._last_pos[id(node)] = item.pos()
        self._bounds = None
        for e in list(item.edges):  # type: ignore[attr-defined]
            self._drop_edge(e.key)
        self.removeItem(item)

    # -- positions (view state, moved by MoveItemsCommand) ------------------------------------
    def apply_positions(self, positions: dict) -> None:
        """Place items at ``positions`` (key -> QPointF)."""
        for key, pos in positions.items():
            item = self.item_for_key(key)
            if item is not None and item.pos() != pos:
                item.setPos(pos)
                self.on_item_moved(item)

    def on_item_moved(self, item: _PortedItem) -> None:
        """Called by an item whose position changed: its edges follow."""
        self._bounds = None
        for e in getattr(item, "edges", ()):
            e.drop_route()
            e.refresh()

    def mousePressEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        # Port items are made on a node's first hover; a press that lands on a port before any
        # hover reached its node (the pointer came from outside the node's outline, where half
        # of each port's hit square lies) must still start a wire, not select the edge below.
        self._ensure_ports_near(event.scenePos(), PORT_HIT)
        if self._select_pending and not event.modifiers() & (Qt.KeyboardModifier.ControlModifier
                                                             | Qt.KeyboardModifier.ShiftModifier):
            hit = self.itemAt(event.scenePos(), self.views()[0].transform()) if self.views() else None
            if hit is None or not hit.isSelected():  # a click elsewhere ends Select All
                self._select_pending = False
        super().mousePressEvent(event)

    def _ensure_ports_near(self, pos: QPointF, radius: float) -> None:
        """Make the port items of the nodes within ``radius`` of ``pos`` (see ``ensure_ports``)."""
        for it in self.items(QRectF(pos.x() - radius, pos.y() - radius, 2 * radius, 2 * radius)):
            if isinstance(it, _PortedItem):
                it.ensure_ports()
        self._press_pos = {it.key: it.pos() for it in self.selectedItems() if isinstance(it, _PortedItem)}

    def mouseMoveEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        super().mouseMoveEvent(event)
        if self._press_pos and event.buttons() & Qt.MouseButton.LeftButton:
            for key, old in self._press_pos.items():
                item = self.item_for_key(key)
                if item is not None and item.pos() != old:
                    self.on_item_moved(item)

    def mouseReleaseEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        super().mouseReleaseEvent(event)
        moves = {}
        for key, old in self._press_pos.items():
            item = self.item_for_key(key)
            if item is not None and item.pos() != old:
                moves[key] = (old, item.pos())
        self._press_pos = {}
        if moves and not self.read_only:
            self.doc.push(commands.MoveItemsCommand(self.doc, moves))

    # -- connecting by dragging from an output port --------------------------------------------
    def begin_connection(self, port: PortItem, pos: QPointF) -> None:
        """Start a rubber-band edge from an output port."""
        if self.read_only:
            self.message.emit("this view is read-only")
            return
        path_item = QGraphicsPathItem()
        pen = QPen(style.EDGE_HOVER, 2, Qt.PenStyle.DashLine)
        pen.setCosmetic(True)
        path_item.setPen(pen)
        path_item.setZValue(40)
        self.addItem(path_item)
        self._drag = (port, path_item)
        self.update_connection(pos)

    def update_connection(self, pos: QPointF) -> None:
        """Follow the mouse with the rubber-band edge."""
        if self._drag is None:
            return
        port, path_item = self._drag
        start = port.owner.port_scene_pos(False, port.index)  # type: ignore[attr-defined]
        path_item.setPath(smooth_path([start, pos]) if pos != start else QPainterPath(start))

    def finish_connection(self, pos: QPointF) -> None:
        """Drop the rubber-band edge: connect to the input port under the mouse, if any."""
        if self._drag is None:
            return
        port, path_item = self._drag
        self._drag = None
        self.removeItem(path_item)
        target = self.input_port_at(pos)
        if target is None:
            self.message.emit("not connected: drop the wire on an input port or on a node")
            return
        node_item, index = target
        value = port.owner.node.output(port.index) if isinstance(port.owner, NodeItem) else port.owner.value  # type: ignore[attr-defined]
        if value is None:
            self.message.emit("not connected: that output produces no value")
            return
        if node_item.node.input(index) is value:
            self.message.emit(f"{value.name} is already connected to {node_item.node.name} input {index}")
            return
        old = node_item.node.input(index)
        why = commands.connect(self.doc, value, node_item.node, index)  # replaces an existing edge
        if why:
            self.message.emit(f"not connected: {why}")
        elif old is not None:
            self.message.emit(f"{node_item.node.name} input {index}: {old.name} replaced by {value.name}")

    def input_port_at(self, pos: QPointF) -> tuple[NodeItem, int] | None:
        """The node input under ``pos``: the nearest input port within PORT_SNAP pixels (an
        occupied port too: the drop replaces its edge), or the nearest free input of a node."""
        snap = PORT_SNAP
        # A wire's drag grabs the mouse, so no node under it was hovered and made its port items.
        self._ensure_ports_near(pos, snap + PORT_HIT)
        near = [it for it in self.items(QRectF(pos.x() - snap, pos.y() - snap, 2 * snap, 2 * snap))
                if isinstance(it, PortItem) and it.is_input and isinstance(it.owner, NodeItem)]
        if near:
            best = min(near, key=lambda it: QLineF(it.sceneBoundingRect().center(), pos).length())
            return best.owner, best.index
        for it in self.items(pos):
            if isinstance(it, NodeItem):
                local = it.mapFromScene(pos)
                n_in, _ = it.counts()
                if n_in == 0:
                    return None
                free = [i for i in range(n_in) if it.node.input(i) is None] or list(range(n_in))
                best = min(free, key=lambda i: abs(it.port_pos(True, i).x() - local.x()))
                return it, best
        return None

    # -- hover label ---------------------------------------------------------------------------
    def show_edge_label(self, edge: EdgeItem, pos: QPointF) -> None:
        """Show the hovered edge's tensor name, dtype and shape beside the mouse."""
        self.edge_label.owner = edge
        self.edge_label.setText(edge.label())
        self.edge_label.setPos(pos + QPointF(10, 6))
        self.edge_label.show()

    def hide_edge_label(self, edge: EdgeItem) -> None:
        """Hide the label if it belongs to ``edge``."""
        if self.edge_label.owner is edge:
            self.edge_label.owner = None
            self.edge_label.hide()

    # -- level of detail ---------------------------------------------------------------------
    def set_view_scale(self, scale: float) -> None:
        """Switch between items and the overview drawing for the view's zoom."""
        want = self.node_count() >= OVERVIEW_MIN_ITEMS and scale < OVERVIEW_SCALE
        if want == self.overview_mode:
            return
        self.overview_mode = want
        # Hiding an item deselects it, one selectionChanged per item: keep the selection
        # aside while the overview is shown and put it back, announced once, on the way in.
        blocked = self.blockSignals(True)
        try:
            if want:
                self._kept_selection = [it.key for it in self.selectedItems() if isinstance(it, _PortedItem)]
                self.overview.rebuild()
                self.overview.show()
            for item in self._graph_items():
                item.setVisible(not want)
            if not want:
                self.overview.hide()
                for key in self._kept_selection:
                    item = self.item_for_key(key)
                    if item is not None:
                        item.setSelected(True)
                self._kept_selection = []
        finally:
            self.blockSignals(blocked)
        if not want:
            self.selectionChanged.emit()

    @property
    def pending_layout(self) -> Populator | None:
        """While populating: the layout and which of its items are still to make."""
        return self._populator

    def node_count(self) -> int:
        """Nodes drawn: their items, and while populating those still to make."""
        pop = self._populator
        return len(self.node_items) + (pop.left if pop is not None else 0)

    # -- groups ------------------------------------------------------------------------------
    def on_group_toggled(self, group: GroupItem) -> None:
        """A fused group was expanded or collapsed: lay out again to make room."""
        key = group.node_item.key  # type: ignore[attr-defined]
        if group.expanded:
            self.expanded.add(key)
        else:
            self.expanded.discard(key)
        self.relayout_requested.emit()

    # -- queries -----------------------------------------------------------------------------
    def selected_edges(self) -> list[tuple[Node, int]]:
        """(consumer node, input index) of the selected edges into nodes."""
        return [(e.target.node, e.in_index) for e in self.selectedItems()  # type: ignore[attr-defined]
                if isinstance(e, EdgeItem) and isinstance(e.target, NodeItem)]
