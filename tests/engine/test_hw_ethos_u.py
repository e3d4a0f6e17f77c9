"""The Ethos-U targets: vela's own estimate agrees with ours, and their YAML is checked.

The fidelity tests compile small models for ethos-u55-128, ethos-u55-256 and ethos-u65-256,
run Arm's vela 5.2 on the exported model.tflite (the test extras install it) and compare its
per-layer cycles with our estimate over the ops both put on the NPU: a change to the cost
model or the targets' tables that breaks agreement fails here. tests/bench/bench_vela_fidelity.py
prints the same comparison on the demos and zoo CNNs.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

import engine
from engine.cli import main as cli_main
from engine.compiler import CompileOptions, compile_model
from engine.errors import InputError
from engine.export.vela import compare
from engine.hw.target import TARGETS_DIR, load_target, resolve_target
from engine.quant.config import QuantConfig
from engine.quant.data import CalibrationSet
from tests.models import ASSETS

ETHOS_U = ("ethos-u55-128", "ethos-u55-256", "ethos-u65-256")


def _cnn() -> onnx.ModelProto:
    """A small CNN of the layer kinds vela costs differently: a 3x3 convolution, a depthwise
    3x3, a pointwise convolution, a residual Add, a max pool and a fully connected layer."""
    rng = np.random.default_rng(7)

    def w(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="dw", pads=[1, 1, 1, 1], group=32),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], name="pw"),
        helper.make_node("Add", ["c3", "r1"], ["a"], name="add"),
        helper.make_node("MaxPool", ["a"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p", "w4", "b4"], ["c4"], name="conv4", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c4"], ["r4"], name="relu4"),
        helper.make_node("Flatten", ["r4"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "w5", "b5"], ["y"], name="fc", transB=1),
    ]
    inits = [w("w1", 32, 8, 3, 3), w("b1", 32), w("w2", 32, 1, 3, 3), w("b2", 32), w("w3", 32, 32, 1, 1),
             w("b3", 32), w("w4", 64, 32, 3, 3), w("b4", 64), w("w5", 10, 64 * 8 * 8), w("b5", 10)]
    g = helper.make_graph(nodes, "fidelity_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _compile(model, target: str, calib: dict[str, np.ndarray]):
    g = engine.load(model)
    return compile_model(g, target, CalibrationSet.from_arrays("fixture", calib),
                         CompileOptions(quant=QuantConfig(method="percentile"), analysis_samples=0,
                                        require_tflite=True, vela=True))


@pytest.fixture(scope="module")
def cnn_results():
    x = np.random.default_rng(0).standard_normal((4, 1, 8, 32, 32)).astype(np.float32)
    model = _cnn()
    out = {}
    for t in ETHOS_U:
        r = _compile(model, t, {"x": x})
        out[t] = (r, compare(r.sim, r.vela, resolve_target(t).npu.clock_mhz))
    return out


@pytest.mark.parametrize("target", ETHOS_U)
def test_small_cnn_total_within_15_percent_of_vela(cnn_results, target):
    _, c = cnn_results[target]
    assert not c.cpu_here_npu_there and not c.npu_here_cpu_there  # same placement: a pure cost comparison
    assert 0.85 <= c.ratio <= 1.15, f"ours {c.ours_total_us:.1f} us, vela {c.vela_total_us:.1f} us"


@pytest.mark.parametrize("target", ETHOS_U)
def test_small_cnn_layers_rank_as_vela_ranks_them(cnn_results, target):
    _, c = cnn_results[target]
    assert sum(1 for row in c.layers if row["macs"]) == 6  # vela counts the max pool's MACs too
    assert c.spearman() >= 0.9, c.layers


def test_bigger_npu_is_faster_as_vela_says(cnn_results):
    ours = {t: c.ours_total_us for t, (_, c) in cnn_results.items()}
    vela = {t: c.vela_total_us for t, (_, c) in cnn_results.items()}
    assert sorted(ours, key=ours.get) == sorted(vela, key=vela.get)


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u65-256"])  # the -256 U55 shares the -128's system
def test_mobilenet_demo_total_within_15_percent_of_vela_on_shared_npu_ops(target):
    data = np.load(ASSETS / "data" / "mobilenet_calib.npz")
    r = _compile(onnx.load(ASSETS / "models" / "mobilenet_demo.onnx"), target, {"image": data["image"][:4]})
    c = compare(r.sim, r.vela, resolve_target(target).npu.clock_mhz)
    assert 0.85 <= c.ratio <= 1.15, f"ours {c.ours_total_us:.1f} us, vela {c.vela_total_us:.1f} us"
    assert c.spearman() >= 0.9


@pytest.fixture(scope="module")
def transformer_results():
    """transformer_demo (two encoder blocks: LayerNorms, FullyConnected layers, attention MatMuls of
    two activations and softmaxes) compiled with vela for each Ethos-U config."""
    data = np.load(ASSETS / "data" / "transformer_calib.npz")
    model = onnx.load(ASSETS / "models" / "transformer_demo.onnx")
    out = {}
    for t in ETHOS_U:
        r = _compile(model, t, {"x": data["x"][:4]})
        out[t] = compare(r.sim, r.vela, resolve_target(t).npu.clock_mhz)
    return out


@pytest.mark.parametrize("target", ETHOS_U)
def test_transformer_total_within_15_percent_of_vela(transformer_results, target):
    c = transformer_results[target]
    assert not c.cpu_here_npu_there and not c.npu_here_cpu_there
    assert 0.85 <= c.ratio <= 1.15, f"ours {c.ours_total_us:.1f} us, vela {c.vela_total_us:.1f} us"


@pytest.mark.parametrize("target", ETHOS_U)
def test_transformer_attention_matmuls_rank_as_vela_ranks_them(transformer_results, target):
    """vela runs a MatMul of two activations as a Mul and a ReduceSum per output column (about one
    MAC per cycle): the four attention MatMuls are its slowest MAC layers, far above the
    FullyConnected layers with more MACs; our ranking of the 13 MAC layers must agree."""
    c = transformer_results[target]
    rows = [r for r in c.layers if r["macs"]]
    assert len(rows) == 13
    attention = {r["node"] for r in rows if r["node"].endswith(("attn/MatMul", "attn/MatMul_1"))}
    slowest = sorted(rows, key=lambda r: -r["ours"])[:4]
    assert {r["node"] for r in slowest} == attention
    assert c.spearman() >= 0.9, rows


def test_matmul_of_two_activations_costs_a_mul_and_a_reduce_sum_per_output_column():
    from engine.hw.cost_model import _effective_arch
    from engine.hw.ethos_u import LayerQuery, estimate

    arch = _effective_arch(resolve_target("ethos-u55-128"))
    cols = {n: estimate(arch, LayerQuery("matmul", (1, 4, 32, 16), (1, 4, 32, n), ifm2=(1, 4, n, 16)))
            for n in (16, 32)}
    assert cols[32].total == pytest.approx(2 * cols[16].total, rel=0.02)
    assert cols[32].macs / cols[32].total < 2  # vela: 65536 MACs in 62080 cycles


# -- the targets' YAML ------------------------------------------------------------------------------
def test_ethos_u55_128_is_ethos_u55():
    a, b = resolve_target("ethos-u55-128"), resolve_target("ethos-u55")
    assert a == b and a.ethos_u.shram_banks == 24 and a.npu.sram_kib == 24  # vela's U55-128 SHRAM


def test_derived_targets_share_the_u55_op_rules_and_change_the_accelerator():
    base = resolve_target("ethos-u55")
    for name, macs, banks in (("ethos-u55-256", 256, 48), ("ethos-u65-256", 256, 48)):
        t = resolve_target(name)
        assert t.ops == base.ops and t.constraints == base.constraints
        assert (t.ethos_u.macs, t.ethos_u.shram_banks, t.vela["accelerator_config"]) == (macs, banks, name)
    u65 = resolve_target("ethos-u65-256")
    assert u65.npu.clock_mhz == 1000 and u65.ethos_u.constants == "dram"
    assert u65.ethos_u.memory("dram").bytes_per_cycle == 12.0


@pytest.mark.parametrize("target", ETHOS_U)
def test_npu_bandwidths_are_the_vela_ini_memories(target):
    t = resolve_target(target)
    e, clock = t.ethos_u, t.npu.clock_mhz
    assert t.npu.dram_bandwidth_gbps == pytest.approx(e.memory(e.feature_maps).bytes_per_cycle * clock / 1e3)
    assert t.npu.weight_bandwidth_gbps == pytest.approx(e.memory(e.constants).bytes_per_cycle * clock / 1e3)


def test_slower_sram_slows_the_ethos_u_estimate():
    g = engine.load(ASSETS / "models" / "mobilenet_demo.onnx")
    t = resolve_target("ethos-u55-128")
    fast, slow = engine.simulate(g, t), engine.simulate(g, t.with_npu(dram_bandwidth_gbps=0.5))
    assert slow.latency_us > fast.latency_us


def _variant(tmp_path, **changes) -> str:
    doc = {"base": str(TARGETS_DIR / "ethos-u55.yaml"), "name": "variant", **changes}
    p = tmp_path / "variant.yaml"
    p.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return str(p)


def test_unknown_vela_accelerator_is_one_error_naming_the_field(tmp_path):
    path = _variant(tmp_path, vela={"accelerator_config": "ethos-u99-128"})
    with pytest.raises(InputError, match=r"field vela\.accelerator_config: must be one of .*ethos-u99-128"):
        load_target(path)


def test_shram_too_small_for_the_smallest_block_names_the_field(tmp_path):
    path = _variant(tmp_path, npu={"sram_kib": 8})
    with pytest.raises(InputError, match=r"field npu\.sram_kib: 8 banks .* cannot hold the smallest layer"):
        load_target(path)


def test_macs_that_disagree_with_the_accelerator_name_the_field(tmp_path):
    path = _variant(tmp_path, ethos_u={"macs": 256, "ofm_ublock": [2, 2, 8]})
    with pytest.raises(InputError, match=r"field ethos_u\.macs: .*ethos-u55-128"):
        load_target(path)


def test_sram_too_small_for_the_smallest_layer_is_exit_2_naming_the_field(tmp_path, capsys):
    path = _variant(tmp_path, memory={"areas": {"sram": {"size_kib": 0.25}}})
    load_target(path)  # the file itself is valid: the model decides what is too small
    code = cli_main(["simulate", str(ASSETS / "models" / "digits_cnn.onnx"), "--target", path])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith("error:") and "field memory.areas.sram.size_kib" in err[0]
    assert "cannot hold the smallest layer" in err[0]


def test_base_that_extends_itself_is_an_error(tmp_path):
    p = tmp_path / "loop.yaml"
    p.write_text("base: loop.yaml\nname: loop\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"field base: .*extends itself"):
        load_target(p)
