"""The intermediate representation that passes and the GUI work on."""

from engine.ir.graph import Graph, GraphError, Node, Value
from nodes.types import TensorType

__all__ = ["Graph", "GraphError", "Node", "TensorType", "Value"]
