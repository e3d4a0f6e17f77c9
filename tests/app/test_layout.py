"""The layered layout: top-to-bottom flow, no overlaps, fewer crossings, routed long edges."""

from __future__ import annotations

import itertools
import random

import pytest

from app.canvas.layout import LayoutCancelled, LayoutInput, layered_layout


def _overlaps(res, sizes) -> int:
    boxes = [(x, y, x + w, y + h) for (x, y), (w, h) in zip(res.positions, sizes)]
    by_row: dict[float, list] = {}
    for b in boxes:
        by_row.setdefault(round(b[1]), []).append(b)
    bad = 0
    for row in by_row.values():
        row.sort()
        bad += sum(1 for a, b in itertools.pairwise(row) if b[0] < a[2] - 1e-6)
    return bad


def test_edges_point_down_and_nodes_do_not_overlap():
    rng = random.Random(0)
    n = 300
    edges = [(v - 1, v) for v in range(1, n)] + [(rng.randrange(0, v - 1), v) for v in range(5, n, 3)]
    sizes = [(176.0, 58.0)] * n
    res = layered_layout(LayoutInput(sizes, edges, {0}))
    assert _overlaps(res, sizes) == 0
    assert all(res.positions[u][1] < res.positions[v][1] for u, v in edges)
    assert res.routes  # long edges got bend points


def test_crossing_reduction_untangles_a_crossed_ladder():
    # Two chains whose second layer is given in crossed order.
    edges = [(0, 3), (1, 2), (2, 4), (3, 5)]
    res = layered_layout(LayoutInput([(50.0, 20.0)] * 6, edges))
    assert res.crossings == 0


def test_constants_are_pulled_down_next_to_their_consumer():
    # 0 -> 1 -> 2 -> 3 -> 4, and a source 5 feeding only node 4.
    edges = [(0, 1), (1, 2), (2, 3), (3, 4), (5, 4)]
    res = layered_layout(LayoutInput([(50.0, 20.0)] * 6, edges, {0}))
    assert res.layers[5] == res.layers[4] - 1


def test_cycles_do_not_break_the_layout():
    res = layered_layout(LayoutInput([(50.0, 20.0)] * 3, [(0, 1), (1, 2), (2, 0)]))
    assert len(res.positions) == 3


def test_layout_can_be_cancelled():
    with pytest.raises(LayoutCancelled):
        layered_layout(LayoutInput([(50.0, 20.0)] * 50, [(i, i + 1) for i in range(49)]), cancelled=lambda: True)


def test_weight_chains_hang_beside_their_consumer_and_the_data_flow_stays_straight():
    # input 0 -> 1 -> 2 -> ... -> 20; each op k reads a weight made by a two-node constant
    # chain (ConstantOfShape -> Unsqueeze, as in the onnx "light" models).
    n_flow = 20
    edges = [(k, k + 1) for k in range(n_flow)]
    sizes = [(176.0, 58.0)] * (n_flow + 1)
    ports = [(0.0, -40.0)] * n_flow
    for k in range(1, n_flow + 1):
        src, unsq = len(sizes), len(sizes) + 1
        sizes += [(176.0, 58.0), (176.0, 58.0)]
        edges += [(src, unsq), (unsq, k)]
        ports += [(0.0, 0.0), (0.0, 40.0)]
    res = layered_layout(LayoutInput(sizes, edges, {0}, ports))
    xs = {round(res.positions[k][0], 3) for k in range(n_flow + 1)}
    assert len(xs) == 1  # the constants never pull the flow sideways
    for k in range(1, n_flow + 1):
        src, unsq = n_flow + 1 + 2 * (k - 1), n_flow + 2 + 2 * (k - 1)
        assert res.layers[unsq] == res.layers[k] - 1 and res.layers[src] == res.layers[k] - 2
        assert res.positions[unsq][0] > res.positions[k][0]  # beside it, towards its port
    assert _overlaps(res, sizes) == 0


def test_producers_are_ordered_like_the_input_ports_they_feed():
    # 0 feeds 1 and 2; node 3 reads 2 on its left port and 1 on its right port.
    edges = [(0, 1), (0, 2), (2, 3), (1, 3)]
    ports = [(0.0, 0.0), (0.0, 0.0), (0.0, -50.0), (0.0, 50.0)]
    res = layered_layout(LayoutInput([(176.0, 58.0)] * 4, edges, {0}, ports))
    assert res.positions[2][0] < res.positions[1][0]


def _boxes_overlap(positions, sizes) -> int:
    """Pairs of boxes that overlap anywhere (rows of any height, not only within a layer)."""
    cells: dict[int, list] = {}
    for i, ((x, y), (w, h)) in enumerate(zip(positions, sizes)):
        for c in range(int(y // 100), int((y + h) // 100) + 1):
            cells.setdefault(c, []).append((x, x + w, y, y + h, i))
    bad = set()
    for boxes in cells.values():
        boxes.sort()
        for k, a in enumerate(boxes):
            for b in boxes[k + 1:]:
                if b[0] >= a[1] - 1e-6:
                    break
                if b[2] < a[3] - 1e-6 and a[2] < b[3] - 1e-6:
                    bad.add((a[4], b[4]))
    return len(bad)


def test_a_large_graphs_linear_runs_are_straight_columns_between_its_branches_without_overlaps():
    # More than LARGE nodes, so its linear runs are laid out collapsed (app/canvas/chains.py):
    # a main line with a skip every 5 nodes and a short side branch off every 40th node.
    from app.canvas.layout import LARGE

    n_main = LARGE + 500
    edges = [(v - 1, v) for v in range(1, n_main)] + [(v - 5, v) for v in range(5, n_main, 5)]
    sizes = [(176.0, 58.0)] * n_main
    for v in range(7, n_main - 10, 40):
        a, b = len(sizes), len(sizes) + 1
        sizes += [(176.0, 58.0), (176.0, 58.0)]
        edges += [(v, a), (a, b), (b, v + 6)]
    res = layered_layout(LayoutInput(sizes, edges, {0}))
    pos = res.positions
    assert all(pos[u][1] + sizes[u][1] <= pos[v][1] for u, v in edges), "an edge points up"
    assert _boxes_overlap(pos, sizes) == 0
    outs = [0] * len(sizes)
    ins = [0] * len(sizes)
    for u, v in edges:
        outs[u] += 1
        ins[v] += 1
    runs = [(u, v) for u, v in edges if outs[u] == 1 and ins[v] == 1]
    assert len(runs) > n_main // 2
    assert all(pos[u][0] == pos[v][0] for u, v in runs), "a linear run is not a straight column"
    gaps = {round(pos[v][1] - pos[u][1] - sizes[u][1], 6) for u, v in runs}
    assert len(gaps) == 1, "a linear run's nodes are not evenly stacked"
