"""Layered top-to-bottom graph layout (Sugiyama style), pure Python, safe off the GUI thread.

Steps, each linear or near-linear in nodes + edges so 50,000 nodes lay out in seconds:

1. Cycles (only in broken graphs) are broken by reversing edges that go back in a Kahn order.
2. Layering by longest path from the sources; then everything that does not depend on a
   graph input (a Constant, a ConstantOfShape -> Unsqueeze weight chain, an unconnected op)
   is pulled down to just above its first consumer, so constants do not hang at the top.
3. Edges spanning several layers are routed through dummy nodes. Long edges leaving one
   node share one trunk of dummies (a tensor used by many later ops is drawn as one line
   that branches off near each consumer), which keeps skip connections readable.
4. Crossing reduction: barycenter sweeps down and up, keeping the best order found (crossings
   are counted exactly for graphs of moderate size).
   A graph of more than LARGE nodes is layered a second time with its linear chains collapsed
   into one tall box each (app/canvas/chains.py), so steps 3-5 visit one row per chain.
5. Coordinates: each layer is placed as close as possible to the weighted mean of its
   neighbours (dummy-dummy edges weigh most, so long edges run straight) subject to the
   minimum spacing and the order, solved exactly per layer with pool-adjacent-violators.

The input is a plain snapshot (sizes and index pairs) taken on the GUI thread; the result is
plain numbers. ``progress(fraction, text)`` is called now and then and ``cancelled()`` polled;
a cancelled layout raises ``LayoutCancelled``.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.canvas.chains import collapse_chains, expand_positions

LAYER_GAP = 46.0  # vertical space between layer rows (room for edges and labels)
NODE_GAP = 28.0  # horizontal space between neighbouring nodes
DUMMY_WIDTH = 14.0  # horizontal room of a long edge passing through a layer
SWEEPS = 6  # barycenter sweep pairs (down + up)
LARGE = 10000  # above this many nodes + dummies, fewer sweeps (each sweep is linear anyway)
EXACT_CROSSINGS_LIMIT = 20000  # count crossings exactly below this many nodes + dummies


class LayoutCancelled(Exception):
    """The caller asked the layout to stop."""


@dataclass
class LayoutInput:
    """What the layout needs: per-node (width, height), directed edges (src, dst) and which
    nodes are graph inputs (kept at the top)."""

    sizes: list[tuple[float, float]]
    edges: list[tuple[int, int]]
    pinned_top: set[int] = field(default_factory=set)
    # Per edge (optional): x of the output port and of the input port, relative to the
    # centres of the two nodes. Edges then run straight into their own port, and a node
    # feeding input 0 is ordered left of one feeding input 1.
    ports: list[tuple[float, float]] | None = None


@dataclass
class LayoutResult:
    """Top-left corner of every node, the bend points of every long edge and the extent."""

    positions: list[tuple[float, float]]
    routes: dict[tuple[int, int], list[tuple[float, float]]]
    layers: list[int]
    width: float
    height: float
    crossings: int | None = None
    index: LayoutIndex | None = None  # made by the worker that laid out (see index_layout)
    key_routes: dict | None = None  # ``routes`` by layout key (app/canvas/snapshot.routes_by_key)


@dataclass
class LayoutIndex:
    """The layout as arrays, for finding what a rectangle shows without the items: every node's
    box, the nodes top rows first (then left to right), the edges at each node (CSR: those of
    node i are ``incident[incident_at[i]:incident_at[i + 1]]``) and every edge's box (its
    ends' boxes and its bend points)."""

    x0: np.ndarray
    y0: np.ndarray
    x1: np.ndarray
    y1: np.ndarray
    order: np.ndarray
    e_u: np.ndarray
    e_v: np.ndarray
    incident: np.ndarray
    incident_at: np.ndarray
    ex0: np.ndarray
    ex1: np.ndarray
    ey0: np.ndarray
    ey1: np.ndarray


def index_layout(data: LayoutInput, result: LayoutResult) -> LayoutIndex:
    """Index ``result`` (the layout of ``data``; see LayoutIndex)."""
    n, m = len(data.sizes), len(data.edges)
    chain = itertools.chain.from_iterable
    sizes = np.fromiter(chain(data.sizes), dtype=float, count=2 * n).reshape(n, 2)
    pos = np.fromiter(chain(result.positions), dtype=float, count=2 * n).reshape(n, 2)
    x0, y0 = pos[:, 0].copy(), pos[:, 1].copy()
    x1, y1 = x0 + sizes[:, 0], y0 + sizes[:, 1]
    ends = np.fromiter(chain(data.edges), dtype=np.int64, count=2 * m).reshape(m, 2)
    u, v = ends[:, 0].copy(), ends[:, 1].copy()
    both = np.concatenate([u, v])
    by_end = np.argsort(both, kind="stable")
    incident = by_end % max(m, 1)
    incident_at = np.searchsorted(both[by_end], np.arange(n + 1))
    ex0, ex1 = np.minimum(x0[u], x0[v]), np.maximum(x1[u], x1[v])
    ey0, ey1 = np.minimum(y0[u], y0[v]), np.maximum(y1[u], y1[v])
    routed = [(a * n + b, min(p[0] for p in pts), max(p[0] for p in pts))
              for (a, b), pts in result.routes.items() if pts]
    if routed and m:  # long edges: their bend points widen the box
        code = u * n + v
        by_code = np.argsort(code, kind="stable")
        r_code, r_lo, r_hi = (np.asarray(c) for c in zip(*routed))
        k = np.minimum(np.searchsorted(code, r_code, sorter=by_code), m - 1)
        hit = code[by_code[k]] == r_code
        j = by_code[k[hit]]
        ex0[j] = np.minimum(ex0[j], r_lo[hit])
        ex1[j] = np.maximum(ex1[j], r_hi[hit])
    return LayoutIndex(x0, y0, x1, y1, np.lexsort((x0, y0)), u, v, incident, incident_at, ex0, ex1, ey0, ey1)


Progress = Callable[[float, str], None]


def _noop_progress(fraction: float, text: str) -> None:
    return None


def _never() -> bool:
    return False


def layered_layout(data: LayoutInput, progress: Progress | None = None,
                   cancelled: Callable[[], bool] | None = None, compiled: bool = False) -> LayoutResult:
    """Lay out the graph described by ``data`` (see the module docstring); ``compiled`` compiles
    the sweeps here if they are not yet (else a process without them interprets them)."""
    progress = progress or _noop_progress
    cancelled = cancelled or _never
    n = len(data.sizes)
    if n == 0:
        return LayoutResult([], {}, [], 0.0, 0.0, 0)
    from app.canvas import _layout_jit

    jit = _layout_jit.kernels(n, compile_here=compiled)
    eu, ev, ports = _clean_edges(n, data.edges, data.ports)
    progress(0.02, "ordering")
    order = jit.kahn_order(n, eu, ev)
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    # Edges that go backwards in the order (cycles) are reversed for layering.
    forward = rank[eu] < rank[ev]
    du, dv = np.where(forward, eu, ev), np.where(forward, ev, eu)
    dp = np.where(forward[:, None], ports, 0.0)
    pinned = np.zeros(n, dtype=np.bool_)
    pinned[[v for v in data.pinned_top if 0 <= v < n]] = True
    layer, live = jit.assign_layers(n, order, du, dv, pinned)
    _check(cancelled)
    # A large graph's linear chains are laid out as one box each (app/canvas/chains.py).
    chains = collapse_chains(order, du, dv, dp, layer, live, data.sizes, pinned, LAYER_GAP) if n > LARGE else None
    sizes: Sequence[tuple[float, float]] = data.sizes
    if chains is not None:
        m = len(chains.members)
        layer, live = jit.assign_layers(m, np.arange(m), chains.du, chains.dv, chains.pinned_mask)
        dag, dag_ports, sizes = chains.dag, chains.ports, chains.sizes
    else:
        dag, dag_ports = list(zip(du.tolist(), dv.tolist())), list(zip(dp[:, 0].tolist(), dp[:, 1].tolist()))
    layer, live = layer.tolist(), live.tolist()
    progress(0.1, "routing long edges")
    graph = _LayerGraph(len(sizes), layer, live, jit)
    graph.build(dag, dag_ports, sizes)
    _check(cancelled)
    progress(0.2, "reducing crossings")
    crossings = graph.reduce_crossings(progress, cancelled)
    progress(0.7, "placing")
    graph.assign_x(cancelled)
    _check(cancelled)
    progress(0.9, "finishing")
    result = graph.result(data.edges, crossings)
    if chains is not None:
        result = LayoutResult(expand_positions(chains, result.positions, data.sizes, LAYER_GAP),
                              {chains.original_edge[e]: pts for e, pts in result.routes.items()},
                              [result.layers[chains.rep[v]] for v in range(n)], result.width, result.height, crossings)
    result.index = index_layout(data, result)  # here, off the GUI thread
    return result


def warm_up() -> None:
    """Compile (first process after an install) or load from numba's cache the layout's sweeps
    (app/canvas/_layout_jit.py), now rather than inside the first layout a user waits for: a
    small graph with a long edge, a constant and a row of three."""
    sizes = [(60.0, 30.0)] * 6
    edges = [(0, 1), (0, 2), (0, 3), (1, 4), (2, 4), (3, 4), (0, 4), (5, 4)]
    from app.canvas import _layout_jit

    layered_layout(LayoutInput(sizes, edges, {0}, [(0.0, 0.0)] * len(edges)), compiled=True)
    _layout_jit.mark_compiled()


def _check(cancelled: Callable[[], bool]) -> None:
    if cancelled():
        raise LayoutCancelled()


def _clean_edges(n: int, edges: Sequence[tuple[int, int]], ports: Sequence[tuple[float, float]] | None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The edges without self-loops, out-of-range ends and repeats (the first kept, in order),
    as sources, targets and their ports ((0, 0) where ``ports`` has none)."""
    m = len(edges)
    ends = np.fromiter(itertools.chain.from_iterable(edges), dtype=np.int64, count=2 * m).reshape(m, 2)
    at = np.zeros((m, 2))
    if ports is not None and len(ports):
        k = min(m, len(ports))
        at[:k] = np.fromiter(itertools.chain.from_iterable(ports[:k]), dtype=float, count=2 * k).reshape(k, 2)
    u, v = ends[:, 0], ends[:, 1]
    ok = np.flatnonzero((u != v) & (u >= 0) & (u < n) & (v >= 0) & (v < n))
    _, first = np.unique(u[ok] * n + v[ok], return_index=True)
    keep = ok[np.sort(first)]
    return u[keep].copy(), v[keep].copy(), at[keep]


class _LayerGraph:
    """Real nodes plus dummy nodes, grouped by layer, with up and down neighbour lists."""

    def __init__(self, n_real: int, layer: list[int], live: list[bool], kernels: object) -> None:
        self.kernels: Any = kernels  # app/canvas/_layout_jit.py's functions, compiled or not
        self.n_real = n_real
        self.layer = list(layer)
        # Live nodes carry the data flow; the others (constants) follow their consumers and
        # never pull the flow towards them when ordering and placing.
        self.live = list(live)
        self.width: list[float] = []
        self.height: list[float] = []
        self.up: list[list[int]] = []  # neighbours in the layer above
        self.down: list[list[int]] = []  # neighbours in the layer below
        # Parallel to up/down: (x of the port on the upper node, x of the port on the lower
        # node), relative to their centres; dummies have their port in the middle.
        self.up_p: list[list[tuple[float, float]]] = []
        self.down_p: list[list[tuple[float, float]]] = []
        self.trunk: dict[tuple[int, int], int] = {}  # (source, layer) -> dummy
        self.route_of: dict[tuple[int, int], list[int]] = {}  # real edge -> dummies
        self.links: list[tuple[int, int, float, float]] = []  # (upper, lower, their ports), in the order made
        self._made: tuple | None = None  # ``_arrays``
        self.layers: list[list[int]] = []
        self.x: list[float] = []

    def _new_dummy(self, lay: int, live: bool) -> int:
        d = len(self.layer)
        self.layer.append(lay)
        self.live.append(live)
        self.width.append(DUMMY_WIDTH)
        self.height.append(0.0)
        self.up.append([])
        self.down.append([])
        self.up_p.append([])
        self.down_p.append([])
        return d

    def _link(self, a: int, b: int, ports: tuple[float, float]) -> None:
        self.down[a].append(b)
        self.down_p[a].append(ports)
        self.up[b].append(a)
        self.up_p[b].append(ports)
        self.links.append((a, b, ports[0], ports[1]))

    def _arrays(self) -> tuple:
        """The links as the compiled sweeps take them (app/canvas/_layout_jit.py): width, live,
        upper and lower node and their ports per link, and each node's links up and down (CSR).
        Made once: the links and nodes do not change after ``build``."""
        if self._made is not None:
            return self._made
        total = len(self.layer)
        m = len(self.links)
        flat = np.fromiter(itertools.chain.from_iterable(self.links), dtype=float, count=4 * m).reshape(m, 4)
        lu, lv = flat[:, 0].astype(np.int64), flat[:, 1].astype(np.int64)
        lpa, lpb = flat[:, 2].copy(), flat[:, 3].copy()
        up_link, down_link = np.argsort(lv, kind="stable"), np.argsort(lu, kind="stable")
        every = np.arange(total + 1)
        up_at, down_at = np.searchsorted(lv[up_link], every), np.searchsorted(lu[down_link], every)
        self._made = (np.asarray(self.live, dtype=np.bool_), np.asarray(self.width, dtype=float),
                      lu, lv, lpa, lpb, up_at, up_link, down_at, down_link)
        return self._made

    def _rows(self, rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        """Rows as one array and where each starts (row k: ``flat[at[k]:at[k + 1]]``)."""
        at = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum([len(r) for r in rows], out=at[1:])
        flat = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=int(at[-1]))
        return flat, at

    def build(self, dag: list[tuple[int, int]], ports: list[tuple[float, float]],
              sizes: Sequence[tuple[float, float]]) -> None:
        self.width = [float(w) for w, _ in sizes]
        self.height = [float(h) for _, h in sizes]
        n = self.n_real
        self.up = [[] for _ in range(n)]
        self.down = [[] for _ in range(n)]
        self.up_p = [[] for _ in range(n)]
        self.down_p = [[] for _ in range(n)]
        # Sort long edges by span so a trunk grows once, from the source down.
        for k in sorted(range(len(dag)), key=lambda i: self.layer[dag[i][1]] - self.layer[dag[i][0]]):
            u, v = dag[k]
            out_x, in_x = ports[k]
            lu, lv = self.layer[u], self.layer[v]
            prev = u
            chain: list[int] = []
            for lay in range(lu + 1, lv):
                d = self.trunk.get((u, lay))
                if d is None:
                    d = self._new_dummy(lay, self.live[u])
                    self.trunk[(u, lay)] = d
                    self._link(prev, d, (out_x if prev == u else 0.0, 0.0))
                chain.append(d)
                prev = d
            self._link(prev, v, (out_x if prev == u else 0.0, in_x))
            self.route_of[(u, v)] = chain
        depth = max(self.layer) + 1
        self.layers = [[] for _ in range(depth)]
        # Initial order: depth-first from the sources keeps related nodes together.
        seen = [False] * len(self.layer)
        roots = [v for v in range(len(self.layer)) if not self.up[v]]
        for r in roots:
            stack = [r]
            while stack:
                v = stack.pop()
                if seen[v]:
                    continue
                seen[v] = True
                self.layers[self.layer[v]].append(v)
                stack.extend(reversed(self.down[v]))

    # -- crossing reduction ------------------------------------------------------------------
    def reduce_crossings(self, progress: Progress, cancelled: Callable[[], bool]) -> int | None:
        """Barycenter sweeps down and up, keeping the best order found (crossings counted exactly
        up to EXACT_CROSSINGS_LIMIT nodes + dummies); app/canvas/_layout_jit.py says how."""
        jit = self.kernels
        total = len(self.layer)
        exact = total <= EXACT_CROSSINGS_LIMIT
        rows, row_at = self._rows(self.layers)
        live, width, *links = self._arrays()
        best = jit.reduce_crossings(rows, row_at, SWEEPS if total <= LARGE else 3, exact, live, width, NODE_GAP, *links)
        self.layers = [rows[row_at[k]:row_at[k + 1]].tolist() for k in range(len(self.layers))]
        return int(best) if exact else None

    # -- coordinates -------------------------------------------------------------------------
    def assign_x(self, cancelled: Callable[[], bool]) -> None:
        total = len(self.layer)
        self.x = [0.0] * total
        widest = max((sum(self.width[v] for v in row) + NODE_GAP * len(row) for row in self.layers), default=0.0)
        for row in self.layers:
            left = (widest - (sum(self.width[v] for v in row) + NODE_GAP * (len(row) - 1))) / 2
            for v in row:
                self.x[v] = left + self.width[v] / 2
                left += self.width[v] + NODE_GAP
        # The data flow is placed first, as if constants were not there; then each constant
        # takes the free spot nearest to its consumer's constant ports (top-right corner).
        jit = self.kernels
        _check(cancelled)
        flow, flow_at = self._rows([[v for v in row if self.live[v]] for row in self.layers])
        live, width, lu, lv, _, _, *csr = self._arrays()
        x = np.asarray(self.x, dtype=float)
        jit.place_flow(flow, flow_at, 4 if total <= LARGE else 2, x, live, width, NODE_GAP, self.n_real, lu, lv, *csr)
        self.x = x.tolist()
        self._place_constants()
        lo = min((self.x[v] - self.width[v] / 2 for v in range(total)), default=0.0)
        self.x = [x - lo for x in self.x]

    def _place_constants(self) -> None:
        """Fit the non-live nodes (and their long-edge dummies) into the free room of each row,
        bottom-up so a chain of constants follows its consumer."""
        live, x, width, n_real = self.live, self.x, self.width, self.n_real
        for k in range(len(self.layers) - 1, -1, -1):
            row = self.layers[k]
            consts = [v for v in row if not live[v]]
            if not consts:
                continue
            spans = sorted((x[v] - width[v] / 2, x[v] + width[v] / 2) for v in row if live[v])
            starts = [a for a, _ in spans]
            ends = [b for _, b in spans]
            wanted = []
            for v in consts:
                if self.down[v]:  # right above the consumer's port (constants: top-right)
                    want = sum(x[b] + pb - pa for b, (pa, pb) in zip(self.down[v], self.down_p[v])) / len(self.down[v])
                elif self.up[v]:
                    want = sum(x[a] + pa - pb for a, (pa, pb) in zip(self.up[v], self.up_p[v])) / len(self.up[v])
                else:
                    want = x[v]
                wanted.append((want, v))
            wanted.sort()
            for want, v in wanted:
                half = width[v] / 2
                gap = NODE_GAP if v < n_real else 6.0
                x[v] = _free_spot(starts, ends, want, half, gap)
                i = bisect.bisect_left(starts, x[v] - half)
                starts.insert(i, x[v] - half)
                ends.insert(i, x[v] + half)

    def result(self, original_edges: Sequence[tuple[int, int]], crossings: int | None) -> LayoutResult:
        n = self.n_real
        depth = len(self.layers)
        row_h = [0.0] * depth
        for v in range(n):
            row_h[self.layer[v]] = max(row_h[self.layer[v]], self.height[v])
        top = [0.0] * depth
        y = 0.0
        for k in range(depth):
            top[k] = y
            y += (row_h[k] or 8.0) + LAYER_GAP
        positions = [(self.x[v] - self.width[v] / 2, top[self.layer[v]] + (row_h[self.layer[v]] - self.height[v]) / 2)
                     for v in range(n)]
        routes: dict[tuple[int, int], list[tuple[float, float]]] = {}
        for (u, v), chain in self.route_of.items():
            if chain:
                pts = [(self.x[d], top[self.layer[d]] + row_h[self.layer[d]] / 2) for d in chain]
                routes[(u, v)] = _straighten(pts)
        width = max((self.x[v] + self.width[v] / 2 for v in range(len(self.layer))), default=0.0)
        return LayoutResult(positions, routes, self.layer[:n], width, y - LAYER_GAP, crossings)


def _free_spot(starts: list[float], ends: list[float], want: float, half: float, gap: float) -> float:
    """The centre nearest to ``want`` (ties and near-ties to the right) of a box of half-width
    ``half`` that keeps ``gap`` from every span (sorted, disjoint ``starts[i]..ends[i]``)."""
    right = want
    j = bisect.bisect_right(ends, right - half - gap)
    while j < len(starts) and starts[j] < right + half + gap:
        right = ends[j] + gap + half
        j += 1
    left = want
    j = bisect.bisect_left(starts, left + half + gap) - 1
    while j >= 0 and ends[j] > left - half - gap:
        left = starts[j] - gap - half
        j -= 1
    return right if right - want <= 3.0 * (want - left) else left


def _straighten(pts: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Drop bend points in the middle of straight vertical runs (a long trunk is one line)."""
    if len(pts) <= 2:
        return pts
    out = [pts[0]]
    for prev, cur, nxt in zip(pts, pts[1:], pts[2:]):
        if abs(prev[0] - cur[0]) > 0.5 or abs(nxt[0] - cur[0]) > 0.5:
            out.append(cur)
    out.append(pts[-1])
    return out
