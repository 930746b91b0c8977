"""cuDNN names in hand-written code are checked: by mypy through the generated constants, by this test elsewhere.

Hand-written modules name attributes, descriptor kinds, attribute types and enum values through
``cudnn_py._generated.names`` (``attr.TENSOR_DIMENSIONS``, ``desc.MATMUL_DESCRIPTOR``, ``PointwiseMode.ADD``), whose
values are the C names themselves; mypy rejects a misspelt constant. This test

1. keeps ``"CUDNN_*"`` string literals out of every hand-written module but those of ``NOT_CONVERTED`` (a list that
   only shrinks: a listed module with no such literal left fails too, so that it is taken off);
2. checks every ``"CUDNN_*"`` literal still written (in those modules, and anywhere as a prefix) against the headers:
   a member of a cuDNN enum, a prefix that members start with (names built at run time from a classic enum), or
   one of cudnn_py's own ``CUDNN_PY_*`` environment variables; where the call says which kind of name it is
   (``Descriptor("...")``, ``.set("...")`` / ``.get("...")``, ``type="..."``) the member must be of that enum;
3. runs mypy on a snippet with a misspelt constant (where mypy is installed), and checks the generated classes.
"""
from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cudnn_py._generated import names
from cudnn_py._generated.enums import ENUMS

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "cudnn_py"

# Modules still spelling cuDNN names as strings, left to the steps restructuring them (issue #30, item 5): take a
# module off once converted. Paths relative to cudnn_py/.
NOT_CONVERTED: set[str] = set()  # empty: every module converted (issue #30 item 5)

_LITERAL = re.compile(r"""^(['"])(CUDNN_[A-Za-z0-9_]*)\1$""")
MEMBERS = {m[0]: enum for enum, members in ENUMS.items() for m in members}
_PREFIXES = {name[:i + 1] for name in MEMBERS for i, ch in enumerate(name) if ch == "_"}
# call shapes that say which enum a literal belongs to
KIND_OF_CALL = {"Descriptor": "cudnnBackendDescriptorType_t", "set": "cudnnBackendAttributeName_t",
                "get": "cudnnBackendAttributeName_t"}
KIND_OF_KEYWORD = {"type": "cudnnBackendAttributeType_t"}


def _hand_written() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "_generated" not in p.relative_to(PACKAGE).parts)


def _literals(path: Path) -> list[tuple[int, str]]:
    """(line, name) of every string literal that is a whole ``CUDNN_*`` name, those inside an f-string's
    expressions too: read from the AST, so that every Python finds the same (3.12 tokenizes f-string contents,
    3.11 does not: a literal there once passed here and failed on the device)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    text_parts = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in text_parts:
            m = _LITERAL.match(repr(node.value))
            if m:
                out.append((node.lineno, m.group(2)))
    return sorted(out)


# the official frontend's own variables, which cudnn_py reads too (cudnn_py/frontend_log.py)
FRONTEND_ENV = frozenset({"CUDNN_FRONTEND_LOG_INFO", "CUDNN_FRONTEND_LOG_FILE"})


def classify(name: str) -> str:
    """'member', 'prefix' (members start with it, with or without its last underscore: names built at run time,
    labels such as an error's "CUDNN_BACKEND_EXECUTION_PLAN"), 'env' (cudnn_py's CUDNN_PY_* variables) or
    'unknown'."""
    if name in MEMBERS:
        return "member"
    if name == "CUDNN_PY" or name.startswith("CUDNN_PY_") or name in FRONTEND_ENV:
        return "env"
    if name in _PREFIXES or name + "_" in _PREFIXES:
        return "prefix"
    return "unknown"


def test_no_cudnn_literals_outside_the_shrinking_list():
    found: dict[str, list[str]] = {}
    for path in _hand_written():
        rel = path.relative_to(PACKAGE).as_posix()
        members = [f"{rel}:{line}: {name!r}" for line, name in _literals(path) if classify(name) == "member"]
        if members:
            found[rel] = members
    outside = [m for rel, ms in found.items() if rel not in NOT_CONVERTED for m in ms]
    assert not outside, ("write these through cudnn_py._generated.names (attr / desc / atype / PointwiseMode ...), "
                         "not as strings:\n" + "\n".join(outside))
    done = sorted(NOT_CONVERTED - set(found))
    assert not done, f"no cuDNN name literal left in {done}: take them off NOT_CONVERTED"


def test_every_cudnn_literal_left_is_a_real_name():
    unknown = [f"{p.relative_to(PACKAGE)}:{line}: {name!r}" for p in _hand_written() for line, name in _literals(p)
               if classify(name) == "unknown"]
    assert not unknown, "not a cuDNN enum member, a prefix of members, nor a CUDNN_PY_ variable:\n" + "\n".join(unknown)


def _call_name(node: ast.Call) -> str | None:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _str(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def kind_mismatches(source: str, where: str = "<snippet>") -> list[str]:
    """Literal names given where a call takes one enum's member, that are not members of it."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        checks = []
        enum = KIND_OF_CALL.get(_call_name(node) or "")
        if enum and node.args and (_str(node.args[0]) or "").startswith("CUDNN_"):
            checks.append((_str(node.args[0]), enum))
        for kw in node.keywords:
            if kw.arg in KIND_OF_KEYWORD and (_str(kw.value) or "").startswith("CUDNN_"):
                checks.append((_str(kw.value), KIND_OF_KEYWORD[kw.arg]))
        bad += [f"{where}:{node.lineno}: {name!r} is not a member of {enum}" for name, enum in checks
                if MEMBERS.get(name) != enum and classify(name or "") != "env"]
    return bad


def test_literals_left_are_of_the_kind_their_call_takes():
    bad = [m for p in _hand_written() for m in kind_mismatches(p.read_text(encoding="utf-8"),
                                                                 str(p.relative_to(PACKAGE)))]
    assert not bad, "\n".join(bad)


def test_the_structural_checks_catch_a_misspelling():
    assert classify("CUDNN_ATTR_TENSOR_DIMENSIONS") == "member"
    assert classify("CUDNN_ATTR_TENSOR_DIMENSONS") == "unknown"
    assert classify("CUDNN_ATTR_OPERATION_NORM_FWD_") == "prefix"
    assert classify("CUDNN_PY_CACHE") == "env"
    assert classify("CUDNN_FRONTEND_LOG_FILE") == "env" and classify("CUDNN_FRONTEND_LOG_FILES") == "unknown"
    assert kind_mismatches('d = Descriptor("CUDNN_ATTR_TENSOR_DIMENSIONS")\n'
                           'd.set("CUDNN_BACKEND_TENSOR_DESCRIPTOR", 1, type="CUDNN_DATA_FLOAT")\n'
                           'd.get("CUDNN_ATTR_TENSOR_STRIDES", type="CUDNN_TYPE_INT64")\n') == [
        "<snippet>:1: 'CUDNN_ATTR_TENSOR_DIMENSIONS' is not a member of cudnnBackendDescriptorType_t",
        "<snippet>:2: 'CUDNN_BACKEND_TENSOR_DESCRIPTOR' is not a member of cudnnBackendAttributeName_t",
        "<snippet>:2: 'CUDNN_DATA_FLOAT' is not a member of cudnnBackendAttributeType_t",
    ]


def test_the_generated_classes_hold_every_backend_member_under_its_c_name():
    graph_enums = {e for e in ENUMS if e in names.BY_ENUM}
    assert {"cudnnBackendAttributeName_t", "cudnnBackendDescriptorType_t", "cudnnBackendAttributeType_t",
            "cudnnPointwiseMode_t", "cudnnDataType_t", "cudnnBackendOperationGraphMode_t"} <= graph_enums
    for enum, cls in names.BY_ENUM.items():
        values = {v for k, v in vars(cls).items() if not k.startswith("__")}
        assert values == {m[0] for m in ENUMS[enum]}, enum
    assert names.attr is names.AttributeName and names.desc is names.DescriptorType
    assert names.atype is names.AttributeType
    assert names.attr.TENSOR_DIMENSIONS == "CUDNN_ATTR_TENSOR_DIMENSIONS"
    assert names.desc.OPERATION_MATMUL_DESCRIPTOR == "CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR"


def test_import_cudnn_py_does_not_import_the_names():
    code = "import sys, cudnn_py; print('cudnn_py._generated.names' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stdout + r.stderr


def test_mypy_rejects_a_misspelt_name(tmp_path):
    exe = shutil.which("mypy") or str(Path(sys.executable).with_name("mypy"))
    if not Path(exe).exists():
        pytest.skip("mypy is not installed (pip install '.[test]')")
    snippet = tmp_path / "snippet.py"
    snippet.write_text("from cudnn_py._generated.names import PointwiseMode, attr, desc\n"
                       "ok: str = attr.TENSOR_DIMENSIONS + desc.TENSOR_DESCRIPTOR + PointwiseMode.ADD\n"
                       "typo = attr.TENSOR_DIMENSONS\n")
    r = subprocess.run([exe, "--no-error-summary", "--follow-imports=silent", "--cache-dir", str(tmp_path / "cache"),
                        "--config-file", "", str(snippet)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1 and "snippet.py:3:" in lines[0] and "TENSOR_DIMENSONS" in lines[0], r.stdout
