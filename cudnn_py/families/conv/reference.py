"""Convolution: written from the definition, one kernel offset at a time."""
from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ...engines.reference.registry import Read, reference


def _conv_windows(p: dict, out_spatial: tuple, kernel: tuple) -> Any:
    """For every kernel offset r: r and the strided slices of the padded input it meets at every output point."""
    for r in itertools.product(*(range(k) for k in kernel)):
        yield r, tuple(slice(ri * d, ri * d + (o - 1) * s + 1, s)
                       for ri, d, o, s in zip(r, p["dilation"], out_spatial, p["stride"]))


def _padded(x: np.ndarray, p: dict) -> np.ndarray:
    return np.pad(x, [(0, 0), (0, 0)] + list(zip(p["pre_padding"], p["post_padding"])))


def _flip_if_convolution(w: np.ndarray, p: dict) -> np.ndarray:
    if p["convolution_mode"].name == "CONVOLUTION":  # true convolution: the kernel reversed in every spatial axis
        return w[(slice(None), slice(None)) + (slice(None, None, -1),) * (w.ndim - 2)]
    return w


@reference("conv_fprop")
def _conv_fprop(node: Any, read: Read) -> np.ndarray:
    p, x, w = node.params, read(node.inputs["X"]), read(node.inputs["W"])
    w = _flip_if_convolution(w, p)
    y = np.zeros(tuple(node.outputs["Y"].dim))
    xp, groups = _padded(x, p), x.shape[1] // w.shape[1]
    kg, cg = w.shape[0] // groups, w.shape[1]
    for r, sl in _conv_windows(p, y.shape[2:], w.shape[2:]):
        patch = xp[(slice(None), slice(None)) + sl]
        for g in range(groups):
            y[:, g * kg:(g + 1) * kg] += np.einsum("nc...,kc->nk...", patch[:, g * cg:(g + 1) * cg],
                                                    w[(slice(g * kg, (g + 1) * kg), slice(None)) + r])
    return y


@reference("conv_dgrad")
def _conv_dgrad(node: Any, read: Read) -> np.ndarray:
    p, dy, w = node.params, read(node.inputs["DY"]), read(node.inputs["W"])
    w = _flip_if_convolution(w, p)
    dims = tuple(node.outputs["DX"].dim)
    dxp = _padded(np.zeros(dims), p)
    groups = dims[1] // w.shape[1]
    kg, cg = w.shape[0] // groups, w.shape[1]
    for r, sl in _conv_windows(p, dy.shape[2:], w.shape[2:]):
        for g in range(groups):
            dxp[(slice(None), slice(g * cg, (g + 1) * cg)) + sl] += np.einsum(
                "nk...,kc->nc...", dy[:, g * kg:(g + 1) * kg], w[(slice(g * kg, (g + 1) * kg), slice(None)) + r])
    crop = tuple(slice(pre, pre + d) for pre, d in zip(p["pre_padding"], dims[2:]))
    return dxp[(slice(None), slice(None)) + crop]


@reference("conv_wgrad")
def _conv_wgrad(node: Any, read: Read) -> np.ndarray:
    p, x, dy = node.params, read(node.inputs["X"]), read(node.inputs["DY"])
    dims = tuple(node.outputs["DW"].dim)
    dw = np.zeros(dims)
    xp, groups = _padded(x, p), x.shape[1] // dims[1]
    kg, cg = dims[0] // groups, dims[1]
    for r, sl in _conv_windows(p, dy.shape[2:], dims[2:]):
        patch = xp[(slice(None), slice(None)) + sl]
        for g in range(groups):
            n = dy.shape[0]
            dw[(slice(g * kg, (g + 1) * kg), slice(None)) + r] = np.einsum(
                "nkp,ncp->kc", dy[:, g * kg:(g + 1) * kg].reshape(n, kg, -1),
                patch[:, g * cg:(g + 1) * cg].reshape(n, cg, -1))
    return _flip_if_convolution(dw, p)
