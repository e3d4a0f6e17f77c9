"""The analysis follows edits live: deleting a node and undoing it update the charts within two
seconds for every demo model, and the GUI thread never blocks for more than 100 ms meanwhile
(a 5 ms timer measures the event loop's latency).

The stall bound is 100 ms plus what an idle event loop shows on the same machine just before
(measured, capped at 100 ms): on a loaded machine the OS alone can hold the GUI thread that
long, on a quiet one the bound is 100 ms. Both figures are printed."""

from __future__ import annotations

import pytest

from tests.app.analysis_support import (
    StallMeter,
    charts_current,
    close_analysed,
    idle_noise_ms,
    open_analysed,
    settle,
    stall_bound,
    wait_for,
)

pytestmark = pytest.mark.gui

MAX_UPDATE_S = 2.0


CASES = [("mobilenet_demo", "phone-npu"), ("transformer_demo", "ethos-u55"), ("digits_cnn", "ethos-u55")]


@pytest.mark.parametrize(("model", "target"), CASES, ids=[c[0] for c in CASES])
def test_deleting_a_node_and_undoing_update_the_charts_within_2s_without_blocking_the_gui(qapp, tmp_path, model,
                                                                                           target):
    from app import commands

    win, dock = open_analysed(model, target, tmp_path)
    try:
        ctl, charts = dock.controller, dock.charts
        first = ctl.current
        bars = charts.latency.row_names()
        settle(0.3)
        noise = idle_noise_ms()
        victim = max((n for n in win.doc.graph.nodes if n.outputs and any(v.uses() for v in n.outputs if v)),
                     key=lambda n: len(list(n.outputs[0].uses())) if n.outputs[0] is not None else 0)
        with StallMeter() as meter:
            commands.delete_nodes(win.doc, [victim])
            took_delete = wait_for(lambda: ctl.state == "failed" and not ctl.busy, 10, "the analysis of the edit")
            assert "cannot be compiled" in ctl.message
            assert "cannot be compiled" in charts.failure and "cannot be compiled" in charts.banner.toolTip()
            win.doc.undo_stack.undo()
            took_undo = wait_for(lambda: ctl.current is not first and charts_current(dock), 10, "the charts")
            settle(0.2)
        print(f"{model}: delete -> charts {took_delete:.2f} s, undo -> charts {took_undo:.2f} s, "
              f"longest event-loop stall {meter.worst:.0f} ms (idle loop here: {noise:.0f} ms)")
        assert took_delete < MAX_UPDATE_S and took_undo < MAX_UPDATE_S
        assert charts.failure is None
        assert charts.latency.row_names() == bars
        assert ctl.current.latency_us == pytest.approx(first.latency_us)
        assert meter.worst < stall_bound(noise), f"{model}: the GUI thread stalled for {meter.worst:.0f} ms"
    finally:
        close_analysed(win)


def test_an_edit_that_compiles_updates_the_charts_within_2s(qapp, tmp_path):
    """Pinning an op is an edit the compile follows all the way (the optimized graph is reused).

    The stall is printed, not asserted: on a pin the editor re-verifies the graph and rebuilds its
    inspector on the GUI thread (issue 7's Document.analyze), which dominates it here."""
    win, dock = open_analysed("mobilenet_demo", "ethos-u55", tmp_path)
    try:
        ctl = dock.controller
        first = ctl.current
        op = next(o.node for o in first.sim.ops if o.device == "npu" and o.op_type == "Conv")
        settle(0.3)
        noise = idle_noise_ms()
        with StallMeter() as meter:
            ctl.apply_pin([op], "cpu")
            took = wait_for(lambda: ctl.current is not first and charts_current(dock), 10, "the charts")
            settle(0.2)
        print(f"pin -> charts {took:.2f} s, longest event-loop stall {meter.worst:.0f} ms (idle loop: {noise:.0f} ms)")
        assert ctl.current.op(op).device == "cpu"
        assert took < MAX_UPDATE_S
    finally:
        close_analysed(win)


def test_switching_the_target_recompiles_with_statistics_of_the_new_targets_graph(qapp, tmp_path):
    """The worker process keeps calibration statistics across compiles; the optimized graph they
    name depends on the target (ethos-u55's lowerings split a BatchNormalization phone-npu fuses),
    so statistics from phone-npu reused for ethos-u55 failed the analysis with "not calibrated"."""
    win, dock = open_analysed("mobilenet_demo", "phone-npu", tmp_path)
    try:
        ctl = dock.controller
        ctl.set_target("ethos-u55")
        wait_for(lambda: ctl.state == "failed" or (not ctl.busy and ctl.current is not None
                                                   and ctl.current.compile.target.name == "ethos-u55"),
                 90, "the ethos-u55 compile")
        assert ctl.state != "failed", ctl.message
        assert any(o.device == "npu" for o in ctl.current.sim.ops)
    finally:
        close_analysed(win)
