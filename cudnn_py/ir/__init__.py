"""The graph IR: tensors, nodes, the graph container with its uid namespace, one declarative spec per op
(``spec``; the families in ``ops``), and the passes that turn the user's graph into the one that is lowered."""
from . import ops  # noqa: F401  (registers every op spec before the builders are generated)
from .builders import install_builders
from .graph import Graph, GraphContext
from .node import Node, NodeType
from .program import Program, Rewriter
from .spec import SPECS, OpSpec, Output, Param, Port
from .tensor import Tensor, tensor

install_builders(Graph)

__all__ = ["Graph", "GraphContext", "Node", "NodeType", "OpSpec", "Output", "Param", "Port", "Program", "Rewriter",
           "SPECS", "Tensor", "tensor"]
