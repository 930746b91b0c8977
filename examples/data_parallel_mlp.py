"""Data-parallel training of a small MLP whose forward and backward are cudnn_py graphs, with gradients all-reduced
by NCCL through torch.distributed: one process per GPU (``torch.multiprocessing``), each on its slice of the batch.

    python examples/data_parallel_mlp.py --world-size 2     # two GPUs
    python examples/data_parallel_mlp.py --world-size 1     # one GPU (the same code path, NCCL included)

The model: ``h = relu(x @ W1 + b1)``, ``y = h @ W2 + b2``, loss ``0.5 * sum((y - t)^2) / N`` over the global batch of
``N`` rows. Every forward and backward step is a cuDNN graph, built once per process for its device:

    forward   relu(matmul + bias), matmul + bias
    loss      dy = (y - t) * (1 / N)                                   pointwise
    wgrad     dW = x^T @ dz   (x^T: x's memory with transposed strides) matmul
    bgrad     db = 1^T @ dz   (a row of ones)                           matmul
    dgrad     dh = dy @ W2^T  (W2^T: transposed strides)                matmul
    relu bwd  dz1 = dh * (h > 0)                                        pointwise (RELU_BWD)

Each rank's gradients are sums over its rows scaled by 1/N, so their NCCL all-reduce (SUM) is the gradient of the
global batch, and after any number of SGD steps every rank holds the weights that one process training on the
concatenated batch would hold (within float32 rounding). The run prints the largest relative difference of the
final weights from that run done in float64 on the CPU, and exits non-zero above ``--tolerance``.

cudnn_py under torch.distributed: call ``torch.cuda.set_device(rank)`` first, then build the graphs — they are
built for the current device (its default handle) — and execute them without a handle: they run on torch's current
stream, which NCCL's collectives order against.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass
from typing import Any

import cudnn_py as cudnn

F = cudnn.data_type.FLOAT


@dataclass(frozen=True)
class Shapes:
    n_total: int = 64  # global batch
    d_in: int = 32
    hidden: int = 64
    d_out: int = 16


def _t(g: Any, name: str, dim: list[int], stride: list[int] | None = None) -> Any:
    """A float tensor [1, rows, cols] (row-major unless `stride` says otherwise; a transposed view otherwise)."""
    return g.tensor(dim=dim, stride=stride or [dim[1] * dim[2], dim[2], 1], data_type=F, name=name)


def _graph() -> Any:
    return cudnn.pygraph(io_data_type=F, intermediate_data_type=F, compute_data_type=F)


def _transposed(rows: int, cols: int) -> tuple[list[int], list[int]]:
    """dims and strides of the [1, cols, rows] transpose of a row-major [1, rows, cols] matrix (same memory)."""
    return [1, cols, rows], [rows * cols, 1, cols]


class LayerGraphs:
    """The cuDNN graphs of one linear layer for a local batch of `n` rows: forward (with or without relu),
    weight gradient, bias gradient, and (``dgrad``) the gradient of its input."""

    def __init__(self, n: int, k: int, m: int, relu: bool, dgrad: bool):
        self.n, self.k, self.m = n, k, m
        # forward: out = [relu](x @ W + b)
        g = _graph()
        X, W, B = _t(g, "x", [1, n, k]), _t(g, "W", [1, k, m]), _t(g, "b", [1, 1, m])
        Y = g.bias(g.matmul(X, W), B)
        if relu:
            Y = g.relu(Y)
        Y.set_output(True).set_data_type(F).set_name("y")
        self.fwd = (g, X, W, B, Y)
        # wgrad: dW = x^T @ dz, x^T read through transposed strides of x's memory
        g = _graph()
        dims, strides = _transposed(n, k)
        XT, DZ = _t(g, "xT", dims, strides), _t(g, "dz", [1, n, m])
        DW = g.matmul(XT, DZ)
        DW.set_output(True).set_data_type(F).set_name("dW")
        self.wgrad = (g, XT, DZ, DW)
        # bgrad: db = ones[1, 1, n] @ dz (the column sums of dz)
        g = _graph()
        ONES, DZ = _t(g, "ones", [1, 1, n]), _t(g, "dz", [1, n, m])
        DB = g.matmul(ONES, DZ)
        DB.set_output(True).set_data_type(F).set_name("db")
        self.bgrad = (g, ONES, DZ, DB)
        # dgrad: dx = dz @ W^T, W^T through transposed strides of W's memory
        self.dgrad = None
        if dgrad:
            g = _graph()
            dims, strides = _transposed(k, m)
            DZ, WT = _t(g, "dz", [1, n, m]), _t(g, "WT", dims, strides)
            DX = g.matmul(DZ, WT)
            DX.set_output(True).set_data_type(F).set_name("dx")
            self.dgrad = (g, DZ, WT, DX)

    def graphs(self) -> list[Any]:
        return [t[0] for t in (self.fwd, self.wgrad, self.bgrad, self.dgrad) if t is not None]


class MLPGraphs:
    """Every graph of one training step of the two-layer MLP for a local batch of `n` rows."""

    def __init__(self, n: int, shapes: Shapes):
        s = shapes
        self.layer1 = LayerGraphs(n, s.d_in, s.hidden, relu=True, dgrad=False)
        self.layer2 = LayerGraphs(n, s.hidden, s.d_out, relu=False, dgrad=True)
        # loss gradient: dy = (y - t) / N_total (the global batch: the all-reduced sum is the global mean's gradient)
        g = _graph()
        Y, T = _t(g, "y", [1, n, s.d_out]), _t(g, "t", [1, n, s.d_out])
        DY = g.scale(g.sub(Y, T), 1.0 / s.n_total)
        DY.set_output(True).set_data_type(F).set_name("dy")
        self.loss_grad = (g, Y, T, DY)
        # relu backward of layer 1: dz1 = dh * (h > 0), from the relu's output h (h > 0 exactly where z > 0)
        g = _graph()
        DH, Hh = _t(g, "dh", [1, n, s.hidden]), _t(g, "h", [1, n, s.hidden])
        DZ = g.relu_backward(DH, Hh)
        DZ.set_output(True).set_data_type(F).set_name("dz")
        self.relu_bwd = (g, DH, Hh, DZ)

    def graphs(self) -> list[Any]:
        return self.layer1.graphs() + self.layer2.graphs() + [self.loss_grad[0], self.relu_bwd[0]]

    def validate(self) -> None:
        """cuDNN's own validation of every graph (deviceless on cuDNN >= 9.8: no GPU needed)."""
        for g in self.graphs():
            g.validate()

    def build(self) -> None:
        """Plans for the current device (its default handle)."""
        for g in self.graphs():
            g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])


# ------------------------------------------------------------------------------------------------- data and training
def problem(shapes: Shapes, seed: int = 0) -> dict[str, Any]:
    """The global batch and the initial weights, on the CPU in float32, the same in every process."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    s = shapes
    return {"x": torch.randn(s.n_total, s.d_in, generator=gen),
            "t": torch.randn(s.n_total, s.d_out, generator=gen),
            "W1": torch.randn(s.d_in, s.hidden, generator=gen) / s.d_in ** 0.5,
            "b1": 0.1 * torch.randn(s.hidden, generator=gen),
            "W2": torch.randn(s.hidden, s.d_out, generator=gen) / s.hidden ** 0.5,
            "b2": 0.1 * torch.randn(s.d_out, generator=gen)}


PARAMS = ("W1", "b1", "W2", "b2")


def train(rank: int, world_size: int, steps: int, lr: float, shapes: Shapes, all_reduce: Any = None,
          seed: int = 0) -> dict[str, Any]:
    """SGD on this rank's rows of the global batch with cudnn_py graphs on the current device; `all_reduce` sums a
    tensor over the ranks in place (None: a single process). Returns the final weights on the CPU."""
    import torch

    s = shapes
    if s.n_total % world_size:
        raise ValueError(f"the global batch ({s.n_total}) must split evenly over {world_size} ranks")
    n = s.n_total // world_size
    dev = torch.device("cuda", torch.cuda.current_device())
    data = problem(s, seed)
    rows = slice(rank * n, (rank + 1) * n)
    x = data["x"][rows].reshape(1, n, s.d_in).to(dev)
    t = data["t"][rows].reshape(1, n, s.d_out).to(dev)
    p = {"W1": data["W1"].reshape(1, s.d_in, s.hidden).to(dev), "b1": data["b1"].reshape(1, 1, s.hidden).to(dev),
         "W2": data["W2"].reshape(1, s.hidden, s.d_out).to(dev), "b2": data["b2"].reshape(1, 1, s.d_out).to(dev)}
    ones = torch.ones(1, 1, n, device=dev)
    graphs = MLPGraphs(n, s)
    graphs.build()
    l1, l2 = graphs.layer1, graphs.layer2

    def nan(*shape):  # every buffer a graph writes starts as NaN: an element it does not write shows
        return torch.full(shape, float("nan"), device=dev)

    for _ in range(steps):
        h, y, dy = nan(1, n, s.hidden), nan(1, n, s.d_out), nan(1, n, s.d_out)
        g, X, W, B, Y = l1.fwd
        g.execute({X: x, W: p["W1"], B: p["b1"], Y: h})
        g, X, W, B, Y = l2.fwd
        g.execute({X: h, W: p["W2"], B: p["b2"], Y: y})
        g, Yt, T, DY = graphs.loss_grad
        g.execute({Yt: y, T: t, DY: dy})
        grads = {"W2": nan(1, s.hidden, s.d_out), "b2": nan(1, 1, s.d_out),
                 "W1": nan(1, s.d_in, s.hidden), "b1": nan(1, 1, s.hidden)}
        dh, dz1 = nan(1, n, s.hidden), nan(1, n, s.hidden)
        g, XT, DZ, DW = l2.wgrad
        g.execute({XT: h.transpose(1, 2), DZ: dy, DW: grads["W2"]})
        g, ONES, DZ, DB = l2.bgrad
        g.execute({ONES: ones, DZ: dy, DB: grads["b2"]})
        assert l2.dgrad is not None
        g, DZ, WT, DX = l2.dgrad
        g.execute({DZ: dy, WT: p["W2"].transpose(1, 2), DX: dh})
        g, DH, Hh, DZ = graphs.relu_bwd
        g.execute({DH: dh, Hh: h, DZ: dz1})
        g, XT, DZ, DW = l1.wgrad
        g.execute({XT: x.transpose(1, 2), DZ: dz1, DW: grads["W1"]})
        g, ONES, DZ, DB = l1.bgrad
        g.execute({ONES: ones, DZ: dz1, DB: grads["b1"]})
        for name in PARAMS:
            if all_reduce is not None:
                all_reduce(grads[name])  # on torch's current stream, after the executes that wrote it
            p[name].sub_(lr * grads[name])
    torch.cuda.synchronize(dev)
    return {name: p[name].reshape(data[name].shape).cpu() for name in PARAMS}


def reference_train(steps: int, lr: float, shapes: Shapes, seed: int = 0) -> dict[str, Any]:
    """The same SGD run in one process on the whole batch, in float64 on the CPU."""
    import torch

    d = {k: v.double() for k, v in problem(shapes, seed).items()}
    x, t = d["x"], d["t"]
    W1, b1, W2, b2 = d["W1"], d["b1"], d["W2"], d["b2"]
    for _ in range(steps):
        h = torch.relu(x @ W1 + b1)
        y = h @ W2 + b2
        dy = (y - t) / shapes.n_total
        dW2, db2, dh = h.T @ dy, dy.sum(0), dy @ W2.T
        dz1 = dh * (h > 0)
        dW1, db1 = x.T @ dz1, dz1.sum(0)
        W1, b1, W2, b2 = W1 - lr * dW1, b1 - lr * db1, W2 - lr * dW2, b2 - lr * db2
    return {"W1": W1, "b1": b1, "W2": W2, "b2": b2}


def max_rel_diff(weights: dict[str, Any], ref: dict[str, Any]) -> float:
    out = 0.0
    for name in PARAMS:
        w, r = weights[name].double(), ref[name].double()
        if not bool(w.isfinite().all()):
            return float("inf")
        out = max(out, ((w - r).norm() / r.norm()).item())
    return out


# ------------------------------------------------------------------------------------------------- processes
def worker(rank: int, world_size: int, init_file: str, out_dir: str, steps: int, lr: float, shapes: Shapes) -> None:
    """One rank: its own GPU, NCCL for the gradients; writes its final weights to `out_dir/rank<r>.pt`."""
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)  # before building any graph: the graphs are built for the current device
    dist.init_process_group("nccl", init_method=f"file://{init_file}", rank=rank, world_size=world_size,
                            device_id=torch.device("cuda", rank))
    try:
        weights = train(rank, world_size, steps, lr, shapes, all_reduce=lambda t: dist.all_reduce(t))
        torch.save(weights, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def run(world_size: int, steps: int = 5, lr: float = 0.1, shapes: Shapes = Shapes()) -> list[dict[str, Any]]:
    """Launch `world_size` ranks (one per GPU) and return each rank's final weights."""
    import torch
    import torch.multiprocessing as mp

    if torch.cuda.device_count() < world_size:
        raise RuntimeError(f"--world-size {world_size} needs {world_size} GPUs, this machine has "
                           f"{torch.cuda.device_count()}")
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "rendezvous")
        mp.spawn(worker, args=(world_size, init_file, tmp, steps, lr, shapes), nprocs=world_size, join=True)
        return [torch.load(os.path.join(tmp, f"rank{r}.pt")) for r in range(world_size)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--tolerance", type=float, default=1e-2)
    args = ap.parse_args(argv)
    per_rank = run(args.world_size, args.steps, args.lr)
    ref = reference_train(args.steps, args.lr, Shapes())
    worst = max(max_rel_diff(w, ref) for w in per_rank)
    spread = max(max_rel_diff(w, per_rank[0]) for w in per_rank)
    print(f"{args.world_size} rank(s), {args.steps} SGD steps: max relative difference of the final weights from "
          f"one float64 process on the whole batch {worst:.2e}; between ranks {spread:.2e}")
    return 0 if worst <= args.tolerance and spread <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
