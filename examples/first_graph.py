"""A first cuDNN graph, relu(A @ B + bias), with whatever array library is installed. Needs a GPU, or --reference.

    pip install ".[cu12]"            # or ".[cu13]": nothing else is needed
    python examples/first_graph.py   # torch if importable, else cupy, else cuda.core + numpy
    python examples/first_graph.py --framework cuda.core
    python examples/first_graph.py --reference   # no GPU: the same graph on the float64 reference engine (CPU)

The inputs are made with numpy on the host, copied to the device with the chosen framework, and the result is
compared against a float64 numpy reference. ``workspace=None``: cudnn_py allocates the workspace from the
operands' framework (torch's caching allocator, cupy's memory pool, else cuda.core), on the stream execute runs on.

Without a GPU it says so in one line and exits with status 2; ``--reference`` runs the same graph on cudnn_py's
float64 reference engine (numpy on the CPU; no GPU, driver or cuDNN call), to see what the graph computes.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import cudnn_py as cudnn

FRAMEWORKS = ("torch", "cupy", "cuda.core")
TOLERANCE = 1e-2  # half-precision inputs and output, float accumulation


def make_graph(batch: int, m: int, n: int, k: int, reference: bool = False):
    """The graph and its four non-virtual tensors (described by dims and strides: no array is needed). With
    ``reference``, routed to the float64 reference engine only (no cuDNN plan is made)."""
    half = cudnn.data_type.HALF
    engines = {}
    if reference:
        from cudnn_py.engines import ReferenceEngine, Router

        engines = {"backends": [ReferenceEngine()], "router": Router(include_backend=False)}
    g = cudnn.pygraph(io_data_type=half, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT, **engines)
    A = g.tensor(name="A", dim=[batch, m, k], stride=[m * k, k, 1], data_type=half)
    B = g.tensor(name="B", dim=[batch, k, n], stride=[k * n, n, 1], data_type=half)
    bias = g.tensor(name="bias", dim=[1, 1, n], stride=[n, n, 1], data_type=half)
    Y = g.relu(input=g.bias(input=g.matmul(A, B), bias=bias))
    Y.set_output(True).set_data_type(half).set_name("Y")
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    return g, A, B, bias, Y


def run_torch(g, pack: dict, out_shape):
    import torch

    dev = {k: torch.from_numpy(v).cuda() for k, v in pack.items()}
    y = torch.full(out_shape, float("nan"), dtype=torch.half, device="cuda")
    g.execute({**dev, "Y": y}, workspace=None)  # runs on torch's current stream
    return y.cpu().numpy()


def run_cupy(g, pack: dict, out_shape):
    import cupy

    dev = {k: cupy.asarray(v) for k, v in pack.items()}
    y = cupy.full(out_shape, cupy.nan, dtype=cupy.float16)
    g.execute({**dev, "Y": y}, workspace=None)  # runs on cupy's current stream
    return cupy.asnumpy(y)  # synchronizes that stream


def run_cuda_core(g, pack: dict, out_shape):
    from cuda.core import Buffer, Device

    device = Device(0)
    device.set_current()
    stream = device.create_stream()
    handle = cudnn.create_handle()
    cudnn.set_stream(handle, stream)  # Buffers carry no stream: the handle says which one to run on

    def upload(host: np.ndarray):
        buf = device.allocate(host.nbytes, stream=stream)
        buf.copy_from(Buffer.from_handle(host.ctypes.data, host.nbytes, owner=host), stream=stream)
        return buf

    dev = {k: upload(v) for k, v in pack.items()}
    y_host = np.full(out_shape, np.nan, dtype=np.float16)
    y = upload(y_host)  # poisoned: every element must be written
    g.execute({**dev, "Y": y}, workspace=None, handle=handle)  # a Buffer is bound as raw memory of Y's size
    y.copy_to(Buffer.from_handle(y_host.ctypes.data, y_host.nbytes, owner=y_host), stream=stream)
    stream.sync()
    cudnn.destroy_handle(handle)
    return y_host


def run_reference(g, pack: dict, out_shape):
    y = np.full(out_shape, np.nan, dtype=np.float16)
    g.execute({**pack, "Y": y})  # numpy arrays in and out: the reference engine computes in float64 on the CPU
    return y


RUNNERS = {"torch": run_torch, "cupy": run_cupy, "cuda.core": run_cuda_core, "reference": run_reference}


def available_framework() -> str:
    """torch if it imports, else cupy, else cuda.core (installed with cudnn_py's cu12 / cu13 extras)."""
    for name in ("torch", "cupy"):
        try:
            __import__(name)
        except ImportError:
            continue
        return name
    return "cuda.core"


def no_gpu() -> str | None:
    """Why graphs cannot run on a GPU here, or None (also when it cannot be told: then the run says)."""
    from cudnn_py.capabilities import gpu_execution

    gpu = gpu_execution()
    return gpu.reason if gpu.works is False else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--framework", choices=FRAMEWORKS, help="default: the first of torch, cupy, cuda.core found")
    ap.add_argument("--reference", action="store_true",
                    help="run on the float64 reference engine (numpy, on the CPU) instead of cuDNN: no GPU needed")
    args = ap.parse_args(argv)
    if args.reference:
        framework = "reference"
    else:
        why = no_gpu()
        if why is not None:
            print(f"first_graph.py needs a GPU: {why}. Run it with --reference for the float64 reference engine "
                  "on the CPU; `python -m cudnn_py info` says what works here.", file=sys.stderr)
            return 2
        framework = args.framework or available_framework()

    batch, m, n, k = 4, 256, 64, 128
    g, *_ = make_graph(batch, m, n, k, reference=args.reference)
    rng = np.random.default_rng(0)
    pack = {"A": rng.standard_normal((batch, m, k)).astype(np.float16),
            "B": rng.standard_normal((batch, k, n)).astype(np.float16),
            "bias": rng.standard_normal((1, 1, n)).astype(np.float16)}
    y = RUNNERS[framework](g, pack, (batch, m, n)).astype(np.float64)

    a, b, bias = (pack[x].astype(np.float64) for x in ("A", "B", "bias"))
    ref = np.maximum(a @ b + bias, 0.0)
    err = float(np.linalg.norm(y - ref) / np.linalg.norm(ref)) if np.isfinite(y).all() else float("inf")
    if args.reference:
        print(f"float64 reference engine (numpy arrays, on the CPU; no cuDNN): output Y {list(y.shape)} float16, "
              f"{int((y > 0).sum())} of {y.size} elements positive after the relu")
    else:
        plan = g.get_plan_name_at_index(g.session.candidate)  # the default plan: the best-ranked one that built
        print(f"cuDNN {cudnn.backend_version_string()}, operands from {framework}: plan {plan}, "
              f"workspace {g.get_workspace_size()} bytes")
    print(f"relative error against float64 numpy: {err:.3e} ({'ok' if err < TOLERANCE else 'TOO LARGE'})")
    return 0 if err < TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
