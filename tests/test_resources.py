"""Resources on the CPU: a build that fails midway leaves no descriptor alive once its objects are dropped, and
repeated graph builds do not accumulate descriptors. (Process memory per GPU build is measured on the device.)"""
from __future__ import annotations

import gc

import pytest

import cudnn_py as cudnn
from cudnn_py.backend import descriptor

F, H = cudnn.data_type.FLOAT, cudnn.data_type.HALF


def live() -> int:
    gc.collect()
    return len(descriptor._live)


def failing_graph():
    """Lowering fails at the second op (a matmul cuDNN rejects), after the first op's descriptors exist."""
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    x = g.tensor([3, 1, 8, 16], name="x")
    y = g.relu(x)
    g.matmul(y, g.tensor([5, 16, 4], name="w")).set_output(True)  # a 4-D broadcast cuDNN 9.28 does not support
    return g


def test_a_build_failing_midway_leaves_no_descriptor_alive():
    before = live()
    for _ in range(5):
        g = failing_graph()
        with pytest.raises(cudnn.backend.CudnnError):
            g.validate()
        del g
    assert live() == before


def test_repeated_builds_do_not_accumulate_descriptors():
    def build():
        g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
        a, b = g.tensor([2, 8, 16], name="a"), g.tensor([2, 16, 4], name="b")
        g.relu(g.matmul(a, b)).set_output(True)
        g.validate()
        return g

    build()
    base = live()
    for _ in range(20):
        build()
    assert live() == base


def test_a_collected_descriptor_is_destroyed_once_and_an_explicit_destroy_is_final():
    import io
    import json

    from cudnn_py.backend import Descriptor, trace

    buf = io.StringIO()
    with trace.tracing(buf):
        d = Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR")
        ptr, kept = d.ptr, Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR")
        del d
        gc.collect()  # the registry's weak reference calls back: destroyed, entry gone
        assert ptr not in descriptor._live
        kept.destroy()  # the entry and its reference go first: no second destroy when it is collected
        kept_ptr = kept._ptr
        del kept
        gc.collect()
    destroyed = [json.loads(line)["desc"] for line in buf.getvalue().splitlines()
                 if '"cudnnBackendDestroyDescriptor"' in line and '"begin"' in line]
    assert len(destroyed) == 2 and len(set(destroyed)) == 2, destroyed
    assert kept_ptr not in descriptor._live
