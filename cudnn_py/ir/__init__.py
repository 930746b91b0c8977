"""The graph IR: tensors, nodes, the graph container with its uid namespace, one declarative spec per op
(``spec``; the families' specs in ``cudnn_py/families/<family>/spec.py`` register themselves into ``SPECS`` when
``cudnn_py.families`` is imported, and that package gives ``Graph`` its builder methods), and the passes that turn
the user's graph into the one that is lowered."""
from .builders import install_builders
from .graph import Graph, GraphContext
from .node import Node, NodeType
from .program import Program, Rewriter
from .spec import SPECS, OpSpec, Output, Param, Port
from .tensor import Tensor, tensor

__all__ = ["Graph", "GraphContext", "Node", "NodeType", "OpSpec", "Output", "Param", "Port", "Program", "Rewriter",
           "SPECS", "Tensor", "install_builders", "tensor"]
