"""The classic facade: ``pygraph`` over the IR (``cudnn_py.ir``), the engines and the planning session, and 1.32's
module-level helpers around it (``graph``, ``jit``, ``graph_cache``) and its ``Graph`` wrapper (``wrapper``)."""
from .. import families  # noqa: F401  (registers every op: the specs, Graph's builder methods, the facet fillers)
from ..errors import cudnnGraphNotSupportedError
from ..ir import GraphContext, Node, NodeType, Tensor, tensor
from .module_api import graph, graph_cache, jit, sdpa_capabilities
from .pygraph import pygraph
from .wrapper import Graph

__all__ = ["cudnnGraphNotSupportedError", "Graph", "GraphContext", "Node", "NodeType", "Tensor", "graph",
           "graph_cache", "jit", "pygraph", "sdpa_capabilities", "tensor"]
