"""Plain-Python change events a Graph emits, so an observer (the GUI) needs no Qt in engine/."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class GraphEvent:
    """Base class of every graph event."""


@dataclass(frozen=True)
class NodeAdded(GraphEvent):
    """A node was inserted into the graph."""

    node: Any


@dataclass(frozen=True)
class NodeRemoved(GraphEvent):
    """A node was taken out of the graph."""

    node: Any


@dataclass(frozen=True)
class NodeChanged(GraphEvent):
    """An attribute (or the name, or metadata) of a node changed."""

    node: Any
    key: str


@dataclass(frozen=True)
class EdgeChanged(GraphEvent):
    """Input ``index`` of ``node`` now reads ``new`` instead of ``old`` (values or None)."""

    node: Any
    index: int
    old: Any
    new: Any


@dataclass(frozen=True)
class GraphIOChanged(GraphEvent):
    """The graph's inputs, outputs or initializers changed."""

    what: str


Listener = Callable[[GraphEvent], None]


class EventSource:
    """A list of listeners called synchronously, in subscription order."""

    def __init__(self) -> None:
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Add a listener; returns a function that removes it again."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def emit(self, event: GraphEvent) -> None:
        """Call every listener with ``event``."""
        for listener in list(self._listeners):
            listener(event)
