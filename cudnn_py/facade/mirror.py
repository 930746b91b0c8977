"""The classic methods ``pygraph`` mirrors from the planning session under the same names, declared once each.

A row of ``pygraph``'s table, ``name = mirror(gate, signature, ...)``, says what the facade makes sure of before the
session answers (``gate``), the official signature (names, defaults, annotations: what ``inspect.signature`` and
``docs/api.md`` show) and, where they are not the parameters as given, the arguments the session gets. The method
is generated from the row as Python source, compiled on its first use (``__get__`` puts the plain function on the
class in the row's place), so it has the official signature, takes keywords, and raises what a written method
would, at the same moment: the gate first, then ``checks``, then a python engine's answer (``engine``) where the
selected plan runs on one, then the session's method of the same name, all under the graph's lock (one thread at
a time, as ``pygraph``'s own steps: ``facade/serial.py``).

Gates:

* ``graph``: the graph validated (``validate()`` when it was not), the session at OPERATION_GRAPH;
* ``planned``: ``create_execution_plans()`` ran (``PhaseError`` naming the call otherwise), the session at
  ENGINE_CONFIGS (queried with the modes given then, if the cuDNN plan was not selected then);
* ``count``: 0 (the classic "nothing planned yet") while the session is not at ENGINE_CONFIGS;
* ``cuda_graph``: a built cuDNN plan selected (``pygraph._cuda_graph_session``).
"""
from __future__ import annotations
import __future__

import linecache
import sys
from typing import Any

from ..errors import InvalidValueError
from ..ir.builders import MadeOnFirstRead

_GATES = {
    "graph": (["if not self._is_validated:", "    self.validate()"], "self._at(Phase.OPERATION_GRAPH)"),
    "planned": (["self._require_planned({name!r})"], "self._at(Phase.ENGINE_CONFIGS)"),
    "count": (["s = self._session", "if s is None or s.phase < Phase.ENGINE_CONFIGS:",
               "    return 0  # classic: nothing planned yet"], "s"),
    "cuda_graph": ([], "self._cuda_graph_session({name!r})"),
}
# the classic shape-override arguments, refused when given (not implemented yet)
OVERRIDES = "no_overrides({name!r}, override_uids, override_shapes, override_strides)"


def mirror(gate: str, signature: str, *, forward: str | None = None, checks: tuple[str, ...] = (),
           engine: str | None = None, doc: str | None = None) -> Any:
    """A row of the table (typed ``Any``: to type checkers the method it becomes takes anything)."""
    return _Mirror(gate, signature, forward=forward, checks=checks, engine=engine, doc=doc)


class _Mirror(MadeOnFirstRead):
    """One mirrored method (see the module's docstring): ``signature`` without ``self``, e.g.
    ``"(index: int) -> str"``; ``forward``: the session's arguments (default: the parameters, in order);
    ``checks``: statements after the gate (``{name}`` is the method's name); ``engine``: the value returned when
    the selected plan runs on a python engine (``engine`` is that engine)."""

    def __init__(self, gate: str, signature: str, *, forward: str | None = None, checks: tuple[str, ...] = (),
                 engine: str | None = None, doc: str | None = None) -> None:
        if gate not in _GATES:
            raise InvalidValueError(f"mirror(): unknown gate {gate!r}")
        self.gate, self.signature, self.forward, self.checks, self.engine, self.doc = \
            gate, signature, forward, checks, engine, doc

    def __set_name__(self, owner: type, name: str) -> None:
        self.owner, self.name = owner, name

    def source(self) -> str:
        """The method as Python source."""
        name = self.name
        params, _, returns = self.signature.partition("->")
        params = params.strip()
        assert params.startswith("(") and params.endswith(")"), self.signature
        inner = params[1:-1].strip()
        head = f"def {name}(self{', ' + inner if inner else ''})" + (f" -> {returns.strip()}" if returns else "")
        pre, target = _GATES[self.gate]
        body = [line.format(name=name) for line in pre]
        body += [check.format(name=name) for check in self.checks]
        give = "" if returns.strip() == "None" else "return "  # (-> None: the answer is not passed on)
        if self.engine is not None:
            body += ["engine = self.selected_engine", "if engine is not None:", f"    {give}{self.engine}"]
            body += ["    return None"] if not give else []
        forward = self.forward if self.forward is not None else ", ".join(_names(inner))
        body.append(f"{give}{target.format(name=name)}.{name}({forward})")
        # under the graph's lock (facade/serial.py): the gate may move the graph between phases
        doc = f"    {self.doc!r}\n" if self.doc else ""
        return head + ":\n" + doc + "    with self._lock:\n" + "".join(f"        {line}\n" for line in body)

    def method(self) -> Any:
        module = sys.modules[self.owner.__module__]
        source, filename = self.source(), f"<{self.owner.__name__}.{self.name}: facade/mirror.py>"
        # the source where inspect.getsource and tracebacks look for it
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        code = compile(source, filename, "exec", flags=__future__.annotations.compiler_flag, dont_inherit=True)
        made: dict[str, Any] = {}
        exec(code, module.__dict__, made)  # the owner's module globals: Phase, no_overrides, ...
        method = made[self.name]
        method.__qualname__ = f"{self.owner.__qualname__}.{self.name}"
        return method


def _names(params: str) -> list[str]:
    """The parameter names of a parameter list (``"index: int, handle: Any = None"`` -> index, handle)."""
    out, depth, current = [], 0, ""
    for ch in params + ",":
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            if current.strip():
                out.append(current.split(":")[0].split("=")[0].strip())
            current = ""
        else:
            current += ch
    return out
