"""The operand re-check of every execute tier, described once and compiled into each tier's form.

An operand is re-checked against what its slot's last full check recorded (``OperandSlots._check_one``): its
class, then, for torch, each of ``TORCH_TERMS``, else its framework's whole signature. The description below is
the only place those comparisons are written. From it this module generates, as Python source compiled once per
form:

* ``resolve_checked``: ``Executor.execute``'s comparison (``OperandSlots._resolve``): every operand's pointer,
  and whether all of them match (those that do not are then fully checked);
* ``fast_resolver``: the bound execute's (``Executor.fast``): the pointers, or None at the first operand that does
  not match (the call then goes to ``Executor.execute``);
* ``hot_matcher(n)``: the steady state's (the hot path of ``Executor.fast``): n row-major torch operands in a known
  key order, each compared with its row (class, the terms' fields, pointer) in straight-line code.

Generated rather than shared at run time: the hot path's speed is its specialised inline check, and a call per
operand (or a shared method taking every form's arguments) made a replayed call measurably slower (issue #30). A
check added to ``TORCH_TERMS`` is made by all three forms; ``tests/test_replay_policy.py`` compares the tiers.
"""
from __future__ import annotations

import functools
import string
from collections.abc import Callable
from typing import Any, NamedTuple

from ..interop import data_ptr


class Term(NamedTuple):
    """One field of a torch operand compared with the one recorded at its slot's last full check: ``differs`` is
    an expression true when operand ``{v}`` differs from the recorded field (``{field}``, by the name it has in
    ``CHECKED``); ``row_major``, where given, is the cheaper expression for a slot whose checked strides were the
    row-major ones of its shape (``kind == 2``)."""

    differs: str
    row_major: str | None = None


# The layout of a slot's checked entry (``OperandSlots._checked``): class, pointer getter, signature getter,
# signature, placement, torch kind (0: not torch; 1: torch; 2: torch with row-major strides), then for torch the
# signature's fields (interop._torch_signature's order), else None each.
CHECKED = ("cls", "getter", "signature", "sig", "where", "kind", "shape", "stride", "dtype", "device")

# A torch operand's re-check: the fields of interop._torch_signature, each read as cheaply as torch allows
# (torch.Size compares as a tuple, dtypes are singletons, get_device() is an int). Row-major strides are re-checked
# by is_contiguous(): with the same shape it holds exactly when every dim of size > 1 has its row-major stride,
# which is what the full check requires (execute_operands._check_operand).
TORCH_TERMS: tuple[Term, ...] = (
    Term("{v}.shape != {shape}"),
    Term("{v}.dtype is not {dtype}"),
    Term("{v}.get_device() != {device}"),
    Term("{v}.stride() != {stride}", row_major="not {v}.is_contiguous()"),
)
TORCH_POINTER = "{v}.data_ptr()"  # a torch operand's pointer (cls.data_ptr, bound: cheaper than the getter)


def _fields(expr: str) -> list[str]:
    return [name for _, name, _, _ in string.Formatter().parse(expr) if name and name != "v"]


def _torch_differs(terms: tuple[Term, ...], v: str, row_major_only: bool, suffix: str = "") -> str:
    """One expression, true when torch operand ``v`` differs from its recorded fields (their names in ``CHECKED``
    and ``suffix``) in any term."""

    def field(name: str) -> str:
        return name + suffix

    parts = []
    for term in terms:
        general = term.differs.format(v=v, **{f: field(f) for f in _fields(term.differs)})
        if term.row_major is None:
            parts.append(general)
            continue
        row_major = term.row_major.format(v=v, **{f: field(f) for f in _fields(term.row_major)})
        parts.append(row_major if row_major_only else f"({row_major} if {field('kind')} == 2 else {general})")
    return " or ".join(parts)


def _operand_block(terms: tuple[Term, ...], v: str, class_miss: list[str], miss: list[str], ints: bool) -> list[str]:
    """The re-check of operand ``v`` at ``slot``: its pointer into ``ptrs``, ``placement`` set from the first device
    operand that matches; ``class_miss`` are the lines run where its class is not the checked one, ``miss`` where a
    field differs (its pointer is read first)."""
    check = [f"{', '.join('seen_cls' if f == 'cls' else f for f in CHECKED)} = checked[slot]",
             f"if seen_cls is not {v}.__class__:", *(f"    {m}" for m in class_miss),
             "elif kind:",
             f"    ptrs[slot] = {TORCH_POINTER.format(v=v)}",
             f"    if {_torch_differs(terms, v, False)}:", *(f"        {m}" for m in miss),
             "    elif placement is None:", "        placement = where",
             "else:",
             f"    ptrs[slot] = getter({v})",
             f"    if signature({v}) != sig:", *(f"        {m}" for m in miss),
             "    elif placement is None:", "        placement = where"]
    if not ints:
        return check
    # an int pointer carries no metadata: the caller's responsibility
    return [f"if {v}.__class__ is int:", f"    ptrs[slot] = {v}", "else:", *(f"    {line}" for line in check)]


def _resolve_source(terms: tuple[Term, ...], checked_mode: bool, extras: bool) -> str:
    """The source of a resolver: ``checked_mode`` the one of Executor.execute (a method: every pointer, and
    whether all match), else the bound execute's (a closure over the executor's tables: the pointers and the
    placement, or None at the first miss)."""
    if checked_mode:
        head = ["def resolve(self, variant_pack):",
                "    slots, checked, template = self._fast_slots, self._checked, self._template",
                "    ptrs = template.copy()", "    placement, same = None, True"]
        unknown = ["if key is None:", "    continue", "slot = self._slot(key)",
                   "if slot < 0 or slot in self._fixed:",
                   "    continue  # read by no operation, or a scalar whose value the graph carries"]
        # (an operand of another class than the checked one: its pointer read the general way)
        class_miss, miss = ["ptrs[slot] = data_ptr(value)", "same = False"], ["same = False"]
        bound = "self._bound_items"
    else:
        head = ["def make(slots, template, checked, bound_items, aliases):",
                "    slots_get = slots.get",
                "    def resolve(variant_pack):",
                "        ptrs = template.copy()", "        placement = None"]
        unknown = class_miss = miss = ["return None"]
        bound = "bound_items"
    get = "slots.get" if checked_mode else "slots_get"
    loop = ["for key, value in variant_pack.items():", f"    slot = {get}(key)", "    if slot is None:"]
    loop += [f"        {line}" for line in unknown]
    loop += [f"    {line}" for line in _operand_block(terms, "value", class_miss, miss, ints=True)]
    body = loop
    if extras:
        # data bound at build time: the same re-check, unless the caller's pack rebinds the slot
        body += [f"for slot, value in {bound}:", "    if ptrs[slot] == template[slot]:"]
        body += [f"        {line}" for line in _operand_block(terms, "value", miss, miss, ints=False)]
        body += [f"for view, source, offset in {'self._aliases' if checked_mode else 'aliases'}:",
                 "    ptrs[view] = ptrs[source] + offset if ptrs[source] else 0"]
    body += ["return ptrs, same, placement" if checked_mode else "return ptrs, placement"]
    indent = "    " if checked_mode else "        "
    lines = head + [f"{indent}{line}" for line in body]
    if not checked_mode:
        lines.append("    return resolve")
    return "\n".join(lines) + "\n"


def _hot_source(terms: tuple[Term, ...], n: int) -> str:
    """The source of the steady state's check of ``n`` row-major torch operands: the pack's keys are the state's,
    in order, and each operand matches its row (class, the terms' fields, pointer)."""
    fields = ["cls"] + [f for t in terms for f in _fields(t.row_major or t.differs)] + ["ptr"]
    lines = ["def matches(variant_pack, keys, rows):",
             "    if tuple(variant_pack) != keys:",
             "        return False"]
    values = ", ".join(f"v{i}" for i in range(n))
    lines.append(f"    {values}{',' if n == 1 else ''} = variant_pack.values()")
    rows = ", ".join("(" + ", ".join(f"{f}{i}" for f in fields) + ")" for i in range(n))
    lines.append(f"    {rows}{',' if n == 1 else ''} = rows")
    for i in range(n):
        v = f"v{i}"
        differs = _torch_differs(terms, v, True, str(i))
        lines.append(f"    if {v}.__class__ is not cls{i} or {differs} or "
                     f"{TORCH_POINTER.format(v=v)} != ptr{i}:")
        lines.append("        return False")
    lines.append("    return True")
    return "\n".join(lines) + "\n"


def hot_fields(terms: tuple[Term, ...] = TORCH_TERMS) -> tuple[int, ...]:
    """Where a hot row's fields, but its pointer, are in a checked entry (``CHECKED``): class, then the terms'."""
    return tuple(CHECKED.index(f) for f in ["cls"] + [f for t in terms for f in _fields(t.row_major or t.differs)])


def _compile(source: str, name: str) -> Any:
    namespace: dict[str, Any] = {"data_ptr": data_ptr}
    exec(compile(source, f"<cudnn_py.plans.execute_checks: {name}>", "exec"), namespace)
    return namespace


@functools.cache
def _checked_resolver(terms: tuple[Term, ...]) -> Callable[..., Any]:
    return _compile(_resolve_source(terms, True, True), "resolve_checked")["resolve"]


@functools.cache
def _fast_factory(terms: tuple[Term, ...], extras: bool) -> Callable[..., Any]:
    return _compile(_resolve_source(terms, False, extras), "fast_resolver")["make"]


@functools.cache
def _hot(terms: tuple[Term, ...], n: int) -> Callable[..., bool]:
    return _compile(_hot_source(terms, n), f"hot_matcher({n})")["matches"]


def resolve_checked(terms: tuple[Term, ...] = TORCH_TERMS) -> Callable[..., Any]:
    """``OperandSlots._resolve``'s comparison: ``(self, variant_pack) -> (pointers, all matched, placement)``."""
    return _checked_resolver(terms)


def fast_resolver(slots: dict, template: list[int], checked: list[tuple], bound_items: tuple, aliases: tuple,
                  terms: tuple[Term, ...] = TORCH_TERMS) -> Callable[[dict], Any]:
    """The bound execute's comparison over these tables: ``variant_pack -> (pointers, placement)``, None at the
    first key or operand that is not as checked."""
    return _fast_factory(terms, bool(bound_items or aliases))(slots, template, checked, bound_items, aliases)


def hot_matcher(n: int, terms: tuple[Term, ...] = TORCH_TERMS) -> Callable[[dict, tuple, tuple], bool]:
    """The steady state's check of a pack of ``n`` operands: ``(variant_pack, keys, rows) -> bool``."""
    return _hot(terms, n)
