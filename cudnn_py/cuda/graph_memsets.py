"""Small memset nodes of a captured CUDA graph rewritten as kernel nodes: what a replayed execute's launch costs.

A cuDNN 9.19 attention execute (forward and backward, H200) enqueues a 4-byte ``cuMemsetD8Async`` on its workspace
(a counter its kernels start from) before its kernels. Captured (``capture.py``), that is a MEMSET node, and a
graph with one costs about 1 us more per ``cuGraphLaunch`` than the same graph with a kernel node that writes the
same bytes: measured on the H200 as an A/B over 41 interleaved rounds of 40 launches (a probe, not committed),
per-round saving quartiles 0.68 / 1.04 / 1.35 us (fwd causal), 0.67 / 0.97 / 1.13 (fwd GQA), 0.80 / 0.97 / 1.15
(bwd causal), outputs bitwise equal. A replayed attention execute costs 6-12 us of host time in all. A 32-bit
write-value node (``cuGraphAddBatchMemOpNode``, no kernel at all) in the memset's place launches slower still: 3.4
against the kernel node's 2.0 us for the causal forward graph, 3.2 against 1.9 for the causal backward (H200, 25
interleaved rounds of 40 launches; outputs equal).

Recordings use it unless ``CUDNN_PY_REPLAY_MEMSET_KERNELS=0`` (``plans/execute_replay.py``);
tests/test_gpu_graph_memsets.py checks on the GPU that the kernel nodes write what the memsets wrote, and a replayed
attention equals its execute.

The kernel is PTX text (below), compiled by the driver's JIT once per context (tens of ms the first time on a
machine, ~0.2 ms once the driver's compute cache has it): no compiled code ships. It stores ``value`` to every
element of the memset's rows (``dst + row * pitch + column * element size``) with a grid-stride loop.

What is rewritten: memset nodes of 1-, 2- or 4-byte elements of at most ``MAX_BYTES`` (a large memset is the
driver's job: its own is vectorized), whose edges are plain ones (no edge data). The rewrite works on a clone of
the captured graph: any refusal or driver error leaves the captured graph as it was, and says why.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any

from . import context, driver

MAX_BYTES = 64 * 1024
CU_GRAPH_NODE_TYPE_MEMSET = 2
THREADS = 128
MAX_BLOCKS = 64

_KERNEL = r"""
.visible .entry cudnn_py_memset{size}(.param .u64 p_dst, .param .u64 p_pitch, .param .u64 p_width,
                                      .param .u64 p_count, .param .u32 p_value)
{{
    .reg .pred %p;
    .reg .b32 %r<6>;
    .reg .b64 %rd<13>;
    ld.param.u64 %rd1, [p_dst];
    ld.param.u64 %rd2, [p_pitch];
    ld.param.u64 %rd3, [p_width];
    ld.param.u64 %rd4, [p_count];
    ld.param.u32 %r1, [p_value];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mov.u32 %r5, %nctaid.x;
    mul.wide.u32 %rd5, %r2, %r3;
    cvt.u64.u32 %rd6, %r4;
    add.u64 %rd5, %rd5, %rd6;
    mul.wide.u32 %rd7, %r5, %r3;
LOOP{size}:
    setp.ge.u64 %p, %rd5, %rd4;
    @%p bra DONE{size};
    div.u64 %rd8, %rd5, %rd3;
    rem.u64 %rd9, %rd5, %rd3;
    mul.lo.u64 %rd10, %rd8, %rd2;
    shl.b64 %rd11, %rd9, {shift};
    add.u64 %rd12, %rd1, %rd10;
    add.u64 %rd12, %rd12, %rd11;
    st.global.u{bits} [%rd12], %r1;
    add.u64 %rd5, %rd5, %rd7;
    bra.uni LOOP{size};
DONE{size}:
    ret;
}}
"""
ELEMENT_SHIFTS = {1: 0, 2: 1, 4: 2}  # the element sizes (bytes) a kernel is made for -> log2 of the size
PTX = (".version 6.0\n.target sm_52\n.address_size 64\n"
       + "".join(_KERNEL.format(size=size, shift=shift, bits=8 * size) for size, shift in ELEMENT_SHIFTS.items()))


class MemsetParams(ctypes.Structure):
    """CUDA_MEMSET_NODE_PARAMS."""

    _fields_ = [("dst", ctypes.c_uint64), ("pitch", ctypes.c_size_t), ("value", ctypes.c_uint),
                ("elementSize", ctypes.c_uint), ("width", ctypes.c_size_t), ("height", ctypes.c_size_t)]


class KernelParams(ctypes.Structure):
    """CUDA_KERNEL_NODE_PARAMS_v2 (its first fields are the v1 struct: the v1 entry point reads only those)."""

    _fields_ = [("func", ctypes.c_void_p), ("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint),
                ("gridDimZ", ctypes.c_uint), ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint),
                ("blockDimZ", ctypes.c_uint), ("sharedMemBytes", ctypes.c_uint), ("kernelParams", ctypes.c_void_p),
                ("extra", ctypes.c_void_p), ("kern", ctypes.c_void_p), ("ctx", ctypes.c_void_p)]


EDGE_DATA_BYTES = 8  # CUgraphEdgeData: from_port, to_port, type, reserved[5]; all zero for a plain edge


class Refused(Exception):
    """Why a graph's memsets stay memsets."""


class _Driver:
    """The entry points of the rewrite: raw (ctypes, typed) for the reason ``driver.py`` gives, but for
    ``cuGraphDestroy`` (``cuda``'s, as ``capture.py`` calls it). ``v2``: the dependency calls take edge data (CUDA
    >= 12.3)."""

    def __init__(self, lib: Any, cuda: Any):
        self.v2 = all(hasattr(lib, name + "_v2") for name in (
            "cuGraphNodeGetDependencies", "cuGraphNodeGetDependentNodes", "cuGraphAddDependencies"))
        v2 = "_v2" if self.v2 else ""
        add_kernel = "cuGraphAddKernelNode_v2" if hasattr(lib, "cuGraphAddKernelNode_v2") else "cuGraphAddKernelNode"
        names = ["cuGraphGetNodes", "cuGraphNodeGetType", "cuGraphMemsetNodeGetParams",
                 "cuGraphNodeGetDependencies" + v2, "cuGraphNodeGetDependentNodes" + v2,
                 "cuGraphAddDependencies" + v2, add_kernel, "cuGraphDestroyNode", "cuGraphClone",
                 "cuModuleLoadData", "cuModuleGetFunction"]  # (cuda/driver.py's catalog types them)
        if not driver.typed(lib, names):
            raise AttributeError("the driver lacks a graph-editing entry point")
        self.get_nodes, self.node_type, self.memset_params = (
            lib.cuGraphGetNodes, lib.cuGraphNodeGetType, lib.cuGraphMemsetNodeGetParams)
        self.dependencies = getattr(lib, "cuGraphNodeGetDependencies" + v2)
        self.dependents = getattr(lib, "cuGraphNodeGetDependentNodes" + v2)
        self.add_dependencies = getattr(lib, "cuGraphAddDependencies" + v2)
        self.add_kernel_node = getattr(lib, add_kernel)
        self.destroy_node, self.clone = lib.cuGraphDestroyNode, lib.cuGraphClone
        self.destroy_graph = cuda.cuGraphDestroy
        self.load_module, self.get_function = lib.cuModuleLoadData, lib.cuModuleGetFunction


_driver: Any = None  # _Driver, or False: the driver lacks an entry point
# context id (context.current_id) -> {element size: CUfunction}, or why the PTX did not load
_kernels: dict[int, dict[int, int] | str] = {}
_lock = threading.Lock()


def _the_driver() -> _Driver | None:
    global _driver
    if _driver is None:
        lib, cuda = driver.raw(), driver.bindings()
        try:
            _driver = _Driver(lib, cuda) if lib and cuda else False
        except AttributeError:
            _driver = False
    return _driver or None


def _check(status: int, what: str) -> None:
    if status != 0:
        raise Refused(f"{what} failed with CUresult {status}")


def _kernels_here(drv: _Driver) -> dict[int, int]:
    """The memset kernels in the current context, loaded on first use (the PTX JIT)."""
    ctx = context.current_id()
    if ctx is None:  # keyed by address, a context made where a destroyed one was would launch its freed functions
        raise Refused("no current context with an id (cuCtxGetId: CUDA >= 12.0) to key the memset kernels by")
    with _lock:
        got = _kernels.get(ctx)
        if got is None:
            module = ctypes.c_void_p()
            status = drv.load_module(ctypes.byref(module), PTX.encode() + b"\0")
            if status != 0:
                got = f"cuModuleLoadData of the memset kernels' PTX failed with CUresult {status}"
            else:
                got = {}
                for size in ELEMENT_SHIFTS:
                    fn = ctypes.c_void_p()
                    status = drv.get_function(ctypes.byref(fn), module, b"cudnn_py_memset%d" % size)
                    if status != 0:
                        got = f"cuModuleGetFunction failed with CUresult {status}"
                        break
                    got[size] = fn.value or 0
            _kernels[ctx] = got  # the module stays loaded with its context
    if isinstance(got, str):
        raise Refused(got)
    return got


def _node_list(call: Any, owner: int, drv: _Driver, with_edges: bool) -> tuple[list[int], bytes]:
    """The nodes a counted driver call returns (asked twice: how many, then which), and their edge data."""
    count = ctypes.c_size_t(0)
    edge_args: list = [None] if with_edges and drv.v2 else []
    _check(call(owner, None, *edge_args, ctypes.byref(count)), call.__name__)
    n = count.value
    if n == 0:  # the driver refuses an array with room for nothing (CUDA_ERROR_INVALID_VALUE)
        return [], b""
    nodes = (ctypes.c_void_p * n)()
    edges = (ctypes.c_ubyte * (EDGE_DATA_BYTES * n))()
    edge_args = [edges] if with_edges and drv.v2 else []
    _check(call(owner, nodes, *edge_args, ctypes.byref(count)), call.__name__)
    if count.value != n:
        raise Refused(f"{call.__name__} changed its count ({n} -> {count.value})")
    return [nodes[i] or 0 for i in range(n)], bytes(edges)[:EDGE_DATA_BYTES * n] if edge_args else b""


def _memsets(drv: _Driver, graph: int) -> list[tuple[int, MemsetParams]]:
    out = []
    nodes, _ = _node_list(drv.get_nodes, graph, drv, with_edges=False)
    for node in nodes:
        kind = ctypes.c_int()
        _check(drv.node_type(node, ctypes.byref(kind)), "cuGraphNodeGetType")
        if kind.value == CU_GRAPH_NODE_TYPE_MEMSET:
            params = MemsetParams()
            _check(drv.memset_params(node, ctypes.byref(params)), "cuGraphMemsetNodeGetParams")
            out.append((node, params))
    return out


def _refusal(p: MemsetParams) -> str | None:
    size = p.elementSize
    if size not in ELEMENT_SHIFTS:
        return f"a memset of {size}-byte elements"
    if p.width == 0 or p.height == 0:
        return "an empty memset"
    if p.height > 1 and p.pitch < p.width * size:
        return f"a 2D memset whose pitch ({p.pitch}) is less than a row ({p.width * size} bytes)"
    if p.width * p.height * size > MAX_BYTES:
        return f"a memset of {p.width * p.height * size} bytes (more than {MAX_BYTES}: the driver's is faster)"
    return None


def _replace(drv: _Driver, graph: int, node: int, p: MemsetParams, kernels: dict[int, int]) -> None:
    """One memset node of ``graph`` replaced by a kernel node with the same dependencies and dependents."""
    deps, dep_edges = _node_list(drv.dependencies, node, drv, with_edges=True)
    outs, out_edges = _node_list(drv.dependents, node, drv, with_edges=True)
    if any(dep_edges) or any(out_edges):
        raise Refused("a memset node with edge data (not plain edges)")
    count = p.width * p.height
    args = [ctypes.c_uint64(p.dst), ctypes.c_uint64(p.pitch), ctypes.c_uint64(p.width), ctypes.c_uint64(count),
            ctypes.c_uint32(p.value)]
    arg_ptrs = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
    k = KernelParams()
    k.func = kernels[p.elementSize]
    k.blockDimX = THREADS if count > THREADS else -(-count // 32) * 32
    k.gridDimX = min(MAX_BLOCKS, -(-count // k.blockDimX))
    k.gridDimY = k.gridDimZ = k.blockDimY = k.blockDimZ = 1
    k.kernelParams = ctypes.addressof(arg_ptrs)  # read (copied) when the node is added
    dep_array = (ctypes.c_void_p * max(1, len(deps)))(*deps)
    added = ctypes.c_void_p()
    _check(drv.add_kernel_node(ctypes.byref(added), graph, dep_array, len(deps), ctypes.byref(k)),
           "cuGraphAddKernelNode")
    for out in outs:
        src, dst = ctypes.c_void_p(added.value), ctypes.c_void_p(out)
        edge: list = [None] if drv.v2 else []
        _check(drv.add_dependencies(graph, ctypes.byref(src), ctypes.byref(dst), *edge, 1), "cuGraphAddDependencies")
    _check(drv.destroy_node(node), "cuGraphDestroyNode")


def rewrite(graph: int) -> tuple[int, int, str]:
    """``(graph to instantiate, memsets replaced, why none were)``: a clone of ``graph`` with its memset nodes as
    kernel nodes (the caller destroys it with cuGraphDestroy after instantiating it), or ``graph`` itself when
    there is nothing to rewrite (why == "") or a memset cannot be (why says which). Run with the graph's context
    current."""
    drv = _the_driver()
    if drv is None:
        return graph, 0, "the CUDA driver lacks a graph-editing entry point"
    try:
        found = _memsets(drv, graph)
        if not found:
            return graph, 0, ""
        for _, params in found:
            why = _refusal(params)
            if why is not None:
                raise Refused(why)
        kernels = _kernels_here(drv)
        clone = ctypes.c_void_p()
        _check(drv.clone(ctypes.byref(clone), graph), "cuGraphClone")
    except Refused as e:
        return graph, 0, str(e)
    try:
        cloned = _memsets(drv, clone.value or 0)
        if len(cloned) != len(found):
            raise Refused(f"the clone has {len(cloned)} memset nodes, the graph {len(found)}")
        for node, params in cloned:
            _replace(drv, clone.value or 0, node, params, kernels)
    except Refused as e:
        drv.destroy_graph(clone.value or 0)
        return graph, 0, str(e)
    return clone.value or 0, len(cloned), ""
