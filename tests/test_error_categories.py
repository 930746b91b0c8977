"""Every exception cudnn_py raises on purpose is a cudnn_py.errors category under one root (issue #27): callers
catch ``CudnnPyError`` for all of them, or the classic type (ValueError, TypeError, RuntimeError,
NotImplementedError) a caller of the official module catches for that kind of problem."""
from __future__ import annotations

import ast
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


def test_an_op_kind_without_a_backend_lowering_is_refused_by_validate(monkeypatch):
    """As the official module does for a graph cuDNN cannot take: cudnnGraphNotSupportedError, raised by
    validate() (the IR checks before it pass), not a NotImplementedError."""
    from cudnn_py.lowering import LOWERINGS

    g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
    a, b = g.tensor([1, 4, 8], name="a"), g.tensor([1, 8, 4], name="b")
    g.matmul(a, b, name="mm").set_output(True)
    monkeypatch.delitem(LOWERINGS.fill(), "matmul")
    g.validate_ir()  # the IR is sound: only lowering finds no operation for it
    with pytest.raises(errors.cudnnGraphNotSupportedError, match=r"matmul node 'mm': no backend lowering") as info:
        g.validate()
    assert not isinstance(info.value, NotImplementedError)


def _only_raises_not_implemented(fn: ast.AST) -> bool:
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]  # docstring
    return len(body) == 1 and isinstance(body[0], ast.Raise)


def test_not_implemented_error_is_for_abstract_methods_only():
    """``raise NotImplementedError`` only as the whole body of a method a subclass overrides; an error a user can
    meet is a cudnn_py category (NoCudaDeviceError and NotImplementedOptionError are NotImplementedErrors as the
    official module's are), and no ``except`` names the bare class."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        if "_generated" in path.parts:
            continue
        tree = ast.parse(path.read_text())
        abstract = {id(r) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and _only_raises_not_implemented(f) for r in f.body if isinstance(r, ast.Raise)}
        for node in ast.walk(tree):
            where = f"{path.relative_to(PACKAGE)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Raise) and node.exc is not None and id(node) not in abstract and \
                    "NotImplementedError" in {n.id for n in ast.walk(node.exc) if isinstance(n, ast.Name)}:
                found.append(f"{where}: raise {ast.unparse(node.exc)}")
            if isinstance(node, ast.ExceptHandler) and node.type is not None and \
                    "NotImplementedError" in {n.id for n in ast.walk(node.type) if isinstance(n, ast.Name)}:
                found.append(f"{where}: except {ast.unparse(node.type)}")
    assert not found, found
