"""The cost model: fold cycles, roofline bounds, tiling, on-chip residency, CPU costs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.hw.cost_model import CostModel, fold_cycles, gemm_shapes
from engine.hw.target import resolve_target
from engine.ir.fused import FusedActivation
from engine.place.support import GraphFacts
from engine.sim.timeline import SimOptions, simulate
from tests.engine.sim_graphs import chain, conv_graph, every_op_target, make_target, matmul_sandwich


def closed_form_os(m, k, n, rows, cols):
    """SCALE-Sim output stationary: ceil(M/R) * ceil(N/C) folds of (2R + C + K - 2) cycles."""
    return math.ceil(m / rows) * math.ceil(n / cols) * (2 * rows + cols + k - 2)


def closed_form_ws(m, k, n, rows, cols):
    """Weight stationary: K on rows, N on columns, M streamed."""
    return math.ceil(k / rows) * math.ceil(n / cols) * (2 * rows + cols + m - 2)


SHAPES = [(1, 1, 1), (128, 128, 128), (3136, 576, 64), (49, 4608, 512), (1000, 2048, 1), (197, 768, 2304)]
ARRAYS = [(8, 16), (32, 32), (128, 128), (16, 64)]


@pytest.mark.parametrize("mkn", SHAPES)
@pytest.mark.parametrize("array", ARRAYS)
def test_fold_model_matches_closed_form(mkn, array):
    m, k, n = mkn
    rows, cols = array
    assert fold_cycles(m, k, n, rows, cols, "os")[0] == closed_form_os(m, k, n, rows, cols)
    assert fold_cycles(m, k, n, rows, cols, "ws")[0] == closed_form_ws(m, k, n, rows, cols)


def test_fold_model_hand_computed_figures():
    # 128^3 on 32x32 output stationary: 4 x 4 folds of 64 + 32 + 128 - 2 = 222 cycles.
    assert fold_cycles(128, 128, 128, 32, 32, "os") == (16 * 222, 16)
    # A single output on a 128x128 array still pays fill and drain: 2*128 + 128 + 1 - 2.
    assert fold_cycles(1, 1, 1, 128, 128, "os") == (383, 1)


def test_conv_maps_to_gemm_and_compute_time_follows_folds():
    g = conv_graph(cin=64, cout=64, hw=56, k=3, relu=False)
    tgt = resolve_target("phone-npu")  # 32x32 os at 1000 MHz, int8 at one MAC per PE per cycle
    facts = GraphFacts(g, tgt)
    f = facts.by_name["conv"]
    assert gemm_shapes(f.node, f.ctx, 32)[0].m == 56 * 56
    cost = CostModel(tgt).npu_cost(f, facts)
    cycles = closed_form_os(56 * 56, 64 * 9, 64, 32, 32)
    assert cost.cycles == cycles
    assert cost.compute_us == pytest.approx(cycles / 1000.0)
    assert cost.macs == 56 * 56 * 64 * 64 * 9
    assert 0.5 < cost.utilization <= 1.0


def test_lower_precision_halves_the_rate():
    g = conv_graph(relu=False)
    int8 = CostModel(resolve_target("phone-npu"))
    int16_target = make_target(precision="int16")
    f8 = GraphFacts(g, resolve_target("phone-npu"))
    f16 = GraphFacts(g, int16_target)
    c8 = int8.npu_cost(f8.by_name["conv"], f8)
    c16 = CostModel(int16_target).npu_cost(f16.by_name["conv"], f16)
    assert c16.compute_us == pytest.approx(2 * c8.compute_us, rel=1e-3)
    assert c16.dram_bytes > c8.dram_bytes  # 2-byte tensors


def test_depthwise_conv_packs_groups_on_columns():
    g = conv_graph(cin=64, cout=64, group=64, relu=False)
    f = GraphFacts(g, resolve_target("phone-npu")).by_name["conv"]
    (shape,) = gemm_shapes(f.node, f.ctx, 32)
    assert (shape.k, shape.n, shape.repeats) == (9, 32, 2)


def test_large_elementwise_is_memory_bound():
    g = chain(["Relu"], shape=(1, 256, 128, 128))
    res = simulate(g, resolve_target("phone-npu"))
    assert res.ops[0].cost.bound == "memory"


def test_large_gemm_on_big_array_is_compute_bound():
    g = matmul_sandwich(2048, 2048, 2048)
    res = simulate(g, resolve_target("cloud-tpu"), SimOptions(move_islands=False))
    mm = next(o for o in res.ops if o.node == "mm")
    assert mm.device == "npu"
    assert mm.cost.bound == "compute"
    assert mm.cost.compute_us > 5 * mm.cost.memory_us


def test_tiny_op_is_overhead_bound():
    g = chain(["Relu"], shape=(1, 8))
    res = simulate(g, resolve_target("phone-npu"))
    assert res.ops[0].cost.bound == "overhead"


def test_roofline_gemm_too_big_for_sram_refetches_activations():
    import dataclasses

    g = matmul_sandwich(256, 1024, 1024)
    small = make_target("ethos-u55", ops=["MatMul"], constraints={"dtypes": ["int8", "int32"], "max_rank": 4})
    big = make_target("ethos-u55", ops=["MatMul"], sram_kib=8192,
                      constraints={"dtypes": ["int8", "int32"], "max_rank": 4})
    costs = []
    for t in (small, big):
        t = dataclasses.replace(t, ethos_u=None)  # the roofline model, not vela's estimate
        facts = GraphFacts(g, t)
        costs.append(CostModel(t).npu_cost(facts.by_name["mm"], facts))
    tensors = 256 * 1024 + 1024 * 1024 + 256 * 1024  # int8 A, W, C
    assert costs[1].dram_bytes == tensors
    assert costs[0].dram_bytes > tensors  # A streamed again for every weight chunk


def test_fused_chain_keeps_intermediate_on_chip():
    g = conv_graph(cin=32, cout=32, hw=28)
    on_chip = simulate(g, make_target(residency_fraction=0.5))
    off_chip = simulate(g, make_target(residency_fraction=0.0))
    by = {o.node: o for o in on_chip.ops}
    off = {o.node: o for o in off_chip.ops}
    inter = 32 * 28 * 28  # int8 bytes of the Conv output
    assert off["conv"].cost.dram_bytes - by["conv"].cost.dram_bytes == inter
    assert off["relu"].cost.dram_bytes - by["relu"].cost.dram_bytes == inter
    assert on_chip.latency_us < off_chip.latency_us


def test_fused_activation_is_a_free_epilogue():
    plain = conv_graph(relu=False)
    fused = conv_graph(relu=False)
    fused.node_by_name("conv").activation = FusedActivation("Relu", names=("relu",))
    a = simulate(plain, resolve_target("phone-npu"))
    b = simulate(fused, resolve_target("phone-npu"))
    assert b.latency_us == pytest.approx(a.latency_us)
    assert b.to_json()["ops"][0]["activation"]["op_type"] == "Relu"


def test_cpu_cost_is_roofline_of_peak_and_bandwidth():
    g = matmul_sandwich(64, 64, 64)
    t = resolve_target("phone-npu").with_cpu(peak_gflops=10.0, memory_bandwidth_gbps=5.0, op_overhead_us=0.0, cache_kib=0)
    facts = GraphFacts(g, t)
    c = CostModel(t).cpu_cost(facts.by_name["mm"])
    assert c.compute_us == pytest.approx(2 * 64**3 / 10e3)
    assert c.memory_us == pytest.approx((3 * 64 * 64 * 4) / 5e3)
    assert c.bound == "compute"


def test_layout_conversion_costs_what_it_moves():
    g = conv_graph(cin=16, cout=16, hw=32, relu=False)
    t = every_op_target()
    res = simulate(g, t)
    conv_events = [e for e in res.events if e.kind == "convert"]
    # input: 16x32x32 fp32 read + int8 written; output: the same back, at the CPU's bandwidth.
    moved = 16 * 32 * 32 * 4 + 16 * 32 * 32
    assert [e.end_us - e.start_us for e in conv_events] == pytest.approx([t.cpu.memory_us(moved)] * 2)


def test_cpu_memory_time_uses_cache_then_dram():
    t = resolve_target("phone-npu").with_cpu(cache_kib=1024, cache_bandwidth_gbps=50.0, memory_bandwidth_gbps=10.0)
    assert t.cpu.memory_us(1024 * 1024) == pytest.approx(1024 * 1024 / 50e3)
    assert t.cpu.memory_us(3 * 1024 * 1024) == pytest.approx(1024 * 1024 / 50e3 + 2 * 1024 * 1024 / 10e3)


@pytest.mark.parametrize(("op", "attrs", "shapes"), [
    ("Conv", {"group": 1}, [(1, 8, 10, 10), (16, 8, 3, 3)]),
    ("Conv", {"group": 8}, [(1, 8, 10, 10), (8, 1, 3, 3)]),
    ("ConvTranspose", {"strides": [2, 2]}, [(1, 8, 5, 5), (8, 4, 3, 3)]),
    ("MatMul", {}, [(2, 7, 12), (12, 5)]),
    ("MatMul", {}, [(3, 7, 12), (3, 12, 5)]),
    ("Gemm", {"transB": 1}, [(7, 12), (5, 12)]),
])
def test_the_gemms_an_op_declares_hold_exactly_its_macs(op, attrs, shapes):
    """The cost model's matrix products come from the OpSpec and must account for every MAC
    the op's own work() counts (one home for each op's arithmetic)."""
    from onnx import TensorProto, helper, numpy_helper

    import engine

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(shapes[1]).astype(np.float32), "w")]
    node = helper.make_node(op, ["x", "w"], ["y"], name="n", **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shapes[0])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])], initializer=inits)
    graph = engine.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    f = GraphFacts(graph, resolve_target("phone-npu")).by_name["n"]
    from nodes import registry

    gemms = registry.get(op).gemm(f.ctx)
    assert gemms, f"{op} declares no GEMM"
    assert sum(x.m * x.k * x.n * x.groups * x.batch for x in gemms) == f.work.macs > 0
