"""Hardware targets: bundled profiles, YAML validation errors a user sees, SUPPORTED_OPS.md."""

from __future__ import annotations

import onnx
import pytest
import yaml

from engine.errors import InputError
from engine.hw.docs import write_supported_ops
from engine.hw.target import bundled_targets, list_targets, load_target, resolve_target
from tests.engine.cli_util import run_cli
from tests.engine.sim_graphs import target_doc
from tests.models import tiny_add_mul


def test_three_bundled_profiles_load_with_distinct_character():
    names = set(bundled_targets())
    assert {"phone-npu", "ethos-u55", "cloud-tpu"} <= names
    phone, mcu, tpu = (resolve_target(n) for n in ("phone-npu", "ethos-u55", "cloud-tpu"))
    assert phone.npu.precision == "int8"
    assert tpu.npu.precision == "bf16"
    assert (tpu.npu.rows, tpu.npu.cols) == (128, 128)
    assert mcu.npu.sram_kib < phone.npu.sram_kib < tpu.npu.sram_kib
    assert mcu.npu.weight_bandwidth_gbps is not None  # weights in flash, vela's Shared_Sram mode
    for t in (phone, mcu, tpu):
        assert t.cpu.peak_gflops > 0
        assert t.transfer.bandwidth_gbps > 0
        assert t.thermal.sustained_clock_mhz <= t.npu.clock_mhz


def test_list_targets_cli_prints_name_first_then_description():
    rc, out, _ = run_cli(["simulate", "--list-targets"])
    assert rc == 0
    lines = out.strip().splitlines()
    assert [ln.split()[0] for ln in lines] == [n for n, _ in list_targets()]
    assert all(len(ln.split(maxsplit=1)) == 2 for ln in lines)


def test_target_by_path_works_like_by_name(tmp_path):
    doc = target_doc("ethos-u55")
    p = tmp_path / "mine.yaml"
    p.write_text(yaml.safe_dump(doc))
    assert load_target(p).npu == resolve_target("ethos-u55").npu


def test_unknown_target_name_lists_the_bundled_ones():
    with pytest.raises(InputError, match=r"bundled: .*phone-npu"):
        resolve_target("no-such-chip")


def _bad(tmp_path, mutate):
    doc = target_doc()
    mutate(doc)
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


BAD_CASES = [
    ("missing field", lambda d: d["npu"].pop("clock_mhz"), "npu.clock_mhz", "missing"),
    ("negative bandwidth", lambda d: d["npu"].__setitem__("dram_bandwidth_gbps", -5), "npu.dram_bandwidth_gbps",
     "positive"),
    ("unknown op name", lambda d: d["npu"]["ops"].__setitem__("Convolution", {}), "npu.ops.Convolution",
     "unknown op name"),
    ("wrong type", lambda d: d["npu"].__setitem__("sram_kib", "big"), "npu.sram_kib", "expected a number"),
    ("unknown field", lambda d: d["cpu"].__setitem__("peak_gflop", 3), "cpu.peak_gflop", "did you mean"),
    ("negative fixed cost", lambda d: d["transfer"].__setitem__("fixed_us", -1), "transfer.fixed_us", "negative"),
    ("bad constraint", lambda d: d["npu"]["ops"].__setitem__("Conv", {"max_kernel": "7"}), "npu.ops.Conv.max_kernel",
     "expected an integer"),
    ("sustained above peak", lambda d: d["thermal"].__setitem__("sustained_clock_mhz", 5000),
     "thermal.sustained_clock_mhz", "above"),
    ("missing section", lambda d: d.pop("transfer"), "transfer", "missing"),
]


@pytest.mark.parametrize(("case", "mutate", "field", "words"), BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_bad_target_yaml_is_exit_2_naming_file_and_field(tmp_path, case, mutate, field, words):
    path = _bad(tmp_path, mutate)
    model = tmp_path / "m.onnx"
    onnx.save(tiny_add_mul(), model)
    rc, out, err = run_cli(["simulate", str(model), "--target", str(path), "--shape", "x=2,3"])
    assert rc == 2, err
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error:")
    assert str(path) in lines[0]
    assert f"field {field}" in lines[0]
    assert words in lines[0]


def test_broken_yaml_syntax_names_the_line(tmp_path):
    p = tmp_path / "broken.yaml"
    p.write_text("name: x\nnpu: [1, 2\n")
    with pytest.raises(InputError, match=r"broken.yaml: not valid YAML at line \d"):
        load_target(p)


def test_missing_target_file_is_input_error(tmp_path):
    with pytest.raises(InputError, match="no such target file"):
        resolve_target(str(tmp_path / "nope.yaml"))


def test_op_list_may_be_a_plain_list(tmp_path):
    doc = target_doc()
    doc["npu"]["ops"] = ["Conv", "Relu"]
    p = tmp_path / "list.yaml"
    p.write_text(yaml.safe_dump(doc))
    t = load_target(p)
    assert t.supports("Conv")
    assert not t.supports("Add")


def test_supported_ops_docs_are_current():
    assert write_supported_ops(check=True) == [], "run: python tools/gen_supported_ops.py"


def test_supported_ops_doc_states_the_rules_from_docstrings():
    from engine.hw.docs import supported_ops_markdown

    text = supported_ops_markdown(resolve_target("ethos-u55"))
    assert "Tensors must have rank at most 4 on this NPU." in text
    assert ("| MatMul | matmul | A MatMul by a constant weight (a fully connected layer) must have an activation "
            "of rank at most 2 on this NPU.") in text
