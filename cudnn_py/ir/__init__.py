"""The graph IR: tensors, nodes, the graph container with its uid namespace, one declarative spec per op
(``spec``; the families' specs in ``cudnn_py/ops/<family>/spec.py``), and the passes that turn the user's graph
into the one that is lowered."""
from ..ops import SPEC, load
from .builders import install_builders
from .graph import Graph, GraphContext
from .node import Node, NodeType
from .program import Program, Rewriter
from .spec import SPECS, OpSpec, Output, Param, Port
from .tensor import Tensor, tensor

load(SPEC)  # registers every op spec before the builders are generated
install_builders(Graph)

__all__ = ["Graph", "GraphContext", "Node", "NodeType", "OpSpec", "Output", "Param", "Port", "Program", "Rewriter",
           "SPECS", "Tensor", "tensor"]
