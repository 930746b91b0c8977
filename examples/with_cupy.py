"""relu(A @ B + bias) with cupy arrays, no torch. Needs a GPU and cupy.

    python examples/with_cupy.py

Execute runs on cupy's current stream (here a non-blocking stream of our own), and ``workspace=None`` takes the
workspace from cupy's memory pool on that stream. Nothing here imports torch.
"""
import cupy as cp
import numpy as np

import cudnn_py as cudnn

half = cudnn.data_type.HALF
graph = cudnn.pygraph(io_data_type=half, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)
stream = cp.cuda.Stream(non_blocking=True)
with stream:
    a = cp.random.standard_normal((8, 256, 128)).astype(cp.float16)
    b = cp.random.standard_normal((8, 128, 64)).astype(cp.float16)
    bias = cp.random.standard_normal((1, 1, 64)).astype(cp.float16)
    out = cp.full((8, 256, 64), cp.nan, dtype=cp.float16)
    A, B, Bias = graph.tensor_like(a), graph.tensor_like(b), graph.tensor_like(bias)
    Y = graph.relu(input=graph.bias(input=graph.matmul(A, B), bias=Bias))
    Y.set_output(True).set_data_type(half)
    graph.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.execute({A: a, B: b, Bias: bias, Y: out}, workspace=None)  # on `stream`
stream.synchronize()

ref = np.maximum(cp.asnumpy(a).astype(np.float64) @ cp.asnumpy(b).astype(np.float64)
                 + cp.asnumpy(bias).astype(np.float64), 0.0)
got = cp.asnumpy(out).astype(np.float64)
err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref)) if np.isfinite(got).all() else float("inf")
print(f"cuDNN {cudnn.backend_version_string()}, cupy {cp.__version__}: workspace {graph.get_workspace_size()} bytes")
print(f"relative error against float64: {err:.3e} ({'ok' if err < 1e-2 else 'TOO LARGE'})")
raise SystemExit(0 if err < 1e-2 else 1)
