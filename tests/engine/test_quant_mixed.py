"""Mixed-precision search (engine/quant/search.py): it reaches its target with fewer raises than
raising layers in isolated-sensitivity order, keeps the best model and says so in one warning when
the target is out of reach, refuses a raise that lowers the outputs, and refuses bad input."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import engine
from engine.quant.api import quantize
from engine.quant.config import QuantConfig
from engine.quant.data import CalibrationSet
from engine.quant.mixed import auto_mixed_precision
from engine.quant.search import SearchOptions, search_mixed_precision
from engine.quant.sensitivity import find_groups
from tests.engine.cli_util import run_cli

N = 16


def _decoy_model(path) -> None:
    """y = x W1 W2 + 0.001 * sum_i x D_i. Each decoy D_i has one weight of 50 on an input that is
    always ~0, so per-tensor int8 rounds its other weights to 0: its own (isolated) SQNR is ~0 dB,
    the worst of the model, yet scaled by 0.001 it hardly touches the output. The output's error
    comes from the main path, whose layers look fine on their own."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((32, 32)) * 0.2).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal((32, 8)) * 0.2).astype(np.float32), "w2"),
             numpy_helper.from_array(np.array(1e-3, np.float32), "small")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="main1"),
             helper.make_node("MatMul", ["h", "w2"], ["m"], name="main2")]
    acc = "m"
    for i in range(3):
        d = (rng.standard_normal((32, 8)) * 0.1).astype(np.float32)
        d[0, :] = 50.0
        inits.append(numpy_helper.from_array(d, f"d{i}"))
        nodes += [helper.make_node("MatMul", ["x", f"d{i}"], [f"dd{i}"], name=f"decoy{i}"),
                  helper.make_node("Mul", [f"dd{i}", "small"], [f"e{i}"], name=f"scale{i}"),
                  helper.make_node("Add", [acc, f"e{i}"], [f"s{i}" if i < 2 else "y"], name=f"add{i}")]
        acc = f"s{i}"
    g = helper.make_graph(nodes, "decoys", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def _decoy_data(n: int = N) -> np.ndarray:
    x = np.random.default_rng(1).standard_normal((n, 1, 32)).astype(np.float32)
    x[:, :, 0] *= 1e-3  # the input the decoys' outlier weight reads
    return x


@pytest.fixture(scope="module")
def decoy(tmp_path_factory):
    path = tmp_path_factory.mktemp("mixed") / "decoys.onnx"
    _decoy_model(path)
    graph = engine.load(path)
    data = CalibrationSet.from_arrays("decoys", {"x": _decoy_data()})
    return path, graph, data


def test_search_reaches_its_target_with_fewer_raises_than_isolated_order(decoy):
    _, graph, data = decoy
    config = QuantConfig()
    base = quantize(graph, data, config, analysis_samples=8)
    ranking = [le.node for le in base.analysis.sensitivity()]
    assert ranking[:3] == ["decoy0", "decoy1", "decoy2"] or set(ranking[:3]) == {"decoy0", "decoy1", "decoy2"}
    start = min(s.sqnr_db for s in base.analysis.outputs.values())
    target = start + 6.0
    greedy = auto_mixed_precision(graph, data, config, base.calibration, ranking, target_sqnr_db=target)
    # the ranges cover every sample here: the check is about the order, not about new samples
    mp = search_mixed_precision(graph, data, config, base.calibration, None,
                                SearchOptions(target_sqnr_db=target, choices=("int16",),
                                              check_outside_calibration=False))
    assert mp.reached and mp.output_sqnr_db >= target
    assert mp.check_bound_db is not None and mp.check_bound_db >= target  # with the margin new samples need
    ours = {n for n, p in mp.config.precision.items() if p != "int8"}
    theirs = {n for n, p in greedy.config.precision.items() if p != "int8"}
    assert not ours & {"decoy0", "decoy1", "decoy2"}, "the decoys cost nothing at the output"
    assert len(ours) < len(theirs), (ours, theirs)
    assert len(mp.steps) < len(greedy.steps)
    # the held-out figure the report gives is the model's: measured again, it holds
    doc = mp.to_json()
    assert doc["reached"] and doc["samples"]["verify"] >= 2 and doc["samples"]["search"] >= 2
    assert sum(r["db_gain"] for r in doc["raised"]) == pytest.approx(doc["output_sqnr_db"] - doc["start_sqnr_db"],
                                                                     abs=0.01)


def test_unreachable_target_keeps_the_best_model_and_warns_once(decoy, tmp_path):
    path, _, _ = decoy
    np.savez(tmp_path / "c.npz", x=_decoy_data())
    out, report = tmp_path / "q.onnx", tmp_path / "r.json"
    rc, _, err = run_cli(["quantize", str(path), "--calib", str(tmp_path / "c.npz"), "-o", str(out), "--quiet",
                               "--no-optimize", "--target-sqnr", "100", "--raise-to", "int16", "--target",
                               "phone-npu", "--report", str(report)])
    assert rc == 0, err
    warnings = [ln for ln in err.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1, err
    mp = json.loads(report.read_text())["mixed_precision"]
    assert not mp["reached"] and mp["target_sqnr_db"] == 100.0
    assert mp["output_sqnr_db"] > mp["start_sqnr_db"]  # the best model found, not the int8 one
    assert f"{mp['output_sqnr_db']:.2f} dB" in warnings[0] and "not reached" in warnings[0]
    assert out.exists()
    assert mp["latency_us"]["final"] >= mp["latency_us"]["int8"]
    assert {"node", "from", "to", "latency_us_delta", "db_gain"} <= set(mp["raised"][0])


def _underflow_model() -> engine.Graph:
    """x W1 -> * 1e-7 -> W2 -> * 1e7: the scaled tensor (~1e-7) is subnormal in FP16, which keeps
    only a few bits of it, while int8 with its own scale keeps it to 1/127."""
    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array((rng.standard_normal((16, 16)) * 0.3).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal((16, 16)) * 0.3).astype(np.float32), "w2"),
             numpy_helper.from_array(np.array(1e-7, np.float32), "tiny"),
             numpy_helper.from_array(np.array(1e7, np.float32), "big")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["a"], name="mm1"),
             helper.make_node("Mul", ["a", "tiny"], ["t"], name="shrink"),
             helper.make_node("MatMul", ["t", "w2"], ["b"], name="mm2"),
             helper.make_node("Mul", ["b", "big"], ["y"], name="grow")]
    g = helper.make_graph(nodes, "underflow", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])], inits)
    return engine.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def test_a_raise_that_lowers_the_output_is_refused():
    graph = _underflow_model()
    data = CalibrationSet.from_arrays("u", {"x": np.random.default_rng(3).standard_normal((N, 1, 16)).astype(np.float32)})
    base = quantize(graph, data, QuantConfig(), analysis_samples=0)
    mp = search_mixed_precision(graph, data, base.config, base.calibration, None,
                                SearchOptions(target_sqnr_db=90.0, choices=("fp16",)))
    assert mp.refused, "raising the readers of the 1e-7 tensor to fp16 loses it"
    assert all(r["db_change"] < 0 and r["to"] == "fp16" for r in mp.refused)
    assert mp.config.node_precision("mm2") != "fp16"  # it would read the tensor in fp16
    assert mp.output_sqnr_db >= mp.start_sqnr_db
    # steps are accepted on the search samples (the check samples only report them: one step here
    # is -0.016 dB on the check samples the picture-spread split holds out)
    sq = [st["search_sqnr_db"] for st in mp.steps]
    assert sq == sorted(sq), "every accepted step improves the search samples' outputs"


def test_groups_keep_squeeze_excite_blocks_and_attention_together():
    rng = np.random.default_rng(4)
    w = numpy_helper.from_array((rng.standard_normal((8, 8, 1, 1)) * 0.3).astype(np.float32), "w")
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["p"], name="gap"),
             helper.make_node("Conv", ["p", "w"], ["c"], name="fc"),
             helper.make_node("HardSigmoid", ["c"], ["s"], name="gate"),
             helper.make_node("Mul", ["x", "s"], ["y0"], name="excite"),
             helper.make_node("Add", ["y0", "x"], ["y"], name="residual")]
    g = helper.make_graph(nodes, "se", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 4, 4])], [w])
    graph = engine.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    groups = find_groups(graph, [n.name for n in graph.nodes])
    se = next(gr for gr in groups if gr.kind == "squeeze_excite")
    assert set(se.nodes) == {"gap", "fc", "gate", "excite"}
    assert any(gr.kind == "tensor" and set(gr.nodes) == {"excite", "residual"} for gr in groups)


@pytest.mark.parametrize(("extra", "needle"), [
    (["--target-sqnr", "abc"], "expected a number"),
    (["--target-sqnr", "101"], "at most 100"),
    (["--target-sqnr", "30", "--target", "ethos-u55", "--raise-to", "fp16"], "no fp16 mode"),
])
def test_bad_search_options_are_one_error_line(decoy, tmp_path, extra, needle):
    path, _, _ = decoy
    np.savez(tmp_path / "c.npz", x=_decoy_data())
    out = tmp_path / "q.onnx"
    rc, _, err = run_cli(["quantize", str(path), "--calib", str(tmp_path / "c.npz"), "-o", str(out), "--quiet",
                          *extra])
    assert rc == 2 and err.startswith("error:") and err.count("\n") == 1, err
    assert needle in err and not out.exists()


def test_too_few_calibration_samples_to_verify_a_search_is_an_error(decoy, tmp_path):
    path, _, _ = decoy
    np.savez(tmp_path / "c.npz", x=_decoy_data(3))
    out = tmp_path / "q.onnx"
    rc, _, err = run_cli(["quantize", str(path), "--calib", str(tmp_path / "c.npz"), "-o", str(out), "--quiet",
                          "--target-sqnr", "30"])
    assert rc == 2 and err.startswith("error:") and err.count("\n") == 1, err
    assert "3 sample(s)" in err and "at least 4" in err and not out.exists()


def test_the_search_aims_higher_when_its_samples_disagree():
    from engine.quant.search_eval import Quality

    alike = Quality({"y": np.tile([[100.0, 1.0, 100.0, 99.0]], (8, 1))})
    spread = Quality({"y": np.array([[100.0, e, 100.0, 99.0] for e in (0.1, 0.2, 0.5, 1.0, 1.5, 2.0, 4.0, 8.0)])})
    assert alike.bound_db() == pytest.approx(alike.sqnr_db)  # identical samples: no margin
    assert spread.bound_db() < spread.sqnr_db - 1.0  # one noisy sample in eight: a margin of dBs


def test_a_raise_measured_on_the_nodes_it_changes_equals_the_full_run(decoy):
    from engine.quant.search_eval import Evaluator, merge

    _, graph, data = decoy
    base = quantize(graph, data, QuantConfig(), analysis_samples=0)
    samples = [data.sample(i) for i in range(3)]
    part = Evaluator(graph, base.calibration, samples, anchor=base.config)
    full = Evaluator(graph, base.calibration, samples)
    assert part.anchor is not None
    for gr in find_groups(graph, base.model.node_precision):
        cfg = base.config
        for n, p in merge({}, gr.nodes, "int16").items():
            cfg = cfg.with_precision(n, p)
        a, b = part.measure(cfg), full.measure(cfg)
        assert a.sqnr_db == pytest.approx(b.sqnr_db, abs=1e-6), gr.name


def test_the_reported_figure_is_that_of_samples_outside_the_calibrated_ranges(decoy):
    """Samples the ranges were not fitted to clip where the others do not: the search says what
    they reach, and that it missed the target, instead of its own samples' figure."""
    _, graph, _ = decoy
    x = _decoy_data()
    from engine.quant.search import split_samples

    _, check = split_samples(len(x))
    x[check] *= 3.0  # beyond every range the other samples give
    data = CalibrationSet.from_arrays("decoys", {"x": x})
    base = quantize(graph, data, QuantConfig(), analysis_samples=0)
    mp = search_mixed_precision(graph, data, base.config, base.calibration, None,
                                SearchOptions(target_sqnr_db=40.0, choices=("int16",)))
    assert mp.search_sqnr_db is not None and mp.output_sqnr_db < mp.search_sqnr_db - 3.0
    assert not mp.reached and f"{mp.output_sqnr_db:.2f} dB" in (mp.warning() or "")


def test_the_written_model_is_calibrated_on_every_sample_and_analysed_on_the_check_samples(decoy, tmp_path):
    """The search's ranges leave the check samples out; the written model's cover them too (the
    check samples observed alone and merged: min/max statistics are exact), and its analysis runs
    on those few samples only; the report says where the command's time went."""
    from engine.quant.calibrate import calibrate
    from engine.quant.search import held_out_split, subset, with_samples

    path, graph, data = decoy
    np.savez(tmp_path / "c.npz", x=_decoy_data())
    report = tmp_path / "r.json"
    rc, _, err = run_cli(["quantize", str(path), "--calib", str(tmp_path / "c.npz"), "-o", str(tmp_path / "q.onnx"),
                          "--quiet", "--no-optimize", "--target-sqnr", "45", "--raise-to", "int16", "--report",
                          str(report)])
    assert rc == 0, err
    doc = json.loads(report.read_text())
    mp = doc["mixed_precision"]
    assert doc["samples"] == N and doc["analysis_samples"] == mp["samples"]["verify"] < N
    phases = [p["phase"] for p in mp["phases"]]
    assert phases[:2] == ["load", "calibrate"] and phases[-3:] == ["calibrate check", "analyze", "export"]
    search = sum(p["seconds"] for p in mp["phases"][2:-3])
    assert search == pytest.approx(mp["seconds"], abs=0.05)  # the search's phases add up to its seconds
    rest, held = held_out_split(N)
    config = QuantConfig()
    merged = with_samples(graph, calibrate(graph, subset(data, rest), config), data, held, config)
    whole = calibrate(graph, data, config)
    assert merged.samples == N and merged.stats.keys() == whole.stats.keys()
    assert all(merged.stats[n].range() == whole.stats[n].range() for n in whole.stats)


def test_the_time_budget_bounds_the_whole_command_not_only_the_search(decoy, tmp_path, monkeypatch):
    """A slow calibration leaves the search only what remains of --time-budget."""
    import time

    import engine.quant.api as api
    import engine.quant.search as search

    path, _, _ = decoy
    np.savez(tmp_path / "c.npz", x=_decoy_data())
    slow, given = api.calibrate, []

    def slow_calibrate(*a, **k):
        time.sleep(1.5)
        return slow(*a, **k)

    def spy(*a, **k):
        given.append(a[5].time_budget_s)
        return real(*a, **k)

    real = search.search_mixed_precision
    monkeypatch.setattr(api, "calibrate", slow_calibrate)
    monkeypatch.setattr(search, "search_mixed_precision", spy)
    report = tmp_path / "r.json"
    rc, _, err = run_cli(["quantize", str(path), "--calib", str(tmp_path / "c.npz"), "-o", str(tmp_path / "q.onnx"),
                          "--quiet", "--no-optimize", "--target-sqnr", "45", "--raise-to", "int16", "--report",
                          str(report), "--time-budget", "20"])
    assert rc == 0, err
    assert given and given[0] <= 20 - 1.5
    mp = json.loads(report.read_text())["mixed_precision"]
    assert next(p["seconds"] for p in mp["phases"] if p["phase"] == "calibrate") >= 1.5


def test_a_target_the_check_samples_reach_without_margin_is_not_reached_and_says_so():
    from engine.quant.mixed import MixedPrecisionResult

    mp = MixedPrecisionResult(QuantConfig(), [], False, 31.0, 0.999, 30.0, None, 20.0, 100.0,
                              stopped="no candidate left", check_bound_db=28.5)
    line = mp.warning()
    assert line is not None and "\n" not in line
    assert "not reached with the margin new samples need (bound 28.50 dB)" in line and "31.00 dB" in line
    mp.output_sqnr_db = 29.0  # the figure itself misses: no word of a margin
    assert "margin" not in (mp.warning() or "")


def test_a_verdict_on_fewer_check_samples_asks_a_wider_margin():
    from engine.quant.search_eval import Z_NINE_IN_TEN, Quality, small_sample_z

    rows = [[100.0, e, 100.0, 99.0] for e in (0.5, 1.0, 2.0, 4.0)]
    four, eight = Quality({"y": np.array(rows)}), Quality({"y": np.array(rows * 2)})
    assert small_sample_z(4) > small_sample_z(8) > small_sample_z(100) > Z_NINE_IN_TEN
    assert small_sample_z(100) == pytest.approx(Z_NINE_IN_TEN, abs=0.01)  # many samples: the normal z
    assert four.bound_db(small_sample_z(4)) < four.bound_db() - 1.0  # 4 samples: dBs more margin
    assert eight.bound_db(small_sample_z(8)) > four.bound_db(small_sample_z(4))


def test_a_slow_model_build_does_not_thin_the_search_samples_of_a_fast_model(decoy, monkeypatch):
    # Building each measurement's model costs the same however many samples it runs: a machine
    # under load (a slower build) must not make the same command decide on fewer samples.
    import time

    from engine.quant import search_eval

    _, graph, data = decoy
    base = quantize(graph, data, QuantConfig(), analysis_samples=8)
    real = search_eval.build_qdq

    def slow_build(*args, **kwargs):
        time.sleep(0.05)
        return real(*args, **kwargs)

    monkeypatch.setattr(search_eval, "build_qdq", slow_build)
    mp = search_mixed_precision(graph, data, base.config, base.calibration, None,
                                SearchOptions(target_sqnr_db=200.0, choices=("int16",), time_budget_s=6.0))
    doc = mp.to_json()
    # 6 s / 40 is 150 ms a measurement: 50 ms of it building, the samples' runs well under 1 ms
    assert doc["samples"]["search"] == N - len(doc["check_samples"])
