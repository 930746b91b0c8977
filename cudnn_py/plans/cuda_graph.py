"""CUDA graphs: record a built plan into a caller's ``cudaGraph_t`` and update it with
other buffers, through ``cudnnBackendPopulateCudaGraph`` / ``cudnnBackendUpdateCudaGraph`` (cuDNN >= 9.5).

As the frontend does, the plan is populated into a graph of its own, added to the caller's (empty) graph as one
child-graph node; ``update`` finds that node again and updates the child graph in place. An instantiated
``cudaGraphExec_t`` does not see updates: instantiate again, or ``cudaGraphExecUpdate`` it. The plan must carry
the behavior note SUPPORTS_CUDA_GRAPH_NATIVE_API; cuDNN refuses other plans, and the error says so.

The operands are checked as at execute, and a workspace must be given when the plan needs one: the graph keeps
every pointer, so cudnn_py cannot hand it a cached buffer that may move.
"""
from __future__ import annotations

from typing import Any

from ..backend import api, versions
from ..backend.handle import live_handle
from ..errors import CudaDriverError, CudaUnavailableError, InvalidTypeError, InvalidValueError
from ..interop import data_ptr
from .execute import _PLAN_KIND  # how a plan's errors name it, as execute's do

POPULATE, UPDATE = "cudnnBackendPopulateCudaGraph", "cudnnBackendUpdateCudaGraph"


def _runtime() -> Any:
    try:
        from cuda.bindings import runtime
    except ImportError as e:  # the cu12 / cu13 extras install it
        raise CudaUnavailableError(f"CUDA graphs need cuda-bindings (pip install cuda-bindings; the cu12 / cu13 "
                                   f"extras have it): {e}") from None
    return runtime


def _check(result: Any, what: str) -> Any:
    """cuda.bindings returns (err, *values); raise on an error, return the values."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise CudaDriverError(f"{what} failed: {err!r}")
    return values[0] if len(values) == 1 else values


def graph_handle(cuda_graph: Any) -> int:
    """A ``cudaGraph_t`` as an int: an int, a cuda.bindings graph, or anything with ``__int__`` / ``getPtr``."""
    if isinstance(cuda_graph, int):
        value = cuda_graph
    elif callable(getattr(cuda_graph, "getPtr", None)):
        value = int(cuda_graph.getPtr()) if not hasattr(cuda_graph, "__int__") else int(cuda_graph)
    else:
        try:
            value = int(cuda_graph)
        except TypeError:
            raise InvalidTypeError(f"cannot use a {type(cuda_graph).__name__} as a cudaGraph_t (pass an int or a "
                            "cuda.bindings cudaGraph_t)") from None
    if value == 0:
        raise InvalidValueError("cuda_graph is NULL: create one first (cudaGraphCreate)")
    return value


def _variant_pack(executor: Any, plan: Any, variant_pack: dict, workspace: Any) -> Any:
    if workspace is None and plan.workspace:
        raise InvalidValueError(f"plan {plan.name} needs {plan.workspace} bytes of workspace: pass one (a CUDA "
                                f"graph keeps "
                         "the pointer, so no cached buffer is used)")
    ptrs = executor.pointers(variant_pack)
    executor._check_operands(variant_pack, ptrs)
    ws = 0 if workspace is None else data_ptr(workspace)
    return executor._variant_pack(ptrs, ws)


def _prelude(function: str, method: str, handle: int, cuda_graph: Any) -> tuple[int, Any, int]:
    """What both calls check first: the running cuDNN has ``function``, the handle is live, cuda-bindings and the
    caller's graph are usable. Returns (handle, the cuda.bindings runtime, the graph)."""
    versions.require(function, what=f"{method}()")
    return live_handle(handle, f"{method}(handle=...)"), _runtime(), graph_handle(cuda_graph)


def populate(handle: int, plan: Any, executor: Any, variant_pack: dict, workspace: Any, cuda_graph: Any) -> Any:
    """Record ``plan`` into the empty graph ``cuda_graph``; returns the variant pack the graph was recorded with."""
    handle, rt, graph = _prelude(POPULATE, "populate_cuda_graph", handle, cuda_graph)
    nodes = _check(rt.cudaGraphGetNodes(graph, 0), "cudaGraphGetNodes")
    count = nodes[-1] if isinstance(nodes, list) else nodes
    if int(count) != 0:
        raise InvalidValueError(f"populate_cuda_graph(): the CUDA graph must be empty; it has {int(count)} node(s)")
    vp = _variant_pack(executor, plan, variant_pack, workspace)
    child = _check(rt.cudaGraphCreate(0), "cudaGraphCreate")
    try:
        status = api.function(POPULATE)(int(handle), plan.ptr, vp.ptr, int(child))
        if status != 0:
            raise api.error_for(status, POPULATE, kind=_PLAN_KIND, detail=f"plan {plan.name}")
        _check(rt.cudaGraphAddChildGraphNode(graph, None, 0, child), "cudaGraphAddChildGraphNode")
    finally:
        _check(rt.cudaGraphDestroy(child), "cudaGraphDestroy")  # the child node holds a copy
    return vp


def update(handle: int, plan: Any, executor: Any, variant_pack: dict, workspace: Any, cuda_graph: Any) -> Any:
    """Point the graph ``populate`` made at other buffers."""
    handle, rt, graph = _prelude(UPDATE, "update_cuda_graph", handle, cuda_graph)
    roots = _check(rt.cudaGraphGetRootNodes(graph, 0), "cudaGraphGetRootNodes")
    n_roots = int(roots[-1]) if isinstance(roots, list) else int(roots)
    if n_roots != 1:
        raise InvalidValueError(f"update_cuda_graph(): expected the one node populate_cuda_graph() made, found "
                                f"{n_roots} "
                         "roots")
    root = _check(rt.cudaGraphGetRootNodes(graph, 1), "cudaGraphGetRootNodes")[0][0]
    kind = _check(rt.cudaGraphNodeGetType(root), "cudaGraphNodeGetType")
    if kind != rt.cudaGraphNodeType.cudaGraphNodeTypeGraph:
        raise InvalidValueError(f"update_cuda_graph(): the graph's node is a {kind!r}, not the child graph "
                         "populate_cuda_graph() made")
    child = _check(rt.cudaGraphChildGraphNodeGetGraph(root), "cudaGraphChildGraphNodeGetGraph")
    vp = _variant_pack(executor, plan, variant_pack, workspace)
    status = api.function(UPDATE)(int(handle), plan.ptr, vp.ptr, int(child))
    if status != 0:
        raise api.error_for(status, UPDATE, kind=_PLAN_KIND, detail=f"plan {plan.name}")
    return vp
