"""Child-process side of the raw-descriptor fuzz (tests/test_hostile_raw.py): for each attribute named on the
command line, create a fresh descriptor of its owner kind, ``set`` every bad value of :func:`bad_values`, then
``finalize`` it and ``get`` the attribute back. Every outcome is printed as one JSON line *before* the next call
(``{"attr": ..., "case": ..., "outcome": ...}``), so that a child killed by a signal still says what it was doing.

Outcomes: ``accepted``, ``refused:<ExceptionClass>``, ``error:<ExceptionClass>:<message>`` (an exception that is
neither a DescriptorError nor a CudnnError — a failure), and ``start`` lines before each call.

    python -m tests.support.raw_fuzz CUDNN_ATTR_TENSOR_DIMENSIONS CUDNN_ATTR_MATMUL_COMP_TYPE ...
"""
from __future__ import annotations

import json
import math
import sys
from fractions import Fraction

from tests.support.libcuda_stub import ensure_driver

ensure_driver()

from cudnn_py._generated.attributes import ATTRIBUTES  # noqa: E402
from cudnn_py.backend import Descriptor  # noqa: E402
from cudnn_py.backend.enums import enum_class  # noqa: E402
from cudnn_py.errors import CudnnError, DescriptorError  # noqa: E402

HUGE = 100_000


def _tensor(uid: int, finalize: bool = True) -> Descriptor:
    t = Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR")
    t.set("CUDNN_ATTR_TENSOR_DATA_TYPE", "CUDNN_DATA_FLOAT").set("CUDNN_ATTR_TENSOR_DIMENSIONS", [1, 4, 8])
    t.set("CUDNN_ATTR_TENSOR_STRIDES", [32, 8, 1]).set("CUDNN_ATTR_TENSOR_UNIQUE_ID", uid)
    t.set("CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT", 16)
    return t.finalize() if finalize else t


class Fixtures:
    """Descriptors the bad values are made of, created once per child."""

    def __init__(self) -> None:
        self.tensor = _tensor(1)
        self.unfinalized_tensor = _tensor(2, finalize=False)
        self.dead_tensor = _tensor(3)
        self.dead_tensor.destroy()
        self.matmul = Descriptor("CUDNN_BACKEND_MATMUL_DESCRIPTOR").set(
            "CUDNN_ATTR_MATMUL_COMP_TYPE", "CUDNN_DATA_FLOAT").finalize()
        self.heur_mode = enum_class("cudnnBackendHeurMode_t").CUDNN_HEUR_MODE_A
        self.data_type = enum_class("cudnnDataType_t").CUDNN_DATA_HALF

    def other_enum(self, type_name: str):
        """A member of an enum other than the one behind ``type_name`` (its int value may well be valid there)."""
        return self.data_type if type_name != "CUDNN_TYPE_DATA_TYPE" else self.heur_mode

    def wrong_kind(self, spec) -> Descriptor:
        """A finalized descriptor of a kind the attribute does not accept."""
        if "CUDNN_BACKEND_MATMUL_DESCRIPTOR" in spec.element_kinds:
            return self.tensor
        return self.matmul


def bad_values(spec, fx: Fixtures) -> list[tuple[str, object, str | None]]:
    """(case name, value, type=) for one attribute: values of the wrong Python type, out of range, None, huge
    lists, descriptors of the wrong kind, destroyed or unfinalized descriptors."""
    common: list[tuple[str, object]] = [
        ("None", None), ("str", "not a value"), ("dict", {}), ("object", object()), ("set", {1, 2}),
        ("complex", complex(1, 2)), ("descriptor-wrong-kind", fx.wrong_kind(spec)),
        ("descriptor-destroyed", fx.dead_tensor), ("descriptor-unfinalized", fx.unfinalized_tensor),
        ("huge-list-of-str", ["x"] * HUGE), ("huge-list-of-None", [None] * HUGE),
        ("huge-list-of-big-int", [1 << 70] * 1000), ("nested-list", [[1, 2], [3]]),
    ]
    by_type: dict[str, list[tuple[str, object]]] = {
        "CUDNN_TYPE_INT64": [("int-2**64+1", (1 << 64) + 1), ("int--2**63-1", -(1 << 63) - 1),
                             ("float", 1.5), ("bool", True), ("nan", math.nan), ("bytes", b"12")],
        "CUDNN_TYPE_INT32": [("int-2**31", 1 << 31), ("int--2**31-1", -(1 << 31) - 1), ("int-2**64+1", (1 << 64) + 1),
                             ("float", 1.5), ("bool", False)],
        "CUDNN_TYPE_FLOAT": [("nan", math.nan), ("inf", math.inf), ("-inf", -math.inf), ("1e39", 1e39),
                             ("str-number", "1.0"), ("bool", True), ("int-2**1100", 1 << 1100)],
        "CUDNN_TYPE_DOUBLE": [("nan", math.nan), ("inf", math.inf), ("str-number", "1.0"), ("bool", True),
                              ("int-2**1100", 1 << 1100)],
        "CUDNN_TYPE_BOOLEAN": [("int-2", 2), ("int--1", -1), ("float", 0.5), ("str-true", "True"), ("list", [])],
        "CUDNN_TYPE_VOID_PTR": [("int--1", -1), ("int-2**64", 1 << 64), ("int-3", 3), ("float", 1.5),
                                ("bool", True), ("str-hex", "0x1000"), ("descriptor", fx.tensor)],
        "CUDNN_TYPE_HANDLE": [("int-1", 1), ("int-12345", 12345), ("int-0", 0), ("int--1", -1),
                              ("int-2**64", 1 << 64), ("descriptor", fx.tensor), ("bool", True)],
        "CUDNN_TYPE_CHAR": [("int", 5), ("list-of-int", [65, 66]), ("descriptor", fx.tensor)],
        "CUDNN_TYPE_FRACTION": [("zero-denominator", (1, 0)), ("str", "1/2"), ("huge", Fraction(1 << 70, 3)),
                                ("huge-denominator", (1, 1 << 70)), ("nan", math.nan), ("bool", True)],
        "CUDNN_TYPE_BACKEND_DESCRIPTOR": [("int", 1234), ("self", None), ("list-with-None", [fx.tensor, None]),
                                          ("mixed-kinds", [fx.tensor, fx.matmul])],
    }
    out: list[tuple[str, object, str | None]] = []
    for type_name in spec.types:
        enum_bad = [("int-9999", 9999), ("int--5", -5), ("int-2**40", 1 << 40), ("bool", True), ("float", 1.0),
                    ("unknown-name", "CUDNN_NOT_A_MEMBER"), ("other-enum-member", fx.other_enum(type_name))]
        cases = by_type.get(type_name, enum_bad) + common
        for name, value in cases:
            out.append((f"{type_name.removeprefix('CUDNN_TYPE_')}/{name}", value, type_name))
    return out


def emit(**rec) -> None:
    sys.stdout.write(json.dumps(rec) + "\n")
    sys.stdout.flush()


def _outcome(e: BaseException | None) -> str:
    if e is None:
        return "accepted"
    if isinstance(e, (DescriptorError, CudnnError)):
        return f"refused:{type(e).__name__}"
    return f"error:{type(e).__name__}:{str(e)[:200]}"


def fuzz_attribute(attr: str, fx: Fixtures) -> None:
    spec = ATTRIBUTES[attr]
    emit(attr=attr, case="create", outcome="start")
    try:
        d = Descriptor(spec.owner)
    except (DescriptorError, CudnnError) as e:  # INTERMEDIATE_INFO cannot be created by users
        emit(attr=attr, case="create", outcome=_outcome(e))
        return
    for case, value, type_name in bad_values(spec, fx):
        if case.endswith("/self"):
            value = d
        emit(attr=attr, case=case, outcome="start")
        err: BaseException | None = None
        try:
            d.set(attr, value, type=type_name)
        except Exception as e:
            err = e
        emit(attr=attr, case=case, outcome=_outcome(err))
    for case, call in (("finalize", d.finalize), ("get", lambda: d.get(attr))):
        if case == "get" and not (spec.readable and d.finalized):
            continue
        emit(attr=attr, case=case, outcome="start")
        err = None
        try:
            call()
        except Exception as e:
            err = e
        emit(attr=attr, case=case, outcome=_outcome(err))


def main(argv: list[str]) -> int:
    fx = Fixtures()
    for attr in argv:
        fuzz_attribute(attr, fx)
    emit(attr="", case="end", outcome="end")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
