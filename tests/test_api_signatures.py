"""The builders' signatures, docstrings, type stub and API page, all generated from the op specs."""
from __future__ import annotations

import importlib.util
import inspect
import subprocess
import sys
from pathlib import Path

import cudnn_py
from cudnn_py.ir.signatures import call_forms
from cudnn_py.ir.spec import SPECS

ROOT = Path(__file__).resolve().parents[1]
APIGEN = ROOT / "bindings" / "apigen.py"


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


def test_every_builder_has_name_signature_and_doc_from_its_spec():
    for spec in PUBLIC:
        method = getattr(cudnn_py.pygraph, spec.method)
        assert method.__name__ == spec.method and method.__qualname__ == f"pygraph.{spec.method}"
        surface = inspect.signature(method)
        classic = spec.signature()  # the official surface: names, kinds and defaults unchanged
        assert [(p.name, p.kind, p.default) for p in surface.parameters.values()] == \
            [(p.name, p.kind, p.default) for p in classic.parameters.values()], spec.method
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
