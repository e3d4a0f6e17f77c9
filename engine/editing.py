"""Re-deriving inferred types after an edit.

``reinfer`` re-derives every node output's type from the types the model was loaded with, so
undoing an edit also restores the inferred types exactly (types are derived data: they are
assigned directly, without events).
"""

from __future__ import annotations

from engine.diagnostics import Diagnostic
from engine.ir.graph import Graph, Value
from engine.ir.infer import infer_shapes
from engine.ir.verify import verify
from nodes.types import TensorType

Baseline = dict[int, tuple[Value, TensorType]]


def snapshot_types(graph: Graph) -> Baseline:
    """The types of every node output as loaded (the starting point of ``reinfer``), keyed by
    value identity (the values are kept alive so their ids stay theirs)."""
    return {id(v): (v, v.type) for n in graph.nodes for v in n.outputs if v is not None}


def reinfer(graph: Graph, baseline: Baseline) -> list[Diagnostic]:
    """Verify, then infer every node output's type afresh from ``baseline`` (types as loaded;
    outputs of nodes added since start unknown). Returns verify errors + inference warnings.

    Types are derived data, so this assigns them directly and emits no events.
    """
    for n in graph.nodes:
        for v in n.outputs:
            if v is not None:
                entry = baseline.get(id(v))
                v.type = entry[1] if entry is not None and entry[0] is v else TensorType()
    errors = verify(graph)
    return errors + infer_shapes(graph)
