"""cuda/graph_memsets.py on the CPU: how a captured graph's memset nodes become kernel nodes (which node, which
edges, which kernel arguments) and when they are left alone. The driver is a small graph model with the entry
points' calling conventions (ctypes arguments, counted queries); that the PTX kernel writes what a memset writes is
tests/test_gpu_graph_memsets.py, on a GPU."""
from __future__ import annotations

import ctypes
import itertools

import pytest

from cudnn_py.cuda import context, graph_memsets
from cudnn_py.cuda.graph_memsets import MAX_BYTES, MemsetParams

KERNEL, MEMSET = 0, graph_memsets.CU_GRAPH_NODE_TYPE_MEMSET


def _out(arg):
    return arg._obj  # the object a ctypes.byref() points at


class FakeGraphs:
    """Graphs of nodes (type, parameters) and edges (from, to, edge data), with the rewrite's entry points."""

    v2 = True

    def __init__(self):
        self.graphs: dict[int, dict] = {}
        self._ids = itertools.count(0x100)
        self.modules_loaded = 0
        self.load_status = 0
        self.destroyed: list[int] = []

    # ---- building a graph in the tests
    def graph(self) -> int:
        g = next(self._ids)
        self.graphs[g] = {"nodes": {}, "edges": []}
        return g

    def node(self, g: int, kind: int, params=None, after=(), edge_data=b"\0" * 8) -> int:
        n = next(self._ids)
        self.graphs[g]["nodes"][n] = (kind, params)
        self.graphs[g]["edges"] += [(d, n, edge_data) for d in after]
        return n

    def _graph_of(self, node: int) -> dict:
        return next(g for g in self.graphs.values() if node in g["nodes"])

    # ---- the entry points
    def _fill(self, items, array, edges, count, edge_data=()):
        if array is not None:
            room = _out(count).value
            if room == 0:  # as the H200's driver (13.0) answers an array with room for nothing
                return 1  # CUDA_ERROR_INVALID_VALUE
            items = items[:room]
            for i, x in enumerate(items):
                array[i] = x
            if edges is not None:
                for i, e in enumerate(edge_data):
                    for j, byte in enumerate(e):
                        edges[8 * i + j] = byte
        _out(count).value = len(items)
        return 0

    def get_nodes(self, g, array, count):
        return self._fill(list(self.graphs[g]["nodes"]), array, None, count)

    def node_type(self, node, kind):
        _out(kind).value = self._graph_of(node)["nodes"][node][0]
        return 0

    def memset_params(self, node, out):
        p = self._graph_of(node)["nodes"][node][1]
        ctypes.memmove(ctypes.addressof(_out(out)), ctypes.addressof(p), ctypes.sizeof(MemsetParams))
        return 0

    def dependencies(self, node, array, edges, count):
        es = [e for e in self._graph_of(node)["edges"] if e[1] == node]
        return self._fill([e[0] for e in es], array, edges, count, [e[2] for e in es])

    def dependents(self, node, array, edges, count):
        es = [e for e in self._graph_of(node)["edges"] if e[0] == node]
        return self._fill([e[1] for e in es], array, edges, count, [e[2] for e in es])

    def add_kernel_node(self, out, g, deps, n, params):
        k = _out(params)
        values = (ctypes.c_void_p * 5).from_address(k.kernelParams)
        types = (ctypes.c_uint64,) * 4 + (ctypes.c_uint32,)
        args = tuple(t.from_address(values[i]).value for i, t in enumerate(types))
        dims = (k.gridDimX, k.gridDimY, k.gridDimZ, k.blockDimX, k.blockDimY, k.blockDimZ)
        node = self.node(g, KERNEL, {"func": k.func, "args": args, "dims": dims}, after=[deps[i] for i in range(n)])
        _out(out).value = node
        return 0

    def add_dependencies(self, g, src, dst, edges, n):
        assert edges is None and n == 1
        self.graphs[g]["edges"].append((_out(src).value, _out(dst).value, b"\0" * 8))
        return 0

    def destroy_node(self, node):
        g = self._graph_of(node)
        del g["nodes"][node]
        g["edges"] = [e for e in g["edges"] if node not in e[:2]]
        return 0

    def clone(self, out, g):
        c = self.graph()
        renamed = {}
        for n, (kind, p) in self.graphs[g]["nodes"].items():
            renamed[n] = self.node(c, kind, p)
        self.graphs[c]["edges"] = [(renamed[a], renamed[b], d) for a, b, d in self.graphs[g]["edges"]]
        _out(out).value = c
        return 0

    def destroy_graph(self, g):
        g = g.value if isinstance(g, ctypes.c_void_p) else g
        self.destroyed.append(g)
        del self.graphs[g]
        return 0

    def load_module(self, out, ptx):
        assert b".entry cudnn_py_memset1" in ptx and ptx.endswith(b"\0")
        self.modules_loaded += 1
        if self.load_status:
            return self.load_status
        _out(out).value = 0xAA00
        return 0

    def get_function(self, out, module, name):
        _out(out).value = {b"cudnn_py_memset1": 0xF1, b"cudnn_py_memset2": 0xF2, b"cudnn_py_memset4": 0xF4}[name]
        return 0


@pytest.fixture
def drv(monkeypatch):
    d = FakeGraphs()
    monkeypatch.setattr(graph_memsets, "_driver", d)
    monkeypatch.setattr(graph_memsets, "_kernels", {})
    monkeypatch.setattr(context, "current_id", lambda: 7)
    return d


def memset(size=1, width=4, height=1, pitch=0, value=0, dst=0x7000_0000):
    return MemsetParams(dst=dst, pitch=pitch, value=value, elementSize=size, width=width, height=height)


def shape(drv, g):
    """The graph's nodes by kind and its edges by (kind, kind), node ids left out."""
    nodes = drv.graphs[g]["nodes"]
    return sorted(k for k, _ in nodes.values()), sorted((nodes[a][0], nodes[b][0]) for a, b, _ in
                                                        drv.graphs[g]["edges"])


def test_a_memset_becomes_a_kernel_node_with_its_edges_and_arguments(drv):
    g = drv.graph()
    root = drv.node(g, KERNEL, "root")
    m = drv.node(g, MEMSET, memset(size=2, width=10, height=3, pitch=64, value=0xBEEF), after=[root])
    a = drv.node(g, KERNEL, "a", after=[m])
    drv.node(g, KERNEL, "b", after=[m, a])
    before = shape(drv, g)
    target, replaced, why = graph_memsets.rewrite(g)
    assert (replaced, why) == (1, "") and target != g
    assert shape(drv, g) == before  # the captured graph is left as it was
    nodes = drv.graphs[target]["nodes"]
    assert all(kind == KERNEL for kind, _ in nodes.values())
    new = next(n for n, (_, p) in nodes.items() if isinstance(p, dict))
    p = nodes[new][1]
    assert p["func"] == 0xF2 and p["args"] == (0x7000_0000, 64, 10, 30, 0xBEEF)
    assert p["dims"] == (1, 1, 1, 32, 1, 1)  # 30 elements: one warp
    by_label = {label: n for n, (_, label) in nodes.items() if isinstance(label, str)}
    edges = {(a_, b_) for a_, b_, _ in drv.graphs[target]["edges"]}
    assert edges == {(by_label["root"], new), (new, by_label["a"]), (new, by_label["b"]), (by_label["a"], by_label["b"])}


def test_large_memsets_get_a_grid_stride_launch_and_one_module_per_context(drv):
    for _ in range(2):
        g = drv.graph()
        drv.node(g, MEMSET, memset(size=4, width=MAX_BYTES // 4))
        target, replaced, _ = graph_memsets.rewrite(g)
        (p,) = [p for _, p in drv.graphs[target]["nodes"].values()]
        assert p["func"] == 0xF4 and p["args"][3] == MAX_BYTES // 4
        assert p["dims"][0] == graph_memsets.MAX_BLOCKS and p["dims"][3] == graph_memsets.THREADS
    assert drv.modules_loaded == 1


@pytest.mark.parametrize("params, reason", [
    (memset(size=8), "a memset of 8-byte elements"),
    (memset(size=1, width=MAX_BYTES + 1), f"a memset of {MAX_BYTES + 1} bytes"),
    (memset(size=4, width=16, height=2, pitch=32), "pitch (32) is less than a row (64 bytes)"),
    (memset(width=0), "an empty memset"),
])
def test_memsets_it_cannot_rewrite_leave_the_graph_as_captured(drv, params, reason):
    g = drv.graph()
    drv.node(g, MEMSET, memset())  # one that could be rewritten: the graph's memsets go all or none
    drv.node(g, MEMSET, params)
    target, replaced, why = graph_memsets.rewrite(g)
    assert (target, replaced) == (g, 0) and reason in why
    assert list(drv.graphs) == [g] and drv.modules_loaded == 0  # no clone made, no PTX compiled


def test_edge_data_on_a_memsets_edge_leaves_the_graph_and_drops_the_clone(drv):
    g = drv.graph()
    m = drv.node(g, MEMSET, memset())
    drv.node(g, KERNEL, "k", after=[m], edge_data=b"\1" + b"\0" * 7)
    target, replaced, why = graph_memsets.rewrite(g)
    assert (target, replaced) == (g, 0) and "edge data" in why
    assert list(drv.graphs) == [g] and len(drv.destroyed) == 1


def test_a_graph_without_memsets_is_not_cloned(drv):
    g = drv.graph()
    drv.node(g, KERNEL, "k")
    assert graph_memsets.rewrite(g) == (g, 0, "")
    assert list(drv.graphs) == [g] and drv.modules_loaded == 0


def test_ptx_that_does_not_load_is_said_and_not_retried_in_that_context(drv):
    drv.load_status = 218  # CUDA_ERROR_INVALID_PTX
    for _ in range(2):
        g = drv.graph()
        drv.node(g, MEMSET, memset())
        target, replaced, why = graph_memsets.rewrite(g)
        assert (target, replaced) == (g, 0) and "cuModuleLoadData" in why and "218" in why
    assert drv.modules_loaded == 1


def test_kernels_are_per_context_id_not_per_address(drv, monkeypatch):
    # a context destroyed and another created at its address: the old module's functions died with the old one
    for ctx_id in (7, 8, 8):
        monkeypatch.setattr(context, "current_id", lambda ctx_id=ctx_id: ctx_id)
        g = drv.graph()
        drv.node(g, MEMSET, memset())
        assert graph_memsets.rewrite(g)[1] == 1
    assert drv.modules_loaded == 2


def test_a_context_without_an_id_keeps_its_memsets(drv, monkeypatch):
    monkeypatch.setattr(context, "current_id", lambda: None)
    g = drv.graph()
    drv.node(g, MEMSET, memset())
    target, replaced, why = graph_memsets.rewrite(g)
    assert (target, replaced) == (g, 0) and "cuCtxGetId" in why and drv.modules_loaded == 0


def test_no_driver_entry_points_means_no_rewrite(monkeypatch):
    monkeypatch.setattr(graph_memsets, "_driver", False)
    assert graph_memsets.rewrite(0x10) == (0x10, 0, "the CUDA driver lacks a graph-editing entry point")


# ------------------------------------------------------------------------------------------------- capture()
class FakeCaptureLib:
    """The capture entry points of cuda/capture.py, as cuda.bindings calls them ((CUresult, *values)): the
    captured graph is 0x61; instantiating a graph in `refuse` fails."""

    def __init__(self, refuse=()):
        self.refuse, self.instantiated, self.destroyed = set(refuse), [], []

    def cuStreamBeginCapture(self, stream, mode):
        return (0,)

    def cuStreamEndCapture(self, stream):
        return 0, 0x61

    def cuGraphInstantiateWithFlags(self, graph, flags):
        self.instantiated.append(graph)
        if graph in self.refuse:
            return 1, None
        return 0, 0xE000 + graph

    def cuGraphDestroy(self, graph):
        self.destroyed.append(graph)
        return (0,)


@pytest.mark.parametrize("case", ["rewritten", "rewritten graph refused", "rewrite raised", "not asked"])
def test_capture_instantiates_the_rewritten_graph_or_else_the_captured_one(monkeypatch, case):
    from cudnn_py.cuda import capture

    lib = FakeCaptureLib(refuse={0x62} if case == "rewritten graph refused" else ())
    monkeypatch.setattr(capture, "driver", lambda: lib)
    clones = []

    def rewrite(graph):
        assert graph == 0x61
        if case == "rewrite raised":
            raise ctypes.ArgumentError("argument 2: wrong type")
        clones.append(0x62)
        return 0x62, 1, ""

    monkeypatch.setattr(graph_memsets, "rewrite", rewrite)
    got = capture.capture(0x5, lambda: 0, memsets_as_kernels=case != "not asked")
    expected = {
        "rewritten": (0xE062, 1, "", [0x62]),
        "rewritten graph refused": (0xE061, 0, "the graph with kernel nodes for its memsets did not instantiate "
                                                "(CUresult 1)", [0x62, 0x61]),
        "rewrite raised": (0xE061, 0, "the rewrite failed: ArgumentError('argument 2: wrong type')", [0x61]),
        "not asked": (0xE061, 0, "", [0x61]),
    }[case]
    assert (got.exec, got.memsets_replaced, got.memsets_kept, lib.instantiated) == expected
    assert got.status == 0 and got.why == ""
    assert sorted(lib.destroyed) == sorted(set(clones) | {0x61})  # the clone and the captured graph both go


@pytest.mark.parametrize("seed", range(40))
def test_random_graphs_keep_their_shape_with_memsets_as_kernels(drv, seed):
    """Seeded random DAGs of kernel and memset nodes: after the rewrite every memset is a kernel node with the
    memset's arguments, and the edges are the original ones with each memset in its kernel node's place."""
    import random

    r = random.Random(seed)
    g = drv.graph()
    order = []
    for i in range(r.randint(1, 12)):
        after = r.sample(order, r.randint(0, min(3, len(order))))
        if r.random() < 0.4:
            size = r.choice((1, 2, 4))
            width, height = r.randint(1, 300), r.randint(1, 4)
            p = memset(size=size, width=width, height=height, pitch=width * size + r.choice((0, 16)),
                       value=r.getrandbits(8 * size), dst=0x7000_0000 + 0x10000 * i)
            order.append(drv.node(g, MEMSET, p, after=after))
        else:
            order.append(drv.node(g, KERNEL, f"k{i}", after=after))
    original = {n: drv.graphs[g]["nodes"][n] for n in order}
    # what each node is, independent of ids: a kernel's label, a memset's arguments as the kernel would get them
    def identity(kind, p):
        if kind == MEMSET:
            return ("memset", (p.dst, p.pitch, p.width, p.width * p.height, p.value), p.elementSize)
        if isinstance(p, dict):
            return ("memset", p["args"], {0xF1: 1, 0xF2: 2, 0xF4: 4}[p["func"]])
        return ("kernel", p)
    want_nodes = sorted(identity(*original[n]) for n in order)
    want_edges = sorted((identity(*original[a]), identity(*original[b])) for a, b, _ in drv.graphs[g]["edges"])
    target, replaced, why = graph_memsets.rewrite(g)
    n_memsets = sum(kind == MEMSET for kind, _ in original.values())
    assert (replaced, why) == (n_memsets, "")
    nodes = drv.graphs[target]["nodes"]
    assert all(kind == KERNEL for kind, _ in nodes.values())
    assert sorted(identity(*v) for v in nodes.values()) == want_nodes
    assert sorted((identity(*nodes[a]), identity(*nodes[b])) for a, b, _ in drv.graphs[target]["edges"]) == want_edges
