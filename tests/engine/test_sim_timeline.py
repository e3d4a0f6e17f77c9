"""The simulator: the JSON contract, the timeline, stages, stream and thermal modes, the CLI."""

from __future__ import annotations

import dataclasses
import itertools
import json

import onnx
import pytest
from onnx import helper

import engine
from engine.hw.target import ThermalProfile, resolve_target
from engine.sim.stream import simulate_stream
from engine.sim.thermal import simulate_thermal
from engine.sim.timeline import SimOptions, simulate
from tests.engine.cli_util import run_cli
from tests.engine.sim_graphs import (
    _model,
    _w,
    branchy,
    chain,
    conv_graph,
    make_target,
    matmul_sandwich,
    synthetic,
    vi,
)

CONTRACT_OP_KEYS = {"node", "op_type", "device", "start_us", "latency_us", "bound", "fallback_reason"}


@pytest.mark.parametrize("target", ["phone-npu", "ethos-u55", "cloud-tpu"])
def test_json_lists_every_op_once_with_reasons_exactly_for_cpu_ops(target):
    g = branchy()
    doc = simulate(g, target).to_json()
    assert {"target", "latency_us", "ops", "partitions", "transfers", "summary"} <= doc.keys()
    assert doc["target"] == target
    names = [o["node"] for o in doc["ops"]]
    assert sorted(names) == sorted(n.name for n in g.nodes)
    for o in doc["ops"]:
        assert o.keys() >= CONTRACT_OP_KEYS
        assert o["device"] in ("npu", "cpu")
        assert o["bound"] in ("compute", "memory", "overhead", "transfer")
        if o["device"] == "cpu":
            assert isinstance(o["fallback_reason"], str)
            assert o["fallback_reason"].strip()
        else:
            assert o["fallback_reason"] is None
    assert sorted(n for p in doc["partitions"] for n in p["nodes"]) == sorted(names)
    for t in doc["transfers"]:
        assert {"from", "to", "bytes", "latency_us"} <= t.keys()
    s = doc["summary"]
    assert {"npu_ops", "cpu_ops", "npu_us", "cpu_us", "transfer_us"} <= s.keys()
    assert s["npu_ops"] + s["cpu_ops"] == len(names)
    json.dumps(doc)  # plain JSON types only


def test_ops_start_after_their_inputs_are_on_their_device():
    res = simulate(branchy(), "phone-npu", )
    end = {o.node: o.end_us for o in res.ops}
    by = {o.node: o for o in res.ops}
    arrive = {(t.transfer.value, t.transfer.to_device): t.start_us + t.transfer.latency_us for t in res.transfers}
    for f in res.placement.order:
        o = by[f.name]
        for v in f.inputs:
            p = v.producer()
            if p is None:
                continue
            ready = end[p.name] if by[p.name].device == o.device else arrive[(v.name, o.device)]
            assert o.start_us >= ready - 1e-9
    assert res.latency_us == pytest.approx(max(e.end_us for e in res.events))


def test_lanes_never_run_two_things_at_once():
    res = simulate(synthetic(300, seed=1), "phone-npu")
    for lane in ("npu", "cpu", "dma"):
        ev = sorted((e for e in res.events if e.lane == lane), key=lambda e: e.start_us)
        for a, b in itertools.pairwise(ev):
            assert b.start_us >= a.end_us - 1e-9


def test_stage_breakdown_has_the_field_notes_rows_and_shares():
    res = simulate(conv_graph(cin=3, cout=32, hw=224, k=3), "phone-npu")
    names = [s.name for s in res.stages]
    assert names == ["input load / decode", "preprocess", "layout conversion / copies", "NPU inference",
                     "CPU fallback", "postprocess"]
    assert sum(s.share for s in res.stages) == pytest.approx(1.0)
    stage = {s.name: s for s in res.stages}
    assert stage["input load / decode"].us > 0
    assert "decode" in stage["input load / decode"].note
    assert stage["NPU inference"].us > 0
    assert stage["CPU fallback"].us == 0
    assert res.end_to_end_us > res.latency_us


def test_many_small_dispatches_hurt_a_light_model():
    g = branchy(4)
    t = resolve_target("phone-npu")
    base = simulate(g, t)
    heavier = simulate(g, t.with_npu(dispatch_overhead_us=400.0))
    n_npu_parts = sum(1 for p in heavier.placement.partitions if p.device == "npu")
    assert heavier.latency_us > base.latency_us
    assert heavier.summary()["dispatch_us"] == pytest.approx(400.0 * n_npu_parts)


def test_facade_matches_module_function():
    g = conv_graph()
    assert engine.simulate(g, "phone-npu").latency_us == simulate(g, "phone-npu").latency_us


# -- stream ------------------------------------------------------------------------------------
def test_stream_overlap_beats_serial_and_reports_percentiles():
    res = simulate(conv_graph(cin=3, cout=64, hw=224, k=3), "phone-npu")
    st = simulate_stream(res, frames=200, queue_depth=3, seed=1)
    assert st.throughput_fps > 1.2 * st.serial_fps
    assert st.p99_us >= st.p50_us > 0
    again = simulate_stream(res, frames=200, queue_depth=3, seed=1)
    assert again.latencies_us == st.latencies_us


def test_deeper_queue_adds_latency_without_adding_throughput():
    res = simulate(conv_graph(cin=3, cout=64, hw=224, k=3), "phone-npu")
    q2 = simulate_stream(res, frames=300, queue_depth=2, jitter=0.0)
    q8 = simulate_stream(res, frames=300, queue_depth=8, jitter=0.0)
    assert q8.throughput_fps == pytest.approx(q2.throughput_fps, rel=0.02)
    if res.host_us["decode"] + res.host_us["preprocess"] < res.latency_us:
        assert q8.p50_us > q2.p50_us  # the producer runs ahead and frames wait in the queue


def test_camera_paced_stream_latency_is_close_to_single_frame():
    res = simulate(conv_graph(cin=3, cout=16, hw=64), "phone-npu")
    one = res.host_us["decode"] + res.host_us["preprocess"] + res.latency_us + res.host_us["postprocess"]
    st = simulate_stream(res, frames=50, arrival_fps=1e6 / (10 * one), jitter=0.0)
    assert st.p50_us == pytest.approx(one, rel=1e-6)


# -- thermal -----------------------------------------------------------------------------------
def test_sustained_load_slows_compute_bound_model_and_idle_gaps_cool_it():
    res = simulate(matmul_sandwich(512, 1024, 1024, outer="Relu"), "phone-npu")  # all on the NPU
    th = simulate_thermal(res)
    assert th.runs >= 100
    assert th.first_run_us > th.cold_start_us > 0
    assert th.steady_state_us > 1.3 * (th.first_run_us - th.cold_start_us)
    assert 500.0 <= th.steady_clock_mhz < 0.8 * 1000.0
    paced = simulate_thermal(res, period_us=10 * res.latency_us)  # one inference every 10 latencies
    assert paced.steady_clock_mhz > th.steady_clock_mhz
    assert paced.steady_state_us < th.steady_state_us


def test_memory_bound_model_throttles_less():
    compute = simulate(matmul_sandwich(512, 1024, 1024, outer="Relu"), "phone-npu")
    memory = simulate(chain(["Relu", "Sigmoid", "Relu"], shape=(1, 256, 128, 128)), "phone-npu")
    assert simulate_thermal(memory).slowdown < simulate_thermal(compute).slowdown


def test_no_throttling_when_sustained_equals_peak():
    t = make_target()
    t2 = dataclasses.replace(t, thermal=ThermalProfile(t.npu.clock_mhz, 1.0), _cache={})
    th = simulate_thermal(simulate(conv_graph(), t2), runs=150)
    assert th.steady_state_us == pytest.approx(th.first_run_us - th.cold_start_us)


# -- CLI ---------------------------------------------------------------------------------------
@pytest.fixture
def cnn_path(tmp_path):
    m = _model([helper.make_node("Conv", ["x", "W"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1] * 4),
                helper.make_node("Erf", ["c"], ["e"], name="erf"),
                helper.make_node("Relu", ["e"], ["y"], name="relu")],
               [vi("x", [1, 3, 32, 32])], [vi("y", [1, 8, 32, 32])], [_w("W", (8, 3, 3, 3))])
    p = tmp_path / "cnn.onnx"
    onnx.save(m, p)
    return p


def test_op_waiting_mostly_on_a_transfer_is_transfer_bound():
    res = simulate(matmul_sandwich(8, 16, 16), "phone-npu", SimOptions(move_islands=False))
    mm = next(o for o in res.ops if o.node == "mm")
    assert mm.device == "npu"
    assert mm.bound == "transfer"
    assert mm.transfer_wait_us >= resolve_target("phone-npu").transfer.fixed_us


def test_cli_json_is_one_document_with_the_contract(cnn_path):
    rc, out, err = run_cli(["simulate", str(cnn_path), "--target", "phone-npu", "--json"])
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["target"] == "phone-npu"
    assert sorted(o["node"] for o in doc["ops"]) == ["conv", "erf", "relu"]
    erf = next(o for o in doc["ops"] if o["node"] == "erf")
    assert erf["device"] == "cpu"
    assert "Erf" in erf["fallback_reason"]


def test_cli_text_report_has_stage_table_and_fallbacks(cnn_path):
    rc, out, err = run_cli(["simulate", str(cnn_path), "--target", "ethos-u55", "--stream", "20", "--thermal", "120"])
    assert rc == 0, err
    assert "NPU inference" in out
    assert "share" in out
    assert "CPU fallbacks" in out
    assert "erf" in out
    assert "stream" in out
    assert "p99" in out
    assert "thermal" in out


def test_cli_pin_and_bad_pin(cnn_path):
    rc, out, _ = run_cli(["simulate", str(cnn_path), "--target", "phone-npu", "--json", "--pin", "conv=cpu"])
    assert rc == 0
    conv = next(o for o in json.loads(out)["ops"] if o["node"] == "conv")
    assert conv["device"] == "cpu"
    assert "pinned" in conv["fallback_reason"]
    rc, _, err = run_cli(["simulate", str(cnn_path), "--target", "phone-npu", "--pin", "ghost=npu"])
    assert rc == 2
    assert err.startswith("error:")
    assert "ghost" in err


def test_cli_bad_calibration_file_is_exit_2(cnn_path, tmp_path):
    rc, out, err = run_cli(["simulate", str(cnn_path), "--target", "phone-npu", "--calib", str(tmp_path / "none.npz")])
    assert rc == 2
    assert out == ""
    assert err.startswith("error:")
    assert "none.npz" in err


def test_cli_camera_paced_stream(cnn_path):
    rc, out, _ = run_cli(["simulate", str(cnn_path), "--target", "phone-npu", "--json", "--stream", "30", "--fps", "30"])
    assert rc == 0
    st = json.loads(out)["stream"]
    assert st["arrival_fps"] == 30
    assert st["throughput_fps"] == pytest.approx(30, rel=0.01)


def test_cli_dynamic_input_dimension_is_exit_2_naming_it(tmp_path):
    from tests.models import tiny_add_mul

    path = tmp_path / "dyn.onnx"
    onnx.save(tiny_add_mul(), path)
    rc, _, err = run_cli(["simulate", str(path), "--target", "phone-npu"])
    assert rc == 2
    assert "input 'x' dimension 0 is dynamic ('N')" in err
    assert "--shape x=D0,3" in err
    rc, _, err = run_cli(["simulate", str(path), "--target", "phone-npu", "--shape", "x=4,3"])
    assert rc == 0, err


def test_cli_requires_target(cnn_path):
    rc, _, err = run_cli(["simulate", str(cnn_path)])
    assert rc == 2
    assert "--target" in err


def test_a_mixed_precision_model_is_priced_by_each_ops_precision():
    """int16 halves phone-npu's MAC rate, a float layer has no NPU MAC mode on an int8 target:
    the simulation must show both, not price the model as all-int8."""
    import engine
    from engine.sim.timeline import SimOptions, simulate
    from tests.models import demo_model

    g = engine.optimize(engine.load(demo_model("mobilenet_demo"))).graph
    conv = next(n.name for n in g.toposort() if n.op_type == "Conv" and n.attrs.get("group", 1) == 1)
    base = simulate(g, "phone-npu")
    wide = simulate(g, "phone-npu", SimOptions(precisions={conv: "int16"}))
    flt = simulate(g, "phone-npu", SimOptions(precisions={conv: "fp32"}))
    b, w, f = ({o.node: o for o in r.ops}[conv] for r in (base, wide, flt))
    assert (b.precision, w.precision) == ("int8", "int16")
    assert w.cost.compute_us == pytest.approx(2 * b.cost.compute_us, rel=0.02)
    assert wide.latency_us > base.latency_us
    assert f.device == "cpu" and "float" in f.fallback_reason and "int8" in f.fallback_reason
    assert {o.node: o.precision for o in wide.ops if o.node != conv} == {o.node: o.precision for o in base.ops if o.node != conv}


def test_a_qdq_file_is_priced_by_the_precisions_its_quantize_nodes_carry(tmp_path):
    from engine.quant.qdq import read_precisions
    from tests.engine.cli_util import run_cli
    from tests.models import ASSETS, demo_model

    out = tmp_path / "q.onnx"
    rc, _, err = run_cli(["quantize", str(demo_model("digits_cnn")), "--calib", str(ASSETS / "data" / "digits_calib.npz"),
                          "-o", str(out), "--quiet", "--analysis-samples", "0"])
    assert rc == 0, err
    import engine

    q = engine.load(out)
    precisions = read_precisions(q)
    assert precisions and set(precisions.values()) == {"int8"}
    assert read_precisions(engine.load(demo_model("digits_cnn"))) == {}
