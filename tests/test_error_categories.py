"""Every exception cudnn_py raises on purpose is a cudnn_py.errors category under one root (issue #27): callers
catch ``CudnnPyError`` for all of them, or the classic type (ValueError, TypeError, RuntimeError,
NotImplementedError) a caller of the official module catches for that kind of problem."""
from __future__ import annotations

import inspect
import pathlib
import re

import pytest

import cudnn_py as cudnn
from cudnn_py import errors

PACKAGE = pathlib.Path(cudnn.__file__).parent


def test_every_category_has_the_one_root():
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, BaseException)]
    assert len(classes) >= 15
    for c in classes:
        assert issubclass(c, errors.CudnnPyError), c
    assert not issubclass(errors.cudnnGraphNotSupportedError, (ValueError, TypeError, RuntimeError))  # as pybind's
    for cls, classic in ((errors.InvalidValueError, ValueError), (errors.InvalidTypeError, TypeError),
                         (errors.UsageError, RuntimeError), (errors.CudnnError, RuntimeError),
                         (errors.PhaseError, RuntimeError), (errors.NotImplementedOptionError, NotImplementedError)):
        assert issubclass(cls, classic)


def test_the_package_raises_no_bare_classic_exception():
    """A ``raise ValueError(...)`` (or TypeError / RuntimeError) would escape ``except CudnnPyError``."""
    bare = []
    for path in PACKAGE.rglob("*.py"):
        if "_generated" in path.parts:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"raise (ValueError|TypeError|RuntimeError)\(", line):
                bare.append(f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}")
    assert not bare, bare


@pytest.mark.parametrize("call", [
    lambda: cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT).tensor([4], name=5),
    lambda: cudnn.pygraph(sm_count=-1),
    lambda: cudnn.pygraph().tensor([4]).set_uid("12"),
    lambda: cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT).validate(),
])
def test_public_calls_end_in_a_category(call):
    with pytest.raises(errors.CudnnPyError):
        call()
