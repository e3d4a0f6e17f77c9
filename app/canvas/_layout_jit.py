"""The numba-compiled sweeps of app/canvas/layout.py: crossing reduction and coordinate placement.

Both are loops over thousands of rows, each reading its neighbours' positions, which numpy cannot
express without one call per row (50,000 nodes: 130,000 Python calls of a row placement). They
do exactly what the Python they replace did, in the same order and float arithmetic, so positions
are the same to the last bit. Compiled ``nogil``: a layout in a thread of the editor leaves the
GIL to the GUI thread. Compiled with ``cache=True`` (numba's cache beside this file); imported on
the first layout (numba's import costs ~0.7 s: a process that lays nothing out does not pay it).

Compiling them takes 25 s of CPU the first time after an install (numba's cache is empty). A layout
never waits for that: ``kernels(n)`` gives the compiled functions only where they are already in
this process, or in the cache (a marker ``warm_up`` writes beside it once it has compiled them) and
the graph is big enough to pay loading it (~1-2 s); else the same functions run by Python
(``interpreted()``: 10,000 nodes in ~1.4 s of CPU, 500 in 0.16 s). The worker process compiles them
at its start, off the editor's GIL.

The graph arrives as its links (edges between consecutive layers, dummies included) in the order
they were made: ``lu``/``lv`` the upper and lower node, ``lpa``/``lpb`` the x of the port on
each, relative to its centre. ``up_at``/``up_link`` list each node's links to the layer above in
that order (CSR), ``down_at``/``down_link`` those to the layer below. Rows are slices of one
array: row k is ``rows[row_at[k]:row_at[k + 1]]``.
"""

from __future__ import annotations

import functools
import hashlib
import types
from pathlib import Path

import numba
import numpy as np
from numba import njit

ENTRY_POINTS = ("kahn_order", "assign_layers", "reduce_crossings", "place_flow")  # what layout.py calls
COMPILED_FROM = 2000  # nodes: below this, a process without the compiled code interprets it


@njit(cache=True, nogil=True)
def _barycenter(v, upward, pos, live, width, gap, lu, lv, lpa, lpb, up_at, up_link, down_at, down_link):
    """Mean neighbour slot (at its port) above (``upward``) or below; -1 count: no neighbour.
    A live node averages only its live neighbours when it has any."""
    if upward:
        at, links = up_at, up_link
    else:
        at, links = down_at, down_link
    lo, hi = at[v], at[v + 1]
    if lo == hi:
        return 0.0, 0
    only_live = False
    if live[v]:
        for j in range(lo, hi):
            e = links[j]
            w = lu[e] if upward else lv[e]
            if live[w]:
                only_live = True
                break
    s = 0.0
    c = 0
    for j in range(lo, hi):
        e = links[j]
        if upward:
            w, px = lu[e], lpa[e]
        else:
            w, px = lv[e], lpb[e]
        if only_live and not live[w]:
            continue
        s += pos[w] + 0.9 * px / (width[w] + gap)
        c += 1
    return s, c


@njit(cache=True, nogil=True)
def _sort_row(rows, a, b, upward, pos, live, width, gap, lu, lv, lpa, lpb, up_at, up_link, down_at, down_link):
    """Order ``rows[a:b]`` by barycenter (ties: the current order); True when it changed."""
    m = b - a
    if m < 2:
        return False
    keys = np.empty(m)
    for i in range(m):
        s, c = _barycenter(rows[a + i], upward, pos, live, width, gap, lu, lv, lpa, lpb, up_at, up_link,
                           down_at, down_link)
        keys[i] = s / c if c else float(i)
    order = np.argsort(keys, kind="mergesort")
    same = True
    for i in range(m):
        if order[i] != i:
            same = False
            break
    if same:
        return False
    old = rows[a:b].copy()
    for i in range(m):
        v = old[order[i]]
        rows[a + i] = v
        pos[v] = i
    return True


@njit(cache=True, nogil=True)
def count_crossings(rows, row_at, pos, width, gap, lpa, lpb, lv, down_at, down_link):
    """Exact number of edge crossings between consecutive layers (edges end at ports)."""
    total = 0
    depth = len(row_at) - 1
    for k in range(depth - 1):
        m = 0
        for i in range(row_at[k], row_at[k + 1]):
            u = rows[i]
            m += down_at[u + 1] - down_at[u]
        if m < 2:
            continue
        pa = np.empty(m)
        pb = np.empty(m)
        j = 0
        for i in range(row_at[k], row_at[k + 1]):
            u = rows[i]
            for t in range(down_at[u], down_at[u + 1]):
                e = down_link[t]
                v = lv[e]
                pa[j] = pos[u] + 0.9 * lpa[e] / (width[u] + gap)
                pb[j] = pos[v] + 0.9 * lpb[e] / (width[v] + gap)
                j += 1
        by_b = np.argsort(pb, kind="mergesort")
        by_ab = by_b[np.argsort(pa[by_b], kind="mergesort")]  # sorted by (a, b)
        seen = np.empty(m)
        for cnt in range(m):
            x = pb[by_ab[cnt]]
            # Earlier edges (smaller upper position) ending to the right of x cross it.
            lo, hi = 0, cnt
            while lo < hi:  # bisect_right
                mid = (lo + hi) // 2
                if x < seen[mid]:
                    hi = mid
                else:
                    lo = mid + 1
            total += cnt - lo
            for q in range(cnt, lo, -1):
                seen[q] = seen[q - 1]
            seen[lo] = x
    return total


@njit(cache=True, nogil=True)
def reduce_crossings(rows, row_at, sweeps, exact, live, width, gap, lu, lv, lpa, lpb, up_at, up_link, down_at,
                     down_link):
    """Barycenter sweeps down and up (``rows`` reordered in place, to the best order found when
    ``exact``); returns the crossings of that order (-1 when not ``exact``).

    A row's new order depends only on its own order and the positions in the row it is sorted
    against: ``version[k]`` counts the changes of row k's order, and a sort whose two inputs are
    the versions it last saw would give the order the row already has, so it is skipped."""
    total = len(width)
    depth = len(row_at) - 1
    pos = np.zeros(total, dtype=np.int64)
    for k in range(depth):
        for i in range(row_at[k], row_at[k + 1]):
            pos[rows[i]] = i - row_at[k]
    best = count_crossings(rows, row_at, pos, width, gap, lpa, lpb, lv, down_at, down_link) if exact else -1
    best_rows = rows.copy()
    version = np.zeros(depth, dtype=np.int64)
    seen_down = np.full((depth, 2), -1, dtype=np.int64)
    seen_up = np.full((depth, 2), -1, dtype=np.int64)
    for _ in range(sweeps):
        changed = False
        for k in range(1, depth):
            if seen_down[k, 0] != version[k - 1] or seen_down[k, 1] != version[k]:
                if _sort_row(rows, row_at[k], row_at[k + 1], True, pos, live, width, gap, lu, lv, lpa, lpb, up_at,
                             up_link, down_at, down_link):
                    version[k] += 1
                    changed = True
                seen_down[k, 0] = version[k - 1]
                seen_down[k, 1] = version[k]
        for k in range(depth - 2, -1, -1):
            if seen_up[k, 0] != version[k + 1] or seen_up[k, 1] != version[k]:
                if _sort_row(rows, row_at[k], row_at[k + 1], False, pos, live, width, gap, lu, lv, lpa, lpb, up_at,
                             up_link, down_at, down_link):
                    version[k] += 1
                    changed = True
                seen_up[k, 0] = version[k + 1]
                seen_up[k, 1] = version[k]
        if not changed:
            break  # nothing moved in a whole sweep: every later sweep would be the same
        if exact:
            c = count_crossings(rows, row_at, pos, width, gap, lpa, lpb, lv, down_at, down_link)
            if c < best:
                best = c
                best_rows[:] = rows
            if c == 0:
                break
        else:
            best_rows[:] = rows
    rows[:] = best_rows
    return best


@njit(cache=True, nogil=True)
def _pull(v, upward, downward, x, live, n_real, lu, lv, up_at, up_link, down_at, down_link):
    """Weighted sum and weight of the live neighbours of ``v`` above and/or below: dummy-dummy
    links weigh most, so long edges run straight; constants never pull the data flow."""
    dummy = v >= n_real
    s = 0.0
    w = 0.0
    if upward:
        s, w = _pull_side(v, dummy, up_at, up_link, lu, x, live, n_real, s, w)
    if downward:
        s, w = _pull_side(v, dummy, down_at, down_link, lv, x, live, n_real, s, w)
    return s, w


@njit(cache=True, nogil=True)
def _pull_side(v, dummy, at, link, ends, x, live, n_real, s, w):
    """``s`` and ``w`` with the neighbours of ``v`` on one side added, in their order."""
    for j in range(at[v], at[v + 1]):
        u = ends[link[j]]
        if live[u]:
            wt = (8.0 if dummy else 2.0) if u >= n_real else (2.0 if dummy else 1.0)
            s += wt * x[u]
            w += wt
    return s, w


@njit(cache=True, nogil=True)
def _place_row(flow, a, b, upward, downward, x, live, width, gap, n_real, lu, lv, up_at, up_link, down_at,
               down_link):
    """Place ``flow[a:b]`` near the weighted mean of its neighbours, exact, with pool-adjacent-
    violators (the order kept, ``gap`` between real nodes, 4 between two dummies)."""
    m = b - a
    if m == 0:
        return
    if m == 1:  # most rows of a long chain
        v = flow[a]
        s, w = _pull(v, upward, downward, x, live, n_real, lu, lv, up_at, up_link, down_at, down_link)
        if w > 0.0:
            x[v] = s / w
        return
    desired = np.empty(m)
    weights = np.empty(m)
    for i in range(m):
        v = flow[a + i]
        s, w = _pull(v, upward, downward, x, live, n_real, lu, lv, up_at, up_link, down_at, down_link)
        if w > 0.0:
            desired[i] = s / w
            weights[i] = w
        else:
            desired[i] = x[v]
            weights[i] = 0.05  # free nodes stay roughly where they are
    if m == 2:  # the common case in long chains (a node and a passing edge): closed form
        p, q = flow[a], flow[a + 1]
        g = (width[p] + width[q]) / 2 + (gap if p < n_real or q < n_real else 4.0)
        da, db, wa, wb = desired[0], desired[1], weights[0], weights[1]
        if db - da >= g:
            x[p], x[q] = da, db
        else:
            y = (wa * da + wb * (db - g)) / (wa + wb)
            x[p], x[q] = y, y + g
        return
    # Substituting y_i = x_i - offset_i turns the spacing into y non-decreasing: isotonic
    # regression, solved by pool-adjacent-violators (blocks of mean, weight, count).
    offset = np.zeros(m)
    for i in range(1, m):
        p, q = flow[a + i - 1], flow[a + i]
        offset[i] = offset[i - 1] + (width[p] + width[q]) / 2 + (gap if p < n_real or q < n_real else 4.0)
    means = np.empty(m)
    wts = np.empty(m)
    counts = np.empty(m, dtype=np.int64)
    nb = 0
    for i in range(m):
        means[nb] = desired[i] - offset[i]
        wts[nb] = weights[i]
        counts[nb] = 1
        nb += 1
        while nb > 1 and means[nb - 2] > means[nb - 1]:
            m2, w2, c2 = means[nb - 1], wts[nb - 1], counts[nb - 1]
            nb -= 1
            w1 = wts[nb - 1]
            means[nb - 1] = (means[nb - 1] * w1 + m2 * w2) / (w1 + w2)
            wts[nb - 1] = w1 + w2
            counts[nb - 1] += c2
    i = 0
    for k in range(nb):
        for _ in range(counts[k]):
            x[flow[a + i]] = means[k] + offset[i]
            i += 1


@njit(cache=True, nogil=True)
def place_flow(flow, flow_at, passes, x, live, width, gap, n_real, lu, lv, up_at, up_link, down_at, down_link):
    """``passes`` sweeps down (each row pulled by the row above) and up (by the row below), then
    one pass pulled by both, over the live nodes of each row (``flow``, CSR like the rows)."""
    depth = len(flow_at) - 1
    for _ in range(passes):
        for k in range(1, depth):
            _place_row(flow, flow_at[k], flow_at[k + 1], True, False, x, live, width, gap, n_real, lu, lv, up_at,
                       up_link, down_at, down_link)
        for k in range(depth - 2, -1, -1):
            _place_row(flow, flow_at[k], flow_at[k + 1], False, True, x, live, width, gap, n_real, lu, lv, up_at,
                       up_link, down_at, down_link)
    for k in range(depth):
        _place_row(flow, flow_at[k], flow_at[k + 1], True, True, x, live, width, gap, n_real, lu, lv, up_at,
                   up_link, down_at, down_link)


@njit(cache=True, nogil=True)
def _csr(n, a, b):
    """Per node ``x``: the ``b`` of the edges whose ``a`` is ``x``, in edge order (CSR)."""
    at = np.zeros(n + 1, dtype=np.int64)
    for e in range(len(a)):
        at[a[e] + 1] += 1
    for v in range(n):
        at[v + 1] += at[v]
    fill = at[:-1].copy()
    out = np.empty(len(a), dtype=np.int64)
    for e in range(len(a)):
        out[fill[a[e]]] = b[e]
        fill[a[e]] += 1
    return at, out


@njit(cache=True, nogil=True)
def kahn_order(n, eu, ev):
    """A topological order of the edges ``eu[i] -> ev[i]`` (a stack of ready nodes, the lowest
    index first; successors in edge order); nodes on cycles are released in index order."""
    succ_at, succ = _csr(n, eu, ev)
    indeg = np.zeros(n, dtype=np.int64)
    for e in range(len(ev)):
        indeg[ev[e]] += 1
    stack = np.empty(2 * n + 1, dtype=np.int64)
    top = 0
    for v in range(n - 1, -1, -1):
        if indeg[v] == 0:
            stack[top] = v
            top += 1
    done = np.zeros(n, dtype=np.bool_)
    order = np.empty(n, dtype=np.int64)
    k = 0
    while True:
        while top > 0:
            top -= 1
            u = stack[top]
            if done[u]:
                continue
            done[u] = True
            order[k] = u
            k += 1
            for j in range(succ_at[u + 1] - 1, succ_at[u] - 1, -1):
                v = succ[j]
                indeg[v] -= 1
                if indeg[v] == 0:
                    stack[top] = v
                    top += 1
        if k == n:
            return order
        stuck = 0  # a cycle: release the first stuck node and go on
        while done[stuck]:
            stuck += 1
        indeg[stuck] = 0
        stack[top] = stuck
        top += 1


@njit(cache=True, nogil=True)
def assign_layers(n, order, du, dv, pinned):
    """Layer of every node (longest path from the sources) and whether it depends on a graph
    input ("live"); what does not (constants, weights made by ConstantOfShape -> Unsqueeze) is
    then pulled down to just above its first consumer."""
    pred_at, pred = _csr(n, dv, du)
    succ_at, succ = _csr(n, du, dv)
    layer = np.zeros(n, dtype=np.int64)
    live = np.zeros(n, dtype=np.bool_)
    for v in order:
        top = -1
        alive = pinned[v]
        for j in range(pred_at[v], pred_at[v + 1]):
            u = pred[j]
            top = max(top, layer[u])
            alive = alive or live[u]
        layer[v] = top + 1
        live[v] = alive
    if not live.any():
        live[:] = True  # no graph inputs: everything is data flow
        return layer, live
    for i in range(n - 1, -1, -1):
        v = order[i]
        if not live[v] and succ_at[v + 1] > succ_at[v]:
            low = layer[succ[succ_at[v]]]
            for j in range(succ_at[v], succ_at[v + 1]):
                low = min(low, layer[succ[j]])
            layer[v] = low - 1
    low = layer.min()
    if low < 0:
        layer -= low
    return layer, live


_INTERPRETED: types.SimpleNamespace | None = None


def _dispatchers() -> dict[str, object]:
    return {k: v for k, v in globals().items() if hasattr(v, "py_func")}


def interpreted() -> types.SimpleNamespace:
    """Every compiled function of this module as plain Python, calling each other's plain Python
    (the same code and arithmetic: positions equal the compiled ones to the last bit)."""
    global _INTERPRETED
    if _INTERPRETED is None:
        names: dict[str, object] = dict(globals())
        for name, f in _dispatchers().items():
            py = f.py_func  # type: ignore[attr-defined]
            names[name] = types.FunctionType(py.__code__, names, name, py.__defaults__, py.__closure__)
        _INTERPRETED = types.SimpleNamespace(**{k: names[k] for k in _dispatchers()})
    return _INTERPRETED


@functools.cache
def _marker() -> Path:
    source = Path(__file__).read_bytes()
    tag = hashlib.sha1(source + numba.__version__.encode()).hexdigest()[:16]
    cache = getattr(getattr(kahn_order, "_cache", None), "_cache_path", None)  # where numba caches
    return Path(cache or Path(__file__).with_name("__pycache__")) / f"_layout_jit.{tag}.compiled"


def cached() -> bool:
    """Whether numba's cache holds this module's compiled code (``warm_up`` compiled it once)."""
    return _marker().exists()


def compiled_here() -> bool:
    """Whether this process already holds the compiled code (it compiled or loaded it) of the
    functions layout.py calls (those they call are compiled into them: loaded from the cache,
    their own dispatchers stay empty)."""
    return all(globals()[name].signatures for name in ENTRY_POINTS)


def kernels(n: int, compile_here: bool = False) -> types.SimpleNamespace:
    """The functions a layout of ``n`` nodes should call (see the module docstring);
    ``compile_here``: the compiled ones, compiling them now if neither process nor cache has them."""
    if compile_here or compiled_here() or (n >= COMPILED_FROM and cached()):
        return types.SimpleNamespace(**_dispatchers())
    return interpreted()


def mark_compiled() -> None:
    """Record that numba's cache holds this module's compiled code (after ``warm_up`` ran it);
    a cache directory that cannot be written leaves the marker out (layouts then interpret)."""
    if compiled_here():
        try:
            _marker().parent.mkdir(exist_ok=True)
            _marker().touch()
        except OSError:
            pass
