"""relu(A @ B + bias) with cuda.core Buffers and plain int pointers: no array library at all, numpy on the host.
Needs a GPU; cuda.core comes with cudnn_py's cu12 / cu13 extras.

    python examples/with_cuda_core.py

Buffers are untyped device memory: cudnn_py binds each one as raw memory of its graph tensor's size, after
checking that it is device memory and large enough. Buffers carry no stream, so a handle bound to a cuda.core
stream says where execute runs; the workspace is a Buffer of our own here (``workspace=None`` would allocate one
with cuda.core on the handle's stream).
"""
import numpy as np
from cuda.core import Buffer, Device

import cudnn_py as cudnn

batch, m, n, k = 8, 256, 64, 128
half = cudnn.data_type.HALF
graph = cudnn.pygraph(io_data_type=half, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)
A = graph.tensor(name="A", dim=[batch, m, k], stride=[m * k, k, 1], data_type=half)
B = graph.tensor(name="B", dim=[batch, k, n], stride=[k * n, n, 1], data_type=half)
Bias = graph.tensor(name="bias", dim=[1, 1, n], stride=[n, n, 1], data_type=half)
Y = graph.relu(input=graph.bias(input=graph.matmul(A, B), bias=Bias))
Y.set_output(True).set_data_type(half)
graph.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])

device = Device(0)
device.set_current()
stream = device.create_stream()
handle = cudnn.create_handle()
cudnn.set_stream(handle, stream)  # anything with __cuda_stream__ (or an int) is a stream


def host_view(array: np.ndarray) -> Buffer:
    """A non-owning Buffer over host memory, for copies to and from the device."""
    return Buffer.from_handle(array.ctypes.data, array.nbytes, owner=array)


def to_device(array: np.ndarray) -> Buffer:
    buf = device.allocate(array.nbytes, stream=stream)
    buf.copy_from(host_view(array), stream=stream)
    return buf


rng = np.random.default_rng(0)
a = rng.standard_normal((batch, m, k)).astype(np.float16)
b = rng.standard_normal((batch, k, n)).astype(np.float16)
bias = rng.standard_normal((1, 1, n)).astype(np.float16)
ref = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + bias.astype(np.float64), 0.0)
da, db, dbias = to_device(a), to_device(b), to_device(bias)
workspace = device.allocate(max(graph.get_workspace_size(), 1), stream=stream)


def run(pack: dict, label: str) -> float:
    out = np.full((batch, m, n), np.nan, dtype=np.float16)
    dout = to_device(out)  # poisoned: every element must be written
    as_ints = label == "int pointers"
    pack = {key: (int(buf.handle) if as_ints else buf) for key, buf in {**pack, Y: dout}.items()}
    graph.execute(pack, workspace=int(workspace.handle) if as_ints else workspace, handle=handle)
    dout.copy_to(host_view(out), stream=stream)
    stream.sync()
    got = out.astype(np.float64)
    err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref)) if np.isfinite(got).all() else float("inf")
    print(f"{label}: relative error against float64 {err:.3e} ({'ok' if err < 1e-2 else 'TOO LARGE'})")
    return err


print(f"cuDNN {cudnn.backend_version_string()}: workspace {graph.get_workspace_size()} bytes")
errors = [run({A: da, B: db, Bias: dbias}, "cuda.core Buffers"), run({A: da, B: db, Bias: dbias}, "int pointers")]
cudnn.destroy_handle(handle)
raise SystemExit(0 if max(errors) < 1e-2 else 1)
