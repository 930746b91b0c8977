#!/usr/bin/env python3
"""Ask the live cuDNN library which types each backend attribute accepts (no GPU needed).

    python bindings/probe_types.py [--include DIR] [--out bindings/probe_results.json] [--jobs N] [--only ATTR ...]

The attribute names and enum values come from the headers ``generate.py`` uses (default: the newest pinned set in
``bindings/headers/``, see bindings/headers/README.md; ``--include DIR`` / ``$CUDNN_INCLUDE_DIR`` override it).

For every member of ``cudnnBackendAttributeName_t``, on a fresh descriptor of its owner kind (documented owner, else
inferred from the name prefix):

1. **type sweep** -- ``cudnnBackendSetAttribute`` once with each of the ``cudnnBackendAttributeType_t`` types, one
   element of a plausible value (for BACKEND_DESCRIPTOR a finalized descriptor of the documented/overridden kind when
   one can be built on CPU, else a finalized tensor; the first enum member for enum types,
   1 / 1.0 / true for numbers, a one-character string for CHAR), and read ``cudnnGetLastErrorString()`` after each.
   A type is *accepted* when Set returns SUCCESS, BAD_PARAM_DESCRIPTOR_TYPE (right type, wrong descriptor kind), or a
   BAD_PARAM whose message names that very type as the expected one. The messages of the rejected types usually
   *name* the expected type ("CUDNN_TYPE_INT64 != attrType", "attrType != CUDNN_TYPE_X", "!(attrType == A || ...)").
   An attribute that accepts every type does no type check (the JSON_REPRESENTATION ones).
2. **count** -- with the first accepted type, Set with 0, 2 and 9 elements: "1 != elemCount" means a scalar (the
   library checks counts only for some attributes: many documented 1-element descriptor attributes take any count).
3. **kind** -- for BACKEND_DESCRIPTOR, the BAD_PARAM_DESCRIPTOR_TYPE message names the kind the library demands.

Each worker subprocess handles a batch of jobs and reports one JSON line per job, so a crash (some wrong-type Sets on
unchecked attributes could dereference garbage) only loses the job that crashed: it is recorded as such and a new
worker resumes with the rest. The library is loaded the way the test-suite does it (the test-only stub libcuda so
that the tensor used as a BACKEND_DESCRIPTOR value can be finalized).

The result (``probe_results.json``, committed) keeps, per attribute, the accepted and named types, the method, the
raw status/error seen for each type, and the library version. ``generate.py`` reads it as the "probe" layer.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

STATUS_SUCCESS = 0
STATUS_BAD_PARAM = 2000
STATUS_BAD_PARAM_ATTRIBUTE_TYPE = 2010
STATUS_BAD_PARAM_DESCRIPTOR_TYPE = 2012
STATUS_NOT_SUPPORTED = 3000

# Attributes that the library rejects until another attribute has been set: attr -> [(attr, type, value kind)]
PRECONDITIONS = {
    "CUDNN_ATTR_TENSOR_CONSTANT_VALUE": [("CUDNN_ATTR_TENSOR_IS_BY_VALUE", "CUDNN_TYPE_BOOLEAN", "true")],
    "CUDNN_ATTR_OPERATION_REDUCTION_INIT_VALUES": [("CUDNN_ATTR_OPERATION_REDUCTION_YDESC",
                                                    "CUDNN_TYPE_BACKEND_DESCRIPTOR", "tensor")],
}

_NAMED_RE = re.compile(r"CUDNN_TYPE_[A-Z0-9_]+")
_KIND_MSG_RE = re.compile(r"must be an? (CUDNN_BACKEND_\w+_DESCRIPTOR)")


# --------------------------------------------------------------------------------------------------------------------
# Worker (runs inside a subprocess)
# --------------------------------------------------------------------------------------------------------------------

class Lib:
    def __init__(self, tables: dict) -> None:
        sys.path.insert(0, str(REPO))
        from tests.support.libcuda_stub import ensure_driver

        ensure_driver()
        cdll = None
        try:
            from cudnn_py.backend.loader import load_library

            cdll = load_library().cdll
        except Exception:
            import importlib.util

            try:
                spec = importlib.util.find_spec("nvidia.cudnn")
            except ModuleNotFoundError:  # no nvidia.* package at all: re-raise the loader's error below
                spec = None
            for loc in list(spec.submodule_search_locations or []) if spec else []:
                p = Path(loc) / "lib" / "libcudnn.so.9"
                if p.is_file():
                    cdll = ctypes.CDLL(str(p), mode=ctypes.RTLD_GLOBAL)
                    break
            if cdll is None:
                raise
        c = ctypes
        cdll.cudnnBackendCreateDescriptor.argtypes = [c.c_int, c.POINTER(c.c_void_p)]
        cdll.cudnnBackendCreateDescriptor.restype = c.c_int
        cdll.cudnnBackendDestroyDescriptor.argtypes = [c.c_void_p]
        cdll.cudnnBackendDestroyDescriptor.restype = c.c_int
        cdll.cudnnBackendFinalize.argtypes = [c.c_void_p]
        cdll.cudnnBackendFinalize.restype = c.c_int
        cdll.cudnnBackendSetAttribute.argtypes = [c.c_void_p, c.c_int, c.c_int, c.c_int64, c.c_void_p]
        cdll.cudnnBackendSetAttribute.restype = c.c_int
        cdll.cudnnGetLastErrorString.argtypes = [c.c_char_p, c.c_size_t]
        cdll.cudnnGetLastErrorString.restype = None
        cdll.cudnnGetVersion.restype = c.c_size_t
        self.cdll = cdll
        self.values: dict[str, int] = tables["values"]
        self.type_first: dict[str, int] = tables["type_first_value"]
        self.scratch = ctypes.create_string_buffer(4096)
        self.tensor = self._make_tensor()

    def last_error(self) -> str:
        buf = ctypes.create_string_buffer(8192)
        self.cdll.cudnnGetLastErrorString(buf, len(buf))
        return buf.value.decode(errors="replace")

    def create(self, kind: str) -> ctypes.c_void_p:
        d = ctypes.c_void_p()
        st = self.cdll.cudnnBackendCreateDescriptor(self.values[kind], ctypes.byref(d))
        if st != 0:
            raise RuntimeError(f"cudnnBackendCreateDescriptor({kind}) -> {st} {self.last_error()!r}")
        return d

    def set(self, d, attr: str, typ: str, count: int, buf) -> int:
        return int(self.cdll.cudnnBackendSetAttribute(d, self.values[attr], self.values[typ], count,
                                                      ctypes.cast(buf, ctypes.c_void_p)))

    def _make_tensor(self) -> ctypes.c_void_p:
        """The finalized 1x1x1x1 FLOAT tensor (UID 1) passed as the BACKEND_DESCRIPTOR probe value."""
        return self.make_tensor(1, dims=(1, 1, 1, 1))

    # ---- finalized descriptors of other kinds (used by tests/test_generated.py for BACKEND_DESCRIPTOR values) ----
    def _ints(self, typ: str, *vals):
        ct = {"CUDNN_TYPE_INT64": ctypes.c_int64, "CUDNN_TYPE_INT32": ctypes.c_int32,
              "CUDNN_TYPE_DOUBLE": ctypes.c_double, "CUDNN_TYPE_FLOAT": ctypes.c_float,
              "CUDNN_TYPE_BOOLEAN": ctypes.c_bool, "CUDNN_TYPE_BACKEND_DESCRIPTOR": ctypes.c_void_p}.get(typ, ctypes.c_int)
        return (ct * len(vals))(*vals)

    def _build(self, kind: str, sets) -> ctypes.c_void_p:
        d = self.create(kind)
        for attr, typ, vals in sets:
            if typ == "CUDNN_TYPE_BACKEND_DESCRIPTOR":
                vals = [v.value for v in vals]
            elif typ not in ("CUDNN_TYPE_INT64", "CUDNN_TYPE_INT32", "CUDNN_TYPE_DOUBLE", "CUDNN_TYPE_FLOAT",
                             "CUDNN_TYPE_BOOLEAN"):
                vals = [self.values[v] if isinstance(v, str) else v for v in vals]
            st = self.set(d, attr, typ, len(vals), self._ints(typ, *vals))
            if st:
                raise RuntimeError(f"{kind}: {attr} -> {st} {self.last_error()!r}")
        st = self.cdll.cudnnBackendFinalize(d)
        if st:
            raise RuntimeError(f"{kind}: finalize -> {st} {self.last_error()!r}")
        return d

    def make_tensor(self, uid: int, dims=(1, 4, 8), virtual: bool = False) -> ctypes.c_void_p:
        strides, acc = [], 1
        for n in reversed(dims):
            strides.insert(0, acc)
            acc *= n
        sets = [("CUDNN_ATTR_TENSOR_UNIQUE_ID", "CUDNN_TYPE_INT64", [uid]),
                ("CUDNN_ATTR_TENSOR_DATA_TYPE", "CUDNN_TYPE_DATA_TYPE", ["CUDNN_DATA_FLOAT"]),
                ("CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT", "CUDNN_TYPE_INT64", [16]),
                ("CUDNN_ATTR_TENSOR_DIMENSIONS", "CUDNN_TYPE_INT64", list(dims)),
                ("CUDNN_ATTR_TENSOR_STRIDES", "CUDNN_TYPE_INT64", strides)]
        if virtual:
            sets.append(("CUDNN_ATTR_TENSOR_IS_VIRTUAL", "CUDNN_TYPE_BOOLEAN", [True]))
        return self._build("CUDNN_BACKEND_TENSOR_DESCRIPTOR", sets)

    def finalized(self, kind: str) -> ctypes.c_void_p:
        """A finalized descriptor of ``kind`` built with plausible attributes (cached). Raises RuntimeError for kinds
        that cannot be finalized without a GPU (ENGINECFG, EXECUTION_PLAN, DEVICEPROP ...) or are not covered."""
        cache = self.__dict__.setdefault("_finalized_cache", {})
        if kind in cache:
            if isinstance(cache[kind], Exception):
                raise cache[kind]
            return cache[kind]
        try:
            cache[kind] = self._finalized(kind)
        except RuntimeError as exc:
            cache[kind] = exc
            raise
        return cache[kind]

    def _finalized(self, kind: str) -> ctypes.c_void_p:
        BD, I64, DT = "CUDNN_TYPE_BACKEND_DESCRIPTOR", "CUDNN_TYPE_INT64", "CUDNN_TYPE_DATA_TYPE"
        if kind == "CUDNN_BACKEND_TENSOR_DESCRIPTOR":
            return self.tensor
        if kind == "CUDNN_BACKEND_POINTWISE_DESCRIPTOR":
            return self._build(kind, [("CUDNN_ATTR_POINTWISE_MODE", "CUDNN_TYPE_POINTWISE_MODE",
                                       ["CUDNN_POINTWISE_RELU_FWD"]),
                                      ("CUDNN_ATTR_POINTWISE_MATH_PREC", DT, ["CUDNN_DATA_FLOAT"])])
        if kind == "CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR":
            return self._build(kind, [("CUDNN_ATTR_CONVOLUTION_COMP_TYPE", DT, ["CUDNN_DATA_FLOAT"]),
                                      ("CUDNN_ATTR_CONVOLUTION_CONV_MODE", "CUDNN_TYPE_CONVOLUTION_MODE",
                                       ["CUDNN_CROSS_CORRELATION"]),
                                      ("CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS", I64, [2]),
                                      ("CUDNN_ATTR_CONVOLUTION_DILATIONS", I64, [1, 1]),
                                      ("CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES", I64, [1, 1]),
                                      ("CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS", I64, [0, 0]),
                                      ("CUDNN_ATTR_CONVOLUTION_POST_PADDINGS", I64, [0, 0])])
        if kind == "CUDNN_BACKEND_MATMUL_DESCRIPTOR":
            return self._build(kind, [("CUDNN_ATTR_MATMUL_COMP_TYPE", DT, ["CUDNN_DATA_FLOAT"])])
        if kind == "CUDNN_BACKEND_REDUCTION_DESCRIPTOR":
            return self._build(kind, [("CUDNN_ATTR_REDUCTION_OPERATOR", "CUDNN_TYPE_REDUCTION_OPERATOR_TYPE",
                                       ["CUDNN_REDUCE_TENSOR_ADD"]),
                                      ("CUDNN_ATTR_REDUCTION_COMP_TYPE", DT, ["CUDNN_DATA_FLOAT"])])
        if kind == "CUDNN_BACKEND_RESAMPLE_DESCRIPTOR":
            return self._build(kind, [("CUDNN_ATTR_RESAMPLE_MODE", "CUDNN_TYPE_RESAMPLE_MODE",
                                       ["CUDNN_RESAMPLE_MAXPOOL"]),
                                      ("CUDNN_ATTR_RESAMPLE_COMP_TYPE", DT, ["CUDNN_DATA_FLOAT"]),
                                      ("CUDNN_ATTR_RESAMPLE_SPATIAL_DIMS", I64, [2]),
                                      ("CUDNN_ATTR_RESAMPLE_STRIDES", I64, [2, 2]),
                                      ("CUDNN_ATTR_RESAMPLE_PRE_PADDINGS", I64, [0, 0]),
                                      ("CUDNN_ATTR_RESAMPLE_POST_PADDINGS", I64, [0, 0]),
                                      ("CUDNN_ATTR_RESAMPLE_WINDOW_DIMS", I64, [2, 2])])
        if kind == "CUDNN_BACKEND_RNG_DESCRIPTOR":
            return self._build(kind, [("CUDNN_ATTR_RNG_DISTRIBUTION", "CUDNN_TYPE_RNG_DISTRIBUTION",
                                       ["CUDNN_RNG_DISTRIBUTION_BERNOULLI"]),
                                      ("CUDNN_ATTR_RNG_BERNOULLI_DIST_PROBABILITY", "CUDNN_TYPE_DOUBLE", [0.5])])
        if kind == "CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR":
            first_knob = self.type_first["CUDNN_TYPE_KNOB_TYPE"]
            return self._build(kind, [("CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE", "CUDNN_TYPE_KNOB_TYPE", [first_knob]),
                                      ("CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE", I64, [0])])
        if kind == "CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR":
            return self._build(kind, [
                ("CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR", BD,
                 [self.finalized("CUDNN_BACKEND_POINTWISE_DESCRIPTOR")]),
                ("CUDNN_ATTR_OPERATION_POINTWISE_XDESC", BD, [self.tensor_x]),
                ("CUDNN_ATTR_OPERATION_POINTWISE_YDESC", BD, [self.tensor_y])])
        if kind == "CUDNN_BACKEND_OPERATION_SOFTMAX_DESCRIPTOR":
            return self._build(kind, [("CUDNN_ATTR_OPERATION_SOFTMAX_XDESC", BD, [self.tensor_x]),
                                      ("CUDNN_ATTR_OPERATION_SOFTMAX_YDESC", BD, [self.tensor_y])])
        if kind == "CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR":
            return self._build(kind, [("CUDNN_ATTR_OPERATIONGRAPH_OPS", BD,
                                       [self.finalized("CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR")])])
        if kind == "CUDNN_BACKEND_ENGINE_DESCRIPTOR":
            return self._build(kind, [("CUDNN_ATTR_ENGINE_OPERATION_GRAPH", BD,
                                       [self.finalized("CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR")]),
                                      ("CUDNN_ATTR_ENGINE_GLOBAL_INDEX", I64, [0])])
        if kind == "CUDNN_BACKEND_KERNEL_CACHE_DESCRIPTOR":
            return self._build(kind, [("CUDNN_ATTR_KERNEL_CACHE_OPERATION_GRAPH", BD,
                                       [self.finalized("CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR")])])
        raise RuntimeError(f"no CPU-finalizable recipe for {kind}")

    @property
    def tensor_x(self) -> ctypes.c_void_p:
        if "_tx" not in self.__dict__:
            self._tx = self.make_tensor(101, dims=(1, 2, 4, 8))
        return self._tx

    @property
    def tensor_y(self) -> ctypes.c_void_p:
        if "_ty" not in self.__dict__:
            self._ty = self.make_tensor(102, dims=(1, 2, 4, 8))
        return self._ty

    def value_buffer(self, typ: str, count: int, kind: str = "plausible"):
        """A buffer holding ``count`` plausible elements of ``typ`` (at least 64 bytes, zero padded).
        ``kind="null"``: all bytes zero (NULL pointers), used to retry a type whose plausible value crashed."""
        n = max(count, 1)
        if kind == "null":
            return ctypes.create_string_buffer(max(64, 16 * n))
        if typ == "CUDNN_TYPE_BACKEND_DESCRIPTOR":
            arr = (ctypes.c_void_p * max(n, 8))(*([self.tensor.value] * n))
        elif typ in ("CUDNN_TYPE_HANDLE",):
            arr = (ctypes.c_void_p * max(n, 8))()
        elif typ == "CUDNN_TYPE_VOID_PTR":
            arr = (ctypes.c_void_p * max(n, 8))(*([ctypes.addressof(self.scratch)] * n))
        elif typ in ("CUDNN_TYPE_INT64",):
            arr = (ctypes.c_int64 * max(n, 8))(*([1] * n))
        elif typ == "CUDNN_TYPE_INT32":
            arr = (ctypes.c_int32 * max(n, 16))(*([1] * n))
        elif typ == "CUDNN_TYPE_DOUBLE":
            arr = (ctypes.c_double * max(n, 8))(*([1.0] * n))
        elif typ == "CUDNN_TYPE_FLOAT":
            arr = (ctypes.c_float * max(n, 16))(*([1.0] * n))
        elif typ == "CUDNN_TYPE_BOOLEAN":
            arr = (ctypes.c_bool * max(n, 64))(*([True] * n))
        elif typ == "CUDNN_TYPE_CHAR":
            arr = ctypes.create_string_buffer(b"a" * n, max(n + 1, 64))
        elif typ == "CUDNN_TYPE_FRACTION":
            arr = (ctypes.c_int64 * max(2 * n, 8))(*([1] * (2 * n)))
        else:  # an enum-valued type: the first member of its enum
            arr = (ctypes.c_int * max(n, 16))(*([self.type_first.get(typ, 0)] * n))
        return arr

    def fresh(self, owner: str, attr: str) -> ctypes.c_void_p:
        d = self.create(owner)
        for pattr, ptyp, _pval in PRECONDITIONS.get(attr, []):
            buf = self.value_buffer(ptyp, 1)
            st = self.set(d, pattr, ptyp, 1, buf)
            if st:
                raise RuntimeError(f"precondition {pattr} -> {st} {self.last_error()!r}")
        return d

    def run(self, job: dict) -> dict:
        attr, owner, typ, count = job["attr"], job["owner"], job["type"], job.get("count", 1)
        self.last_error()  # clear
        try:
            d = self.fresh(owner, attr)
        except RuntimeError as exc:
            return {"status": None, "error": str(exc)}
        try:
            buf = self.value_buffer(typ, count, job.get("value", "plausible"))
            if typ == "CUDNN_TYPE_BACKEND_DESCRIPTOR" and job.get("value") != "null":
                for kind in job.get("kinds") or []:
                    try:  # a descriptor of a documented kind where one can be finalized on CPU, else the tensor
                        desc = self.finalized(kind)
                    except RuntimeError:
                        continue
                    buf = (ctypes.c_void_p * max(count, 8))(*([desc.value] * max(count, 1)))
                    break
            st = self.set(d, attr, typ, count, buf)
            return {"status": st, "error": self.last_error()}
        finally:
            self.cdll.cudnnBackendDestroyDescriptor(d)


def worker_main() -> int:
    payload = json.loads(sys.stdin.read())
    lib = Lib(payload["tables"])
    out = sys.stdout
    out.write(json.dumps({"ready": True, "version": int(lib.cdll.cudnnGetVersion())}) + "\n")
    out.flush()
    for i, job in enumerate(payload["jobs"]):
        res = lib.run(job)
        res["i"] = i
        out.write(json.dumps(res) + "\n")
        out.flush()
    return 0


# --------------------------------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------------------------------

def run_jobs(jobs: list[dict], tables: dict, timeout: float = 600.0) -> tuple[list[dict | None], int | None]:
    """Run jobs in one worker at a time, resuming after crashes. Returns (results, library version)."""
    results: list[dict | None] = [None] * len(jobs)
    version = None
    start = 0
    while start < len(jobs):
        batch = jobs[start:]
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker"],
                              input=json.dumps({"tables": tables, "jobs": batch}), capture_output=True, text=True,
                              timeout=timeout, cwd=str(REPO))
        done = -1
        for line in proc.stdout.splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if rec.get("ready"):
                version = rec["version"]
                continue
            results[start + rec["i"]] = rec
            done = rec["i"]
        if proc.returncode == 0 and done == len(batch) - 1:
            break
        if version is None and done < 0 and proc.returncode != 0 and not any(r for r in results):
            raise RuntimeError(f"probe worker failed to start (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
        crashed = start + done + 1
        # only the signal is kept: the C++ exception text varies from run to run (the library reads garbage)
        sig = {-6: "SIGABRT", -11: "SIGSEGV", -7: "SIGBUS", -8: "SIGFPE"}.get(proc.returncode, "")
        results[crashed] = {"status": None, "crashed": True,
                            "error": f"process crashed (rc {proc.returncode} {sig})".replace(" )", ")")}
        start = crashed + 1
    return results, version


def classify(typ: str, res: dict) -> str:
    """accepted | rejected | ambiguous | not_supported | crashed | error"""
    if res is None:
        return "error"
    if res.get("crashed"):
        return "crashed"
    if res.get("retried_with_null") and res.get("status") == STATUS_SUCCESS:
        return "accepted"  # the plausible value crashed the process, NULL was accepted: the type check passed
    st, msg = res.get("status"), res.get("error", "")
    if st is None:
        return "error"
    if st in (STATUS_SUCCESS, STATUS_BAD_PARAM_DESCRIPTOR_TYPE):
        return "accepted"
    if st == STATUS_BAD_PARAM_ATTRIBUTE_TYPE:
        return "rejected"
    named = set(_NAMED_RE.findall(msg))
    if "attrType" in msg and named:
        # the message names the expected type(s); passing one of them cannot have failed the type check
        return "accepted" if typ in named else "rejected"
    if st == STATUS_NOT_SUPPORTED:
        return "not_supported"
    return "ambiguous"


def analyse(attr: str, owner: str, owner_how: str, type_names: list[str], sweep: dict[str, dict],
            counts: dict[str, dict]) -> dict:
    verdicts = {t: classify(t, sweep.get(t)) for t in type_names}
    named: list[str] = []
    for t in type_names:
        res = sweep.get(t) or {}
        msg = res.get("error", "")
        if verdicts[t] == "rejected" and "attrType" in msg:
            for n in _NAMED_RE.findall(msg):
                if n in type_names and n not in named:
                    named.append(n)
    # A Set that crashed the process with a type the other messages name as the expected one got past the type
    # check (it crashed on the value: e.g. a tensor passed where another descriptor kind is expected).
    crashed_past_check = [t for t in type_names if verdicts[t] == "crashed" and t in named]
    for t in crashed_past_check:
        verdicts[t] = "accepted"
    accepted = [t for t in type_names if verdicts[t] == "accepted"]
    out: dict = {"owner": owner, "owner_from": owner_how}
    no_check = len(accepted) == len(type_names)
    if no_check:
        out["no_type_check"] = True
        method = "accepts every type (no type check)"
        accepted_out: list[str] = []
    else:
        accepted_out = accepted
        if accepted and named:
            method = "sweep + error message"
        elif accepted:
            method = "sweep"
        elif named:
            method = "error message only (no type was accepted with the probe value)"
        else:
            kinds = sorted({v for v in verdicts.values()})
            method = f"no type accepted ({'/'.join(kinds)})"
    if all(v == "not_supported" for v in verdicts.values()):
        out["not_settable"] = True
        method = "NOT_SUPPORTED for every type"
    out["accepted"] = accepted_out
    out["named"] = named
    out["method"] = method
    # representative error text: the wrong-type one (CUDNN_TYPE_ATTRIB_NAME unless accepted)
    rep = next((t for t in ("CUDNN_TYPE_ATTRIB_NAME", "CUDNN_TYPE_HANDLE") if verdicts.get(t) != "accepted"), None)
    if rep and sweep.get(rep):
        out["error"] = sweep[rep].get("error", "")
        out["status"] = sweep[rep].get("status")
    kind_msgs = [_KIND_MSG_RE.search((sweep.get("CUDNN_TYPE_BACKEND_DESCRIPTOR") or {}).get("error", ""))]
    if kind_msgs[0]:
        out["kind_required"] = kind_msgs[0].group(1)
    crashed = [t for t in type_names if verdicts[t] == "crashed"] + crashed_past_check
    crashed += [t for t in type_names if (sweep.get(t) or {}).get("retried_with_null")]
    if crashed:
        out["crashed_types"] = crashed
        first = sweep.get(crashed[0]) or {}
        out["crash"] = (first.get("first_try") or first.get("error", ""))[-160:]
    if counts:
        out["count"] = count_verdict(counts)
        out["count_raw"] = {k: [v.get("status"), (v.get("error") or "")[:200]] for k, v in sorted(counts.items())}
    # the raw responses, grouped: [status, last error, [types that got it]] ("*" = all the other types)
    groups: dict[tuple, list[str]] = {}
    for t in type_names:
        r = sweep.get(t) or {}
        key = (r.get("status"), (r.get("error") or "")[:200] + (" (retried with NULL)" if r.get("retried_with_null")
                                                                  else ""))
        groups.setdefault(key, []).append(t)
    biggest = max(groups, key=lambda k: len(groups[k]))
    out["responses"] = [[st, msg, ["*"] if (st, msg) == biggest and len(groups) > 1 else ts]
                        for (st, msg), ts in groups.items()]  # "*": every type not listed in another response
    return out


def count_verdict(counts: dict[str, dict]) -> dict:
    def ok(k):
        r = counts.get(k) or {}
        return r.get("status") in (STATUS_SUCCESS, STATUS_BAD_PARAM_DESCRIPTOR_TYPE)

    def says_scalar(k):
        r = counts.get(k) or {}
        return r.get("status") not in (STATUS_SUCCESS, None) and bool(
            re.search(r"\b1 != elemCount\b|\belemCount != 1\b", r.get("error") or ""))

    if says_scalar("2"):
        return {"min": 1, "max": 1, "note": "2 elements rejected ('1 != elemCount'): a scalar"}
    if ok("2"):
        return {"min": 0 if ok("0") else 1, "max": None,
                "note": "2 elements accepted: an array" + (", 0 accepted" if ok("0") else "")
                        + ("; 9 accepted (no upper bound at Set)" if ok("9") else "")}
    return {"min": None, "max": None, "note": "undetermined"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--include", type=Path)
    ap.add_argument("--overrides", type=Path, default=HERE / "overrides.json")
    ap.add_argument("--out", type=Path, default=HERE / "probe_results.json")
    ap.add_argument("--jobs", type=int, default=max(1, min(8, os.cpu_count() or 1)))
    ap.add_argument("--only", nargs="*", help="probe only these attributes (results are merged into --out)")
    args = ap.parse_args(argv)
    if args.worker:
        return worker_main()

    import attribute_docs
    import generate
    import header_parser

    include = args.include or generate.find_include_dir()
    hs = header_parser.parse_headers(include)
    overrides = json.loads(args.overrides.read_text()) if args.overrides.is_file() else {}
    owners = attribute_docs.attribute_owners(hs, overrides)
    type_names = [m.name for m in hs.enums["cudnnBackendAttributeType_t"].members]
    type_c = attribute_docs.type_c_names(hs)
    tables = {
        "values": {m.name: m.value for e in hs.enums.values() for m in e.members},
        "type_first_value": {t: hs.enums[c].members[0].value for t, c in type_c.items() if c in hs.enums},
    }
    attrs = [m.name for m in hs.enums["cudnnBackendAttributeName_t"].members]
    if args.only:
        unknown = set(args.only) - set(attrs)
        if unknown:
            print(f"unknown attributes: {sorted(unknown)}", file=sys.stderr)
            return 2
        attrs = [a for a in attrs if a in args.only]

    t0 = time.time()
    # pass 1: the type sweep
    kinds = attribute_docs.documented_kinds(hs, overrides)
    sweep_jobs = [{"attr": a, "owner": owners[a][0], "type": t, "kinds": kinds.get(a)} for a in attrs
                  for t in type_names]
    sweep_res = _parallel(sweep_jobs, tables, args.jobs)
    sweeps: dict[str, dict[str, dict]] = {a: {} for a in attrs}
    for job, res in zip(sweep_jobs, sweep_res):
        sweeps[job["attr"]][job["type"]] = res
    # pass 1b: a type whose plausible value crashed the process is retried with all-zero bytes (NULL pointers)
    retry_jobs = [dict(job, value="null") for job, res in zip(sweep_jobs, sweep_res) if res and res.get("crashed")]
    for job, res in zip(retry_jobs, _parallel(retry_jobs, tables, args.jobs)):
        first = sweeps[job["attr"]][job["type"]]
        if res is not None:
            res = dict(res, retried_with_null=True, first_try=first.get("error", "")[-160:])
        sweeps[job["attr"]][job["type"]] = res
    # pass 2: counts, with the first accepted type
    count_jobs = []
    for a in attrs:
        acc = [t for t in type_names if classify(t, sweeps[a].get(t)) == "accepted"]
        if acc and len(acc) < len(type_names):
            for n in (0, 2, 9):
                count_jobs.append({"attr": a, "owner": owners[a][0], "type": acc[0], "count": n,
                                   "kinds": kinds.get(a)})
    count_res = _parallel(count_jobs, tables, args.jobs)
    counts: dict[str, dict[str, dict]] = {a: {} for a in attrs}
    for job, res in zip(count_jobs, count_res):
        counts[job["attr"]][str(job["count"])] = res

    version = _parallel.version  # type: ignore[attr-defined]
    results = {}
    for a in attrs:
        results[a] = analyse(a, owners[a][0], owners[a][1], type_names, sweeps[a], counts[a])
    old = {}
    if args.only and args.out.is_file():
        old = json.loads(args.out.read_text()).get("attributes", {})
    merged = dict(old)
    merged.update(results)
    ordered = {a: merged[a] for a in [m.name for m in hs.enums["cudnnBackendAttributeName_t"].members] if a in merged}
    doc = {
        "_about": "Written by bindings/probe_types.py: per backend attribute, the types cudnnBackendSetAttribute "
                  "accepts on a fresh descriptor of its owner kind (see the module docstring). Re-run on a new cuDNN.",
        "library_version": version,
        "header_version": hs.defines["CUDNN_VERSION"],
        "attributes": ordered,
    }
    args.out.write_text(dump_results(doc), encoding="utf-8")
    typed = sum(1 for r in ordered.values() if r["accepted"] or r["named"])
    print(f"probe_types.py: {len(results)} attributes probed in {time.time() - t0:.1f}s on cuDNN {version}; "
          f"{typed}/{len(ordered)} with a type; wrote {args.out}")
    return 0


def dump_results(doc: dict) -> str:
    """JSON with one line per attribute (diff-friendly, deterministic)."""
    head = {k: v for k, v in doc.items() if k != "attributes"}
    lines = ["{"]
    for k, v in head.items():
        lines.append(f"  {json.dumps(k)}: {json.dumps(v)},")
    lines.append('  "attributes": {')
    items = list(doc["attributes"].items())
    for i, (name, rec) in enumerate(items):
        lines.append(f"    {json.dumps(name)}: {json.dumps(rec)}" + ("," if i < len(items) - 1 else ""))
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _parallel(jobs: list[dict], tables: dict, n: int) -> list[dict | None]:
    if not jobs:
        return []
    n = max(1, min(n, len(jobs)))
    size = (len(jobs) + n - 1) // n
    chunks = [jobs[i:i + size] for i in range(0, len(jobs), size)]
    with ThreadPoolExecutor(len(chunks)) as ex:
        outs = list(ex.map(lambda c: run_jobs(c, tables), chunks))
    _parallel.version = next((v for _, v in outs if v), None)  # type: ignore[attr-defined]
    return [r for res, _ in outs for r in res]


if __name__ == "__main__":
    sys.exit(main())
