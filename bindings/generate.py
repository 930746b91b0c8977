#!/usr/bin/env python3
"""Generate ``cudnn_py/_generated/`` from the pinned cuDNN headers (``bindings/headers/<version>/``).

    python bindings/generate.py [--include DIR] [--out DIR] [--check] [--report]
    python bindings/generate.py --pin [--include DIR]    # copy new headers into bindings/headers/<version>/

The input headers are, first found: ``--include DIR``, ``$CUDNN_INCLUDE_DIR``, else the newest pinned set under
``bindings/headers/`` (whose ``SHA256SUMS`` is verified first: a pinned header that was edited stops generation).
The installed cuDNN wheel is not read (except by ``--pin``), so the output does not depend on the machine.

Layers for the backend attribute catalog (later layers win, and each attribute records where its type came from):

1. ``header``   -- the doc comments of ``cudnnBackendDescriptorType_t`` (parsed by ``attribute_docs``);
2. ``probe``    -- ``bindings/probe_results.json``, written by ``bindings/probe_types.py`` against the live library;
3. ``override`` -- ``bindings/overrides.json``, reviewed by hand, every entry with a reason.

The output is deterministic (header order / sorted, no timestamps): regenerating from the same headers with the same
probe results and overrides reproduces the committed files byte for byte. ``--check`` regenerates into a temporary
directory and exits 1 with a diff summary when anything differs.
"""
from __future__ import annotations

import argparse
import difflib
import hashlib
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import attribute_docs  # noqa: E402
import header_parser  # noqa: E402
from header_parser import HeaderSet, Param  # noqa: E402

DEFAULT_OUT = REPO / "cudnn_py" / "_generated"
PROBE_RESULTS = HERE / "probe_results.json"
OVERRIDES = HERE / "overrides.json"
REQUIREMENTS = HERE / "requirements.json"

ATTR_NAME_ENUM = "cudnnBackendAttributeName_t"
ATTR_TYPE_ENUM = "cudnnBackendAttributeType_t"
DESC_TYPE_ENUM = "cudnnBackendDescriptorType_t"
STATUS_ENUM = "cudnnStatus_t"


class GenerateError(Exception):
    """Generation cannot proceed; the message names the offending entry."""


# --------------------------------------------------------------------------------------------------------------------
# Locating the headers
# --------------------------------------------------------------------------------------------------------------------

PINNED_ROOT = HERE / "headers"  # bindings/headers/<MAJOR.MINOR.PATCH>/{cudnn*.h, SHA256SUMS}
SHA256SUMS = "SHA256SUMS"
_VERSION_DIR_RE = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")
_VERSION_DEFINE_RE = {k: re.compile(rf"^\s*#\s*define\s+CUDNN_{k}\s+(\d+)\s*$", re.M)
                      for k in ("MAJOR", "MINOR", "PATCHLEVEL")}


def pinned_versions(root: Path = PINNED_ROOT) -> list[Path]:
    """The pinned header sets under ``root`` (directories named MAJOR.MINOR.PATCH), oldest first."""
    if not root.is_dir():
        return []
    dirs = [d for d in root.iterdir() if d.is_dir() and _VERSION_DIR_RE.match(d.name)]
    return sorted(dirs, key=lambda d: tuple(int(x) for x in _VERSION_DIR_RE.match(d.name).groups()))


def is_pinned(include_dir: Path, root: Path = PINNED_ROOT) -> bool:
    return Path(include_dir).resolve().parent == root.resolve()


def header_version(include_dir: Path) -> str:
    """MAJOR.MINOR.PATCH from ``cudnn_version.h`` in ``include_dir``."""
    path = Path(include_dir) / "cudnn_version.h"
    if not path.is_file():
        raise GenerateError(f"{path}: missing")
    text = path.read_text(encoding="utf-8")
    parts = []
    for k, rx in _VERSION_DEFINE_RE.items():
        m = rx.search(text)
        if m is None:
            raise GenerateError(f"{path}: no #define CUDNN_{k}")
        parts.append(m.group(1))
    return ".".join(parts)


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_sha256sums(include_dir: Path) -> dict[str, str]:
    """{file name: sha256 hex} from ``include_dir/SHA256SUMS`` (``sha256sum`` format: "<hex>  <name>")."""
    path = Path(include_dir) / SHA256SUMS
    if not path.is_file():
        raise GenerateError(f"{path}: missing (every pinned header set lists its files' sha256 there)")
    sums: dict[str, str] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        m = re.match(r"^([0-9a-f]{64}) [ *]([^/\\]+)$", line)
        if m is None or m.group(2) in sums:
            raise GenerateError(f"{path}:{n}: not a '<sha256>  <file name>' line (or a repeated name): {line!r}")
        sums[m.group(2)] = m.group(1)
    return sums


def verify_pinned(include_dir: Path) -> None:
    """Check a pinned header set: the files are exactly those listed in SHA256SUMS, each with its listed sha256,
    the set holds every header the parser reads, and the directory is named after the headers' version."""
    include_dir = Path(include_dir)
    sums = read_sha256sums(include_dir)
    how = ("the pinned headers must stay byte-identical to the cuDNN release they were copied from: restore them "
           "(`git checkout -- bindings/headers`) or move the pin to a new release (bindings/headers/README.md)")
    present = {p.name for p in include_dir.iterdir() if p.name != SHA256SUMS}
    unlisted = sorted(present - set(sums))
    if unlisted:
        raise GenerateError(f"{include_dir}: files not listed in {SHA256SUMS}: {', '.join(unlisted)}; {how}")
    for name, want in sums.items():
        path = include_dir / name
        if not path.is_file():
            raise GenerateError(f"{path}: listed in {SHA256SUMS} but missing; {how}")
        got = sha256_of(path)
        if got != want:
            raise GenerateError(f"{path}: sha256 {got} does not match {SHA256SUMS} ({want}): the pinned header "
                                f"was modified; {how}")
    try:
        needed = header_parser.header_files(include_dir)
    except header_parser.HeaderParseError as exc:
        raise GenerateError(f"{include_dir}: incomplete pinned header set: {exc}") from exc
    missing = sorted(set(needed) - set(sums))
    if missing:
        raise GenerateError(f"{include_dir}: headers read by the parser but not in {SHA256SUMS}: {missing}")
    version = header_version(include_dir)
    if version != include_dir.name:
        raise GenerateError(f"{include_dir}: the headers are cuDNN {version}; the directory must be named {version}")


def pinned_include_dir(root: Path = PINNED_ROOT, verify: bool = True) -> Path:
    """The newest pinned header set, verified against its SHA256SUMS."""
    versions = pinned_versions(root)
    if not versions:
        raise GenerateError(f"no pinned cuDNN headers under {root} (expected {root}/<MAJOR.MINOR.PATCH>/): "
                            "pin a set with `python bindings/generate.py --pin`, or pass --include DIR")
    if verify:
        verify_pinned(versions[-1])
    return versions[-1]


def installed_include_dir() -> Path:
    """The include directory of the installed nvidia-cudnn-cu12/cu13 wheel (only ``--pin`` reads it)."""
    try:
        spec = importlib.util.find_spec("nvidia.cudnn")
    except ModuleNotFoundError:  # no nvidia.* namespace package installed
        spec = None
    if spec is not None:
        for loc in list(spec.submodule_search_locations or []):
            cand = Path(loc) / "include"
            if (cand / "cudnn.h").is_file():
                return cand
    raise GenerateError("cannot find the headers of an installed nvidia-cudnn-cu12/cu13 wheel: install one "
                        "or pass --include DIR")


def find_include_dir() -> Path:
    """$CUDNN_INCLUDE_DIR if set, else the newest pinned header set (verified)."""
    env = os.environ.get("CUDNN_INCLUDE_DIR")
    if env:
        return Path(env)
    return pinned_include_dir()


def resolve_include_dir(explicit: Path | None) -> Path:
    """``--include DIR`` if given, else :func:`find_include_dir`; a pinned set named explicitly is verified too."""
    include_dir = Path(explicit) if explicit else find_include_dir()
    if is_pinned(include_dir):
        verify_pinned(include_dir)
    return include_dir


def pin_headers(src: Path, root: Path = PINNED_ROOT) -> Path:
    """Copy the headers the parser reads from ``src`` into ``root/<version>/`` (byte for byte) + SHA256SUMS."""
    src = Path(src)
    try:
        names = header_parser.header_files(src)
    except header_parser.HeaderParseError as exc:
        raise GenerateError(f"{src}: {exc}") from exc
    dest = root / header_version(src)
    if dest.exists():
        raise GenerateError(f"{dest} already exists; remove it first to re-pin the same version")
    dest.mkdir(parents=True)
    for name in names:
        shutil.copyfile(src / name, dest / name)
    lines = [f"{sha256_of(dest / name)}  {name}\n" for name in sorted(names)]
    (dest / SHA256SUMS).write_text("".join(lines), encoding="utf-8", newline="\n")
    verify_pinned(dest)
    return dest


# --------------------------------------------------------------------------------------------------------------------
# C type -> ctypes vocabulary
# --------------------------------------------------------------------------------------------------------------------

_SCALARS = {
    "int": "c_int",
    "unsigned int": "c_uint",
    "uint32_t": "c_uint",  # 32-bit unsigned on every supported ABI
    "int32_t": "c_int32",
    "int64_t": "c_int64",
    "size_t": "c_size_t",
    # The vocabulary has no c_uint64; size_t is an unsigned 64-bit integer on every 64-bit ABI cuDNN supports
    # (LP64 Linux, LLP64 Windows), so it has exactly the layout of unsigned long long (the dropout seed).
    "unsigned long long": "c_size_t",
    "float": "c_float",
    "double": "c_double",
}
# Types from the CUDA headers (not parsed): opaque pointers and one enum.
_EXTERNAL_POINTERS = {"cudaStream_t", "cudaGraph_t"}
_EXTERNAL_ENUMS = {"libraryPropertyType"}


def ctype_of(p: Param, hs: HeaderSet, where: str) -> str:
    base, depth = p.base, p.pointer_depth
    if base == "void":
        if depth == 0:
            return "None"
        if depth == 1:
            return "c_void_p"
        if depth == 2:
            return "POINTER(c_void_p)"
    elif base == "char":
        if depth == 1:
            return "c_char_p"
        if depth == 2:
            return "POINTER(c_char_p)"
    else:
        td = hs.typedefs.get(base)
        if base in _SCALARS:
            scalar = _SCALARS[base]
        elif base in hs.enums or base in _EXTERNAL_ENUMS:
            scalar = "c_int"
        elif base in _EXTERNAL_POINTERS or (td is not None and td.kind in ("opaque_ptr", "void_ptr", "func_ptr")):
            scalar = "c_void_p"
        elif td is not None and td.kind in ("struct", "opaque_struct"):
            if depth == 1:
                return "c_void_p"  # struct pointers are passed as raw addresses
            raise GenerateError(f"{where}: struct {base} passed with pointer depth {depth} is not supported")
        else:
            raise GenerateError(f"{where}: unknown C type {p.c_decl!r}")
        if depth == 0:
            return scalar
        if depth == 1:
            return f"POINTER({scalar})"
    raise GenerateError(f"{where}: unsupported declaration {p.c_decl!r}")


# --------------------------------------------------------------------------------------------------------------------
# Emission helpers
# --------------------------------------------------------------------------------------------------------------------

def version_string(hs: HeaderSet) -> str:
    d = hs.defines
    return f"{d['CUDNN_MAJOR']}.{d['CUDNN_MINOR']}.{d['CUDNN_PATCHLEVEL']}"


def banner(hs: HeaderSet) -> str:
    return f"# Generated by bindings/generate.py from cuDNN {version_string(hs)} headers. Do not edit.\n"


def emit_init(hs: HeaderSet) -> str:
    return (
        banner(hs)
        + '"""Tables generated from the cuDNN headers (see bindings/README.md).\n\n'
        + "Modules: ``enums`` (ENUMS, DEFINES), ``status`` (STATUS_TEXT), ``functions`` (FUNCTIONS),\n"
        + "``attributes`` (AttributeSpec, ATTRIBUTES, UNTYPED, DESCRIPTOR_SINCE), ``names`` (a class of constants\n"
        + "per backend enum: ``attr``, ``desc``, ``atype``, ...), ``requirements`` (REQUIRED and the other tables of\n"
        + '``bindings/requirements.json``).\n"""\n\n'
        + f"HEADER_VERSION = {hs.defines['CUDNN_VERSION']!r}  # CUDNN_VERSION of the headers generated from\n"
        + f"HEADER_VERSION_STRING = {version_string(hs)!r}\n"
    )


def member_since(enum, member) -> int:
    return member.since if member.since is not None else enum.effective_since()


def member_deprecated(enum, member) -> bool:
    return member.deprecated or enum.deprecated


def emit_enums(hs: HeaderSet) -> str:
    out = [banner(hs)]
    out.append('"""C enums and integer ``#define`` constants of the cuDNN headers."""\n\n')
    out.append("# C enum typedef name -> tuple of (member C name, value, since, deprecated), member order as in the header.\n")
    out.append("# since: the member's @since (MAJOR*10000 + MINOR*100 + PATCH); a member without one inherits the enum's\n")
    out.append("# @since, else its first member's, else 90000. deprecated: CUDNN_DEPRECATED_ENUM / @deprecated on the member,\n")
    out.append("# or the whole enum is deprecated.\n")
    out.append("ENUMS = {\n")
    for ename, enum in hs.enums.items():
        out.append(f"    {ename!r}: (  # {enum.file}\n")
        for m in enum.members:
            out.append(f"        ({m.name!r}, {m.value!r}, {member_since(enum, m)!r}, {member_deprecated(enum, m)!r}),\n")
        out.append("    ),\n")
    out.append("}\n\n")
    out.append("# Object-like macros whose value is an integer constant expression (evaluated), in header order.\n")
    out.append("DEFINES = {\n")
    for name, value in hs.defines.items():
        out.append(f"    {name!r}: {value!r},\n")
    out.append("}\n")
    return "".join(out)


def status_text(doc: str) -> str:
    text = header_parser.one_line(doc)
    text = header_parser._SINCE_RE.sub("", text)
    text = text.replace("@deprecated", "Deprecated:")
    return " ".join(text.split())


def emit_status(hs: HeaderSet) -> str:
    enum = hs.enums[STATUS_ENUM]
    out = [banner(hs)]
    out.append('"""Explanations of the cudnnStatus_t codes, from the header\'s ``/**< ... */`` comments."""\n\n')
    out.append("# cudnnStatus_t member name -> explanation text (\"\" when the header has none).\n")
    out.append("STATUS_TEXT = {\n")
    for m in enum.members:
        out.append(f"    {m.name!r}: {status_text(m.doc)!r},\n")
    out.append("}\n")
    return "".join(out)


# The headers whose structs are passed by pointer to bound functions (the C-API families outside the graph API):
# their layouts are emitted as STRUCTS, field by field (other headers' structs are not passed to anything bound).
STRUCT_HEADERS = ("cudnn_subquadratic_ops.h", "cudnn_gnn_ops.h")


def header_since(hs: HeaderSet, overrides: dict) -> dict[str, int | None]:
    """The @since a function of each header inherits: its @file @since, else 90000; overrides.json "header_since"
    replaces it (null: unknown - the header says nothing and the function is gated on the symbol alone)."""
    out: dict[str, int | None] = {f: (hs.file_since.get(f) or 90000) for f in hs.files}
    for name, entry in overrides.get("header_since", {}).items():
        if name not in out:
            raise GenerateError(f"overrides.json header_since names {name!r}, which no parsed header is")
        if not isinstance(entry, dict) or not entry.get("reason") or "since" not in entry:
            raise GenerateError(f"overrides.json header_since {name!r} needs a since (an int or null) and a reason")
        if hs.file_since.get(name) is not None:
            raise GenerateError(f"overrides.json header_since {name!r}: the header now has an @file @since "
                                f"({hs.file_since[name]}): remove the stale entry")
        out[name] = entry["since"]
    return out


def _field_ctype(type_text: str, field: str, hs: HeaderSet, where: str) -> str:
    words = type_text.replace("*", " * ").split()
    depth = words.count("*")
    base = [w for w in words if w not in ("*", "const", "struct", "enum", "volatile")]
    if len(base) != 1 or "[" in type_text:
        raise GenerateError(f"{where}: struct field {field!r} of type {type_text!r} is not supported")
    return ctype_of(Param(field, base[0], depth, "const" in words, type_text), hs, where)


def emit_structs(hs: HeaderSet) -> list[str]:
    out = ["\n# C struct typedef name -> (header file, ((field name, ctype), ...)) in declaration order, for the "
           "structs\n# of " + ", ".join(STRUCT_HEADERS) + " (same vocabulary; natural C alignment: "
           "ctypes.Structure).\n",
           "STRUCTS = {\n"]
    for name, td in hs.typedefs.items():
        if td.kind != "struct" or td.file not in STRUCT_HEADERS:
            continue
        fields = tuple((f, _field_ctype(t, f, hs, f"{td.file}:{td.line} {name}")) for t, f in td.fields)
        out.append(f"    {name!r}: ({td.file!r}, {fields!r}),\n")
    out.append("}\n")
    return out


def emit_functions(hs: HeaderSet, overrides: dict | None = None) -> str:
    inherited = header_since(hs, overrides or {})
    out = [banner(hs)]
    out.append('"""ctypes signatures of every function declared in the cuDNN headers."""\n\n')
    out.append("# C function name -> (restype, ((arg name, ctype), ...), header file, since, deprecated)\n")
    out.append('# ctype vocabulary: "None" (void return), "c_int", "c_uint", "c_int32", "c_int64", "c_size_t", "c_float",\n')
    out.append('# "c_double", "c_void_p", "c_char_p", and "POINTER(x)" of those. Enums -> "c_int"; opaque handles, descriptors,\n')
    out.append('# streams, graphs, callbacks and struct pointers -> "c_void_p"; `char *` -> "c_char_p"; `T *` -> "POINTER(T)".\n')
    out.append('# uint32_t -> "c_uint"; `unsigned long long` (dropout seed) -> "c_size_t" (unsigned 64-bit on all 64-bit ABIs).\n')
    out.append("# since: the function's @since, else its header's @file @since (bindings/overrides.json header_since: None\n")
    out.append("# where the header gives none and its version is unknown), else 90000.\n")
    out.append("FUNCTIONS = {\n")
    for name, fn in hs.functions.items():
        where = f"{fn.file}:{fn.line} {name}"
        restype = ctype_of(fn.ret, hs, where + " (return type)")
        args = tuple((p.name, ctype_of(p, hs, f"{where} ({p.name})")) for p in fn.params)
        since = fn.since if fn.since is not None else inherited[fn.file]
        out.append(f"    {name!r}: ({restype!r}, {args!r}, {fn.file!r}, {since!r}, {fn.deprecated!r}),\n")
    out.append("}\n")
    out += emit_structs(hs)
    return "".join(out)


# --------------------------------------------------------------------------------------------------------------------
# Attribute catalog
# --------------------------------------------------------------------------------------------------------------------

def load_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    return json.loads(path.read_text(encoding="utf-8"))


def emit_attributes(hs: HeaderSet, catalog: attribute_docs.Catalog) -> str:
    out = [banner(hs)]
    out.append('"""Backend attribute catalog: for each cudnnBackendAttributeName_t member, its owner descriptor and the\n')
    out.append("types/counts cudnnBackendSetAttribute accepts. Layers: header doc comments -> live probe\n")
    out.append('(bindings/probe_results.json) -> reviewed overrides (bindings/overrides.json); ``source`` says which gave the type."""\n\n')
    out.append("from typing import NamedTuple, Optional, Tuple\n\n\n")
    out.append("class AttributeSpec(NamedTuple):\n")
    out.append("    name: str  # \"CUDNN_ATTR_TENSOR_DIMENSIONS\"\n")
    out.append("    value: int  # enum value\n")
    out.append("    owner: str  # \"CUDNN_BACKEND_TENSOR_DESCRIPTOR\"\n")
    out.append("    types: Tuple[str, ...]  # accepted CUDNN_TYPE_* names for Set (first = preferred)\n")
    out.append("    min_count: int  # element count range for Set\n")
    out.append("    max_count: Optional[int]  # None = unbounded\n")
    out.append("    element_kinds: Tuple[str, ...]  # for CUDNN_TYPE_BACKEND_DESCRIPTOR: accepted descriptor kinds, else ()\n")
    out.append("    get_type: Optional[str]  # type Get needs when it differs from types[0], else None\n")
    out.append("    readable: bool  # False where Get is known NOT_SUPPORTED\n")
    out.append("    settable: bool  # False for read-only / get-only attributes\n")
    out.append("    since: int  # e.g. 90000, 92300\n")
    out.append("    deprecated: bool\n")
    out.append("    source: str  # \"header\" | \"probe\" | \"override\" (where the type came from)\n\n\n")
    out.append(f"# {len(catalog.attributes)} of {catalog.total} cudnnBackendAttributeName_t members typed; sources: "
               + ", ".join(f"{k} {v}" for k, v in sorted(catalog.source_counts().items())) + "\n")
    out.append("ATTRIBUTES = {\n")
    for a in catalog.attributes.values():
        out.append(f"    {a.name!r}: AttributeSpec({a.name!r}, {a.value!r}, {a.owner!r}, {tuple(a.types)!r}, "
                   f"{a.min_count!r}, {a.max_count!r}, {tuple(a.element_kinds)!r}, {a.get_type!r}, {a.readable!r}, "
                   f"{a.settable!r}, {a.since!r}, {a.deprecated!r}, {a.source!r}),\n")
    out.append("}\n\n")
    out.append("# Attributes without a type, each with the reason.\n")
    out.append("UNTYPED = {\n")
    for name, reason in catalog.untyped.items():
        out.append(f"    {name!r}: {reason!r},\n")
    out.append("}\n\n")
    out.append("# CUDNN_TYPE_* -> the C typedef named by its header comment (\"cudnnDataType_t value.\"); the types whose comment\n")
    out.append("# names none (BOOLEAN, INT64, FLOAT, DOUBLE, VOID_PTR, INT32, CHAR) are absent.\n")
    out.append("TYPE_C_NAMES = {\n")
    for t, c in attribute_docs.type_c_names(hs).items():
        if c:
            out.append(f"    {t!r}: {c!r},\n")
    out.append("}\n\n")
    out.append("# cudnnBackendDescriptorType_t member -> @since\n")
    out.append("DESCRIPTOR_SINCE = {\n")
    enum = hs.enums[DESC_TYPE_ENUM]
    for m in enum.members:
        out.append(f"    {m.name!r}: {member_since(enum, m)!r},\n")
    out.append("}\n")
    return "".join(out)


# --------------------------------------------------------------------------------------------------------------------
# Names: one class of constants per backend enum (cudnn_py/_generated/names.py)
# --------------------------------------------------------------------------------------------------------------------

NAMES_HEADER = "cudnn_graph.h"  # the backend API's enums; the legacy ones (cudnn_ops.h, ...) are not cudnn_py's
# short names for the enums hand-written code names most (each also under its class name)
NAME_ALIASES = {ATTR_NAME_ENUM: "attr", DESC_TYPE_ENUM: "desc", ATTR_TYPE_ENUM: "atype"}
_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

NAMES_DOC = '''"""Every member of the backend enums (``cudnn_graph.h``) as a constant, so that the type checker checks the names.

Hand-written code names attributes, descriptor kinds, attribute types and enum values through these classes instead
of ``"CUDNN_*"`` string literals::

    from .._generated.names import atype, attr, desc

    d = Descriptor(desc.MATMUL_DESCRIPTOR)                     # "CUDNN_BACKEND_MATMUL_DESCRIPTOR"
    d.set(attr.MATMUL_PADDING_VALUE, -inf, type=atype.DOUBLE)  # "CUDNN_ATTR_MATMUL_PADDING_VALUE", "CUDNN_TYPE_DOUBLE"

* one class per C enum of ``cudnn_graph.h``, named after its typedef without ``cudnn``, ``Backend`` and ``_t``
  (``cudnnBackendAttributeName_t`` -> ``AttributeName``, ``cudnnPointwiseMode_t`` -> ``PointwiseMode``); the three
  that code names most have short aliases: ``attr`` (AttributeName), ``desc`` (DescriptorType), ``atype``
  (AttributeType);
* a member's constant is its C name without the prefix all the enum's members share (up to an underscore:
  ``CUDNN_ATTR_``, ``CUDNN_BACKEND_``, ``CUDNN_POINTWISE_``; ``CUDNN_HEUR_`` for ``cudnnBackendHeurMode_t``, whose
  ``CUDNN_HEUR_MODES_COUNT`` shares no longer one: ``HeurMode.MODE_A``; a one-member enum drops ``CUDNN_`` only);
  the class's docstring names its prefix;
* the value is the C name itself, the very string the code wrote before: descriptors, traces, error messages and
  caches stay byte for byte the same, and every API taking a name still takes the string;
* each constant is ``Final`` in ``names.pyi`` (what mypy reads; this module builds the same classes at run time
  from one string per enum, the cheaper import), so mypy infers its ``Literal`` type and rejects a misspelt member
  (``"type[AttributeName]" has no attribute ...``); ``tests/test_names.py`` checks that, and that no hand-written
  module outside its shrinking list still spells a ``"CUDNN_*"`` literal;
* a read is one global and one class-attribute lookup; code on a hot path binds the string once at import
  (``_DIMS = attr.TENSOR_DIMENSIONS``). ``import cudnn_py`` does not import this module: the raw layer (with
  ``dtypes``), the lowering, planning and facade modules do, when first used.
"""
'''


def enum_class_name(ename: str) -> str:
    name = ename[len("cudnn"):] if ename.startswith("cudnn") else ename
    name = name[len("Backend"):] if name.startswith("Backend") else name
    return name[:-2] if name.endswith("_t") else name


def member_prefix(names: list[str]) -> str:
    """The longest prefix ending in '_' that all ``names`` share and whose removal leaves identifiers."""
    if len(names) == 1:
        return "CUDNN_"
    common = os.path.commonprefix(names)
    cut = common.rfind("_") + 1
    while cut > 0:
        if all(len(n) > cut and _IDENT_RE.match(n[cut:]) for n in names):
            return common[:cut]
        cut = common.rfind("_", 0, cut - 1) + 1
    return ""


def _names_classes(hs: HeaderSet) -> list[tuple[str, str, str, list[str]]]:
    """(class name, C enum name, prefix, member short names) per enum of ``NAMES_HEADER``, in header order."""
    out: list[tuple[str, str, str, list[str]]] = []
    for ename, enum in hs.enums.items():
        if enum.file != NAMES_HEADER:
            continue
        cname = enum_class_name(ename)
        if cname in {c for c, *_ in out} or not _IDENT_RE.match(cname):
            raise GenerateError(f"names: enum {ename} gives the class name {cname!r}, taken or not an identifier")
        prefix = member_prefix([m.name for m in enum.members])
        shorts: list[str] = []
        for m in enum.members:
            if m.name[len(prefix):] not in shorts:
                shorts.append(m.name[len(prefix):])
        out.append((cname, ename, prefix, shorts))
    return out


def emit_names(hs: HeaderSet) -> str:
    """The run-time module: each class built from its prefix and its members' short names (cheaper to import than
    a class body per member: ``benchmarks/import_time.py``); ``names.pyi`` is what the type checker reads."""
    out = [banner(hs), NAMES_DOC, "\nimport sys\n\n\n"]
    out.append("def _enum(name: str, prefix: str, members: str) -> type:\n")
    out.append("    return type(name, (), {m: sys.intern(prefix + m) for m in members.split()})\n\n\n")
    classes = _names_classes(hs)  # the classes, then BY_ENUM over the same list
    for cname, _ename, prefix, shorts in classes:
        out.append(f"{cname} = _enum({cname!r}, {prefix!r}, {' '.join(shorts)!r})\n")
    out.append("\n")
    for ename, alias in NAME_ALIASES.items():
        out.append(f"{alias} = {enum_class_name(ename)}\n")
    out.append("\n# C enum typedef name -> its class here\n")
    out.append("BY_ENUM = {\n")
    for cname, ename, _prefix, _shorts in classes:
        out.append(f"    {ename!r}: {cname},\n")
    out.append("}\n")
    return "".join(out)


def emit_names_stub(hs: HeaderSet) -> str:
    """``names.pyi``: the same classes as class bodies of ``Final`` constants (mypy infers each one's Literal)."""
    out = [banner(hs), '"""The types of ``names.py`` (see its docstring): one class per enum, a ``Final`` per member."""\n\n']
    out.append("from typing import Final\n")
    for cname, ename, prefix, shorts in _names_classes(hs):
        out.append(f"\n\nclass {cname}:\n")
        out.append(f'    """{ename}: its members without {prefix!r}."""\n\n')
        for short in shorts:
            out.append(f"    {short}: Final = {prefix + short!r}\n")
    out.append("\n\n")
    for ename, alias in NAME_ALIASES.items():
        out.append(f"{alias} = {enum_class_name(ename)}\n")
    out.append("\nBY_ENUM: dict[str, type]\n")
    return "".join(out)


# --------------------------------------------------------------------------------------------------------------------
# Requirements (cudnn_py/_generated/requirements.py from bindings/requirements.json)
# --------------------------------------------------------------------------------------------------------------------

REQUIREMENTS_DOC = '''"""What a descriptor needs before ``finalize()``, and which reads cuDNN cannot answer: the tables of
``bindings/requirements.json`` (reviewed by hand, each entry with its source), every name checked against the headers
and the attribute catalog at generation. ``cudnn_py.backend.requirements`` re-exports them with the raw-layer errata.

A :class:`Requirement` is met when at least one of its attributes was set through the ``Descriptor`` object; one
with ``when`` only applies once that attribute is set.
"""
'''


def _comment_lines(text: str | None, indent: str) -> list[str]:
    if not text:
        return []
    return [f"{indent}# {line}\n" for line in textwrap.wrap(text, 116 - len(indent))]


def emit_requirements(hs: HeaderSet, catalog: attribute_docs.Catalog, data: dict) -> str:
    """``cudnn_py/_generated/requirements.py`` from ``bindings/requirements.json``: every attribute a member of
    cudnnBackendAttributeName_t (and, in ``required``, a settable attribute of its kind), every kind and graph mode
    a member of its enum, every entry with its source."""
    def members(ename: str) -> set[str]:
        return {m.name for m in hs.enums[ename].members}

    attrs, kinds = members(ATTR_NAME_ENUM), members(DESC_TYPE_ENUM)
    modes = members("cudnnBackendOperationGraphMode_t")
    where = "requirements.json"

    def attribute(name: str, ctx: str, kind: str | None = None) -> str:
        if name not in attrs:
            raise GenerateError(f"{where} {ctx}: {name} is not a member of {ATTR_NAME_ENUM}")
        spec = catalog.attributes.get(name)
        if kind is not None and spec is not None and (spec.owner != kind or not spec.settable):
            raise GenerateError(f"{where} {ctx}: {name} is not a settable attribute of {kind} (owner {spec.owner})")
        return name

    def kind_of(name: str, ctx: str) -> str:
        if name not in kinds:
            raise GenerateError(f"{where} {ctx}: {name} is not a member of {DESC_TYPE_ENUM}")
        return name

    def source(entry: dict, key: str, ctx: str) -> str:
        text = entry.get(key)
        if not isinstance(text, str) or not text:
            raise GenerateError(f"{where} {ctx}: missing {key!r}")
        return text

    def table(key: str) -> dict:
        t = data.get(key)
        if not isinstance(t, dict):
            raise GenerateError(f"{where}: missing table {key!r}")
        return t

    out = [banner(hs), REQUIREMENTS_DOC, "\nfrom typing import NamedTuple, Optional, Tuple\n\n\n"]
    out.append("class Requirement(NamedTuple):\n")
    out.append("    any_of: Tuple[str, ...]  # at least one of these attributes must be set\n")
    out.append("    source: str\n")
    out.append("    when: Optional[str] = None  # the requirement applies only when this attribute is set\n\n\n")
    out.append("# descriptor kind -> what finalize() needs\n")
    out.append("REQUIRED = {\n")
    allowed = {"why", "header", "note", "any_of"}
    for kind, entry in table("required").items():
        ctx = f"required[{kind}]"
        kind_of(kind, ctx)
        if set(entry) - allowed or not (entry.get("header") or entry.get("any_of")):
            raise GenerateError(f"{where} {ctx}: fields {sorted(entry)} (allowed: {sorted(allowed)}; header or "
                                "any_of needed)")
        out.extend(_comment_lines(entry.get("why"), "    "))
        out.append(f"    {kind!r}: (\n")
        short = kind[len("CUDNN_BACKEND_"):-len("_DESCRIPTOR")]
        src = f"header: {short} doc, 'Required attribute.'" + (f"; {entry['note']}" if entry.get("note") else "")
        for a in entry.get("header", ()):
            out.append(f"        Requirement(({attribute(a, ctx, kind)!r},), {src!r}),\n")
        for req in entry.get("any_of", ()):
            names = tuple(attribute(a, ctx, kind) for a in req.get("attributes", ()))
            if not names or set(req) - {"attributes", "source", "when"}:
                raise GenerateError(f"{where} {ctx}: an any_of entry needs attributes and a source: {req}")
            when = attribute(req["when"], ctx, kind) if req.get("when") else None
            out.append(f"        Requirement({names!r}, {source(req, 'source', ctx)!r}, {when!r}),\n")
        out.append("    ),\n")
    out.append("}\n\n")

    def by_name(key: str, const: str, line) -> None:
        """Table ``key`` as the dict ``const``: its ``_comment`` above it, then ``line(name, value, ctx)`` per entry."""
        t = table(key)
        out.extend(_comment_lines(t.get("_comment"), ""))
        out.append(f"{const} = {{\n")
        for name, value in t.items():
            if name != "_comment":
                out.append(line(name, value, f"{key}[{name}]"))
        out.append("}\n\n")

    def sourced(check):
        """The line of an entry whose value is its source, its name checked by ``check``."""
        def line(name: str, text: object, ctx: str) -> str:
            if not isinstance(text, str) or not text:
                raise GenerateError(f"{where} {ctx}: the value must be its source")
            return f"    {check(name, ctx)!r}: {text!r},\n"
        return line

    def graph_mode(mode: str, entry: dict, ctx: str) -> str:
        if mode not in modes:
            raise GenerateError(f"{where} {ctx}: not a member of cudnnBackendOperationGraphMode_t")
        ops = tuple(kind_of(k, ctx) for k in entry.get("kinds", ()))
        if not ops:
            raise GenerateError(f"{where} {ctx}: no kinds")
        return f"    {mode!r}: ({ops!r}, {source(entry, 'source', ctx)!r}),\n"

    def nonfinite(a: str, entry: dict, ctx: str) -> str:
        if entry.get("allowed") not in ("inf", "inf nan"):
            raise GenerateError(f"{where} {ctx}: 'allowed' must be 'inf' or 'inf nan'")
        return f"    {attribute(a, ctx)!r}: {entry['allowed']!r},  # {source(entry, 'source', ctx)}\n"

    by_name("backend_filled_kinds", "BACKEND_FILLED_KINDS", sourced(kind_of))
    by_name("graph_mode_needs", "GRAPH_MODE_NEEDS", graph_mode)
    by_name("get_crashes_when_unset", "GET_CRASHES_WHEN_UNSET", sourced(attribute))
    by_name("get_crashes_always", "GET_CRASHES_ALWAYS", sourced(attribute))

    t = table("filled_from_json")
    out.extend(_comment_lines(t.get("_comment"), ""))
    out.append("FILLED_FROM_JSON = frozenset({\n")
    for a in t.get("attributes", ()):
        out.append(f"    {attribute(a, 'filled_from_json')!r},\n")
    out.append("})\n\n")

    by_name("nonfinite_allowed", "NONFINITE_ALLOWED", nonfinite)
    by_name("host_pointer_attributes", "HOST_POINTER_ATTRIBUTES", sourced(attribute))
    return "".join(out).rstrip("\n") + "\n"


# --------------------------------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------------------------------

def render(include_dir: Path, probe_path: Path = PROBE_RESULTS, overrides_path: Path = OVERRIDES,
           requirements_path: Path = REQUIREMENTS) -> dict[str, str]:
    """Return {file name: content} for everything under cudnn_py/_generated/."""
    hs = header_parser.parse_headers(include_dir)
    for required in (ATTR_NAME_ENUM, ATTR_TYPE_ENUM, DESC_TYPE_ENUM, STATUS_ENUM):
        if required not in hs.enums:
            raise GenerateError(f"enum {required} not found in {include_dir}")
    catalog = attribute_docs.build_catalog(hs, load_json(probe_path), load_json(overrides_path))
    return {
        "__init__.py": emit_init(hs),
        "enums.py": emit_enums(hs),
        "status.py": emit_status(hs),
        "functions.py": emit_functions(hs, load_json(overrides_path)),
        "attributes.py": emit_attributes(hs, catalog),
        "names.py": emit_names(hs),
        "names.pyi": emit_names_stub(hs),
        "requirements.py": emit_requirements(hs, catalog, load_json(requirements_path)),
    }


def write(files: dict[str, str], out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (out_dir / name).write_text(content, encoding="utf-8", newline="\n")


def check(files: dict[str, str], out_dir: Path) -> list[str]:
    """Return a list of human-readable differences between ``files`` and what is in ``out_dir``."""
    problems: list[str] = []
    for name, content in files.items():
        path = out_dir / name
        if not path.is_file():
            problems.append(f"{path}: missing")
            continue
        raw = path.read_bytes()
        if raw != content.encode("utf-8"):  # bytes, so that line-ending or encoding changes count too
            old = raw.decode("utf-8", errors="replace")
            diff = list(difflib.unified_diff(old.splitlines(), content.splitlines(), f"committed/{name}",
                                             f"regenerated/{name}", lineterm="", n=0))
            changed = sum(1 for ln in diff if ln[:1] in "+-" and not ln.startswith(("+++", "---")))
            if changed:
                problems.append(f"{path}: {changed} changed lines\n" + "\n".join(diff[:40]))
            else:
                problems.append(f"{path}: same lines, different bytes (line endings or encoding)")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--include", type=Path, help="cuDNN include dir (default: $CUDNN_INCLUDE_DIR, else the newest "
                                                  f"pinned set under {PINNED_ROOT}, SHA256SUMS verified)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output dir (default {DEFAULT_OUT})")
    ap.add_argument("--probe-results", type=Path, default=PROBE_RESULTS)
    ap.add_argument("--overrides", type=Path, default=OVERRIDES)
    ap.add_argument("--requirements", type=Path, default=REQUIREMENTS)
    ap.add_argument("--check", action="store_true", help="regenerate into a temp dir and compare with --out")
    ap.add_argument("--report", action="store_true", help="print the attribute coverage report")
    ap.add_argument("--pin", action="store_true",
                    help=f"copy the headers the generator reads from --include DIR (default: the installed "
                         f"nvidia-cudnn wheel) into {PINNED_ROOT}/<version>/ with a SHA256SUMS, and exit")
    args = ap.parse_args(argv)
    try:
        if args.pin:
            dest = pin_headers(args.include or installed_include_dir())
            print(f"generate.py: pinned {len(read_sha256sums(dest))} headers in {dest}; next: "
                  "python bindings/generate.py --report (see bindings/headers/README.md)")
            return 0
        include_dir = resolve_include_dir(args.include)
        files = render(include_dir, args.probe_results, args.overrides, args.requirements)
    except (GenerateError, header_parser.HeaderParseError, attribute_docs.SchemaError) as exc:
        print(f"generate.py: error: {exc}", file=sys.stderr)
        return 2
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            write(files, Path(tmp))
            regenerated = {n: (Path(tmp) / n).read_text(encoding="utf-8") for n in files}
        problems = check(regenerated, args.out)
        if problems:
            print(f"generate.py --check: {len(problems)} file(s) differ from {args.out}:", file=sys.stderr)
            for p in problems:
                print(p, file=sys.stderr)
            return 1
        print(f"generate.py --check: {len(files)} files up to date in {args.out}")
        return 0
    write(files, args.out)
    print(f"generate.py: wrote {len(files)} files to {args.out} from {include_dir}")
    if args.report:
        hs = header_parser.parse_headers(include_dir)
        cat = attribute_docs.build_catalog(hs, load_json(args.probe_results), load_json(args.overrides))
        print(cat.report())
    return 0


if __name__ == "__main__":
    sys.exit(main())
