"""The scene's items made on demand, and the queries that must see every node whether its
item exists or not (level of detail for large graphs, app/canvas/populate.py).

A large graph's scene holds items only for what the views have shown; the layout's arrays
(the ``Populator``) keep where every other node goes. Find, Select All, positions and the
panels that jump to a node go through here, so they reach a node without an item the same
way as one with: its item is made where the layout put it, with its edges, when it is needed.
Mixed into ``GraphScene``; it uses the scene's dictionaries and helpers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
from PySide6.QtCore import QPointF

from app.canvas.node_item import NodeItem, _PortedItem

if TYPE_CHECKING:
    from app.canvas.populate import Populator
    from engine.ir.graph import Node


class OnDemandItems:
    """Item making and whole-graph queries of ``GraphScene`` (see the module docstring)."""

    # -- making -------------------------------------------------------------------------------
    def _make_index(self: Any, pop: Populator, i: int) -> None:
        """Make the item of layout index ``i`` where the layout put it, and the edges to the
        items that exist (after an edit since the layout: from the graph as it is now)."""
        nodes, inputs, routes = self._pop_context
        key = pop.snapshot.keys[i]
        pos = QPointF(*self._layout_pos(pop, i))  # nodes: per layout index (see GraphScene.populate)
        item: _PortedItem | None = None
        if isinstance(key, tuple):
            if key[0] == "in":
                v = inputs.get(key[1])
                if v is not None and key[1] not in self.input_items:
                    item = self._add_io_item(True, key[1], v, pos)
            elif key[1] < len(self.graph.outputs) and key[1] not in self.output_items:
                item = self._add_io_item(False, key[1], self.graph.outputs[key[1]], pos)
        else:
            node = nodes[i]
            if node is not None and node.graph is self.graph and key not in self.node_items:
                item = self._add_node_item(node, pos)
                item.layout_index = i  # type: ignore[attr-defined]
        for j in pop.made(i):
            self._populate_edge(pop, j, routes)
        if isinstance(item, NodeItem):
            if pop.lazy and self.graph.version != pop.version:
                self._connect_all(item)
            if self._select_pending:
                blocked = self.blockSignals(True)
                item.setSelected(True)
                self.blockSignals(blocked)

    @staticmethod
    def _layout_pos(pop: Populator, i: int) -> tuple[float, float]:
        key = pop.snapshot.keys[i]
        x, y = pop.result.positions[i]
        dx, dy = pop.snapshot.offsets.get(key, (0.0, 0.0))
        return x + dx, y + dy

    def layout_position(self: Any, key: Any) -> QPointF | None:
        """Where the layout put the item of ``key`` while it has no item (on demand), else None."""
        pop = self._populator
        i = pop.index_of(key) if pop is not None else None
        return QPointF(*self._layout_pos(pop, i)) if i is not None and pop.pending[i] else None

    def ensure_item(self: Any, key: Any) -> _PortedItem | None:
        """The item of a layout key, made now if the layout has it still to make."""
        item = self.item_for_key(key)
        pop = self._populator
        if item is None and pop is not None:
            i = pop.index_of(key)
            if i is not None and pop.pending[i]:
                self._make_index(pop, i)
                item = self.item_for_key(key)
        return item

    def items_named(self: Any, names: Iterable[str]) -> list[NodeItem]:
        """The node items of the nodes called ``names`` (made now where needed), in that order."""
        out = []
        for name in names:
            node = self.graph.node_by_name(name)
            item = self.ensure_item(id(node)) if node is not None else None
            if isinstance(item, NodeItem):
                out.append(item)
        return out

    def trim_items(self: Any, budget: int) -> int:
        """Drop the node items beyond ``budget`` that no view shows (with a margin of a view
        each way) and that hold nothing of their own: not selected, not moved from where the
        layout put them, not an expanded group, no gesture under way. Their nodes go back to
        the layout's arrays, made again when a view shows them. Returns how many were dropped."""
        pop = self._populator
        if pop is None or not pop.lazy or len(self.node_items) <= budget or self._drag or self._press_pos:
            return 0
        rects = [v.mapToScene(v.viewport().rect()).boundingRect() for v in self.views()]
        if not rects:
            return 0
        r = rects[0]
        for other in rects[1:]:
            r = r.united(other)
        keep = r.adjusted(-r.width(), -r.height(), r.width(), r.height())
        dropped = 0
        for key, item in list(self.node_items.items()):
            i = getattr(item, "layout_index", None)
            if i is None or item.isSelected() or key in self.expanded or key in self._stale_items:
                continue
            if keep.intersects(item.sceneBoundingRect()) or item.pos() != QPointF(*self._layout_pos(pop, i)):
                continue
            for e in list(item.edges):
                self._drop_edge(e.key)
            del self.node_items[key]
            self.removeItem(item)
            pop.unmade(i)
            dropped += 1
        return dropped

    def _drop_all_items(self: Any) -> None:
        for key in list(self.edges):
            self._drop_edge(key)
        for group in (self.node_items, self.input_items, self.output_items):
            for it in group.values():
                self.removeItem(it)
            group.clear()
        self._populating = None
        self._idle = True

    def _pending_nodes(self: Any) -> list[Node]:
        """The graph's nodes that the layout has and no item draws yet (on demand)."""
        pop = self._populator
        if pop is None or not pop.left:
            return []
        nodes = self._pop_context[0]
        out = []
        for i in pop.pending.nonzero()[0].tolist():
            n = nodes[i]
            if n is not None and n.graph is self.graph:
                out.append(n)
        return out

    # -- queries ------------------------------------------------------------------------------
    def find(self: Any, text: str) -> list[Node]:
        """Nodes whose name or op type contains ``text`` (case-insensitive), top to bottom and
        left to right, with an item or not (``ensure_item`` makes the one to show)."""
        t = text.strip().lower()
        if not t:
            return []
        hits = [n for n in self.graph.nodes if t in n.name.lower() or t in n.op_type.lower()]
        far = QPointF(float("inf"), float("inf"))

        def where(n: Node) -> tuple[float, float]:
            item = self.node_items.get(id(n))
            p = item.pos() if item is not None else (self.layout_position(id(n)) or far)
            return p.y(), p.x()

        hits.sort(key=where)
        return hits

    def select_all(self: Any) -> None:
        """Select every node, announcing the new selection once (not once per item); the nodes
        without items yet are selected too (their items are made selected)."""
        self._select_pending = self._populator is not None and self._populator.lazy
        if self.overview_mode:  # hidden items cannot be selected: select them on the way in
            self._kept_selection = list(self.node_items)
            return
        blocked = self.blockSignals(True)
        try:
            for it in self.node_items.values():
                it.setSelected(True)
        finally:
            self.blockSignals(blocked)
        self.selectionChanged.emit()

    def clearSelection(self: Any) -> None:
        self._select_pending = False
        super().clearSelection()

    def selected_nodes(self: Any) -> list[Node]:
        """The IR nodes of the selected node items (after Select All: every node)."""
        made = [it.node for it in self.selectedItems() if isinstance(it, NodeItem)]
        return made + self._pending_nodes() if self._select_pending else made

    def node_positions(self: Any) -> dict[int, QPointF]:
        """Position of every node by ``id(node)``: its item's, or where the layout put it."""
        out = {k: it.pos() for k, it in self.node_items.items()}
        pop = self._populator
        if pop is not None and pop.left:
            keys = pop.snapshot.keys
            for i in pop.pending.nonzero()[0].tolist():
                if not isinstance(keys[i], tuple):
                    out[keys[i]] = QPointF(*self._layout_pos(pop, i))
        return out

    def node_boxes(self: Any) -> list[tuple[float, float, float, float, Node]]:
        """(x, y, width, height, node) of every node: its item's box, or the layout's."""
        return list(self.iter_node_boxes())

    def iter_node_boxes(self: Any, slice_len: int = 1000) -> Iterator[tuple[float, float, float, float, Node]]:
        """``node_boxes`` one at a time, of the items and layout boxes there are now; the layout's
        boxes are read ``slice_len`` at a time: a caller that takes a few hundred per event-loop
        turn never converts 50,000 in one (80 ms)."""
        items = list(self.node_items.values())
        pop = self._populator
        pending = pop.pending.nonzero()[0] if pop is not None and pop.left else np.zeros(0, dtype=np.int64)
        return _boxes(self, items, pop, pending, slice_len)


def _boxes(scene: Any, items: list, pop: Any, pending: Any, slice_len: int
           ) -> Iterator[tuple[float, float, float, float, Node]]:
    for it in items:
        yield it.pos().x(), it.pos().y(), it.width, it.height, it.node
    if not len(pending):
        return
    nodes, keys, offsets = scene._pop_context[0], pop.snapshot.keys, pop.snapshot.offsets
    for at in range(0, len(pending), slice_len):
        idx = pending[at:at + slice_len]
        for i, x, y, w, h in zip(idx.tolist(), pop.x0[idx].tolist(), pop.y0[idx].tolist(),
                                 (pop.x1[idx] - pop.x0[idx]).tolist(), (pop.y1[idx] - pop.y0[idx]).tolist()):
            n = nodes[i]
            if n is not None and n.graph is scene.graph:
                dx, dy = offsets.get(keys[i], (0.0, 0.0))
                yield x + dx, y + dy, w, h, n
