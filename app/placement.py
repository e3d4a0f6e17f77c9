"""Adapter between the editor and the engine's placement: node -> (device, reason).

Placement lives in ``engine.place`` and targets in ``engine.hw.target``; this module calls
them when a target is chosen, and otherwise reports every node as "unplaced" (pins are still
shown). It never raises into the GUI: a placement failure becomes
one diagnostic and "unplaced" colours.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from app import style
from engine.diagnostics import ERROR, WARNING, Diagnostic
from engine.ir.graph import Graph
from nodes.types import TensorType

log = logging.getLogger(__name__)

DEVICES = ("npu", "cpu")
NODE_ERROR_CODES = {"shape-inference", "undefined-input", "use-def", "unsupported-op"}
# What the legend calls each placement the canvas can show (Document.placement_source).
SOURCE_LABELS = {"compiled": "Compiled placement:", "edited": "Edited graph (compiling…):",
                 "failed": "Edited graph (compile failed):"}


@dataclass(frozen=True)
class NodeStatus:
    """What the canvas shows about one node: where it runs, why, and what is wrong with it."""

    device: str = "unplaced"
    reason: str = ""
    pinned: bool = False
    errors: tuple[str, ...] = ()


@dataclass
class PlacementOutcome:
    """Devices and reasons by node name, plus diagnostics of the placement itself."""

    device: dict[str, str] = field(default_factory=dict)
    reason: dict[str, str] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    available: bool = False


@dataclass(frozen=True)
class FallbackCount:
    """The one definition of "fallback" every panel shows: graph nodes placed on the CPU by the
    placement the canvas shows, and the compiled ops they run as (fused nodes share one op)."""

    nodes: int
    ops: int

    def phrase(self) -> str:
        """E.g. "69 nodes (21 compiled ops)"; just the nodes when each node is its own op."""
        text = style.count(self.nodes, "node")
        if self.ops != self.nodes:
            text += f" ({style.count(self.ops, 'compiled op')})"
        return text


def fallback_of_result(result: Any) -> FallbackCount:
    """The fallback of an analysis result: the graph nodes it places on the CPU (each node as
    the op it was compiled into, the canvas's compiled placement) and the compiled CPU ops."""
    cpu = {o.node for o in result.sim.ops if o.device == "cpu"}
    return FallbackCount(sum(1 for op in result.op_of_source.values() if op in cpu), len(cpu))


def list_targets() -> list[tuple[str, str]]:
    """(name, description) of the bundled targets (empty before targets exist)."""
    from engine.hw.target import list_targets as bundled

    try:
        return list(bundled())
    except Exception:  # a broken target folder must not break the menu
        log.exception("listing targets failed")
        return []


def resolve_target(name: str | None) -> Any:
    """The HardwareTarget of a bundled name or a YAML path (raises the engine's InputError)."""
    if not name:
        return None
    from engine.hw.target import resolve_target as resolve

    return resolve(name)


def place_graph(graph: Graph, target: Any) -> PlacementOutcome:
    """Place ``graph`` on ``target`` (a HardwareTarget or None). Pins come from node.meta."""
    from engine.place.partition import place

    if target is None:
        return PlacementOutcome()
    from app.shape_dialog import dynamic_inputs

    dynamic = [name for name, _dims in dynamic_inputs(graph)]
    if dynamic:
        # Not a CPU fallback: nothing can be placed until the shapes are known (issue 17 item 2).
        return PlacementOutcome(diagnostics=[Diagnostic(
            WARNING, None, "shapes-unset", f"not placed: input {', '.join(dynamic)} has dynamic dimensions; "
            "set them in View > Input Shapes… (Ctrl+Shift+I)")])
    try:
        result = place(graph, target)
    except Exception as exc:  # an edited graph may be anything; show why instead of crashing
        log.debug("placement failed", exc_info=True)
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return PlacementOutcome(diagnostics=[Diagnostic(WARNING, None, "placement-failed",
                                                        f"placement failed: {msg}")])
    return PlacementOutcome(dict(result.device), dict(result.reason), list(result.diagnostics), True)


def node_status(node: Any, outcome: PlacementOutcome, errors: dict[str, list[str]]) -> NodeStatus:
    """NodeStatus of one node: its device in ``outcome``, else its pin, else "unplaced"."""
    pin = node.meta.get("pin")
    dev = outcome.device.get(node.name)
    if dev is None:
        dev = pin if pin in DEVICES else "unplaced"
        reason = "pinned by the user" if pin in DEVICES else ""
    else:
        reason = outcome.reason.get(node.name, "")
    return NodeStatus(dev, reason, pin in DEVICES, tuple(errors.get(node.name, ())))


def statuses(graph: Graph, outcome: PlacementOutcome, errors: dict[str, list[str]]) -> dict[str, NodeStatus]:
    """NodeStatus of every node of ``graph``."""
    return {n.name: node_status(n, outcome, errors) for n in graph.nodes}


def node_errors(diagnostics: list[Diagnostic]) -> dict[str, list[str]]:
    """The problems to mark on each node (by name), from verify and inference diagnostics."""
    errors: dict[str, list[str]] = {}
    for d in diagnostics:
        if d.node and (d.code in NODE_ERROR_CODES or d.severity == ERROR):
            errors.setdefault(d.node, []).append(d.message)
    return errors


@dataclass
class EditAnalysis:
    """What the analysis worker found for one version of the graph (names are the keys)."""

    version: int
    types: dict[str, TensorType] | None  # output types by value name (None: not re-inferred)
    diagnostics: list[Diagnostic]
    placement: PlacementOutcome
    statuses: dict[str, NodeStatus]

    def wire_bulk(self) -> list[list[Any]]:
        """The long parts a pickle writes ahead in chunks (app/wire.py's ``bulk_of``): the node
        names and reasons, so that reading the dictionaries is memo look-ups, not one long call."""
        return [list(self.statuses), list(self.placement.reason.values())]


class LegendCounts:
    """The legend's figures: nodes per device, nodes with problems, fused groups. Counted again
    only when the statuses or the graph changed (a failed compile republishes the same statuses:
    counting 50,000 of them again took 25 ms of the GUI thread)."""

    def __init__(self) -> None:
        self._held: tuple[Any, Any, int, dict[str, int]] | None = None

    def of(self, statuses: dict[str, NodeStatus], graph: Graph) -> dict[str, int]:
        """The counts of ``statuses`` (a document's) on ``graph`` (its graph)."""
        if not statuses:  # nothing analysed yet (a document just opened): nothing to count
            return {}
        held = self._held
        if held is not None and held[0] is statuses and held[1] is graph and held[2] == graph.version:
            return dict(held[3])
        counts: dict[str, int] = {}
        for st in statuses.values():
            counts[st.device] = counts.get(st.device, 0) + 1
            if st.errors:
                counts["error"] = counts.get("error", 0) + 1
        counts["group"] = sum(1 for n in graph.nodes if n.meta.get("provenance") and n.meta["provenance"] != [n.name])
        self._held = (statuses, graph, graph.version, counts)
        return dict(counts)
