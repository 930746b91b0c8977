"""The classic facade: ``pygraph`` over the IR (``cudnn_py.ir``), the engines and the planning session."""
from ..errors import cudnnGraphNotSupportedError
from ..ir import Node, Tensor, tensor
from .pygraph import pygraph

__all__ = ["cudnnGraphNotSupportedError", "Node", "Tensor", "pygraph", "tensor"]
