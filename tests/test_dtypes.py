"""The one data-type catalog: every layer that converts or checks data types reads it, so they agree."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py import dtypes, enums, interop
from cudnn_py.interop import KDL_CUDA, OperandInfo
from cudnn_py.plans.execute import _check_operand

ROWS = [r for r in dtypes.CATALOG if r.dlpack is not None]


def test_catalog_covers_the_classic_enum_in_order():
    assert [r.name for r in dtypes.CATALOG] == list(cudnn.data_type.__members__)
    for r in dtypes.CATALOG:
        assert (r.backend is None) == (r.name == "NOT_SET")
        if r.backend:
            assert enums.to_backend_data_type(cudnn.data_type[r.name]) == r.backend
            cudnn.backend.member(r.backend)  # a real cudnnDataType_t member


def test_fp8_dlpack_codes_follow_dlpack_h():
    assert dtypes.BY_NAME["FP8_E4M3"].dlpack == (10, 8)  # kDLFloat8_e4m3fn
    assert dtypes.BY_NAME["FP8_E5M2"].dlpack == (12, 8)  # kDLFloat8_e5m2
    assert dtypes.BY_NAME["BFLOAT16"].dlpack == (4, 16)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.name)
def test_every_layer_agrees_on_each_type(row):
    member = cudnn.data_type[row.name]
    assert enums.from_any_dtype(row.dlpack) is member  # DLPack -> classic
    for name in row.names:  # framework dtype names (torch.float8_e4m3fn prints "torch.float8_e4m3fn")
        assert enums.from_any_dtype(f"torch.{name}") is member
        assert interop.dlpack_of_dtype(name) == row.dlpack  # the interop view of a framework dtype
    # the execute-time operand check accepts exactly the catalog's DLPack types for the tensor's data type
    g = cudnn.pygraph()
    t = g.tensor([4], data_type=member, name="t")
    _check_operand(t, OperandInfo(1 << 20, (4,), (1,), row.dlpack, KDL_CUDA, 0))
    other = next(r.dlpack for r in ROWS if r.dlpack not in row.accepted_dlpack and r.dlpack[1] != row.bits)
    with pytest.raises(ValueError, match=rf"tensor 't' \(uid \d+\): expected {member}"):
        _check_operand(t, OperandInfo(1 << 20, (4,), (1,), other, KDL_CUDA, 0))
    same_size = [r.dlpack for r in ROWS if r.dlpack not in row.accepted_dlpack and r.dlpack[1] == row.bits]
    for dlpack in same_size:  # read as the tensor's type, as the official module does, with a warning
        with pytest.warns(RuntimeWarning, match=rf"tensor 't' \(uid \d+\): expected {member}"):
            _check_operand(t, OperandInfo(1 << 20, (4,), (1,), dlpack, KDL_CUDA, 0))


def test_numpy_dtypes_map_through_the_catalog():
    for np_type, name in ((np.float16, "HALF"), (np.float32, "FLOAT"), (np.float64, "DOUBLE"), (np.int8, "INT8"),
                          (np.int32, "INT32"), (np.int64, "INT64"), (np.uint8, "UINT8"), (np.bool_, "BOOLEAN")):
        assert enums.from_any_dtype(np.dtype(np_type)).name == name
        info = interop.operand_info(np.zeros(3, np_type))
        assert info.dtype == dtypes.BY_NAME[name].dlpack


def test_host_scalars_use_the_catalog_ctype():
    from cudnn_py.lowering import host_scalar

    g = cudnn.pygraph()
    for dt, value, ctype in ((cudnn.data_type.FLOAT, 1.5, ctypes.c_float), (cudnn.data_type.INT64, 7, ctypes.c_int64),
                             (cudnn.data_type.INT8, -3, ctypes.c_int8), (cudnn.data_type.BOOLEAN, True, ctypes.c_bool)):
        t = g.tensor([1], data_type=dt, is_pass_by_value=True, pass_by_value=value)
        c = host_scalar(t)
        assert isinstance(c, ctype) and c.value == value
    h = host_scalar(g.tensor([1], data_type=cudnn.data_type.HALF, is_pass_by_value=True, pass_by_value=1.0))
    assert h.value == 0x3C00  # the raw bits of fp16 1.0
    with pytest.raises(ValueError, match="no pass-by-value support"):
        host_scalar(g.tensor([1], data_type=cudnn.data_type.FP8_E4M3, is_pass_by_value=True, pass_by_value=1.0))
