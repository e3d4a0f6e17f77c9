"""What crosses to the worker process (app/wire.py): a graph comes back as the same model, with
its subgraphs and their reads of outer values, and a compile result's placement and simulation
refer to the nodes of the graph that came with it, not to copies."""

from __future__ import annotations

import onnx

import engine
from app import wire
from engine.ir.onnx_io import from_onnx, to_onnx
from tests.engine.test_ir import _rich_model
from tests.models import LIGHT_DIR, demo_model


def _bytes(graph) -> bytes:
    return to_onnx(graph).SerializeToString(deterministic=True)


def test_a_graph_sent_to_the_worker_is_the_same_model_and_can_be_edited():
    g = engine.load(LIGHT_DIR / "light_densenet121.onnx")
    g.events.subscribe(lambda ev: None)  # the editor's listeners stay behind (a closure cannot cross)
    back = wire.loads(wire.dumps(g))
    assert _bytes(back) == _bytes(g)
    assert back.version == g.version and len(back) == len(g)
    assert all(v.producer() is n for n in back.nodes for v in n.outputs if v is not None)
    seen = []
    back.events.subscribe(seen.append)  # the copy has events of its own, and edits bump its version
    back.nodes[0].set_meta("pin", "cpu")
    assert len(seen) == 1 and back.version == g.version + 1 and "pin" not in g.nodes[0].meta


def test_subgraphs_and_their_outer_reads_survive_the_trip():
    g = from_onnx(_rich_model())
    back = wire.loads(wire.dumps(g))
    onnx.checker.check_model(to_onnx(back), full_check=True)
    assert _bytes(back) == _bytes(g)
    k = back.values["k"]
    assert {n.name for n, _ in k.uses()} == {"then_add", "else_sub"}
    branch = next(n for n in back.nodes if n.op_type == "If")
    assert all(sg.parent is back for sg in branch.subgraphs())


def test_a_compile_result_refers_to_the_nodes_of_its_own_graph_after_the_trip():
    from engine.compiler import CompileOptions, compile_model
    from engine.hw.target import resolve_target

    g = engine.load(demo_model("digits_cnn"))
    result = compile_model(g, resolve_target("phone-npu"), options=CompileOptions(allow_synthetic_calibration=True))
    back = wire.loads(wire.dumps(result))
    graph = back.optimized
    facts = back.sim.placement.facts
    assert facts.graph is graph
    assert all(any(f.node is n for n in graph.nodes) for f in facts.order)
    assert [(o.node, o.device, o.latency_us) for o in back.sim.ops] == \
        [(o.node, o.device, o.latency_us) for o in result.sim.ops]
    assert facts.order[0].ctx is not None  # the op spec came back as the registry's
