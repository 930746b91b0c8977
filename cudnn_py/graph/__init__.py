"""The graph IR: tensors, nodes, op tables with inference, and the classic `pygraph` surface."""
from .errors import cudnnGraphNotSupportedError
from .node import Node
from .pygraph import GraphContext, pygraph
from .tensor import Tensor, tensor

__all__ = ["cudnnGraphNotSupportedError", "GraphContext", "Node", "Tensor", "pygraph", "tensor"]
