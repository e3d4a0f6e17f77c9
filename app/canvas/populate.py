"""Making the items of a laid-out graph, what the views show first (level of detail).

The layout (a worker's plain numbers) says where every node goes before any item exists, so
the scene does not wait for 50,000 items: each time slice first makes the pending nodes inside
the views (and the far ends of the edges that cross them), then the rest from the top of the
graph down. An edge item appears with the later of its two ends. While items are still
missing, the overview drawing and the scene's bounds come from the layout, so zooming out
shows the whole graph at once.

Plain arrays and indices here; the scene makes the items (``GraphScene.populate``).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import numpy as np
from PySide6.QtCore import QLineF, QPointF, QRectF

from app.canvas.edge_item import box_size, edge_path

if TYPE_CHECKING:
    from app.canvas.layout import LayoutResult
    from app.canvas.snapshot import GraphSnapshot

VIEW_MARGIN = 0.25  # of the visible rectangle's size, on each side: made before it scrolls in


class Populator:
    """Which items of one layout are still to make, nearest to the views first."""

    def __init__(self, snapshot: GraphSnapshot, result: LayoutResult) -> None:
        self.snapshot = snapshot
        self.result = result
        keys = snapshot.keys
        n = len(keys)
        sizes = np.asarray(snapshot.data.sizes, dtype=float).reshape(n, 2)
        pos = np.asarray(result.positions, dtype=float).reshape(n, 2)
        self.x0, self.y0 = pos[:, 0], pos[:, 1]
        self.x1, self.y1 = self.x0 + sizes[:, 0], self.y0 + sizes[:, 1]
        self.pending = np.ones(n, dtype=bool)
        self.left = n
        # Top rows first (the first look shows the top of the graph), left to right.
        self._order = np.lexsort((self.x0, self.y0)).tolist()
        self._cursor = 0
        edges = snapshot.data.edges
        m = len(edges)
        ends = np.asarray(edges, dtype=np.int64).reshape(m, 2)
        u, v = ends[:, 0], ends[:, 1]
        self.e_u, self.e_v = u, v
        # Edges by end (CSR): the edges of index i are _inc[_inc_at[i]:_inc_at[i + 1]].
        both = np.concatenate([u, v])
        by_end = np.argsort(both, kind="stable")
        self._inc = (by_end % max(m, 1)).tolist()
        self._inc_at = np.searchsorted(both[by_end], np.arange(n + 1)).tolist()
        self.ex0 = np.minimum(self.x0[u], self.x0[v])
        self.ex1 = np.maximum(self.x1[u], self.x1[v])
        self.ey0 = np.minimum(self.y0[u], self.y0[v])
        self.ey1 = np.maximum(self.y1[u], self.y1[v])
        if result.routes and m:  # long edges: their bend points widen the box
            code = u * n + v
            by_code = np.argsort(code, kind="stable")
            routed = [(a * n + b, min(p[0] for p in pts), max(p[0] for p in pts))
                      for (a, b), pts in result.routes.items() if pts]
            if routed:
                r_code, r_lo, r_hi = (np.asarray(c) for c in zip(*routed))
                k = np.minimum(np.searchsorted(code, r_code, sorter=by_code), m - 1)
                hit = code[by_code[k]] == r_code
                j = by_code[k[hit]]
                self.ex0[j] = np.minimum(self.ex0[j], r_lo[hit])
                self.ex1[j] = np.maximum(self.ex1[j], r_hi[hit])
        self.edge_pending = np.ones(m, dtype=bool)
        self._view: tuple[float, float, float, float] | None = None
        self._near: list[int] = []

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

    def pending_lines(self) -> list[QLineF]:
        """Segments of every edge still to make, from the bottom centre of its source's box
        through its bend points to the top centre of its target's box."""
        routes, out = self.result.routes, []
        for j in np.flatnonzero(self.edge_pending).tolist():
            u, v = int(self.e_u[j]), int(self.e_v[j])
            pts = [QPointF((self.x0[u] + self.x1[u]) / 2, self.y1[u]),
                   *(QPointF(x, y) for x, y in routes.get((u, v), ())),
                   QPointF((self.x0[v] + self.x1[v]) / 2, self.y0[v])]
            out.extend(QLineF(a, b) for a, b in itertools.pairwise(pts))
        return out
