#!/usr/bin/env python3
"""Generate the typed builder surface and the API reference from the op specs (the one source). A dev-time
generator beside ``generate.py`` (not shipped: the package never imports it); it reads the checkout's ``cudnn_py``.

    python bindings/apigen.py            # rewrite cudnn_py/facade/_builder_api.pyi and docs/api.md
    python bindings/apigen.py --check    # exit 1 if either is stale (tests/test_api_signatures.py)

* ``facade/_builder_api.pyi``: ``BuilderMethods``, one typed method per public op spec (``@overload`` where the
  spec also accepts the 1.23 order). ``pygraph`` derives from it for type checkers only (``TYPE_CHECKING``), so
  mypy and IDEs see the builders' parameters while ``pygraph.py`` itself stays checked as it is.
* ``docs/api.md``: every builder (call forms and first doc line), ``pygraph``'s other public methods, and the other
  public names of ``cudnn_py``.
"""
from __future__ import annotations

import enum
import inspect
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the checkout's package, whatever is installed

import cudnn_py.families  # noqa: E402, F401  (the op families register their specs)
from cudnn_py import enums as classic_enums  # noqa: E402
from cudnn_py.ir.signatures import call_forms, format_call  # noqa: E402
from cudnn_py.ir.spec import SPECS  # noqa: E402

STUB = ROOT / "cudnn_py" / "facade" / "_builder_api.pyi"
API_PAGE = ROOT / "docs" / "api.md"
# the classic enums (cudnn_py/enums.py makes every one at run time): read from the module, so a builder taking a new
# one gets Any in the stub without an edit here
_ENUMS = tuple(sorted(name for name, value in vars(classic_enums).items()
                      if not name.startswith("_") and isinstance(value, type) and issubclass(value, enum.Enum)))


def _public_specs() -> list[Any]:
    return [s for s in SPECS.values() if s.public]


def stub_text() -> str:
    lines = [
        "# Generated from the op specs by `python bindings/apigen.py`; do not edit",
        "# (tests/test_api_signatures.py fails when it is stale).",
        "# ruff: noqa: E501",
        "import builtins",
        "from collections.abc import Sequence",
        "from typing import Any, Protocol, overload",
        "",
        "from ..ir.tensor import Tensor",
        "",
        "class ArrayLike(Protocol):",
        '    """A framework array or numpy scalar given as a tensor argument (bound data / a fused scalar)."""',
        "    @property",
        "    def shape(self) -> Any: ...",
        "    @property",
        "    def dtype(self) -> Any: ...",
        "",
        "class BuilderMethods:",
        '    """The op builders of ``pygraph``, one per op spec."""',
    ]
    for spec in _public_specs():
        forms = call_forms(spec)
        for sig in forms:
            if len(forms) > 1:
                lines.append("    @overload")
            text = _stub_types(format_call(spec.method, sig, annotated=True, stub=True))
            lines.append(f"    def {text.replace('(', '(self, ', 1).replace('(self, )', '(self)')}: ...")
    return "\n".join(lines) + "\n"


def _stub_types(text: str) -> str:
    """The classic enums are built at run time, so a type checker does not know them as types: Any, default ``...``."""
    names = "|".join(_ENUMS)
    text = re.sub(rf"= (?:{names})\.\w+", "= ...", text)
    return re.sub(rf"(?<=: )(?:{names})\b(?!\.)", "Any", text)


def _first_line(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.strip().split("\n\n")[0].replace("\n", " ").strip()


def _sig(obj: Any) -> str:
    try:
        text = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"
    return re.sub(r"<([^<>]*) at 0x[0-9a-f]+>", r"<\1>", text)


def api_page() -> str:
    import cudnn_py
    from cudnn_py.facade.pygraph import pygraph

    out = ["# API reference", "",
           "Generated from the op specs and the package by `python bindings/apigen.py` (do not edit; "
           "`tests/test_api_signatures.py` fails when it is stale). The full text of each is its docstring: "
           "`help(cudnn.pygraph.matmul)`.", "",
           "A tensor argument (`Tensor | float | ArrayLike`) is a graph tensor, a python / numpy scalar (a fused "
           "pass-by-value scalar) or a framework array (bound data, fed to `execute` for you). Where a builder also "
           "accepts the 1.23 positional order, both forms are listed.", "",
           "## pygraph: op builders", ""]
    for spec in _public_specs():
        out.append(f"### `{spec.method}`")
        out.append("")
        out.append("```text")
        out += [format_call(spec.method, sig, annotated=True) for sig in call_forms(spec)]
        out.append("```")
        out.append("")
        out.append(_first_line(getattr(pygraph, spec.method)))
        out.append("")
    builders = {s.method for s in SPECS.values()}
    out += ["## pygraph: graph, plans and execution", "", "```text",
            f"pygraph{_sig(pygraph.__init__).replace('(self, ', '(', 1)}", "```", "", _first_line(pygraph), ""]
    for name in sorted(n for n in dir(pygraph) if not n.startswith("_") and n not in builders):
        attr = inspect.getattr_static(pygraph, name)
        if isinstance(attr, property):
            out += [f"### `{name}` (property)", "", _first_line(attr), ""]
        elif callable(getattr(pygraph, name)):
            out += [f"### `{name}`", "", "```text", f"{name}{_sig(getattr(pygraph, name)).replace('(self, ', '(', 1)}",
                    "```", "", _first_line(getattr(pygraph, name)), ""]
    out += ["## Other names of `cudnn_py`", ""]
    for name in cudnn_py.__all__:
        if name == "pygraph":
            continue
        obj = getattr(cudnn_py, name)
        if inspect.ismodule(obj):
            out += [f"### `{name}` (module)", "", _first_line(obj), ""]
        elif isinstance(obj, type) and issubclass(obj, enum.Enum):
            out += [f"### `{name}` (enum)", "", ", ".join(f"`{m}`" for m in obj.__members__), ""]
        elif callable(obj):
            kind = "class" if isinstance(obj, type) else "function"
            out += [f"### `{name}` ({kind})", "", "```text", f"{name}{_sig(obj)}", "```", "", _first_line(obj), ""]
        else:
            out += [f"### `{name}`", "", f"`{type(obj).__name__}`: {_first_line(type(obj))}", ""]
    return "\n".join(out).rstrip("\n") + "\n"


def outputs() -> dict[Path, str]:
    return {STUB: stub_text(), API_PAGE: api_page()}


def main(argv: list[str]) -> int:
    files = outputs()  # rendered once: the check and the rewrite compare and write the same text
    stale = [path for path, text in files.items() if not path.exists() or path.read_text() != text]
    if "--check" in argv:
        for path in stale:
            print(f"stale: {path.relative_to(ROOT)} (run python bindings/apigen.py)")
        return 1 if stale else 0
    for path, text in files.items():
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
