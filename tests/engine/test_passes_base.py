"""PassManager (verification, restore, fixed points, trace), checkpoints, clones, patterns."""

from __future__ import annotations

import time

import numpy as np
import pytest

import engine
from engine.ir.clone import Checkpoint, clone_graph
from engine.ir.fused import FusedActivation
from engine.ir.graph import Graph, Node, Value
from engine.ir.verify import verify
from engine.passes.base import Pass, PassManager, PassResult, Repeat
from engine.passes.eliminate import EliminateDeadCode, identity_pass
from engine.passes.pattern import Const, Op, Var, match_pattern
from engine.passes.pipeline import OptimizeOptions, build_pipeline, known_names, optimize
from tests.engine.passes_util import assert_same_numbers, load, model, op_types, rand

CHAIN = """
    agraph (float[2,3] x) => (float[2,3] y) {
        a = Relu (x)
        b = Identity (a)
        c = Mul (b, k)
        y = Identity (c)
    }"""


def _chain() -> Graph:
    return load(model(CHAIN, k=rand(3)))


class DanglingPass(Pass):
    """Breaks the graph: makes the Mul read a value nothing produces."""

    name = "dangling"

    def call(self, graph: Graph) -> PassResult:
        mul = next(n for n in graph.nodes if n.op_type == "Mul")
        mul.set_input(0, graph.add_value(Value("ghost")))
        return PassResult(graph, True)


class CyclePass(Pass):
    """Breaks the graph: feeds the Mul's output back into the Relu."""

    name = "cycle"

    def call(self, graph: Graph) -> PassResult:
        relu = next(n for n in graph.nodes if n.op_type == "Relu")
        mul = next(n for n in graph.nodes if n.op_type == "Mul")
        relu.set_input(0, mul.outputs[0])
        return PassResult(graph, True)


class CrashingPass(Pass):
    """Removes a node, then raises."""

    name = "crash"

    def call(self, graph: Graph) -> PassResult:
        graph.remove_node(next(n for n in graph.nodes if n.op_type == "Relu"))
        raise RuntimeError("boom")


@pytest.mark.parametrize(("bad", "code", "needle"), [
    (DanglingPass, "pass-broke-graph", "node 'mul'"),
    (CyclePass, "pass-broke-graph", "cycle"),
    (CrashingPass, "pass-failed", "RuntimeError: boom"),
])
def test_a_breaking_pass_is_reported_and_the_graph_before_it_is_kept(bad, code, needle):
    g = _chain()
    reference = clone_graph(g)
    res = PassManager([identity_pass(), bad(), EliminateDeadCode()]).run(g)
    (diag,) = [d for d in res.diagnostics if d.severity == "error"]
    assert diag.code == code
    assert f"pass {bad.name!r}" in diag.message and needle in diag.message
    rec = res.trace[1]
    assert rec.restored and not rec.modified
    assert verify(res.graph) == []
    assert op_types(res.graph) == ["Relu", "Mul"]  # identity_pass kept, the bad pass undone
    assert_same_numbers(reference, res.graph)


def test_checkpoint_can_be_restored_twice():
    g = _chain()
    reference = clone_graph(g)
    cp = Checkpoint(g)
    for _ in range(2):
        for n in list(g.nodes):
            g.remove_node(n)
        cp.restore()
        assert op_types(g) == ["Relu", "Identity", "Mul", "Identity"]
        assert verify(g) == []
    assert_same_numbers(reference, g)


def test_clone_is_independent():
    g = _chain()
    c = clone_graph(g)
    for n in list(c.nodes):
        c.remove_node(n)
    assert len(g) == 4 and verify(g) == []
    c2 = clone_graph(g)
    assert op_types(c2) == op_types(g) and c2.nodes[0] is not g.nodes[0]
    assert_same_numbers(g, c2)


class CountingPass(Pass):
    """Modifies the graph a fixed number of times, then reports no change."""

    name = "counting"

    def __init__(self, times: int) -> None:
        self.left = times

    def call(self, graph: Graph) -> PassResult:
        if self.left:
            self.left -= 1
            graph.add_initializer("k", np.zeros(1, np.float32))
            return PassResult(graph, True)
        return PassResult(graph, False)


def test_repeat_runs_to_a_fixed_point_and_records_iterations():
    res = PassManager([Repeat([CountingPass(2)], name="grp")]).run(_chain())
    assert [(r.iteration, r.modified) for r in res.trace] == [(1, True), (2, True), (3, False)]
    assert all(r.group == "grp" for r in res.trace)


def test_trace_records_counts_time_and_rewrites():
    res = PassManager([identity_pass()]).run(_chain())
    (rec,) = res.trace
    assert (rec.nodes_before, rec.nodes_after, rec.modified) == (4, 2, True)
    doc = rec.to_json()
    assert {"name", "modified", "nodes_before", "nodes_after", "ms", "fired", "not_fired"} <= set(doc)
    assert {e["rule"] for e in doc["fired"]} == {"eliminate_identity.identity"}


def test_trace_times_each_pass_by_its_own_run():
    class SlowPass(Pass):
        name = "slow"

        def call(self, graph: Graph) -> PassResult:
            time.sleep(0.03)
            return PassResult(graph, False)

    res = PassManager([identity_pass(), SlowPass()]).run(_chain())
    times = {r.name: r.ms for r in res.trace}
    assert times["slow"] >= 25.0  # the 30 ms it slept, not the pipeline's total nor another pass's
    assert times["eliminate_identity"] < times["slow"]


def test_passes_and_rules_switch_off_by_name():
    g = _chain()
    assert op_types(optimize(g, disable=("eliminate_identity",)).graph).count("Identity") >= 1
    assert op_types(optimize(g, disable=("eliminate_identity.identity",)).graph).count("Identity") >= 1
    assert "fuse_batchnorm.conv" in known_names()
    with pytest.raises(ValueError, match="unknown pass or rule 'nope'"):
        build_pipeline(OptimizeOptions(disable=("nope",)))


def test_optimize_leaves_the_input_graph_alone():
    g = _chain()
    before = op_types(g)
    res = optimize(g)
    assert op_types(g) == before
    assert res.nodes_before == 4 and res.nodes_after == len(res.graph)
    assert_same_numbers(g, res.graph)


def _tiny() -> tuple[Graph, Node]:
    g = load(model("""
        agraph (float[3] x) => (float[3] y) {
            r = Relu (x)
            s = Sigmoid (r)
            y = Mul (s, r)
        }"""))
    return g, next(n for n in g.nodes if n.op_type == "Mul")


def test_patterns_match_commutatively_and_bind_shared_values():
    g, mul = _tiny()
    pat = Op("Mul", Op("Relu", Var("x"), name="r"), Op("Sigmoid", Op("Relu", Var("x"), name="r"), name="s"))
    (m,) = list(match_pattern(pat, mul))
    assert m["r"].op_type == "Relu" and m["x"] is g.inputs[0]
    assert {n.op_type for n in m.nodes} == {"Mul", "Relu", "Sigmoid"}
    assert not list(match_pattern(Op("Mul", Var("a"), Const("c")), mul))


def test_executor_applies_fused_activation_meta():
    g = load(model("agraph (float[4] x) => (float[4] y) { y = Neg (x) }"))
    g.nodes[0].activation = FusedActivation("Relu", names=("r",))
    g._touch()
    out = engine.execute(g, {"x": np.array([-1, 2, -3, 4], np.float32)})["y"]
    np.testing.assert_array_equal(out, [1, 0, 3, 0])
