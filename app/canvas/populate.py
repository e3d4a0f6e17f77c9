"""Making the items of a laid-out graph, what the views show first (level of detail).

The layout (a worker's plain numbers) says where every node goes before any item exists, so
the scene does not wait for 50,000 items: each time slice first makes the pending nodes inside
the views (and the far ends of the edges that cross them), then the rest from the top of the
graph down. An edge item appears with the later of its two ends. While items are still
missing, the overview drawing and the scene's bounds come from the layout, so zooming out
shows the whole graph at once.

A large graph is made *on demand* (``lazy``): only what the views show, plus a margin, ever
gets items; panning or zooming to another region makes its items then, and the rest of the
graph stays plain arrays here (the overview, the minimap, find and the bounds read them).

Plain arrays and indices here; the scene makes the items (``GraphScene.populate``).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import numpy as np
from PySide6.QtCore import QRectF

from app.canvas.edge_item import box_size, edge_path
from app.canvas.layout import index_layout

if TYPE_CHECKING:
    from app.canvas.layout import LayoutResult
    from app.canvas.snapshot import GraphSnapshot

VIEW_MARGIN = 0.25  # of the visible rectangle's size, on each side: made before it scrolls in


class Populator:
    """Which items of one layout are still to make, nearest to the views first."""

    def __init__(self, snapshot: GraphSnapshot, result: LayoutResult, lazy: bool = False,
                 version: int = 0) -> None:
        self.snapshot = snapshot
        self.result = result
        self.lazy = lazy  # only what the views show is made (see the module docstring)
        self.version = version  # of the graph when these items began: a later edit may add edges
        ix = result.index if result.index is not None else index_layout(snapshot.data, result)
        self.x0, self.y0, self.x1, self.y1 = ix.x0, ix.y0, ix.x1, ix.y1
        self.e_u, self.e_v = ix.e_u, ix.e_v
        self.ex0, self.ex1, self.ey0, self.ey1 = ix.ex0, ix.ex1, ix.ey0, ix.ey1
        n, m = len(ix.x0), len(ix.e_u)
        self.pending = np.ones(n, dtype=bool)
        self.edge_pending = np.ones(m, dtype=bool)
        self.left = n
        self._order = ix.order.tolist()
        self._cursor = 0
        self._inc = ix.incident.tolist()
        self._inc_at = ix.incident_at.tolist()
        self._view: tuple[float, float, float, float] | None = None
        self._near: list[int] = []
        self._index: dict[Any, int] | None = None
        self._item_boxes: np.ndarray | None = None
        self._segments: tuple[np.ndarray, np.ndarray] | None = None

    # -- what to make next ---------------------------------------------------------------------
    def look_at(self, rects: list[QRectF]) -> None:
        """The views show ``rects`` (scene coordinates): their pending nodes go first."""
        if not rects:
            self._near = []
            return
        r = rects[0]
        for other in rects[1:]:
            r = r.united(other)
        mx, my = r.width() * VIEW_MARGIN, r.height() * VIEW_MARGIN
        box = (r.left() - mx, r.top() - my, r.right() + mx, r.bottom() + my)
        if box == self._view and not self._near:
            return  # nothing new in view since the last look
        self._view = box
        left, top, right, bottom = box
        inside = self.pending & (self.x0 < right) & (self.x1 > left) & (self.y0 < bottom) & (self.y1 > top)
        near = np.flatnonzero(inside)
        crossing = np.flatnonzero(self.edge_pending & (self.ex0 < right) & (self.ex1 > left)
                                  & (self.ey0 < bottom) & (self.ey1 > top))
        if crossing.size:  # an edge through the view needs both of its ends
            ends = np.concatenate([self.e_u[crossing], self.e_v[crossing]])
            near = np.union1d(near, ends[self.pending[ends]])
        self._near = near[np.argsort(self.y0[near], kind="stable")][::-1].tolist()  # popped from the end

    def in_view_pending(self) -> bool:
        """True while a node the views showed at the last look is still to make."""
        return any(self.pending[i] for i in self._near)

    def next_index(self) -> int | None:
        """The next layout index to make: one in view if any, else the topmost left."""
        while self._near:
            i = self._near.pop()
            if self.pending[i]:
                return i
        if self.lazy:
            return None  # the rest waits until a view shows it
        order = self._order
        while self._cursor < len(order):
            i = order[self._cursor]
            self._cursor += 1
            if self.pending[i]:
                return i
        return None

    def made(self, i: int) -> list[int]:
        """Mark index ``i`` made; the edges whose both ends now exist (to make now)."""
        if not self.pending[i]:
            return []
        self.pending[i] = False
        self.left -= 1
        ready = []
        for j in self._inc[self._inc_at[i]:self._inc_at[i + 1]]:
            if self.edge_pending[j] and not self.pending[self.e_u[j]] and not self.pending[self.e_v[j]]:
                self.edge_pending[j] = False
                ready.append(j)
        return ready

    def unmade(self, i: int) -> None:
        """Index ``i``'s item was dropped (out of every view, on demand): it and its edges are
        to make again when a view shows it."""
        if self.pending[i]:
            return
        self.pending[i] = True
        self.left += 1
        self.edge_pending[self._inc[self._inc_at[i]:self._inc_at[i + 1]]] = True
        self._view = None  # the next look finds it again

    def index_of(self, key: Any) -> int | None:
        """The layout index of a layout key (``id(node)``, ``("in", name)``, ``("out", k)``)."""
        if self._index is None:
            keys = self.snapshot.keys
            self._index = self.snapshot.index if len(self.snapshot.index) == len(keys) else {
                k: i for i, k in enumerate(keys)}
        return self._index.get(key)

    def pending_extent(self) -> tuple[float, float, float, float] | None:
        """(left, top, right, bottom) of the boxes still to make, or None when none is."""
        if not self.left:
            return None
        p = self.pending
        return (float(self.x0[p].min()), float(self.y0[p].min()), float(self.x1[p].max()), float(self.y1[p].max()))

    def path(self, j: int) -> Any:
        """The curve of edge ``j`` as laid out (see ``edge_path``)."""
        return edge_path(self.snapshot, self.result, j)

    # -- the overview of what is not made yet ----------------------------------------------------
    def pending_boxes(self) -> list[tuple[Any, QRectF]]:
        """(layout key, rectangle) of every node still to make."""
        keys, out = self.snapshot.keys, []
        offsets = self.snapshot.offsets
        for i in np.flatnonzero(self.pending).tolist():
            key = keys[i]
            dx, dy = offsets.get(key, (0.0, 0.0))
            w, h = box_size(key)
            out.append((key, QRectF(self.x0[i] + dx, self.y0[i] + dy, w, h)))
        return out

    def item_boxes(self) -> np.ndarray:
        """(x, y, width, height) of every layout index's item (its own rectangle inside the
        layout box, ``box_size``), computed once per layout."""
        if self._item_boxes is None:
            keys = self.snapshot.keys
            io = np.fromiter((isinstance(k, tuple) for k in keys), dtype=bool, count=len(keys))
            (io_w, io_h), (w, h) = box_size(("in", "")), box_size(0)
            bx, by = self.x0.copy(), self.y0.copy()
            for key, (dx, dy) in self.snapshot.offsets.items():
                i = self.index_of(key)
                if i is not None:
                    bx[i] += dx
                    by[i] += dy
            self._item_boxes = np.stack([bx, by, np.where(io, io_w, w), np.where(io, io_h, h)], axis=1)
        return self._item_boxes

    def edge_segments(self) -> tuple[np.ndarray, np.ndarray]:
        """Straight segments of every laid-out edge, from the bottom centre of its source's box
        through its bend points to the top centre of its target's box: (x1, y1, x2, y2) rows
        and the edge index of each row; computed once per layout."""
        if self._segments is None:
            u, v = self.e_u, self.e_v
            cx = (self.x0 + self.x1) / 2
            rows = [np.stack([cx[u], self.y1[u], cx[v], self.y0[v]], axis=1)]
            owner = [np.arange(len(u))]
            routes = self.result.routes
            if routes:
                straight = np.ones(len(u), dtype=bool)
                extra, extra_owner = [], []
                for j, (a, b) in enumerate(zip(u.tolist(), v.tolist())):
                    pts = routes.get((a, b))
                    if pts:
                        straight[j] = False
                        chain = [(cx[a], self.y1[a]), *pts, (cx[b], self.y0[b])]
                        extra.extend((p[0], p[1], q[0], q[1]) for p, q in itertools.pairwise(chain))
                        extra_owner.extend([j] * (len(chain) - 1))
                rows, owner = [rows[0][straight]], [owner[0][straight]]
                if extra:
                    rows.append(np.asarray(extra, dtype=float))
                    owner.append(np.asarray(extra_owner, dtype=np.int64))
            self._segments = (np.concatenate(rows), np.concatenate(owner))
        return self._segments
