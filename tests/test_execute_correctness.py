"""Execute-path correctness that needs no GPU: the cached path re-checks every operand, the stream follows the
caller's framework, workspace=None is stream-ordered, and the variant-pack cache is safe under threads.

torch and cupy are not installed here: small fakes stand in for them. A fake tensor class whose ``__module__`` is
``torch`` goes through exactly the code real torch tensors take (cudnn_py recognises frameworks by module name),
and a fake ``torch`` / ``cupy`` module in ``sys.modules`` provides the current stream and the allocator. The
cuDNN execute call itself is replaced by a recorder: variant packs are real finalized descriptors (cuDNN
finalizes them on the CPU), so the recorder can read back which pointers each call would have run with.
"""
from __future__ import annotations

import itertools
import sys
import threading
import types
import weakref
from contextlib import contextmanager

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py import interop
from cudnn_py.backend import descriptor as descriptor_mod
from cudnn_py.plans import execute as execute_mod
from cudnn_py.plans import execute_defaults, execute_operands
from cudnn_py.plans import workspace as workspace_mod

H, F = cudnn.data_type.HALF, cudnn.data_type.FLOAT
_addresses = itertools.count(1)


def new_address() -> int:
    return 0x7F0000000000 + next(_addresses) * 0x10000


# ------------------------------------------------------------------------------------------------- fake torch
class FakeDtype:
    """torch dtypes are singletons printed as ``torch.<name>``."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"torch.{self.name}"

    __str__ = __repr__


float16, bfloat16, float32, float64, uint8, bool_ = (
    FakeDtype(n) for n in ("float16", "bfloat16", "float32", "float64", "uint8", "bool"))
_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "uint8": 1, "bool": 1}


class FakeDevice:
    def __init__(self, type: str, index: int | None = None):
        self.type, self.index = type, index

    def __eq__(self, other):
        return isinstance(other, FakeDevice) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self):
        return hash((self.type, self.index))

    def __repr__(self):
        return f"device(type={self.type!r}, index={self.index})"


CUDA0 = FakeDevice("cuda", 0)


def _row_major(shape):
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return tuple(reversed(out))


class Tensor:
    """The attributes cudnn_py (cudnn_py.torch, and 1.32's torch wrapper, cudnn_py.wrapper) read from a
    torch.Tensor; like torch's, it has ``__dlpack__`` (what makes an argument a framework tensor for the wrapper),
    but being a ``torch`` tensor it is always read through its attributes, never its capsule."""

    is_nested = False

    def __init__(self, shape, stride=None, dtype=float16, device=CUDA0, ptr=None, requires_grad=False):
        self._shape = tuple(shape)
        self._stride = tuple(stride) if stride is not None else _row_major(self._shape)
        self.dtype, self.device, self.requires_grad = dtype, device, requires_grad
        self._ptr = new_address() if ptr is None else ptr
        self.alloc_stream = None

    def __dlpack__(self, stream=None):
        raise AssertionError("cudnn_py reads a torch tensor's attributes, never its DLPack capsule")

    def __dlpack_device__(self):
        return (2, self.device.index or 0) if self.device.type == "cuda" else (1, 0)

    shape = property(lambda self: self._shape)
    is_cuda = property(lambda self: self.device.type == "cuda")

    def dim(self) -> int:
        return len(self._shape)

    def detach(self) -> Tensor:
        return Tensor(self._shape, self._stride, self.dtype, self.device, self._ptr)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        self.requires_grad = requires_grad
        return self

    def permute(self, *order: int) -> Tensor:
        return Tensor([self._shape[i] for i in order], [self._stride[i] for i in order], self.dtype, self.device,
                      self._ptr, self.requires_grad)

    def unsqueeze(self, d: int) -> Tensor:  # torch's stride for the new dim: size x stride of the dim after it
        shape, stride = list(self._shape), list(self._stride)
        stride.insert(d, shape[d] * stride[d] if d < len(shape) else 1)
        shape.insert(d, 1)
        return Tensor(shape, stride, self.dtype, self.device, self._ptr, self.requires_grad)

    def new_empty(self, shape, dtype=None) -> Tensor:  # a fresh allocation: a new address
        return Tensor(shape, None, dtype or self.dtype, self.device)

    def new_empty_strided(self, shape, stride, dtype=None) -> Tensor:
        return Tensor(shape, stride, dtype or self.dtype, self.device)

    def data_ptr(self) -> int:
        return self._ptr

    def stride(self, dim=None):
        return self._stride if dim is None else self._stride[dim]

    def get_device(self) -> int:
        return self.device.index if self.device.type == "cuda" else -1

    def is_contiguous(self) -> bool:  # torch's rule: every dim of size > 1 has its row-major stride
        return all(d == 1 or s == e for d, s, e in zip(self._shape, self._stride, _row_major(self._shape)))

    def numel(self) -> int:
        n = 1
        for d in self._shape:
            n *= d
        return n

    def element_size(self) -> int:
        return _ITEMSIZE[self.dtype.name]

    @property
    def nbytes(self) -> int:
        return self.numel() * self.element_size()

    def transpose(self, i: int, j: int) -> Tensor:
        shape, stride = list(self._shape), list(self._stride)
        shape[i], shape[j] = shape[j], shape[i]
        stride[i], stride[j] = stride[j], stride[i]
        return Tensor(shape, stride, self.dtype, self.device, self._ptr)

    def view(self, dtype) -> Tensor:
        return Tensor(self._shape, self._stride, dtype, self.device, self._ptr)

    def reshape(self, *shape) -> Tensor:
        return Tensor(shape, None, self.dtype, self.device, self._ptr)

    def cpu(self) -> Tensor:
        return Tensor(self._shape, self._stride, self.dtype, FakeDevice("cpu"), new_address())


Tensor.__module__ = "torch"


class FakeTorchStream:
    def __init__(self, ptr: int, device: int = 0):
        self.cuda_stream, self.device_index = ptr, device


class FakeTorch(types.ModuleType):
    """``sys.modules['torch']`` for these tests: per-device current streams, the current device, ``torch.cuda.stream``,
    ``empty`` and ``empty_strided`` (each call logged in ``allocated``), the dtypes."""

    def __init__(self):
        super().__init__("torch")
        self.Tensor, self.dtype = Tensor, FakeDtype
        self.float16, self.bfloat16, self.float32, self.uint8 = float16, bfloat16, float32, uint8
        self.current = {}  # device -> raw current stream
        self.current_device = 0  # torch.cuda.current_device()
        self.allocations: list[weakref.ref] = []
        self.allocated: list[tuple] = []  # ("empty", size, device, dtype) / ("empty_strided", size, stride, ...)
        self.raw_calls = 0
        self.syncs: list = []
        torch = self

        def raw(device):
            torch.raw_calls += 1
            return torch.current.get(device, 0)

        @contextmanager
        def stream(s):
            before = torch.current.get(s.device_index, 0)
            torch.current[s.device_index] = s.cuda_stream
            try:
                yield s
            finally:
                torch.current[s.device_index] = before

        self._C = types.SimpleNamespace(_cuda_getCurrentRawStream=raw)
        self.cuda = types.SimpleNamespace(
            is_available=lambda: True, stream=stream, current_device=lambda: torch.current_device,
            current_stream=lambda device=None: FakeTorchStream(
                torch.current.get(torch.current_device if device is None else device, 0),
                torch.current_device if device is None else device),
            default_stream=lambda device=None: FakeTorchStream(0, device or 0),
            ExternalStream=lambda ptr, device=None: FakeTorchStream(ptr, _index(device)),
            synchronize=lambda device=None: torch.syncs.append(device))

    def empty(self, size, dtype=None, device=None):
        self.allocated.append(("empty", size, device, dtype))
        dev = _index(device)
        t = Tensor((size,), None, dtype or float32, FakeDevice("cuda", dev))
        t.alloc_stream = self.current.get(dev, 0)  # what the caching allocator ties the block to
        self.allocations.append(weakref.ref(t))
        return t

    def empty_strided(self, size, stride, dtype=None, device=None):
        self.allocated.append(("empty_strided", list(size), list(stride), device, dtype))
        return Tensor(size, stride, dtype or float32, FakeDevice("cuda", _index(device)))


def _index(device) -> int:
    if device is None:
        return 0
    if isinstance(device, int):
        return device
    if isinstance(device, FakeDevice):
        return device.index or 0
    return int(str(device).split(":")[1]) if ":" in str(device) else 0


# ------------------------------------------------------------------------------------------------- fake cupy
class MemoryPointer:
    def __init__(self, ptr: int, device_id: int = 0, stream: int | None = None):
        self.ptr, self.device_id, self.stream = ptr, device_id, stream


class ndarray:
    """The attributes cudnn_py reads from a cupy.ndarray (strides in bytes, numpy dtype)."""

    def __init__(self, shape, dtype=np.float16, device_id=0, ptr=None, strides=None):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.strides = tuple(strides) if strides is not None else \
            tuple(s * self.dtype.itemsize for s in _row_major(self.shape))
        self.data = MemoryPointer(new_address() if ptr is None else ptr, device_id)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * self.dtype.itemsize

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "strides": self.strides,
                "data": (self.data.ptr, False), "version": 3}


ndarray.__module__ = "cupy._core.core"


class FakeCupy(types.ModuleType):
    def __init__(self):
        super().__init__("cupy")
        self.ndarray = ndarray
        self.current = {}  # device -> current stream ptr
        self.device = 0
        self.allocations: list[MemoryPointer] = []
        cp = self

        class Stream:
            def __init__(self, ptr):
                self.ptr = ptr

            def __enter__(self):
                self._before = cp.current.get(cp.device, 0)
                cp.current[cp.device] = self.ptr
                return self

            def __exit__(self, *exc):
                cp.current[cp.device] = self._before

        Stream.null = Stream(0)

        @contextmanager
        def device(d):
            before, cp.device = cp.device, d
            try:
                yield
            finally:
                cp.device = before

        def alloc(size):
            m = MemoryPointer(new_address(), cp.device, cp.current.get(cp.device, 0))
            cp.allocations.append(m)
            return m

        self.cuda = types.SimpleNamespace(
            get_current_stream=lambda device_id=-1: Stream(cp.current.get(cp.device if device_id < 0 else device_id, 0)),
            ExternalStream=Stream, Stream=Stream, Device=device, alloc=alloc)


# ------------------------------------------------------------------------------------------------- harness
class FakePlan:
    _ids = itertools.count(10_000)

    def __init__(self, workspace: int = 0):
        self.id, self.ptr, self.name, self.workspace = next(self._ids), 0xDEAD0000, "fake_plan", workspace


class Recorder:
    """Stands in for cudnnBackendExecute: records the handle and the data pointers the variant pack holds."""

    def __init__(self):
        self.calls: list[tuple] = []
        self.by_thread: dict[int, list[tuple]] = {}
        self.lock = threading.Lock()

    def __call__(self, handle, plan_ptr, vp) -> int:
        ref = descriptor_mod._live.get(vp.value)  # the registry's weak reference (descriptor._Owner)
        d = ref() if ref is not None else None
        assert d is not None and not d.destroyed, "executed with a destroyed variant pack"
        ptrs = [int(p, 16) for p in d._attrs["CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS"]]
        ws = int(d._attrs["CUDNN_ATTR_VARIANT_PACK_WORKSPACE"], 16) if isinstance(
            d._attrs["CUDNN_ATTR_VARIANT_PACK_WORKSPACE"], str) else d._attrs["CUDNN_ATTR_VARIANT_PACK_WORKSPACE"]
        with self.lock:
            self.calls.append((int(handle), ptrs, ws))
            self.by_thread.setdefault(threading.get_ident(), []).append((int(handle), ptrs, ws))
        return 0


def square_matmul(io=H, keep: list | None = None):
    """C = A @ B over [2, 16, 16] tensors: A.transpose(1, 2) has A's shape and pointer but other strides. The
    executor works without its graph; a test that plans further keeps the graph (``keep``): nothing else does."""
    g = cudnn.pygraph(io_data_type=io, compute_data_type=F)
    if keep is not None:
        keep.append(g)
    A = g.tensor(dim=[2, 16, 16], stride=[256, 16, 1], name="A")
    B = g.tensor(dim=[2, 16, 16], stride=[256, 16, 1], name="B")
    C = g.matmul(A, B)
    C.set_output(True).set_name("C")
    g.validate()
    ex = g.session.executor
    ex._backend_execute = Recorder()
    return ex, A, B, C


def operands(dtype=float16):
    return [Tensor((2, 16, 16), dtype=dtype) for _ in range(3)]


class FakeHandles:
    """The default-handle machinery without cudnnCreate: handles are ints, set_stream calls are recorded."""

    def __init__(self):
        self.created: list[tuple] = []
        self.set_calls: list[tuple[int, int]] = []
        self.streams: dict[int, int] = {}

    def new(self, device):
        h = 0x1000 + len(self.created)
        self.created.append((h, device))
        self.streams[h] = 0
        return h

    def set_stream(self, handle, stream):
        self.set_calls.append((int(handle), int(stream)))
        self.streams[int(handle)] = int(stream)

    def get_stream(self, handle):
        return self.streams.get(int(handle), 0)


def register_fake_handles(monkeypatch, registry: dict) -> None:
    """``registry`` as the handle registry (cudnn_py refuses unregistered handles), with the fake handle values
    these tests pass registered as live; restored afterwards."""
    from cudnn_py.backend import live

    monkeypatch.setattr(live, "_live", registry)
    monkeypatch.setattr(execute_mod, "_live_handles", live._live)
    monkeypatch.setattr(execute_defaults, "_live_handles", live._live)  # (the default handles' records)
    for h in [HANDLE, 0x55, 0x77] + [0x1000 + i for i in range(16)]:
        live.register(h, None, owned=False, origin="adopt_handle")


@pytest.fixture(autouse=True)
def registered_fake_handles(monkeypatch):
    from cudnn_py.backend import live

    register_fake_handles(monkeypatch, dict(live._live))


def fake_default_handles(monkeypatch) -> FakeHandles:
    """The default-handle machinery on FakeHandles (no cudnnCreate), with no default handle made yet."""
    fh = FakeHandles()
    monkeypatch.setattr(execute_defaults, "_new_default_handle", fh.new)
    monkeypatch.setattr(execute_defaults, "_set_stream", fh.set_stream)
    monkeypatch.setattr(execute_mod, "_get_stream", fh.get_stream)
    defaults: dict = {}  # one dict: the default handles' module and the bound execute (execute.py) read it
    monkeypatch.setattr(execute_defaults, "_DEFAULT_HANDLES", defaults)
    monkeypatch.setattr(execute_mod, "_DEFAULT_HANDLES", defaults)
    return fh


@pytest.fixture
def handles(monkeypatch):
    return fake_default_handles(monkeypatch)


def install_fake_torch(monkeypatch) -> FakeTorch:
    """A FakeTorch as ``sys.modules['torch']`` for one test."""
    t = FakeTorch()
    monkeypatch.setitem(sys.modules, "torch", t)
    monkeypatch.setattr(interop, "_placements", {})  # placements remember the framework module they read
    return t


@pytest.fixture
def torch(monkeypatch):
    return install_fake_torch(monkeypatch)


@pytest.fixture
def cupy(monkeypatch):
    c = FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", c)
    monkeypatch.setattr(interop, "_placements", {})
    return c


HANDLE = 0x77  # an explicit handle: the caller's stream, nothing is set on it


def both_paths(ex, plan):
    """The two cached entry points: the bound closure pygraph.execute calls, and Executor.execute."""
    fast = ex.fast(plan)
    return [("fast", lambda pack, **kw: fast(pack, kw.get("workspace"), kw.get("handle", HANDLE))),
            ("execute", lambda pack, **kw: ex.execute(plan, pack, kw.get("workspace"), kw.get("handle", HANDLE)))]


# ------------------------------------------------------------------------------------------------- 1. cached-path checks
@pytest.mark.parametrize("path", ["fast", "execute"])
def test_cached_path_rejects_transposed_strides_on_the_same_pointer(path, torch):
    ex, A, B, C = square_matmul()
    plan = FakePlan()
    run = dict(both_paths(ex, plan))[path]
    a, b, c = operands()
    run({A: a, B: b, C: c})
    run({A: a, B: b, C: c})  # cached now
    with pytest.raises(ValueError, match=r"tensor 'A' \(uid \d+\).*strides"):
        run({A: a.transpose(1, 2), B: b, C: c})
    assert len(ex._backend_execute.calls) == 2, "the transposed operand must not reach cuDNN"
    run({A: a, B: b, C: c})  # the good binding still runs after the failure
    assert len(ex._backend_execute.calls) == 3


@pytest.mark.parametrize("path", ["fast", "execute"])
def test_a_tensor_given_two_different_buffers_is_refused(path, torch):
    """Two keys for one tensor (the Tensor and its name or uid) with new pointers: two different buffers are
    refused before cuDNN sees either, naming the tensor; the same buffer twice runs (as in the official module)."""
    ex, A, B, C = square_matmul()
    run = dict(both_paths(ex, FakePlan()))[path]
    a, b, c = operands()
    a2 = operands()[0]
    for second in ("A", A.uid):
        with pytest.raises(ValueError, match=r"tensor 'A' \(uid \d+\) two different buffers"):
            run({A: a, B: b, C: c, second: a2})
    assert not ex._backend_execute.calls
    run({A: a, B: b, C: c, "A": a})
    assert ex._backend_execute.calls[-1][1] == [a.data_ptr(), b.data_ptr(), c.data_ptr()]


@pytest.mark.parametrize("path", ["fast", "execute"])
def test_cached_path_checks_a_dtype_view_of_the_output(path, torch):
    """Elements of another size are refused; a dtype of the same size (bfloat16 memory for a HALF tensor) is read as
    the tensor's type, as the official module reads it, with a warning that names the tensor."""
    ex, A, B, C = square_matmul()
    run = dict(both_paths(ex, FakePlan()))[path]
    a, b, c = operands()
    run({A: a, B: b, C: c})
    run({A: a, B: b, C: c})
    with pytest.raises(ValueError, match=r"tensor 'C' \(uid \d+\).*HALF \(16-bit elements\).*32-bit"):
        run({A: a, B: b, C: c.view(float32)})
    assert len(ex._backend_execute.calls) == 2
    with pytest.warns(RuntimeWarning, match=r"tensor 'C' \(uid \d+\).*same size.*read as data_type.HALF"):
        run({A: a, B: b, C: c.view(bfloat16)})
    assert len(ex._backend_execute.calls) == 3


def test_pointers_seen_before_run_from_the_bound_execute_and_are_still_checked(torch, monkeypatch):
    """A framework's fresh outputs at every call (cudnn_py.torch): pointers other than the last call's, each set
    checked in full once (when its variant pack is built, by execute). After that the bound execute takes the
    cached pack itself (no execute call), with every operand still re-checked against its slot's signature: an
    operand changed at a seen address is refused as before, and tracing sends every call to execute."""
    from cudnn_py.backend import trace

    ex, A, B, C = square_matmul()
    entered = []
    real = ex.execute
    monkeypatch.setattr(ex, "execute", lambda *a, **kw: entered.append(1) or real(*a, **kw))
    fast = ex.fast(FakePlan())
    a, b, c1 = operands()
    c2 = Tensor((2, 16, 16))
    for c in (c1, c2):  # each pointer set once through execute: checked, its variant pack built
        fast({A: a, B: b, C: c}, None, HANDLE)
    assert len(entered) == 2
    for c in (c1, c2, c1, c2):
        fresh = Tensor((2, 16, 16), ptr=c.data_ptr())  # a new object at an address seen before
        fast({A: a, B: b, C: fresh}, None, HANDLE)
    assert len(entered) == 2, "pointers seen before left the bound execute"
    calls = ex._backend_execute.calls
    assert [ptrs for _, ptrs, _ in calls[2:]] == [ex.pointers({A: a, B: b, C: c}) for c in (c1, c2, c1, c2)]
    assert ex._last[2] == ex.pointers({A: a, B: b, C: c2})  # published, as execute publishes it
    with pytest.raises(ValueError, match=r"tensor 'A' \(uid \d+\).*strides"):
        fast({A: a.transpose(1, 2), B: b, C: c1}, None, HANDLE)
    with pytest.raises(ValueError, match=r"tensor 'C' \(uid \d+\).*32-bit"):
        fast({A: a, B: b, C: c2.view(float32)}, None, HANDLE)
    assert len(calls) == 6, "a changed operand reached cuDNN"
    monkeypatch.setattr(trace, "active", object())  # tracing: every call is execute's (and traced there)
    monkeypatch.setattr(ex, "_enqueue", lambda *a, **kw: entered.append("enqueued"))
    fast({A: a, B: b, C: c1}, None, HANDLE)
    assert entered[-1] == "enqueued" and len(calls) == 6


@pytest.mark.parametrize("path", ["fast", "execute"])
def test_cached_path_rejects_shape_and_device_changes(path, torch):
    ex, A, B, C = square_matmul()
    run = dict(both_paths(ex, FakePlan()))[path]
    a, b, c = operands()
    run({A: a, B: b, C: c})
    with pytest.raises(ValueError, match=r"tensor 'B' \(uid \d+\).*shape \[2, 16, 16\], got \[1, 16, 16\].*holds "
                                         r"512 bytes.*spans 1024"):
        run({A: a, B: b.reshape(1, 16, 16), C: c})
    holes = Tensor((2, 16, 16), (512, 32, 1), ptr=b.data_ptr())  # another shape's strides would not matter...
    with pytest.raises(ValueError, match=r"tensor 'B' \(uid \d+\).*not dense"):
        run({A: a, B: Tensor((2, 8, 32), (1024, 64, 1), ptr=b.data_ptr()), C: c})  # ...but gaps do
    with pytest.raises(ValueError, match=r"tensor 'B' \(uid \d+\).*expected strides"):
        run({A: a, B: holes, C: c})  # the declared shape with other strides: a misread
    host_b = Tensor((2, 16, 16), device=FakeDevice("cpu"), ptr=b.data_ptr())  # same address, host memory
    with pytest.raises(ValueError, match=r"tensor 'B' \(uid \d+\).*host"):
        run({A: a, B: host_b, C: c})
    assert len(ex._backend_execute.calls) == 1
    run({A: a, B: b.reshape(1, 32, 16), C: c})  # a dense buffer of the tensor's bytes: read as the tensor, as the
    run({A: a, B: b.reshape(512), C: c})  # official module reads any operand by its pointer
    assert len(ex._backend_execute.calls) == 3


@pytest.mark.parametrize("path", ["fast", "execute"])
def test_cached_path_rejects_changes_of_cupy_and_dlpack_operands(path, torch):
    ex, A, B, C = square_matmul()
    run = dict(both_paths(ex, FakePlan()))[path]
    a, b, c = (ndarray((2, 16, 16)) for _ in range(3))
    run({A: a, B: b, C: c})
    run({A: a, B: b, C: c})
    at = ndarray((2, 16, 16), ptr=a.data.ptr, strides=(512, 2, 32))
    with pytest.raises(ValueError, match=r"tensor 'A' \(uid \d+\).*strides"):
        run({A: at, B: b, C: c})
    cf = ndarray((2, 16, 8), dtype=np.float32, ptr=c.data.ptr)
    with pytest.raises(ValueError, match=r"tensor 'C' \(uid \d+\)"):
        run({A: a, B: b, C: cf})
    assert len(ex._backend_execute.calls) == 2


def test_cached_path_rechecks_a_user_workspace_size(torch):
    ex, A, B, C = square_matmul()
    plan = FakePlan(workspace=4096)
    fast = ex.fast(plan)
    a, b, c = operands()
    ws = Tensor((4096,), dtype=uint8)
    fast({A: a, B: b, C: c}, ws, HANDLE)
    fast({A: a, B: b, C: c}, ws, HANDLE)
    small = Tensor((16,), dtype=uint8, ptr=ws.data_ptr())  # the caching allocator reuses addresses
    with pytest.raises(ValueError, match="workspace too small"):
        fast({A: a, B: b, C: c}, small, HANDLE)
    assert len(ex._backend_execute.calls) == 2


def test_int_pointers_stay_the_callers_responsibility():
    ex, A, B, C = square_matmul()
    fast = ex.fast(FakePlan())
    p = [new_address() for _ in range(3)]
    fast({A: p[0], B: p[1], C: p[2]}, None, HANDLE)
    fast({A: p[0], B: p[1], C: p[2]}, None, HANDLE)
    assert [c[1] for c in ex._backend_execute.calls] == [p, p]


def test_hot_path_skips_the_full_check(torch, monkeypatch):
    ex, A, B, C = square_matmul()
    fast = ex.fast(FakePlan())
    a, b, c = operands()
    fast({A: a, B: b, C: c}, None, HANDLE)
    calls = []
    monkeypatch.setattr(execute_operands, "operand_info", lambda v: calls.append(v))  # any full check would fail
    for _ in range(3):
        fast({A: a, B: b, C: c}, None, HANDLE)
    a2 = Tensor((2, 16, 16), ptr=a.data_ptr())  # another object, same metadata: still the hot path
    fast({A: a2, B: b, C: c}, None, HANDLE)
    assert calls == [] and len(ex._backend_execute.calls) == 5


# ------------------------------------------------------------------------------------------------- 2. streams
@pytest.mark.parametrize("path", ["fast", "execute"])
def test_no_handle_follows_torchs_current_stream(path, torch, handles):
    ex, A, B, C = square_matmul()
    run = dict(both_paths(ex, FakePlan()))[path]
    a, b, c = operands()
    torch.current[0] = 0x5000
    run({A: a, B: b, C: c}, handle=None)
    run({A: a, B: b, C: c}, handle=None)
    assert handles.set_calls == [(0x1000, 0x5000)], "set once, then cached"
    with torch.cuda.stream(FakeTorchStream(0x6000)):
        run({A: a, B: b, C: c}, handle=None)
    run({A: a, B: b, C: c}, handle=None)
    assert handles.set_calls == [(0x1000, 0x5000), (0x1000, 0x6000), (0x1000, 0x5000)]
    assert [call[0] for call in ex._backend_execute.calls] == [0x1000] * 4
    assert handles.created == [(0x1000, 0)]


def test_no_handle_follows_the_operands_device(torch, handles):
    ex, A, B, C = square_matmul()
    fast = ex.fast(FakePlan())
    dev1 = FakeDevice("cuda", 1)
    a, b, c = (Tensor((2, 16, 16), device=dev1) for _ in range(3))
    torch.current[1] = 0x1111
    fast({A: a, B: b, C: c}, None, None)
    fast({A: a, B: b, C: c}, None, None)
    assert handles.created == [(0x1000, 1)] and handles.set_calls == [(0x1000, 0x1111)]


def test_a_given_handle_keeps_its_own_stream(torch, handles):
    ex, A, B, C = square_matmul()
    fast = ex.fast(FakePlan())
    a, b, c = operands()
    torch.current[0] = 0x5000
    fast({A: a, B: b, C: c}, None, HANDLE)
    fast({A: a, B: b, C: c}, None, HANDLE)
    assert handles.set_calls == [] and handles.created == []
    assert [call[0] for call in ex._backend_execute.calls] == [HANDLE, HANDLE]


def test_no_handle_follows_cupys_current_stream(cupy, handles):
    ex, A, B, C = square_matmul()
    fast = ex.fast(FakePlan())
    a, b, c = (ndarray((2, 16, 16)) for _ in range(3))
    cupy.current[0] = 0xC000
    fast({A: a, B: b, C: c}, None, None)
    fast({A: a, B: b, C: c}, None, None)
    with cupy.cuda.ExternalStream(0xC100):
        fast({A: a, B: b, C: c}, None, None)
    assert handles.set_calls == [(0x1000, 0xC000), (0x1000, 0xC100)]


def test_int_pointers_without_handle_use_the_legacy_default_stream(handles):
    ex, A, B, C = square_matmul()
    fast = ex.fast(FakePlan())
    p = [new_address() for _ in range(3)]
    fast({A: p[0], B: p[1], C: p[2]}, None, None)
    fast({A: p[0], B: p[1], C: p[2]}, None, None)
    assert handles.set_calls in ([], [(0x1000, 0)])
    assert [call[0] for call in ex._backend_execute.calls] == [0x1000, 0x1000]


def test_nothing_imports_torch_or_cupy(handles):
    if "torch" in sys.modules or "cupy" in sys.modules:
        pytest.skip("torch or cupy is already imported in this process")
    ex, A, B, C = square_matmul()
    p = [new_address() for _ in range(3)]
    ex.execute(FakePlan(), {A: p[0], B: p[1], C: p[2]}, None, None)
    ex.execute(FakePlan(workspace=0), {A: p[0], B: p[1], C: p[2]}, 0, None)
    assert "torch" not in sys.modules and "cupy" not in sys.modules


@pytest.mark.parametrize("path", ["fast", "execute"])
def test_a_destroyed_default_handle_is_replaced_not_used(torch, handles, path):
    """The default handle is cudnn_py.backend.default_handle(): a caller can destroy it. The next call without a
    handle takes a new one; cuDNN never gets the destroyed one (it would dereference freed memory)."""
    from cudnn_py.backend import live

    ex, A, B, C = square_matmul()
    plan = FakePlan()
    fast = ex.fast(plan)
    run = fast if path == "fast" else (lambda pack, ws, h: ex.execute(plan, pack, ws, h))
    a, b, c = operands()
    for _ in range(3):
        run({A: a, B: b, C: c}, None, None)
    assert {call[0] for call in ex._backend_execute.calls} == {0x1000}
    live.unregister(0x1000, destroyed=True)  # destroy_handle(default_handle())
    for _ in range(3):
        run({A: a, B: b, C: c}, None, None)
    assert [call[0] for call in ex._backend_execute.calls[3:]] == [0x1001] * 3
    assert len(handles.created) == 2


@pytest.mark.parametrize("path", ["fast", "execute"])
def test_a_stream_set_on_the_default_handle_by_the_caller_is_rebound_at_the_next_execute(torch, handles, path,
                                                                                          monkeypatch):
    """set_stream(default_handle(), s) by the caller: an execute without a handle still runs on the framework's
    current stream (the state's record follows every set_stream, so it is not trusted stale)."""
    import types

    from cudnn_py.backend import handle as handle_mod

    def cudnn_set_stream(h, s):  # cuDNN's binding, as the fake default handles keep it
        handles.streams[int(h)] = int(s or 0)
        return 0

    monkeypatch.setattr(handle_mod, "lib", lambda: types.SimpleNamespace(cudnnSetStream=cudnn_set_stream))
    ex, A, B, C = square_matmul()
    plan = FakePlan()
    fast = ex.fast(plan)
    run = fast if path == "fast" else (lambda pack, ws, h: ex.execute(plan, pack, ws, h))
    a, b, c = operands()
    torch.current[0] = 0x5000
    seen = []
    ex._backend_execute.calls.clear()
    for step in range(4):
        if step == 2:
            handle_mod.set_stream(0x1000, 0x9999)  # the caller, on cudnn_py.backend.default_handle()
        run({A: a, B: b, C: c}, None, None)
        seen.append(handles.streams[0x1000])
    assert [call[0] for call in ex._backend_execute.calls] == [0x1000] * 4
    assert seen == [0x5000] * 4, "an execute without a handle ran on another stream than torch's current one"


def test_default_handles_are_per_thread(torch, handles):
    ex, A, B, C = square_matmul()
    fast = ex.fast(FakePlan())
    a, b, c = operands()
    fast({A: a, B: b, C: c}, None, None)
    t = threading.Thread(target=fast, args=({A: a, B: b, C: c}, None, None))
    t.start()
    t.join()
    assert len(handles.created) == 2
    assert {call[0] for call in ex._backend_execute.calls} == {0x1000, 0x1001}


# ------------------------------------------------------------------------------------------------- 3. workspace=None
def test_workspace_none_with_torch_is_per_stream_and_allocated_on_it(torch, handles):
    ex, A, B, C = square_matmul()
    fast = ex.fast(FakePlan(workspace=1 << 20))
    a, b, c = operands()
    torch.current[0] = 0x5000
    fast({A: a, B: b, C: c}, None, None)
    fast({A: a, B: b, C: c}, None, None)
    with torch.cuda.stream(FakeTorchStream(0x6000)):
        fast({A: a, B: b, C: c}, None, None)
    live = [r() for r in torch.allocations if r() is not None]
    assert sorted(t.alloc_stream for t in live) == [0x5000, 0x6000], "one buffer per stream, allocated on it"
    ws_used = [call[2] for call in ex._backend_execute.calls]
    by_stream = {t.alloc_stream: t.data_ptr() for t in live}
    assert ws_used == [by_stream[0x5000], by_stream[0x5000], by_stream[0x6000]]


def test_workspace_none_with_a_given_handle_allocates_on_its_stream(torch, handles):
    ex, A, B, C = square_matmul()
    fast = ex.fast(FakePlan(workspace=1 << 20))
    a, b, c = operands()
    handles.streams[HANDLE] = 0x7000  # the caller bound this stream with set_stream
    fast({A: a, B: b, C: c}, None, HANDLE)
    fast({A: a, B: b, C: c}, None, HANDLE)
    live = [r() for r in torch.allocations if r() is not None]
    assert [t.alloc_stream for t in live] == [0x7000]
    assert torch.current.get(0, 0) == 0, "the caller's current stream is restored"


def test_workspace_growth_drops_the_old_buffer(torch, handles):
    ex, A, B, C = square_matmul()
    a, b, c = operands()
    small, big = FakePlan(workspace=1024), FakePlan(workspace=1 << 20)
    ex.execute(small, {A: a, B: b, C: c}, None, None)
    first = torch.allocations[0]
    ex.execute(big, {A: a, B: b, C: c}, None, None)
    ex.execute(small, {A: a, B: b, C: c}, None, None)  # the grown buffer serves the small plan too
    assert len(torch.allocations) == 2
    # the old buffer is released (to the allocator of the stream it was used on), not kept forever
    assert first() is None


def test_the_bound_execute_of_a_bigger_plan_never_takes_a_smaller_cached_workspace(torch, handles):
    """A plan switched to (select_plan, a new bound execute) that needs more workspace than the buffer cudnn_py keeps
    for the stream: the bound execute grows it before executing, whichever handle form, and never hands cuDNN the
    smaller one (a kernel would write past its end)."""
    ex, A, B, C = square_matmul()
    a, b, c = operands()
    pack = {A: a, B: b, C: c}
    for handle in (None, HANDLE):
        small, big = FakePlan(workspace=1024), FakePlan(workspace=1 << 20)
        ex.fast(small)(pack, None, handle)
        ex.fast(small)(pack, None, handle)
        grown = ex.fast(big)
        for _ in range(3):
            grown(pack, None, handle)
        sizes = {r().data_ptr(): r().nbytes for r in torch.allocations if r() is not None}
        used = [call[2] for call in ex._backend_execute.calls[-3:]]
        assert all(sizes.get(ws, 0) >= 1 << 20 for ws in used), (handle, used, sizes)


def test_workspace_of_an_old_stream_is_evicted_after_a_sync(torch, handles):
    ex, A, B, C = square_matmul()
    fast = ex.fast(FakePlan(workspace=4096))
    a, b, c = operands()
    for k in range(workspace_mod.MAX_STREAMS + 1):
        with torch.cuda.stream(FakeTorchStream(0xA000 + k)):
            fast({A: a, B: b, C: c}, None, None)
    assert len(ex._workspaces._buffers) == workspace_mod.MAX_STREAMS
    assert (0, 0xA000) not in ex._workspaces._buffers and len(torch.syncs) == 1, "evicted only after a sync"
    assert torch.allocations[0]() is None


def test_workspace_none_with_cupy_uses_its_pool_on_the_stream(cupy, handles):
    ex, A, B, C = square_matmul()
    fast = ex.fast(FakePlan(workspace=4096))
    a, b, c = (ndarray((2, 16, 16)) for _ in range(3))
    cupy.current[0] = 0xC000
    fast({A: a, B: b, C: c}, None, None)
    with cupy.cuda.ExternalStream(0xC100):
        fast({A: a, B: b, C: c}, None, None)
    assert [m.stream for m in cupy.allocations] == [0xC000, 0xC100]
    assert [call[2] for call in ex._backend_execute.calls] == [m.ptr for m in cupy.allocations]


def test_workspace_none_without_frameworks_passes_the_stream_to_cuda_core(handles, monkeypatch):
    """cuda.core 1.x: Device.allocate(size, *, stream) — no stream is a TypeError."""
    import cuda.core

    allocated = []

    class FakeBuffer:
        def __init__(self, size, stream):
            self.size, self.stream, self.handle = size, stream, new_address()

    class FakeDeviceCls:
        def __init__(self, device=0):
            self.device = device

        def set_current(self):
            pass

        def allocate(self, size, *, stream):
            allocated.append((self.device, size, stream))
            return FakeBuffer(size, stream)

    class FakeStreamCls:
        @staticmethod
        def from_handle(h):
            return ("stream", h)

    monkeypatch.setattr(cuda.core, "Device", FakeDeviceCls)
    monkeypatch.setattr(cuda.core, "Stream", FakeStreamCls)
    ex, A, B, C = square_matmul()
    p = [new_address() for _ in range(3)]
    handles.streams[HANDLE] = 0x9000
    ex.execute(FakePlan(workspace=4096), {A: p[0], B: p[1], C: p[2]}, None, HANDLE)
    assert len(allocated) == 1 and allocated[0][2] == ("stream", 0x9000)
    ex.execute(FakePlan(workspace=4096), {A: p[0], B: p[1], C: p[2]}, None, None)  # default handle: stream 0
    assert len(allocated) == 2 and allocated[1][2] is cuda.core.LEGACY_DEFAULT_STREAM


# ------------------------------------------------------------------------------------------------- 4. threads
def test_eviction_never_destroys_a_variant_pack_in_use(torch, monkeypatch):
    ex, A, B, C = square_matmul()
    plan = FakePlan()
    entered, release = threading.Event(), threading.Event()
    seen = {}
    record = ex._backend_execute

    def blocking(handle, plan_ptr, vp):
        if threading.current_thread().name == "holder":
            seen["vp"] = descriptor_mod._live[vp.value]  # the registry's weak reference to it
            entered.set()
            release.wait(10)
            d = seen["vp"]()
            seen["alive"] = d is not None and not d.destroyed
        return record(handle, plan_ptr, vp)

    ex._backend_execute = blocking
    a, b, c = operands()
    holder = threading.Thread(target=ex.execute, args=(plan, {A: a, B: b, C: c}, None, HANDLE), name="holder")
    holder.start()
    assert entered.wait(10)
    for _ in range(execute_mod.VARIANT_PACK_CACHE_SIZE + 8):  # evicts the holder's variant pack
        ex.execute(plan, {A: Tensor((2, 16, 16)), B: b, C: c}, None, HANDLE)
    release.set()
    holder.join(10)
    assert seen["alive"], "the variant pack was destroyed while a call was executing with it"


def test_variant_pack_cache_is_lru():
    ex, A, B, C = square_matmul()
    plan = FakePlan()
    fixed = [new_address() for _ in range(3)]
    hot = {A: fixed[0], B: fixed[1], C: fixed[2]}
    ex.execute(plan, hot, None, HANDLE)
    built = []
    orig = ex._variant_pack
    ex._variant_pack = lambda ptrs, ws: built.append(list(ptrs)) or orig(ptrs, ws)
    for _ in range(execute_mod.VARIANT_PACK_CACHE_SIZE * 2):
        ex.execute(plan, {A: new_address(), B: fixed[1], C: fixed[2]}, None, HANDLE)
        ex.execute(plan, hot, None, HANDLE)  # used every other call: never evicted
    assert fixed not in built


def test_threads_hammering_one_graph_always_run_their_own_pointers(torch, handles):
    ex, A, B, C = square_matmul()
    fast = ex.fast(FakePlan(workspace=256))
    rec = ex._backend_execute
    errors = []
    per_thread_sets = execute_mod.VARIANT_PACK_CACHE_SIZE // 4 + 8  # together more than the cache holds
    iterations = 300

    # all four threads alive together (thread idents, which key the records and default handles, are reused once
    # a thread has exited)
    start, done = threading.Barrier(4), threading.Barrier(4)

    def worker(k):
        try:
            sets = [operands() for _ in range(per_thread_sets)]
            start.wait(60)
            for it in range(iterations):
                a, b, c = sets[(it * 7 + k) % len(sets)]
                fast({A: a, B: b, C: c}, None, None)
                _, ptrs, ws = rec.by_thread[threading.get_ident()][-1]
                if ptrs != [a.data_ptr(), b.data_ptr(), c.data_ptr()] or ws == 0:
                    errors.append((k, it, ptrs, ws))
        except Exception as e:
            errors.append((k, repr(e)))
        finally:
            done.wait(60)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        sys.setswitchinterval(old)
    assert errors == []
    assert sorted(len(v) for v in rec.by_thread.values()) == [iterations] * 4
    assert len(handles.created) == 4, "one default handle per thread"


def test_the_graphs_handle_is_used_when_execute_gets_none(torch, handles):
    """pygraph(handle=h) then execute(pack): classic runs on h (and h's stream), not on a default handle."""
    ex, A, B, C = square_matmul()
    ex.graph_handle = 0x55  # what BackendGraph sets from pygraph(handle=...)
    plan = FakePlan(workspace=512)
    handles.streams[0x55] = 0x8000
    a, b, c = operands()
    ex.execute(plan, {A: a, B: b, C: c}, None, None)
    fast = ex.fast(plan)
    fast({A: a, B: b, C: c}, None, None)
    assert [call[0] for call in ex._backend_execute.calls] == [0x55, 0x55]
    assert handles.created == [] and handles.set_calls == []
    assert [r().alloc_stream for r in torch.allocations if r() is not None] == [0x8000]


def test_untyped_cuda_core_buffers_are_bound_as_raw_memory_of_the_right_size():
    """A cuda.core Buffer's DLPack view is a flat byte array: it is bound as raw device memory of the tensor's size
    (checked for size and device), not compared as a shape."""
    from cudnn_py.interop import OperandInfo, is_raw_buffer, operand_info
    from cudnn_py.plans.execute import _check_operand

    Buffer = type("Buffer", (), {"__module__": "cuda.core._memory", "handle": 0, "size": 0})  # properties on the class

    def buffer(size, ptr=1 << 20, device_id=0, on_device=True):
        b = Buffer()
        b.handle, b.size, b.device_id, b.is_device_accessible = ptr, size, device_id, on_device
        return b

    assert is_raw_buffer(Buffer)
    g = cudnn.pygraph()
    t = g.tensor([4, 8, 16], data_type=cudnn.data_type.HALF, name="t")
    info = operand_info(buffer(4 * 8 * 16 * 2))
    assert isinstance(info, OperandInfo) and info.nbytes == 1024 and info.shape is None
    _check_operand(t, info)  # exactly the tensor's bytes
    with pytest.raises(ValueError, match=r"tensor 't' \(uid \d+\): needs 1024 bytes .* the buffer has 1000"):
        _check_operand(t, operand_info(buffer(1000)))
    with pytest.raises(ValueError, match="host"):
        _check_operand(t, operand_info(buffer(1024, on_device=False)))


@pytest.mark.parametrize("path", ["fast", "execute"])
def test_an_unregistered_handle_never_reaches_cudnn(path, torch):
    ex, A, B, C = square_matmul()
    run = dict(both_paths(ex, FakePlan()))[path]
    a, b, c = operands()
    run({A: a, B: b, C: c})
    with pytest.raises(ValueError, match=r"execute\(handle=...\): 0x999 is not a handle created by"):
        run({A: a, B: b, C: c}, handle=0x999)
    assert len(ex._backend_execute.calls) == 1


def test_an_executor_dropped_after_executes_frees_its_variant_packs_at_once(torch):
    """No reference cycle inside an executor either (bound fast paths, cached bindings): dropped with its graph
    after checked and cached executes, its variant packs are destroyed at once (the cyclic collector is off)."""
    from tests.support.collector import collector_off

    with collector_off():
        before = set(descriptor_mod._live)
        kept: list = []
        ex, A, B, C = square_matmul(keep=kept)
        pack = dict(zip((A, B, C), operands()))
        paths = both_paths(ex, FakePlan())
        for _, run in paths:
            for _ in range(3):
                run(pack)
        assert ex._vp_cache and len(ex._backend_execute.calls) == 6
        alive = weakref.ref(ex)
        del ex, run, paths, kept
        assert alive() is None
        assert not set(descriptor_mod._live) - before


# ------------------------------------------------------------------------------------------------- installed execute
def _tiny_add_graph():
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT)
    X = g.tensor(dim=[1, 1, 8], stride=[8, 8, 1], name="X")
    Y = g.tensor(dim=[1, 1, 8], stride=[8, 8, 1], name="Y")
    Z = g.add(X, Y)
    Z.set_output(True)
    g.validate()
    return g


class _NamedPlan:
    id, ptr, name, workspace = 7, 0x7000, "fake", 0


def test_the_installed_execute_sends_classic_keywords_to_the_method(monkeypatch):
    """pygraph installs the bound execute as its `execute` (one frame per call): a call with tensor_uids or an
    override goes to pygraph.execute with every argument, in the classic order; dropping the fast path gives the
    method back; the installed execute holds the graph weakly (no cycle: collected with the collector off)."""
    from tests.support.collector import collector_off

    pygraph_mod = sys.modules["cudnn_py.facade.pygraph"]  # (cudnn_py.facade.pygraph is the class)
    g = _tiny_add_graph()
    fast = g.session.executor.fast(_NamedPlan(), pygraph_mod._classic_execute(g))
    g._use_fast_execute(fast)
    assert g.execute is fast and g._fast_execute is fast
    seen = []
    monkeypatch.setattr(pygraph_mod.pygraph, "execute", lambda self, *args: seen.append((self, args)))
    fast([1, 2, 3], None, None, tensor_uids=[1, 2, 3])
    fast({}, 0, 5, override_uids=[1])
    assert seen == [(g, ([1, 2, 3], None, None, None, None, None, [1, 2, 3])),
                    (g, ({}, 0, 5, [1], None, None, None))]
    seen.clear()  # (it holds the graph)
    g.drop_fast_path()
    assert "execute" not in vars(g) and g._fast_execute is None
    g._use_fast_execute(fast)
    gone = weakref.ref(g)
    with collector_off():
        del g
        assert gone() is None, "the installed execute kept its graph alive (a reference cycle)"
    with pytest.raises(RuntimeError, match="destroyed"):
        fast({}, None, None, tensor_uids=[1])


def test_calls_with_tensor_uids_bind_the_execute_once():
    """A call with tensor_uids goes through pygraph.execute every time (the installed execute sends it there): the
    bound execute is made once, not again per call (which would rebuild it and lose its steady state)."""
    from cudnn_py.engines.base import BACKEND_PLAN
    from cudnn_py.plans.session import Phase

    g = _tiny_add_graph()
    made, executed = [], []

    class Session:
        def execute(self, pack, workspace, handle):
            executed.append(dict(pack))

        def fast_path(self, classic):  # as Executor.fast routes a call with tensor_uids: to the method
            made.append(classic)
            return lambda pack, ws=None, h=None, tensor_uids=None: classic(pack, ws, h, None, None, None, tensor_uids)

    session = Session()
    session.phase = Phase.EXECUTABLE  # planned for the cuDNN plan, and built (the facade reads both from these)
    g._plans, g._session = [BACKEND_PLAN], session
    g._at = lambda phase: session if phase == Phase.EXECUTABLE else None
    for _ in range(3):
        g.execute([10, 20, 30], None, None, tensor_uids=[1, 2, 3])
    assert len(executed) == 3 and executed[-1] == {1: 10, 2: 20, 3: 30}
    assert len(made) == 1


def test_a_bound_execute_without_the_classic_method_refuses_classic_keywords():
    g = _tiny_add_graph()
    fast = g.session.executor.fast(_NamedPlan())
    with pytest.raises(TypeError, match="tensor_uids"):
        fast([1, 2, 3], None, None, tensor_uids=[1, 2, 3])
