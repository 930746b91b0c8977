"""The lazy exports of ``cudnn.ops`` and its kin (``cudnn.ops.norm``, ``cudnn.experimental.ops``): a public name
is imported from its implementation module the first time it is read, so importing the namespace needs no torch.

A name whose implementation cannot be imported raises ImportError, as the official module's lazy exports do, never
AttributeError; the message says what is missing: a framework that is not installed (torch), or an operator that
cudnn_py has not built yet.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

TORCH_HINT = "Install a CUDA-enabled torch build"


def _missing_module(error: BaseException | None) -> str | None:
    """The name of the module whose absence caused ``error`` (the first ModuleNotFoundError of its chain)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, ModuleNotFoundError):
            return error.name or ""
        error = error.__cause__ or error.__context__
    return None


def optional_dependency_message(name: str, target: str, error: BaseException) -> str:
    """Why ``name`` (implemented in module ``target``) cannot be imported."""
    missing = _missing_module(error)
    if missing and missing.split(".")[0] == "cudnn_py" and target.startswith(missing):
        return (f"{name} is not implemented in cudnn_py yet (its module {target!r} does not exist); it is part of "
                f"the official cudnn module's API that cudnn_py has not built: {error}")
    if missing and missing.split(".")[0] != "cudnn_py":
        return f"{name} requires the {missing!r} module, which is not installed. {TORCH_HINT}: {error}"
    return f"{name} requires optional dependencies that failed to import. {TORCH_HINT}: {error}"


def import_export(name: str, module_name: str, attr: str | None) -> Any:
    """Module ``module_name``'s ``attr`` (the module itself where ``attr`` is None); ImportError (see the module
    doc) where the module cannot be imported or lacks the attribute."""
    try:
        module = importlib.import_module(module_name)
        return module if attr is None else getattr(module, attr)
    except (ImportError, AttributeError) as error:
        raise ImportError(optional_dependency_message(name, module_name, error)) from error


def lazy_getattr(module_globals: dict, exports: dict[str, tuple[str, str | None]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` resolving ``exports`` (public name -> (absolute module name, attribute or None))
    on first read and keeping the value as a plain attribute of the module."""
    package = module_globals["__name__"]

    def __getattr__(name: str) -> Any:
        target = exports.get(name)
        if target is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = import_export(name, target[0], target[1])
        module_globals[name] = value
        return value

    return __getattr__
