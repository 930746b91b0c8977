"""``cudnn.gnn``: the official module's graph neural network operators, as torch operators over cuDNN's GNN C API
(``cudnn_gnn_ops.h`` in libcudnn_ext, :mod:`cudnn_py.backend.ext_gnn`), with autograd.

* :class:`CscGraph`: the graph, in compressed sparse column form, as tensors;
* :func:`agg_simple`: sum / mean / max / min aggregation of node and edge features;
* :func:`mha_gat` and :func:`mha_gat_v2`: GAT and GATv2 multi-head attention.

Importing this package imports torch (``import cudnn_py`` does not import it: ``cudnn_py.gnn`` is resolved on first
access). The C API needs a cuDNN that has it (9.28); an older one is refused when an operator calls into it.
"""
from .agg_simple import agg_simple
from .graph import CscGraph
from .mha_gat import mha_gat
from .mha_gat_v2 import mha_gat_v2

__all__ = ["CscGraph", "agg_simple", "mha_gat", "mha_gat_v2"]
