"""Replay the descriptor calls of a trace file (``CUDNN_PY_TRACE``) against the loaded cuDNN, raw — bypassing
cudnn_py's own checks — and report every call whose status differs from the recorded one.

Descriptor ids in the trace are remapped to the new descriptors. Calls that need live device memory or a handle
(execute, handles, streams) are skipped and counted: replay is for reproducing descriptor-level behaviour, e.g.
to attach to a bug report or to compare two cuDNN versions.
"""
from __future__ import annotations

import ctypes
import json
import sys

from ..errors import status_name
from .api import get_last_error_string, lib
from .enums import enum_class
from .types import ENUM_OF_TYPE, cudnnFraction_t, element_ctype


def _array(type_name: str, values, ptrs: dict[int, int]):
    ct = element_ctype(type_name)
    if type_name == "CUDNN_TYPE_CHAR":
        data = values.encode()
        return ctypes.create_string_buffer(data, len(data))
    if type_name == "CUDNN_TYPE_BACKEND_DESCRIPTOR":
        return (ct * len(values))(*[ptrs[v["desc"]] for v in values])
    if type_name in ("CUDNN_TYPE_VOID_PTR", "CUDNN_TYPE_HANDLE"):
        return (ct * len(values))(*[int(v, 16) for v in values])
    if type_name == "CUDNN_TYPE_FRACTION":
        return (ct * len(values))(*[cudnnFraction_t(a, b) for a, b in values])
    if type_name in ENUM_OF_TYPE:
        cls = enum_class(ENUM_OF_TYPE[type_name])
        return (ct * len(values))(*[int(cls[v]) for v in values])
    return (ct * len(values))(*values)


def replay(path: str, out=sys.stdout) -> int:
    cdll = lib()
    kinds = enum_class("cudnnBackendDescriptorType_t")
    attrs = enum_class("cudnnBackendAttributeName_t")
    types = enum_class("cudnnBackendAttributeType_t")
    ptrs: dict[int, int] = {}
    replayed = skipped = 0
    mismatches: list[str] = []
    with open(path, encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    for r in records:
        fn = r["fn"]
        if fn == "cudnnBackendCreateDescriptor":
            p = ctypes.c_void_p()
            status = cdll.cudnnBackendCreateDescriptor(int(kinds[r["kind"]]), ctypes.byref(p))
            ptrs[r["desc"]] = p.value or 0
        elif fn == "cudnnBackendSetAttribute":
            arr = _array(r["type"], r.get("values", []), ptrs)
            status = cdll.cudnnBackendSetAttribute(ptrs[r["desc"]], int(attrs[r["attr"]]), int(types[r["type"]]),
                                                   r["count"], arr)
        elif fn == "cudnnBackendFinalize":
            status = cdll.cudnnBackendFinalize(ptrs[r["desc"]])
        elif fn == "cudnnBackendGetAttribute":
            n = r["count"]
            if r["type"] == "CUDNN_TYPE_BACKEND_DESCRIPTOR" and n:
                skipped += 1  # needs pre-created output descriptors whose creation is traced separately
                continue
            buf = (element_ctype(r["type"]) * max(n, 1))() if n else None
            got = ctypes.c_int64(0)
            status = cdll.cudnnBackendGetAttribute(ptrs[r["desc"]], int(attrs[r["attr"]]), int(types[r["type"]]), n,
                                                   ctypes.byref(got), buf)
        elif fn == "cudnnBackendDestroyDescriptor":
            status = cdll.cudnnBackendDestroyDescriptor(ptrs.pop(r["desc"]))
        else:
            skipped += 1
            continue
        replayed += 1
        if status != r.get("status", 0):
            mismatches.append(f"seq {r['seq']} {fn} {r.get('kind', '')} {r.get('attr', '')}: recorded "
                              f"{r.get('status_name')}, now {status_name(status)} ({get_last_error_string()})")
    for line in mismatches:
        print(line, file=out)
    print(f"replayed {replayed} call(s), skipped {skipped}, {len(mismatches)} status mismatch(es)", file=out)
    return 1 if mismatches else 0
