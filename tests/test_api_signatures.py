"""The builders' signatures, docstrings, type stub and API page, all generated from the op specs."""
from __future__ import annotations

import ast
import enum
import importlib.util
import inspect
import re
import subprocess
import sys
from pathlib import Path

import cudnn_py
from cudnn_py import enums as classic_enums
from cudnn_py.ir.signatures import call_forms, format_default
from cudnn_py.ir.spec import SPECS

ROOT = Path(__file__).resolve().parents[1]
APIGEN = ROOT / "bindings" / "apigen.py"
STUB = ROOT / "cudnn_py" / "facade" / "_builder_api.pyi"
ENUMS = sorted(k for k, v in vars(classic_enums).items() if not k.startswith("_") and isinstance(v, type)
               and issubclass(v, enum.Enum))


def _apigen():
    """bindings/apigen.py, the generator (a dev-time script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("apigen", APIGEN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
PUBLIC = [s for s in SPECS.values() if s.public]


def test_matmul_signature_shows_the_real_parameters():
    sig = inspect.signature(cudnn_py.pygraph.matmul)
    assert list(sig.parameters) == ["self", "A", "B", "compute_data_type", "padding", "name"]
    assert sig.parameters["padding"].default == 0.0 and sig.parameters["padding"].annotation == "float"
    assert sig.parameters["A"].annotation.startswith("Tensor")
    assert sig.return_annotation == "Tensor"


def _stub_methods() -> dict[str, ast.FunctionDef]:
    """The first declaration of each method of the stub's ``BuilderMethods`` (the first of its overloads)."""
    tree = ast.parse(STUB.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "BuilderMethods")
    methods: dict[str, ast.FunctionDef] = {}
    for node in cls.body:
        if isinstance(node, ast.FunctionDef):
            methods.setdefault(node.name, node)
    return methods


def _stub_annotation(text: str) -> str:
    """A runtime annotation as the stub writes it (the classic enums, built at run time, are Any there)."""
    return re.sub(rf"\b(?:{'|'.join(ENUMS)})\b(?!\.)", "Any", text)


def _stub_default(value) -> str:
    """A runtime default as the stub writes it (a classic enum member is ``...`` there)."""
    return re.sub(rf"^(?:{'|'.join(ENUMS)})\.\w+$", "...", format_default(value))


def test_every_builder_signature_is_its_stub_declaration():
    """What inspect.signature, help(), IPython and Jupyter show is the stub's declaration (its first overload: the
    classic positional order), parameter by parameter: name, kind, annotation and default."""
    stub = _stub_methods()
    assert sorted(stub) == sorted(s.method for s in PUBLIC)
    kinds = {"posonlyargs": inspect.Parameter.POSITIONAL_ONLY, "args": inspect.Parameter.POSITIONAL_OR_KEYWORD,
             "kwonlyargs": inspect.Parameter.KEYWORD_ONLY}
    for spec in PUBLIC:
        node = stub[spec.method]
        declared = []
        positional = node.args.posonlyargs + node.args.args
        defaults = [None] * (len(positional) - len(node.args.defaults)) + node.args.defaults
        for field in ("posonlyargs", "args", "kwonlyargs"):
            for arg in getattr(node.args, field):
                default = (defaults[positional.index(arg)] if field != "kwonlyargs"
                           else node.args.kw_defaults[node.args.kwonlyargs.index(arg)])
                declared.append((arg.arg, kinds[field], arg.annotation and ast.unparse(arg.annotation),
                                 default and ast.unparse(default)))
        assert node.args.vararg is None and node.args.kwarg is None, spec.method
        sig = inspect.signature(getattr(cudnn_py.pygraph, spec.method))
        shown = [(p.name, p.kind, None if p.annotation is p.empty else _stub_annotation(p.annotation),
                  None if p.default is p.empty else _stub_default(p.default)) for p in sig.parameters.values()]
        assert shown == declared, spec.method
        assert _stub_annotation(sig.return_annotation) == ast.unparse(node.returns), spec.method
        bound = inspect.signature(getattr(cudnn_py.pygraph(), spec.method))  # a bound method's: self dropped
        assert list(bound.parameters) == [d[0] for d in declared[1:]], spec.method


def test_every_builder_keeps_the_classic_keywords():
    """The official wrapper's surface (``spec.signature()``: ``(*args, name=, compute_data_type=, **kwargs)`` where it
    overloads a builder) names parameters with defaults; each is in the spelled-out signature with that default."""
    for spec in PUBLIC:
        shown = inspect.signature(getattr(cudnn_py.pygraph, spec.method)).parameters
        for p in spec.signature().parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            assert p.name in shown, (spec.method, p.name)
            assert shown[p.name].default in (p.default, shown[p.name].empty), (spec.method, p.name)


def test_every_builder_has_name_and_doc_from_its_spec():
    for spec in PUBLIC:
        method = getattr(cudnn_py.pygraph, spec.method)
        assert method.__name__ == spec.method and method.__qualname__ == f"pygraph.{spec.method}"
        doc = inspect.getdoc(method)
        assert doc.startswith(spec.doc.strip()[:40]) and "Call forms:" in doc and "Arguments:" in doc
        for sig in call_forms(spec):
            assert f"    {spec.method}(" in doc
            for name in sig.parameters:
                if name != "self":
                    assert f"    {name}" in doc, (spec.method, name)


def test_call_forms_bind_like_the_builder():
    """Each call form's positional order is the one the spec binds (keywords by name)."""
    for spec in PUBLIC:
        forms = call_forms(spec)
        orders = [spec.order] + ([spec.legacy_order] if len(forms) > 1 else [])
        for sig, order in zip(forms, orders):
            positional = [p.name for p in sig.parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD][1:]
            assert tuple(positional) == tuple(order), spec.method


def test_pygraph_has_a_docstring_with_an_example():
    doc = inspect.getdoc(cudnn_py.pygraph)
    assert "Example::" in doc and "g.matmul(A, B)" in doc and "validate()" in doc


def test_generated_stub_and_api_page_are_current():
    for path, text in _apigen().outputs().items():
        assert path.read_text() == text, f"{path} is stale: run python bindings/apigen.py"
    result = subprocess.run([sys.executable, str(APIGEN), "--check"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_api_page_lists_every_builder_and_public_name():
    page = _apigen().API_PAGE.read_text()
    for spec in PUBLIC:
        assert f"### `{spec.method}`" in page
    for name in cudnn_py.__all__:
        assert f"`{name}`" in page or name == "pygraph"
    assert "```python" not in page
