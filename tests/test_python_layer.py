"""1.32's module-level Python layer on the CPU: every public name of the official module (recorded from the 1.32
wheel's sources in tests/data/module_surface_1_32.json) exists with the official signature; the ``graph`` context
manager, the ``jit`` and ``graph_cache`` decorators; ``datatypes``; ``NodeType`` / ``Node`` / ``GraphContext`` /
``knob``; and the handle model (``Handle``, ``DeviceInfo``) on fake devices. The builds on a GPU are in
tests/test_gpu_python_layer.py."""
from __future__ import annotations

import hashlib
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import cudnn_py as cudnn
from cudnn_py import errors
from cudnn_py.backend import device as device_mod
from cudnn_py.backend import live

ROOT = Path(__file__).resolve().parents[1]
SURFACE = json.loads((ROOT / "tests" / "data" / "module_surface_1_32.json").read_text())
# 1.32 names cudnn_py does not have (docs/differences.md says why): none since Graph / wrapper came
NOT_PROVIDED: set[str] = set()


def _signature(fn) -> list:
    out = []
    for p in inspect.signature(fn).parameters.values():
        if p.name in ("self", "cls"):
            continue
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            out.append([("**" if p.kind == p.VAR_KEYWORD else "*") + p.name, None, None])
            continue
        d = None if p.default is p.empty else (repr(p.default) if isinstance(p.default, str) else str(p.default))
        out.append([p.name, p.kind.name, d])
    return out


def _leading_match(reference: list, candidate: list) -> bool:
    """The reference's parameters lead the candidate's (names, kinds, defaults; ``**kwargs`` by kind only);
    the candidate may add keyword-only parameters after them."""
    named = [p for p in candidate if not p[0].startswith("*")]
    for i, want in enumerate(p for p in reference if not p[0].startswith("*")):
        if i >= len(named) or named[i] != want:
            return False
    for var in (p for p in reference if p[0].startswith("*")):
        if not any(c[0].startswith(var[0][:2]) and not c[0].startswith(var[0][:2] + "*") for c in candidate):
            return False
    return True


# ---- the surface -----------------------------------------------------------------------------------------------
def test_every_public_name_of_1_32_exists():
    missing = [n for n in SURFACE["names"] if n not in NOT_PROVIDED and not hasattr(cudnn, n)]
    assert missing == []
    assert cudnn.handle is cudnn.Handle  # the alias 1.32 keeps for annotations


@pytest.mark.parametrize("name", sorted(SURFACE["funcs"]))
def test_module_functions_have_the_official_signature(name):
    assert _leading_match(SURFACE["funcs"][name], _signature(getattr(cudnn, name))), _signature(getattr(cudnn, name))


def test_classes_have_the_official_signatures_and_attributes():
    assert _leading_match(SURFACE["Handle"]["__init__"], _signature(cudnn.Handle.__init__))
    assert _leading_match(SURFACE["DeviceInfo"]["__init__"], _signature(cudnn.DeviceInfo.__init__))
    for method, params in SURFACE["Graph"].items():  # the wrapper (tests/test_graph_wrapper.py: the rest of it)
        assert _signature(getattr(cudnn.Graph, method)) == params, method
    assert isinstance(cudnn.wrapper, type(sys)) and cudnn.wrapper.Graph is cudnn.Graph
    info = cudnn.DeviceInfo(0)
    assert all(hasattr(type(info), a) or a in vars(info) for a in SURFACE["DeviceInfo"]["attributes"])
    assert [m.name for m in cudnn.NodeType] == SURFACE["NodeType"]
    ctx = cudnn.GraphContext()
    assert all(getattr(ctx, f) == cudnn.data_type.NOT_SET for f in SURFACE["GraphContext"])
    for name, params in SURFACE["datatypes"].items():
        assert _leading_match(params, _signature(getattr(cudnn.datatypes, name))), name


def test_the_vendored_compat_files_are_the_recorded_copies():
    """tests/data/compat is vendored (its README says from where): each file is the copy whose digest the README
    records, so a local edit cannot pass for the reference."""
    compat = ROOT / "tests" / "data" / "compat"
    recorded = dict(re.findall(r"^\| (\S+) \| ([0-9a-f]{64}) \|$", (compat / "README.md").read_text(), re.M))
    assert set(recorded) == {"reference_surface.json", "api_parity.py", "api_surface.py"}
    for name, digest in recorded.items():
        assert hashlib.sha256((compat / name).read_bytes()).hexdigest() == digest, name


def test_import_imports_no_framework():
    code = "import sys, cudnn_py; cudnn_py.datatypes.is_torch_available(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---- graph / jit / graph_cache ---------------------------------------------------------------------------------
@pytest.fixture
def wrapped_handle():
    """A foreign handle wrapped as 1.32 allows (cudnn.Handle(ptr, ordinal, stream)): adopted, never dereferenced
    by these tests."""
    h = cudnn.Handle(0x5A5A_0000, 0, 0)
    yield h
    live.unregister(0x5A5A_0000, destroyed=False)


def _matmul(g):
    a = g.tensor(name="A", dim=[2, 16, 32], stride=[512, 32, 1])
    b = g.tensor(name="B", dim=[2, 32, 8], stride=[256, 8, 1])
    c = g.matmul(a, b, name="mm")
    c.set_output(True)
    return a, b, c


def test_graph_yields_a_pygraph_and_an_empty_list_and_does_nothing_on_exit(wrapped_handle):
    with cudnn.graph(wrapped_handle) as (g, tensors):
        assert isinstance(g, cudnn.pygraph) and tensors == []
        a, b, c = _matmul(g)
    assert g.handle is wrapped_handle and g.name == "cudnn_graph"
    assert (g.context.io_data_type, g.context.intermediate_data_type, g.context.compute_data_type) == \
        (cudnn.data_type.HALF, cudnn.data_type.FLOAT, cudnn.data_type.FLOAT)
    assert not g._is_validated and g.get_execution_plan_count() == 0  # nothing ran on exit
    with cudnn.graph(None) as (g, _):  # no handle (the wrapped one is no real handle): validated deviceless
        a, b, c = _matmul(g)
    g.validate()  # cuDNN finalizes the operation graph without a GPU
    assert g.session.lowered.operation_graph.finalized
    assert c.get_dim() == [2, 16, 8] and c.get_data_type() == cudnn.data_type.HALF


def test_graph_forwards_its_arguments(wrapped_handle):
    with cudnn.graph(wrapped_handle, name="g2", io_data_type=cudnn.data_type.BFLOAT16,
                     compute_data_type=cudnn.data_type.FLOAT, sm_count=4) as (g, _):
        pass
    assert g.name == "g2" and g.sm_count == 4 and g.context.io_data_type == cudnn.data_type.BFLOAT16
    with pytest.raises(TypeError, match="unexpected keyword"):
        with cudnn.graph(wrapped_handle, no_such_option=1):
            pass


class _Builds:
    """pygraph.build replaced by a recorder: build(modes) validates (deviceless) and counts one plan."""

    def __init__(self, monkeypatch):
        self.calls: list = []
        builds = self

        def build(g, heuristics=None, ctx=None):
            builds.calls.append((g, heuristics))
            g.validate()
            g._fake_plans = 1

        monkeypatch.setattr(cudnn.pygraph, "build", build)
        monkeypatch.setattr(cudnn.pygraph, "get_execution_plan_count", lambda g: getattr(g, "_fake_plans", 0))


def test_jit_builds_with_its_modes_and_returns_uids(monkeypatch):
    builds = _Builds(monkeypatch)
    body_runs = []

    @cudnn.jit(heur_modes=[cudnn.heur_mode.A, cudnn.heur_mode.B])
    def make(handle, n):
        """docstring kept"""
        body_runs.append(n)
        with cudnn.graph(handle) as (g, _):
            a, b, c = _matmul(g)
        return g, [a, b, c]

    g, uids = make(None, 1)
    assert uids == [t.get_uid() for t in (g.tensors["A"], g.tensors["B"], g.nodes[0].outputs["C"])]
    assert all(isinstance(u, int) for u in uids)
    assert builds.calls == [(g, [cudnn.heur_mode.A, cudnn.heur_mode.B])]
    assert g.session.lowered.operation_graph.finalized
    assert make.__wrapped__.__doc__ == "docstring kept" and make.__name__ == "make"


def test_jit_does_not_rebuild_a_built_graph_and_wraps_one_mode_in_a_list(monkeypatch):
    builds = _Builds(monkeypatch)
    with cudnn.graph(None) as (g, _):
        a, b, c = _matmul(g)
    make = cudnn.jit(heur_modes=cudnn.heur_mode.FALLBACK, unused_option=True)(lambda: (g, [c]))
    assert make() == (g, [c.get_uid()])
    assert make() == (g, [c.get_uid()])
    assert builds.calls == [(g, [cudnn.heur_mode.FALLBACK])]  # once: the second call found plans
    assert cudnn.jit()(lambda: (g, []))() == (g, [])  # the default mode (A); built already


def test_graph_cache_runs_the_body_once_per_key_and_evicts_the_oldest():
    runs = []

    @cudnn.graph_cache(key_fn=lambda shape, tag=None: tuple(shape), maxsize=2)
    def make(shape, tag=None):
        runs.append(tuple(shape))
        return object()

    first = make([1, 2])
    assert make([1, 2], tag="other") is first and runs == [(1, 2)]  # a hit: the same object, no body run
    second = make([3])
    assert make([3]) is second and runs == [(1, 2), (3,)]
    make([4])  # full (2 entries): the oldest, (1, 2), goes
    assert runs == [(1, 2), (3,), (4,)]
    assert make([3]) is second  # still there (eviction is by insertion order, not by use)
    assert make([1, 2]) is not first and runs[-1] == (1, 2)
    assert make.__wrapped__ is not None and make.__name__ == "make"


def test_jit_over_graph_cache_returns_the_same_graph_on_a_hit(monkeypatch):
    builds = _Builds(monkeypatch)
    bodies = []

    @cudnn.jit(heur_modes=[cudnn.heur_mode.A])
    @cudnn.graph_cache(key_fn=lambda handle, m: m)
    def make(handle, m):
        bodies.append(m)
        with cudnn.graph(handle) as (g, _):
            a = g.tensor(name="A", dim=[1, m, 8], stride=[8 * m, 8, 1])
            b = g.tensor(name="B", dim=[1, 8, 4], stride=[32, 4, 1])
            c = g.matmul(a, b)
            c.set_output(True)
        return g, [a, b, c]

    g1, uids1 = make(None, 16)
    g2, uids2 = make(None, 16)
    g3, _ = make(None, 32)
    assert g1 is g2 and g1 == g2 and uids1 == uids2 and g3 is not g1
    assert bodies == [16, 32] and [c[0] for c in builds.calls] == [g1, g3]


# ---- datatypes, NodeType, knobs ----------------------------------------------------------------------------------
class _FakeTorch(SimpleNamespace):
    pass


def test_datatypes_convert_torch_dtypes_without_importing_torch(monkeypatch):
    dtype = type("dtype", (), {"__init__": lambda self, n: setattr(self, "n", n), "__str__": lambda self: f"torch.{self.n}"})
    dtype.__module__ = "torch"
    tensor = type("Tensor", (), {})
    fake = _FakeTorch(dtype=dtype, Tensor=tensor, float16=dtype("float16"), bfloat16=dtype("bfloat16"),
                      float8_e4m3fn=dtype("float8_e4m3fn"), complex64=dtype("complex64"))
    dt = cudnn.datatypes
    assert dt.torch_to_cudnn_data_type("float16") is None  # not a torch dtype
    monkeypatch.setitem(sys.modules, "torch", fake)
    assert dt.torch_to_cudnn_data_type(fake.float16) == cudnn.data_type.HALF
    assert dt._torch_to_cudnn_data_type(fake.bfloat16) == cudnn.data_type.BFLOAT16
    assert dt.torch_to_cudnn_data_type(fake.float8_e4m3fn) == cudnn.data_type.FP8_E4M3
    assert dt.torch_to_cudnn_data_type(fake.complex64) is None
    assert dt._cudnn_to_torch_data_type(cudnn.data_type.HALF) is fake.float16
    assert dt._library_type(fake.bfloat16) == cudnn.data_type.BFLOAT16
    assert dt._library_type(cudnn.data_type.INT8) is cudnn.data_type.INT8
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="No available conversion"):
        dt._library_type("float16")
    assert dt._is_torch_tensor(tensor()) and not dt._is_torch_tensor(object())
    assert dt.cudnn_data_type is cudnn.data_type and isinstance(dt.is_torch_available(), bool)
    assert isinstance(dt.is_cutlass_available(), bool)


def test_nodes_report_their_1_32_node_type():
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT)
    x = g.tensor(name="x", dim=[2, 16, 8, 8], stride=[1024, 1, 128, 16])
    w = g.tensor(name="w", dim=[4, 16, 3, 3], stride=[144, 1, 48, 16])
    y = g.conv_fprop(x, w, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    r = g.relu(y)
    s = g.reduction(r, mode=cudnn.reduction_mode.ADD)
    s.set_output(True).set_dim([2, 1, 8, 8])
    kinds = [n.node_type for n in g.nodes]
    assert kinds == [cudnn.NodeType.CONV_FPROP, cudnn.NodeType.POINTWISE, cudnn.NodeType.REDUCTION]
    assert all(isinstance(n, cudnn.Node) for n in g.nodes) and isinstance(x, cudnn.Tensor)
    assert isinstance(g.context, cudnn.GraphContext)
    from cudnn_py.ir.node import node_type_of

    assert node_type_of("norm_backward", "rmsnorm_backward") is cudnn.NodeType.RMSNORM_BWD
    assert node_type_of("sdpa_backward", "sdpa_fp8_backward") is cudnn.NodeType.SDPA_FP8_BWD
    assert node_type_of("diagonal_band_mask", "diagonal_band_mask") is cudnn.NodeType.COMPOSITE


def test_knob_and_the_frontend_knob_band():
    k = cudnn.knob()
    assert (k.type, k.max_value, k.min_value, k.stride) == (cudnn.knob_type.NOT_SET, None, None, None)
    k = cudnn.knob(cudnn.knob_type.TILE_M, 4, 1, 1)
    assert json.loads(repr(k)) == {"type": "knob_type.TILE_M", "max_value": 4, "min_value": 1, "stride": 1}
    with pytest.raises(AttributeError):
        k.stride = 2
    band = [m for m in cudnn.knob_type if cudnn.is_frontend_knob_type(m)]
    assert [m.name for m in band] == ["SCHED_POLICY", "PACK_GQA", "SPLIT_KV", "PIPELINE_ARCH", "MMA_TILE_M",
                                      "MMA_TILE_N", "MMA_TILE_K", "CTA_GROUP", "WARPS_M", "WARPS_N"]
    assert band[0].value == cudnn.FRONTEND_KNOB_TYPE_BASE == 1000
    assert cudnn.is_frontend_knob_type(1003) and not cudnn.is_frontend_knob_type(cudnn.knob_type.TILE_CGA)
    assert not cudnn.is_frontend_knob_type(int(cudnn.knob_type.STAGES))
    assert cudnn.sdpa_capabilities() == frozenset()


# ---- the handle model ----------------------------------------------------------------------------------------------
class FakeDriver:
    """cuda.bindings' driver as DeviceInfo calls it: two GPUs, (err, value) tuples, attribute ordinals as ints."""

    names = {0: b"Fake H200\x00junk", 1: b"Fake B200\x00"}
    attrs = {0: {75: 9, 76: 0, 16: 132, 97: 232448, 38: 52428800, 150: 0},
             1: {75: 10, 76: 0, 16: 148, 97: 232448, 38: 132120576, 150: 334848}}

    def __init__(self, version=13040):
        self.version, self.queries = version, []

    def CUdevice_attribute(self, value):  # a cuda-bindings too old to name them: the bare ordinal
        raise ValueError(value)

    def cuDeviceGetCount(self):
        return 0, 2

    def cuDeviceGet(self, ordinal):
        return 0, ordinal

    def cuDeviceGetAttribute(self, attr, dev):
        self.queries.append((dev, attr))
        return 0, self.attrs[dev][attr]

    def cuDeviceGetName(self, size, dev):
        return 0, self.names[dev]

    def cuDriverGetVersion(self):
        return 0, self.version


@pytest.fixture
def fake_gpus(monkeypatch):
    drv = FakeDriver()
    monkeypatch.setattr(device_mod, "_driver", lambda: drv)
    device_mod.device_info.cache_clear()
    yield drv
    device_mod.device_info.cache_clear()


def test_device_info_reads_each_fact_once(fake_gpus):
    d0, d1 = cudnn.DeviceInfo(0), device_mod.device_info(1)
    assert device_mod.device_info(1) is d1 and repr(d1) == "DeviceInfo(cuda:1)"
    assert (d0.compute_capability, d0.sm_version, d0.sm_count, d0.device_name) == ((9, 0), 90, 132, "Fake H200")
    assert (d1.sm_version, d1.l2_cache_bytes, d1.oversized_shared_memory_per_block) == (100, 132120576, 334848)
    assert d0.shared_memory_per_block_optin == 232448
    n = len(fake_gpus.queries)
    assert (d0.sm_version, d0.sm_count) == (90, 132) and len(fake_gpus.queries) == n  # cached on the instance
    fake_gpus.version = 13000
    assert cudnn.DeviceInfo(1).oversized_shared_memory_per_block == 0  # a driver before 13.4: no such mode
    with pytest.raises(ValueError, match=r"cuda:5 does not exist \(2 device\(s\) visible\)"):
        _ = cudnn.DeviceInfo(5).sm_count


def test_device_info_without_a_driver(monkeypatch):
    monkeypatch.setattr(device_mod, "_driver", lambda: None)
    with pytest.raises(errors.NoCudaDeviceError, match="no CUDA device visible") as info:
        _ = cudnn.DeviceInfo(0).compute_capability
    # the project's device error, and the NotImplementedError 1.32's DeviceInfo raises here
    assert isinstance(info.value, errors.CudaUnavailableError) and isinstance(info.value, NotImplementedError)


def test_a_wrapped_handle_is_accepted_and_knows_its_device(fake_gpus):
    h = cudnn.Handle(0x5A5B_0000, 1, 0x77)
    try:
        assert (h.backend_handle, h.stream, h.ordinal) == (0x5A5B_0000, 0x77, 1)
        assert h.device is device_mod.device_info(1) and h.device.sm_version == 100
        assert repr(h) == "cudnn.Handle(backend_handle=0x5a5b0000, cuda:1)"
        rec = live.lookup(h)
        assert rec is not None and rec.device == 1 and not rec.owned  # adopted: accepted, its creator's to destroy
        assert live.lookup(int(h)) is rec  # the plain integer is the same handle
        with pytest.raises(ValueError, match="adopted"):
            cudnn.destroy_handle(h)
        g = cudnn.pygraph(handle=h)
        assert g.handle is h
        from cudnn_py.plans import device_gates
        assert device_gates.device_of_handle(h) == 1  # planning reads the ordinal (h.device is a DeviceInfo)
    finally:
        live.unregister(0x5A5B_0000, destroyed=False)


def test_a_handle_wrapped_without_an_ordinal_takes_its_registered_device_or_the_current_one(fake_gpus, monkeypatch):
    live.register(0x5A5C_0000, 1, owned=False, origin="adopt_handle")
    try:
        assert cudnn.Handle(0x5A5C_0000).ordinal == 1
    finally:
        live.unregister(0x5A5C_0000, destroyed=False)
    from cudnn_py.backend import handle as handle_mod

    monkeypatch.setattr(handle_mod, "current_device", lambda: 0)
    h = cudnn.Handle(None)  # a destroyed handle: nothing registered
    assert h.backend_handle is None and h.ordinal == 0 and live.lookup(h) is None
    assert repr(h) == "cudnn.Handle(backend_handle=None, cuda:0)"
    cudnn.destroy_handle(h)  # nothing to destroy (1.32)


class FakeCudnn:
    """cudnnCreate / SetStream / GetStream / Destroy without a GPU."""

    def __init__(self):
        self.streams: dict[int, int] = {}
        self.calls: list = []

    def cudnnCreate(self, out):
        import ctypes

        ptr = 0x5A60_0000 + len(self.streams) * 0x100
        self.streams[ptr] = 0
        ctypes.cast(out, ctypes.POINTER(ctypes.c_void_p))[0] = ptr
        return 0

    def cudnnSetStream(self, h, s):
        self.calls.append(("set", h, s))
        self.streams[h] = s
        return 0

    def cudnnGetStream(self, h, out):
        import ctypes

        ctypes.cast(out, ctypes.POINTER(ctypes.c_void_p))[0] = self.streams[h] or None
        return 0

    def cudnnDestroy(self, h):
        self.calls.append(("destroy", h))
        return 0


def test_create_set_get_destroy_keep_the_handle_object_true(monkeypatch, fake_gpus):
    from cudnn_py.backend import handle as handle_mod

    fake = FakeCudnn()
    monkeypatch.setattr(handle_mod, "lib", lambda: fake)
    monkeypatch.setattr(handle_mod, "ensure_context", lambda device=None: 0 if device is None else device)
    h = cudnn.create_handle()
    assert isinstance(h, cudnn.Handle) and isinstance(h, int)
    assert (h.backend_handle, h.stream, h.ordinal, h.device.device_name) == (int(h), 0, 0, "Fake H200")
    cudnn.set_stream(handle=h, stream=0x1234)
    assert h.stream == 0x1234 and cudnn.get_stream(h) == 0x1234
    cudnn.set_stream(int(h), 0x99)  # a plain integer handle is still accepted
    assert cudnn.get_stream(int(h)) == 0x99 and cudnn.get_stream(h) == 0x99 and h.stream == 0x99
    ptr = int(h)
    cudnn.destroy_handle(h)
    assert (h.backend_handle, h.stream) == (None, None) and ("destroy", ptr) in fake.calls
    cudnn.destroy_handle(h)  # cleared: nothing happens (1.32)
    assert fake.calls.count(("destroy", ptr)) == 1
    with pytest.raises(ValueError, match="was destroyed"):
        cudnn.set_stream(h, 0)
