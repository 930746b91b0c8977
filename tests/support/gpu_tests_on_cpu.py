"""A pytest plugin (test-only, opt-in) that dry-runs the GPU test modules on a machine without a GPU, before they
spend device time: "cuda" tensors become CPU tensors, ``validate()`` still runs cuDNN's deviceless validation for
real, and ``build`` / ``execute`` go to the float64 ReferenceEngine instead of cuDNN. It checks the tests' own logic
(graphs, buffers and strides, references, tolerances), not cuDNN: tests that assert a cuDNN refusal fail here.

    pip install torch   # a CPU build is enough
    PYTHONPATH=.:tests/support python -m pytest -p gpu_tests_on_cpu tests/test_gpu_conv.py tests/test_gpu_norms.py
"""
from __future__ import annotations

import functools
import sys

import pytest
import torch

import cudnn_py.ir.builders as builders
from cudnn_py.engines.reference import ReferenceEngine
from cudnn_py.facade.pygraph import pygraph


def _on_cpu(fn):
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        if str(kwargs.get("device", "")).startswith("cuda"):
            kwargs["device"] = "cpu"
        return fn(*args, **kwargs)

    return wrapped


for _name in ("randn", "rand", "randint", "full", "empty", "zeros", "ones", "empty_strided", "tensor"):
    setattr(torch, _name, _on_cpu(getattr(torch, _name)))
_generator = torch.Generator
torch.Generator = lambda device="cpu": _generator(device="cpu")  # type: ignore[assignment,misc]
torch.Tensor.cuda = lambda self, *args, **kwargs: self  # type: ignore[method-assign]
torch.Tensor.to = _on_cpu(torch.Tensor.to)  # type: ignore[method-assign]
torch.cuda.synchronize = lambda *args, **kwargs: None

_describe = builders._describe


def _describe_as_device(obj):
    """The CPU stand-ins of device tensors are not host scalars: only one-element CPU tensors are."""
    dims, strides, dt, on_cpu = _describe(obj)
    numel = 1
    for d in dims:
        numel *= d
    return dims, strides, dt, on_cpu and numel == 1


builders._describe = _describe_as_device
_build = pygraph.build


def _build_on_reference(self, heuristics=None, ctx=None):
    if not self.backends:
        self.validate()  # cuDNN's own deviceless validation first
        self.register_backend(ReferenceEngine())
    return _build(self, heuristics, ctx)


pygraph.build = _build_on_reference  # type: ignore[method-assign]
pygraph.get_plan_name_at_index = lambda self, index: "reference_float64"  # type: ignore[method-assign]
pygraph.get_execution_plan_count = lambda self: 1  # type: ignore[method-assign]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    sys.modules["tests.conftest"].gpu_available = lambda: True  # before the conftest adds its skips
