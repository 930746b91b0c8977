"""Every op family is one folder, ``cudnn_py/families/<family>/``, and every registered op has all its facets there: its
spec (and inference) in ``spec.py``, its lowering in ``lowering.py`` or a declaration that it has none
(``decomposed=True``: always expanded by the decompose pass), and its float64 reference in ``reference.py``. The
registration list (``cudnn_py.families.FAMILIES``) names each folder and the facets it has, and nothing else loads a
family (``pyproject.toml``'s import contracts)."""
from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import cudnn_py.ir  # noqa: F401  (registers the specs)
from cudnn_py import families
from cudnn_py.engines.reference import REFERENCES
from cudnn_py.ir.spec import SPECS
from cudnn_py.lowering import LOWERINGS

OPS = Path(families.__file__).parent


def _family_of(module: str) -> str:
    parts = module.split(".")
    assert parts[:2] == ["cudnn_py", "families"] and len(parts) == 4, f"{module} is not a family facet module"
    return parts[2]


def test_every_folder_is_a_registered_family_with_the_facets_it_declares():
    folders = {p.name for p in OPS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(families.FAMILIES)
    for family, facets in families.FAMILIES.items():
        assert families.SPEC in facets, family
        present = {f for f in families.ALL if (OPS / family / f"{f}.py").exists()}
        assert present == set(facets), f"{family}: FAMILIES says {facets}, the folder has {sorted(present)}"
        assert (OPS / family / "__init__.py").exists()


@pytest.mark.parametrize("method", list(SPECS))
def test_each_registered_op_has_its_facets_in_its_family_folder(method):
    spec = SPECS[method]
    family = _family_of(spec.infer.__module__)
    assert spec.infer.__module__ == families.module(family, families.SPEC)
    if spec.decomposed:
        assert spec.expand is not None, f"{method}: decomposed=True needs an expand"
        assert spec.kind not in LOWERINGS, f"{method}: decomposed=True, yet kind {spec.kind!r} has a lowering"
    else:
        assert spec.kind in LOWERINGS, f"{method}: no lowering for kind {spec.kind!r} (or declare decomposed=True)"
        assert LOWERINGS[spec.kind].__module__ == families.module(family, families.LOWERING), method
    assert spec.kind in REFERENCES, f"{method}: no reference for kind {spec.kind!r}"
    assert REFERENCES[spec.kind][0].__module__ == families.module(family, families.REFERENCE), method


def test_no_lowering_or_reference_without_a_spec():
    kinds = {s.kind for s in SPECS.values()}
    assert set(LOWERINGS) <= kinds and set(REFERENCES) <= kinds


def test_hooks_are_declared_not_tested_by_name():
    """The generic passes read the spec's hooks: the slice is the one op with views, pointwise the elementwise
    family whose GEN_INDEX moves an axis, sdpa the one with a composite to fall back to."""
    assert {s.kind for s in SPECS.values() if s.aliases is not None} == {"slice"}
    assert {s.kind for s in SPECS.values() if s.elementwise} == {"pointwise"}
    assert {s.kind for s in SPECS.values() if s.axis_param is not None} == {"pointwise"}
    assert {s.kind for s in SPECS.values() if s.composite_fallback is not None} == {"sdpa"}


@pytest.mark.parametrize("facet", ["spec", "lowering", "reference"])
def test_any_facet_module_may_be_imported_first(facet):
    """A fresh interpreter importing one family's facet before anything else gets every family registered (the
    registration does not depend on who is imported first). quantize: other families' facets import from its own."""
    family = "quantize"
    code = (f"import {families.module(family, facet)}\n"
            "import cudnn_py.ir, cudnn_py.lowering\n"
            "from cudnn_py.engines.reference import REFERENCES\n"
            "from cudnn_py.ir.spec import SPECS\n"
            "import cudnn_py\n"
            "g = cudnn_py.pygraph()\n"
            "assert all(hasattr(g, m) for m, s in SPECS.items() if s.public)\n"
            "print(len(SPECS), len(cudnn_py.lowering.LOWERINGS), len(REFERENCES))")
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=120,
                       env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == [str(len(SPECS)), str(len(LOWERINGS)), str(len(REFERENCES))]


def test_the_spec_modules_are_importable_alone():
    for family in families.FAMILIES:
        importlib.import_module(families.module(family, families.SPEC))


def test_the_cores_import_no_family_and_are_filled_through_the_registration_list():
    """A fresh interpreter importing the IR, lowering and the reference engine's registry loads no family; the
    registries are empty until ``cudnn_py.families`` is imported, and then each facet is imported by its first read."""
    code = ("import sys\n"
            "import cudnn_py.ir, cudnn_py.lowering, cudnn_py.engines.reference.registry as rr\n"
            "assert not [m for m in sys.modules if m.startswith('cudnn_py.families')], sorted(sys.modules)\n"
            "assert len(cudnn_py.ir.SPECS) == 0 and len(cudnn_py.lowering.LOWERINGS) == 0\n"
            "import cudnn_py.families\n"
            "lowered = [m for m in sys.modules if m.startswith('cudnn_py.families') and m.endswith('.lowering')]\n"
            "assert not lowered, lowered  # the lowerings wait for their registry's first read\n"
            "print(len(cudnn_py.ir.SPECS) > 0, len(cudnn_py.lowering.LOWERINGS) > 0, len(rr.REFERENCES) > 0)")
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=120,
                       env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["True", "True", "True"]


def test_cudnn_ops_is_the_public_namespace_and_holds_no_internals():
    import cudnn_py as cudnn

    public = cudnn.ops
    assert public.__name__ == "cudnn_py.ops"
    assert not hasattr(public, "FAMILIES") and not hasattr(public, "load")
    here = Path(public.__file__).parent  # its modules and packages (a folder of stale bytecode is neither)
    names = {p.stem for p in here.glob("*.py")} | {p.name for p in here.iterdir() if (p / "__init__.py").exists()}
    assert not names & set(families.FAMILIES), names
