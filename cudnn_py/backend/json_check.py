"""Schemas of the JSON documents cuDNN reads back (``KERNEL_CACHE_JSON_REPRESENTATION``,
``EXECUTION_PLAN_JSON_REPRESENTATION``, ``DEVICEPROP_JSON_REPRESENTATION``), checked before the text reaches the
library.

cuDNN trusts these documents: a wrong JSON type (``"tensors": 7``, ``"nodes": "x"``, ``"kernel_cache": [1, 2]``)
crashes it (SIGSEGV / SIGABRT), a tensor reference that is not a decimal number aborts in ``std::stoll``, and
out-of-range values (strides ``2**62``, ``vectCount: -1``) are accepted. The schemas below were written from
cuDNN's own output (``tests/data/serialized/``: cuDNN 9.19 on an H200; cuDNN 9.28 deviceless on the CPU) and accept
both versions' documents:

* every document is at most :data:`MAX_JSON_BYTES` bytes and :data:`MAX_DEPTH` levels deep (checked before
  ``json.loads``), strict JSON (no ``NaN`` / ``Infinity``), an object at the top;
* an operation graph's tensors: ``name`` a decimal uid in [0, 2**63), unique; ``dataType`` a ``cudnnDataType_t``
  member; ``dim`` 1..8 ints >= 1, ``stride`` as many ints >= 1, the byte span (``vectCount`` and the element size
  included) under 2**63; ``vectCount`` 1..64, ``vectDim`` -1..rank-1; ``ptrAlignment`` 1..2**20; booleans
  booleans; ``reordering`` a ``cudnnBackendTensorReordering_t`` member;
* its nodes: ``operation`` a known operation descriptor kind; every other string a known enum member name
  (``CUDNN_*``) or a reference to one of the graph's tensors; numbers finite; ints in int64;
* a kernel: base64 ``cubin`` and ``rawData``; every parameter offset inside ``rawData``; uids in range;
* device properties: the fields cuDNN writes, each in its range (``warpSize`` 1..1024, ``multiProcessorCount``
  >= 1, ``maxGridSize`` / ``maxBlockSize`` three positive ints, ...).

A refusal is a :class:`~cudnn_py.errors.SerializedJSONError` (a ``ValueError``) naming the document and the field
path: ``kernel cache JSON: operationGraph.tensors[3].stride[1]: 2**80 exceeds 2**62``.
"""
from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable
from functools import cache, partial
from itertools import accumulate
from typing import Any

from .._generated.enums import ENUMS
from .._generated.names import attr
from ..dtypes import BY_BACKEND
from ..errors import InvalidValueError, SerializedJSONError

MAX_JSON_BYTES = 256 << 20  # a kernel cache of a few hundred kernels is tens of MB
MAX_DEPTH = 64  # cuDNN's own documents nest at most ~8 levels
MAX_DIMS = 8  # CUDNN_ATTR_TENSOR_DIMENSIONS takes at most 8
MAX_ITEMS = 1 << 16  # tensors / nodes / kernels / offsets per list
MAX_DIM = 1 << 62
INT64_MAX = (1 << 63) - 1
MAX_ALIGNMENT = 1 << 20
MAX_VECT_COUNT = 64
MAX_STRING = 1 << 12  # a name, an enum member (a cubin or rawData is base64 of any length)

Path = str


def fmt(v: Any) -> str:
    """A value for an error message: big powers of two as ``2**k``, long ones cut."""
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 1 << 32:
        a = abs(v)
        if a & (a - 1) == 0:
            return f"{'-' if v < 0 else ''}2**{a.bit_length() - 1}"
    s = json.dumps(v) if isinstance(v, (str, list, dict)) else repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


class Checker:
    """One document being checked: ``what`` names it in the errors."""

    def __init__(self, what: str):
        self.what = what

    def fail(self, path: Path, message: str) -> SerializedJSONError:
        return SerializedJSONError(f"{self.what}: {path or '<top>'}: {message}")

    # ---- scalars -------------------------------------------------------------------------------------------------
    def int_(self, v: Any, path: Path, lo: int = -INT64_MAX - 1, hi: int = INT64_MAX) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(path, f"{fmt(v)} is not an integer ({type(v).__name__})")
        if v < lo:
            raise self.fail(path, f"{fmt(v)} is below {fmt(lo)}")
        if v > hi:
            raise self.fail(path, f"{fmt(v)} exceeds {fmt(hi)}")
        return v

    def bool_(self, v: Any, path: Path) -> bool:
        if not isinstance(v, bool):
            raise self.fail(path, f"{fmt(v)} is not a boolean")
        return v

    def number(self, v: Any, path: Path) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.fail(path, f"{fmt(v)} is not a number")
        if isinstance(v, int):
            return float(self.int_(v, path))
        if v != v or v in (float("inf"), float("-inf")):
            raise self.fail(path, f"{fmt(v)} is not finite")
        return v

    def str_(self, v: Any, path: Path, max_len: int = MAX_STRING) -> str:
        if not isinstance(v, str):
            raise self.fail(path, f"{fmt(v)} is not a string")
        if len(v) > max_len:
            raise self.fail(path, f"a string of {len(v)} characters (at most {max_len})")
        return v

    def word(self, v: Any, path: Path) -> str:
        """An identifier-like string (finalizeMode, update_as)."""
        s = self.str_(v, path, 256)
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", s):
            raise self.fail(path, f"{fmt(s)} is not an identifier")
        return s

    def enum(self, v: Any, path: Path, enum_name: str | None = None) -> str:
        s = self.str_(v, path, 256)
        members = enum_members(enum_name) if enum_name else all_members()
        if s not in members:
            where = enum_name or "any cuDNN enum"
            raise self.fail(path, f"{fmt(s)} is not a member of {where}")
        return s

    def base64_(self, v: Any, path: Path) -> bytes:
        s = self.str_(v, path, MAX_JSON_BYTES)
        try:
            return base64.b64decode(s, validate=True)
        except (binascii.Error, ValueError) as e:
            raise self.fail(path, f"not base64 ({e})") from None

    def uid_name(self, v: Any, path: Path) -> int:
        """A tensor name in cuDNN's JSON: the uid as a decimal string (cuDNN reads it with std::stoll)."""
        s = self.str_(v, path, 32)
        if not re.fullmatch(r"-?[0-9]{1,19}", s):
            raise self.fail(path, f"{fmt(s)} is not a decimal tensor uid")
        return self.int_(int(s), path, 0)

    # ---- containers ----------------------------------------------------------------------------------------------
    def obj(self, v: Any, path: Path, required: tuple[str, ...] = ()) -> dict:
        if not isinstance(v, dict):
            raise self.fail(path, f"{fmt(v)} is not an object ({type(v).__name__})")
        for key in required:
            if key not in v:
                raise self.fail(join(path, key), "missing")
        return v

    def list_(self, v: Any, path: Path, lo: int = 0, hi: int = MAX_ITEMS) -> list:
        if not isinstance(v, list):
            raise self.fail(path, f"{fmt(v)} is not a list ({type(v).__name__})")
        if not lo <= len(v) <= hi:
            raise self.fail(path, f"{len(v)} element(s); {lo}..{hi} allowed")
        return v

    def fields(self, d: dict, path: Path, rules: dict[str, Callable[[Any, Path], Any]],
               other: Callable[[str, Any, Path], Any] | None = None) -> None:
        """Each key of ``d`` by its rule; keys without one by ``other`` (None: refused)."""
        for key, value in d.items():
            p = join(path, key)
            rule = rules.get(key)
            if rule is not None:
                rule(value, p)
            elif other is not None:
                other(key, value, p)
            else:
                raise self.fail(p, "unknown field")

    def plain(self, key: str, v: Any, path: Path, depth: int = 0) -> None:
        """A field no schema names: a finite number, a boolean, a known enum member, or lists / objects of them."""
        if isinstance(v, bool):
            return
        if isinstance(v, (int, float)):
            self.number(v, path)
        elif isinstance(v, str):
            self.enum(v, path)
        elif isinstance(v, list):
            for i, x in enumerate(self.list_(v, path)):
                self.plain(key, x, f"{path}[{i}]", depth + 1)
        elif isinstance(v, dict):
            for k, x in v.items():
                self.plain(k, x, join(path, k), depth + 1)
        else:
            raise self.fail(path, f"{fmt(v)} is not a JSON value")


def join(path: Path, key: str) -> Path:
    return f"{path}.{key}" if path else key


@cache
def enum_members(enum_name: str) -> frozenset[str]:
    return frozenset(m[0] for m in ENUMS.get(enum_name, ()))


@cache
def all_members() -> frozenset[str]:
    return frozenset(m[0] for members in ENUMS.values() for m in members)


def element_bytes(data_type: str) -> int:
    """Bytes of one element (16 for a type the catalog does not size: an upper bound)."""
    d = BY_BACKEND.get(data_type)
    return max(1, (d.bits + 7) // 8) if d is not None and d.bits > 0 else 16


def byte_span(dims: list[int], strides: list[int], elem_bytes: int) -> int:
    """Bytes from the first to one past the last element a (dims, strides) tensor addresses."""
    return (1 + sum((d - 1) * s for d, s in zip(dims, strides))) * elem_bytes


# ---- reading the text --------------------------------------------------------------------------------------------
# a JSON string, as the unrolled loop "normal* (escape normal*)*": the same matches as "(?:[^"\\]|\\.)*", ten times
# faster on the long base64 strings of plans and kernel caches (the disk cache reads one per warm build)
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKETS = bytes(range(256)).translate(None, b"[]{}")


def _reject_constant(name: str) -> Any:
    raise InvalidValueError(f"{name} is not JSON")


def parse(text: Any, what: str, allow_constants: bool = False) -> Any:
    """``json.loads`` of at most MAX_JSON_BYTES bytes nested at most MAX_DEPTH deep (both checked first)."""
    if isinstance(text, str):
        data = text.encode("utf-8", "surrogatepass")
    elif isinstance(text, (bytes, bytearray, memoryview)):
        data = bytes(text)
    else:
        raise SerializedJSONError(f"{what}: takes a JSON str or bytes, not {type(text).__name__}")
    if len(data) > MAX_JSON_BYTES:
        raise SerializedJSONError(f"{what}: {len(data)} bytes; at most {MAX_JSON_BYTES} are read")
    if not data.strip():
        raise SerializedJSONError(f"{what}: the JSON is empty")
    if data.count(b"[") + data.count(b"{") > MAX_DEPTH:
        brackets = _STRING.sub(b"", data).translate(None, _BRACKETS)
        depth = max(accumulate(1 if c in b"[{" else -1 for c in brackets), default=0)
        if depth > MAX_DEPTH:
            raise SerializedJSONError(f"{what}: nested {depth} levels deep; at most {MAX_DEPTH}")
    try:
        return json.loads(data.decode("utf-8"), parse_constant=None if allow_constants else _reject_constant)
    except RecursionError:
        raise SerializedJSONError(f"{what}: nested too deep") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise SerializedJSONError(f"{what}: not JSON: {e}") from None


# ---- the operation graph -----------------------------------------------------------------------------------------
def check_tensor(c: Checker, t: Any, path: Path) -> int:
    t = c.obj(t, path, ("name", "dataType", "dim", "stride"))
    uid = c.uid_name(t["name"], join(path, "name"))
    dtype = c.enum(t["dataType"], join(path, "dataType"), "cudnnDataType_t")
    dims = c.list_(t["dim"], join(path, "dim"), 1, MAX_DIMS)
    for i, d in enumerate(dims):
        c.int_(d, f"{path}.dim[{i}]", 1, MAX_DIM)
    strides = c.list_(t["stride"], join(path, "stride"), len(dims), len(dims))
    for i, s in enumerate(strides):
        c.int_(s, f"{path}.stride[{i}]", 1, MAX_DIM)
    vect = t.get("vectCount", 1)
    c.int_(vect, join(path, "vectCount"), 1, MAX_VECT_COUNT)
    c.int_(t.get("vectDim", -1), join(path, "vectDim"), -1, len(dims) - 1)
    span = byte_span(dims, strides, element_bytes(dtype)) * vect
    if span > INT64_MAX:
        raise c.fail(path, f"dims {fmt(dims)} with strides {fmt(strides)} span {fmt(span)} bytes, over 2**63")
    rules: dict[str, Callable[[Any, Path], Any]] = {
        "name": lambda v, p: None, "dataType": lambda v, p: None, "dim": lambda v, p: None,
        "stride": lambda v, p: None, "vectCount": lambda v, p: None, "vectDim": lambda v, p: None,
        "isVirtual": c.bool_, "isByValue": c.bool_,
        "ptrAlignment": lambda v, p: c.int_(v, p, 1, MAX_ALIGNMENT),
        "reordering": lambda v, p: c.enum(v, p, "cudnnBackendTensorReordering_t"),
    }
    c.fields(t, path, rules, c.plain)
    return uid


def check_operation_graph(c: Checker, og: Any, path: Path) -> dict[int, dict]:
    """The tensors by uid (after checking the whole graph)."""
    og = c.obj(og, path, ("tensors", "nodes"))
    tensors: dict[int, dict] = {}
    for i, t in enumerate(c.list_(og["tensors"], join(path, "tensors"))):
        p = f"{join(path, 'tensors')}[{i}]"
        uid = check_tensor(c, t, p)
        if uid in tensors:
            raise c.fail(join(p, "name"), f"tensor uid {uid} appears twice")
        tensors[uid] = t
    names = {str(u) for u in tensors} | {t["name"] for t in tensors.values()}
    for i, node in enumerate(c.list_(og["nodes"], join(path, "nodes"))):
        check_node(c, node, f"{join(path, 'nodes')}[{i}]", names)
    rules: dict[str, Callable[[Any, Path], Any]] = {
        "tensors": lambda v, p: None, "nodes": lambda v, p: None,
        "finalizeMode": c.word, "isDynamicShapeEnabled": c.bool_,
    }
    c.fields(og, path, rules, c.plain)
    return tensors


def check_node(c: Checker, node: Any, path: Path, tensor_names: set[str]) -> None:
    node = c.obj(node, path, ("operation",))
    op = c.str_(node["operation"], join(path, "operation"), 256)
    if not (op.startswith("CUDNN_BACKEND_OPERATION") and op in enum_members("cudnnBackendDescriptorType_t")):
        raise c.fail(join(path, "operation"), f"{fmt(op)} is not an operation descriptor kind")

    def value(v: Any, p: Path, depth: int = 0) -> None:
        if isinstance(v, str):
            if v.startswith("CUDNN_"):
                c.enum(v, p)
            elif v not in tensor_names:
                c.uid_name(v, p)  # says what is wrong with a malformed one
                raise c.fail(p, f"{fmt(v)} names no tensor of the graph")
        elif isinstance(v, list) and depth < 2:
            for i, x in enumerate(c.list_(v, p)):
                value(x, f"{p}[{i}]", depth + 1)
        elif isinstance(v, dict) and depth < 2:
            for k, x in v.items():
                value(x, join(p, k), depth + 1)
        elif isinstance(v, bool):
            return
        elif isinstance(v, (int, float)):
            c.number(v, p)
        else:
            raise c.fail(p, f"{fmt(v)} is not a value cuDNN writes in a node")

    for key, v in node.items():
        if key != "operation":
            value(v, join(path, key))


# ---- kernels -----------------------------------------------------------------------------------------------------
def check_kernel(c: Checker, k: Any, path: Path) -> None:
    k = c.obj(k, path, ("kernelName", "cubin"))
    c.str_(k["kernelName"], join(path, "kernelName"))
    c.base64_(k["cubin"], join(path, "cubin"))
    c.fields(k, path, {"kernelName": lambda v, q: None, "kernelParams": lambda v, q: None,
                       "cubin": lambda v, q: None}, c.plain)
    if "kernelParams" not in k:  # cuDNN 9.19 writes none for some kernels (the layernorm backward's, on an H200)
        return
    pp = join(path, "kernelParams")
    params = c.obj(k["kernelParams"], pp, ("offsets", "rawData"))
    raw = c.base64_(params["rawData"], join(pp, "rawData"))
    for i, off in enumerate(c.list_(params["offsets"], join(pp, "offsets"))):
        p = f"{join(pp, 'offsets')}[{i}]"
        off = c.obj(off, p, ("value",))
        at = c.int_(off["value"], join(p, "value"), 0, len(raw))
        size = c.int_(off.get("size", 1), join(p, "size"), 0, len(raw))
        kind = c.word(off["update_as"], join(p, "update_as")) if "update_as" in off else None
        if kind == "pointer":
            size = max(size, 8)
        if at + max(size, 1) > len(raw):
            raise c.fail(p, f"bytes {at}..{at + max(size, 1)} lie outside rawData ({len(raw)} bytes)")
        c.fields(off, p, {"value": lambda v, q: None, "size": lambda v, q: None, "update_as": lambda v, q: None,
                          "uid": lambda v, q: c.int_(v, q, 0),
                          "idx_shape_update_fn": lambda v, q: c.int_(v, q, -1, 1 << 16),
                          "name": c.str_}, c.plain)
    c.fields(params, pp, {"offsets": lambda v, q: None, "rawData": lambda v, q: None}, c.plain)


def check_knobs(c: Checker, v: Any, path: Path) -> None:
    for key, x in c.obj(v, path).items():
        c.enum(key, join(path, key), "cudnnBackendKnobType_t")
        c.int_(x, join(path, key))


def check_version_fields(c: Checker, doc: dict) -> None:
    c.int_(doc["cudnnVersion"], "cudnnVersion", 1, 10**7)
    c.int_(doc.get("schemaVersion", 0), "schemaVersion", 0, 1 << 16)


def _skip(v: Any, p: Path) -> None:
    return None


# ---- the three documents -----------------------------------------------------------------------------------------
def check_kernel_cache(text: Any, what: str = "kernel cache JSON") -> dict:
    c = Checker(what)
    doc = c.obj(parse(text, what), "", ("cudnnVersion", "operationGraph"))
    check_version_fields(c, doc)
    check_operation_graph(c, doc["operationGraph"], "operationGraph")
    for i, entry in enumerate(c.list_(doc.get("kernel_cache", []), "kernel_cache")):
        p = f"kernel_cache[{i}]"
        entry = c.obj(entry, p, ("key", "value"))
        kp = join(p, "key")
        key = c.obj(entry["key"], kp, ("operationGraph",))
        check_operation_graph(c, key["operationGraph"], join(kp, "operationGraph"))
        c.fields(key, kp, {"operationGraph": _skip, "type": lambda v, q: c.int_(v, q, 0, 1 << 16),
                           "engineId": lambda v, q: c.int_(v, q, -1, 1 << 31),
                           "knobChoices": lambda v, q: check_knobs(c, v, q),
                           "check_specialization": c.bool_}, c.plain)
        for j, kernel in enumerate(c.list_(entry["value"], join(p, "value"))):
            check_kernel(c, kernel, f"{join(p, 'value')}[{j}]")
        c.fields(entry, p, {"key": _skip, "value": _skip})
    c.fields(doc, "", {"cudnnVersion": _skip, "schemaVersion": _skip, "operationGraph": _skip,
                       "kernel_cache": _skip}, c.plain)
    return doc


_DEVICE_INTS: dict[str, tuple[int, int]] = {
    "regsPerBlock": (1, 1 << 24), "multiProcessorCount": (1, 1 << 16), "warpSize": (1, 1024),
    "maxSharedMemoryPerBlock": (0, 1 << 30), "maxSharedMemoryPerBlockOptin": (0, 1 << 30),
    "reservedSharedMemoryPerBlock": (0, 1 << 30), "maxRegistersPerSM": (1, 1 << 24), "maxCtasPerSM": (1, 1 << 16),
    "maxThreadsPerBlock": (1, 1 << 16), "maxThreadsPerSM": (1, 1 << 20), "pciDeviceId": (0, 1 << 31),
    "isTccDriver": (0, 1), "supportCoopLaunch": (0, 1), "totalGlobalMem": (0, INT64_MAX),
    "smClockRateKHz": (0, 1 << 31), "memClockRateKHz": (0, 1 << 31), "l2CacheSize": (0, 1 << 40),
    "cudaDeviceId": (0, 1 << 31), "deviceVer": (0, 1 << 20), "driverVer": (0, 1 << 31), "smCountOrigin": (0, 3),
}
DEVICE_REQUIRED = ("maxGridSize", "maxBlockSize", "multiProcessorCount", "warpSize", "deviceVer")


def _ranged(c: Checker, bounds: tuple[int, int], v: Any, path: Path) -> int:
    return c.int_(v, path, *bounds)


def check_device_fields(c: Checker, doc: Any, path: Path) -> dict:
    doc = c.obj(doc, path, DEVICE_REQUIRED)
    for key in ("maxGridSize", "maxBlockSize"):
        for i, x in enumerate(c.list_(doc[key], join(path, key), 3, 3)):
            c.int_(x, f"{join(path, key)}[{i}]", 1, (1 << 31) - 1)
    rules: dict[str, Callable[[Any, Path], Any]] = {"maxGridSize": _skip, "maxBlockSize": _skip,
                                                    "deviceName": lambda v, q: c.str_(v, q, 256)}
    for key, bounds in _DEVICE_INTS.items():
        rules[key] = partial(_ranged, c, bounds)

    def other(key: str, v: Any, q: Path) -> None:  # a field a newer cuDNN adds: an int in int32
        c.int_(v, q, -(1 << 31), (1 << 31) - 1)

    c.fields(doc, path, rules, other)
    return doc


def check_device_properties(text: Any, what: str = "device properties JSON") -> dict:
    c = Checker(what)
    return check_device_fields(c, parse(text, what), "")


def check_execution_plan(text: Any, what: str = "execution plan JSON") -> dict:
    c = Checker(what)
    doc = c.obj(parse(text, what), "", ("cudnnVersion", "operationGraph", "engine"))
    check_version_fields(c, doc)
    check_operation_graph(c, doc["operationGraph"], "operationGraph")
    engine = c.obj(doc["engine"], "engine", ("engineId",))

    def payload(v: Any, p: Path) -> None:
        v = c.obj(v, p)
        for i, k in enumerate(c.list_(v.get("kernels", []), join(p, "kernels"))):
            check_kernel(c, k, f"{join(p, 'kernels')}[{i}]")
        c.fields(v, p, {"kernels": _skip}, c.plain)

    c.fields(engine, "engine", {"engineId": lambda v, q: c.int_(v, q, -1, 1 << 31),
                                "smVersion": lambda v, q: c.int_(v, q, 0, 1 << 20),
                                "knobChoices": lambda v, q: check_knobs(c, v, q), "payload": payload}, c.plain)
    c.fields(doc, "", {"cudnnVersion": _skip, "schemaVersion": _skip, "operationGraph": _skip, "engine": _skip,
                       "GPUProfile": lambda v, q: check_device_fields(c, v, q)}, c.plain)
    return doc


BY_ATTRIBUTE: dict[str, Callable[..., dict]] = {
    attr.KERNEL_CACHE_JSON_REPRESENTATION: check_kernel_cache,
    attr.EXECUTION_PLAN_JSON_REPRESENTATION: check_execution_plan,
    attr.DEVICEPROP_JSON_REPRESENTATION: check_device_properties,
}


def check_attribute(attr: str, data: bytes) -> None:
    """Descriptor.set's check of a JSON attribute's bytes (a NUL byte anywhere is refused: not JSON)."""
    checker = BY_ATTRIBUTE.get(attr)
    if checker is not None:
        checker(data, attr)
