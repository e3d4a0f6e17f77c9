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
from engine.diagnostics import WARNING, Diagnostic
from engine.ir.graph import Graph

log = logging.getLogger(__name__)

DEVICES = ("npu", "cpu")
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
