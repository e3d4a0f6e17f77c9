"""Placement: verdicts with reasons, pins, contiguous partitions, transfers, the island step."""

from __future__ import annotations

import pytest
from onnx import helper

from engine.diagnostics import WARNING
from engine.errors import InputError
from engine.hw.target import resolve_target
from engine.place.partition import place
from engine.place.support import GraphFacts, node_verdict
from engine.sim.timeline import SimOptions, simulate
from nodes import registry
from nodes import rules as rules_mod
from tests.engine.sim_graphs import (
    _model,
    _w,
    branchy,
    conv_graph,
    every_op_target,
    load,
    make_target,
    matmul_sandwich,
    split_by_cheap_op,
    synthetic,
    vi,
)

PHONE = "phone-npu"


# -- verdicts ----------------------------------------------------------------------------------
def test_unlisted_op_falls_back_with_the_rule_text():
    g = matmul_sandwich(8, 16, 16)
    v = node_verdict(g.node_by_name("pre"), resolve_target(PHONE))
    assert not v.supported
    assert v.rule == "op_listed"
    assert "Erf" in v.reason
    assert "phone-npu" in v.reason


def test_window_rule_names_the_limit_and_the_kernel():
    g = conv_graph(k=11, relu=False)
    t = resolve_target(PHONE)
    facts = GraphFacts(g, t)
    ctx = facts.by_name["conv"].ctx
    c = make_target(constraints={"max_kernel": 7}).constraints_for("Conv")
    v = rules_mod.evaluate(ctx, c, rules_mod.WINDOW_RULES)
    assert not v.supported
    assert v.rule == "kernel_size_limit"
    assert "at most 7" in v.reason
    assert "11x11" in v.reason
    assert rules_mod.evaluate(ctx, t.constraints_for("Conv"), rules_mod.WINDOW_RULES).supported  # phone: <= 11


def test_conv_spec_carries_window_rules_into_placement():
    g = conv_graph(k=11, relu=False)
    pl = place(g, make_target(constraints={"max_kernel": 7, "dtypes": ["int8", "int32"], "max_rank": 4}),
               move_islands=False)
    assert pl.device["conv"] == "cpu"
    assert "Kernel height and width must be at most 7 on this NPU" in pl.reason["conv"]
    assert "11x11" in pl.reason["conv"]


def test_ethos_u55_refuses_a_stride_of_four():
    g = conv_graph(k=3, stride=4, relu=False)
    pl = place(g, resolve_target("ethos-u55"), move_islands=False)
    assert pl.device["conv"] == "cpu"
    assert "Strides must be at most 3" in pl.reason["conv"]


def test_int64_tensor_is_refused_with_its_dtype():
    m = _model([helper.make_node("ArgMax", ["x"], ["y"], name="am", axis=1)], [vi("x", [1, 10])],
               [helper.make_tensor_value_info("y", 7, [1, 1])])
    t = make_target(ops=["ArgMax"])
    v = node_verdict(load(m).node_by_name("am"), t)
    assert not v.supported
    assert v.rule == "dtype_supported"
    assert "int64" in v.reason


def test_dynamic_shape_is_refused_and_fix_names_shape_option():
    m = _model([helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", ["N", 8])], [vi("y", ["N", 8])])
    t = resolve_target(PHONE)
    g = load(m)
    v = node_verdict(g.node_by_name("r"), t)
    assert not v.supported
    assert v.rule == "static_shapes"
    assert "--shape" in rules_mod.fix_hint(rules_mod.static_shapes, t.constraints_for("Relu"))


def test_every_rule_has_a_docstring_that_formats():
    t = resolve_target(PHONE)
    rules = set(rules_mod.COMMON) | set(rules_mod.WINDOW_RULES)
    for spec in registry.all_specs():
        rules |= set(spec.rules)
    for fn in rules:
        assert (fn.__doc__ or "").strip(), fn.__name__
        text = rules_mod.message(fn, t.constraints_for("Conv"))
        assert "{" not in text, text
        assert text.endswith("."), text


# -- partitions and transfers ------------------------------------------------------------------
def _assert_contiguous(pl):
    names = [f.name for f in pl.order]
    pos = {n: i for i, n in enumerate(names)}
    start = 0
    for k, p in enumerate(pl.partitions):
        assert names[start:start + len(p.nodes)] == p.nodes
        assert all(pl.device[n] == p.device for n in p.nodes)
        if k:
            assert pl.partitions[k - 1].device != p.device
        start += len(p.nodes)
    assert start == len(names)
    for f in pl.order:  # every edge runs forward across partitions
        for v in f.inputs:
            prod = v.producer()
            if prod is not None:
                assert pos[prod.name] < pos[f.name]
                assert pl.partition_of[prod.name] <= pl.partition_of[f.name]


@pytest.mark.parametrize("make", [branchy, lambda: synthetic(400, seed=3)], ids=["branchy", "synthetic"])
def test_partitions_are_contiguous_runs_of_one_device(make):
    pl = place(make(), resolve_target(PHONE))
    assert pl.count("cpu")
    assert pl.count("npu")
    _assert_contiguous(pl)


def test_target_supporting_every_op_yields_zero_transfers():
    pl = place(branchy(), every_op_target())
    assert pl.transfers == []
    assert [p.device for p in pl.partitions] == ["npu"]


def test_transfers_sit_at_device_boundaries_with_bytes_and_latency():
    g = branchy(1)
    t = resolve_target(PHONE)
    pl = place(g, t, move_islands=False)
    assert pl.transfers
    for tr in pl.transfers:
        assert pl.device[tr.src] == tr.from_device != tr.to_device == pl.device[tr.dst]
        assert tr.bytes > 0
        assert tr.latency_us == pytest.approx(t.transfer.fixed_us + tr.bytes / (t.transfer.bandwidth_gbps * 1e3))
    # relu0 -> erf0 (NPU -> CPU) carries the 16x32x32 int8 activation
    assert any(tr.src == "relu0" and tr.dst == "erf0" and tr.bytes == 16 * 32 * 32 for tr in pl.transfers)


# -- the cost-aware island step, both directions -------------------------------------------------
def test_small_npu_island_between_cpu_ops_moves_to_cpu_and_that_is_faster():
    g = matmul_sandwich(8, 16, 16)  # tiny MatMul between two Erf the phone NPU cannot run
    t = resolve_target(PHONE)
    auto = simulate(g, t)
    kept = simulate(g, t, SimOptions(move_islands=False))
    assert kept.placement.device["mm"] == "npu"
    assert auto.placement.device["mm"] == "cpu"
    assert "transfers" in auto.placement.reason["mm"]
    assert auto.latency_us < kept.latency_us
    assert any(d.code == "island-to-cpu" for d in auto.placement.diagnostics)


def test_large_npu_island_stays_and_forcing_it_to_cpu_is_slower():
    g = matmul_sandwich(512, 1024, 1024)
    t = resolve_target(PHONE)
    auto = simulate(g, t)
    assert auto.placement.device["mm"] == "npu"
    assert auto.latency_us == pytest.approx(simulate(g, t, SimOptions(move_islands=False)).latency_us)
    forced = simulate(g, t, SimOptions(pins={"mm": "cpu"}))
    assert forced.placement.device["mm"] == "cpu"
    assert forced.latency_us > auto.latency_us


def test_cheap_unsupported_op_between_npu_partitions_gives_a_fix_suggestion():
    g = split_by_cheap_op(256, 1024, "Erf")
    t = resolve_target(PHONE)
    res = simulate(g, t)
    assert [p.device for p in res.placement.partitions] == ["npu", "cpu", "npu"]
    (s,) = res.placement.suggestions
    assert s.nodes == ["mid"]
    assert s.rules == ["op_listed"]
    assert s.saving_us > 0
    assert "Erf" in s.fixes[0]
    assert any(d.code == "npu-fix-suggestion" for d in res.diagnostics)
    fixed = simulate(g, make_target(ops=[*t.ops, "Erf"]))
    gained = res.latency_us - fixed.latency_us
    assert 0.5 * s.saving_us < gained < 2 * s.saving_us


# -- pins --------------------------------------------------------------------------------------
def test_pin_to_cpu_is_respected_and_the_rest_still_placed_automatically():
    g = conv_graph(cin=64, cout=64, hw=56)
    pl = place(g, resolve_target(PHONE), pins={"relu": "cpu"})
    assert pl.device == {"conv": "npu", "relu": "cpu"}
    assert pl.reason["relu"] == "pinned to the CPU by the user"


def test_pin_in_node_meta_is_respected():
    g = conv_graph()
    g.node_by_name("conv").meta["pin"] = "cpu"
    pl = place(g, resolve_target(PHONE))
    assert pl.device["conv"] == "cpu"


def test_pin_to_npu_of_unsupported_node_is_reported_and_ignored():
    g = matmul_sandwich(512, 1024, 1024)
    pl = place(g, resolve_target(PHONE), pins={"pre": "npu"})
    assert pl.device["pre"] == "cpu"
    assert "ignored" in pl.reason["pre"]
    assert any(d.code == "pin-ignored" and d.severity == WARNING for d in pl.diagnostics)


def test_pinned_npu_island_is_never_moved_to_cpu():
    g = matmul_sandwich(8, 16, 16)
    pl = place(g, resolve_target(PHONE), pins={"mm": "npu"})
    assert pl.device["mm"] == "npu"


def test_pin_of_unknown_node_is_input_error():
    with pytest.raises(InputError, match="no node named 'nope'"):
        place(conv_graph(), resolve_target(PHONE), pins={"nope": "cpu"})


def test_every_cpu_node_gets_a_fallback_diagnostic():
    pl = place(branchy(), resolve_target(PHONE), move_islands=False)
    flagged = {d.node for d in pl.diagnostics if d.code == "npu-fallback"}
    assert flagged == {n for n, d in pl.device.items() if d == "cpu"}


def test_constant_node_follows_its_consumer_and_causes_no_transfer():
    const = helper.make_node("Constant", [], ["c"], name="k", value=_w("cv", (1, 16, 32, 32)))
    m = _model([const, helper.make_node("Add", ["x", "c"], ["y"], name="add")],
               [vi("x", [1, 16, 32, 32])], [vi("y", [1, 16, 32, 32])])
    pl = place(load(m), resolve_target(PHONE), move_islands=False)
    assert pl.device["k"] == pl.device["add"] == "npu"
    assert pl.transfers == []
