"""The operand re-check of every execute tier, described once and compiled into each tier's form.

An operand is re-checked against what its slot's last full check recorded (``OperandSlots._check_one``): its
class, then, for torch, each of ``TORCH_TERMS``, else its framework's whole signature. The description below is
the only place those comparisons are written. From it this module generates, as Python source compiled once per
form:

* ``resolve_checked``: ``Executor.execute``'s comparison (``OperandSlots._resolve``): every operand's pointer,
  and whether all of them match (those that do not are then fully checked);
* ``fast_operand_lines``: the bound execute's (``Executor.fast``), lines inlined into its generated function
  (``execute_fast.py``): the pointers, or the call handed to ``Executor.execute`` at the first operand that does
  not match;
* ``hot_matcher(n)``: the steady state's (the hot path of ``Executor.fast``): n row-major torch operands in a known
  key order, each compared with its row (class, the terms' fields, pointer) in straight-line code.

Generated rather than shared at run time: the hot path's speed is its specialised inline check, and a call per
operand (or a shared method taking every form's arguments) made a replayed call measurably slower, a shared
resolver called by the bound execute its general path (issue #30). A check added to ``TORCH_TERMS`` is made by all
three forms; ``tests/test_replay_policy.py`` compares the tiers.
"""
from __future__ import annotations

import functools
import string
from collections.abc import Callable
from typing import Any, NamedTuple

from ..errors import InvalidTypeError
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


class Check(NamedTuple):
    """A check of a call other than its operands': ``holds`` is an expression of ``params`` (``{name}``), true when
    the call may go on as it is."""

    params: tuple[str, ...]
    holds: str


# The call's other checks, each written once. Executor.execute and its helpers call them compiled (``call_check``),
# the bound execute's template inlines them (``<<name(args)>>``, ``call_check_expr``); the hot path keeps the
# state they passed for (its handle's record, its binding: see ``Executor.fast``).
CALL_CHECKS: dict[str, Check] = {
    # the last binding (a tuple: plan, workspace pointer, operand pointers, VARIANT_PACK pointer, descriptor) is
    # the one this call executes with: the same plan, workspace and pointers
    "binding_matches": Check(("binding", "plan", "ws", "ptrs"),
                             "{binding}[0] is {plan} and {binding}[1] == {ws} and {binding}[2] == {ptrs}"),
    # a handle's registry record is of the graph's device (either unknown: nothing to compare)
    "handle_on_device": Check(("rec", "device"),
                              "{device} is None or {rec}.device is None or {rec}.device == {device}"),
    # a thread's default-handle state is live: its handle not destroyed since (the registry holds its record)
    "default_handle_live": Check(("state", "live"),
                                 "{state} is not None and {live}.get({state}.handle) is {state}.record"),
    # the default handle is bound to the stream the call runs on
    "stream_bound": Check(("state", "stream"), "{stream} == {state}.stream"),
}


def call_check_expr(name: str, args: tuple[str, ...] | list[str]) -> str:
    """Check ``name``'s expression over ``args`` (the names it is given, in ``params``' order), parenthesised."""
    check = CALL_CHECKS[name]
    if len(args) != len(check.params):
        raise InvalidTypeError(f"check {name} takes {check.params}, got {tuple(args)}")
    return "(" + check.holds.format(**dict(zip(check.params, args))) + ")"


@functools.cache
def call_check(name: str) -> Callable[..., bool]:
    """Check ``name`` as a function of its ``params`` (compiled once per name)."""
    params = CALL_CHECKS[name].params
    source = f"def {name}({', '.join(params)}):\n    return {call_check_expr(name, params)}\n"
    return _compile(source, name)[name]


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


def _operand_block(terms: tuple[Term, ...], v: str, miss: list[str], exits: bool, ints: bool) -> list[str]:
    """The re-check of operand ``v`` at ``slot`` against ``checked[slot]``: its pointer into ``ptrs``, ``placement``
    set from the first device operand that matches; ``miss`` are the lines run where its class is not the checked
    one or a field differs. ``exits``: ``miss`` leaves the loop (the bound execute's ``return slow(...)``), so the
    pointer is read only once the operand matched; else its pointer is read first (the general path's, which checks
    a missed operand in full then), the general way for another class. ``ints``: an int is taken as its pointer (it
    carries no metadata: the caller's responsibility)."""
    unpack = f"{', '.join('seen_cls' if f == 'cls' else f for f in CHECKED)} = checked[slot]"
    differs = _torch_differs(terms, v, False)
    torch_ptr = f"ptrs[slot] = {TORCH_POINTER.format(v=v)}"
    lines = [f"cls = {v}.__class__"]
    if ints:
        lines += ["if cls is int:", f"    ptrs[slot] = {v}", "    continue"]
    if exits:  # nothing read that a miss would not need
        lines += [unpack, "if seen_cls is not cls:", *(f"    {m}" for m in miss),
                  "if kind:", f"    if {differs}:", *(f"        {m}" for m in miss), f"    {torch_ptr}",
                  f"elif signature({v}) != sig:", *(f"    {m}" for m in miss),
                  "else:", f"    ptrs[slot] = getter({v})"]
    else:
        lines += [unpack, "if seen_cls is not cls:", f"    ptrs[slot] = data_ptr({v})", *(f"    {m}" for m in miss),
                  "    continue",
                  "if kind:", f"    {torch_ptr}", f"    if {differs}:", *(f"        {m}" for m in miss),
                  "        continue",
                  "else:", f"    ptrs[slot] = getter({v})", f"    if signature({v}) != sig:",
                  *(f"        {m}" for m in miss), "        continue"]
    return lines + ["if placement is None:", "    placement = where"]


def _loop_lines(terms: tuple[Term, ...], miss: list[str], exits: bool, extras: bool, slot_of: str,
                unknown: list[str], bound: str, aliases: str) -> list[str]:
    """The operand loop of a form: every pack entry, then (``extras``) data bound at build time, re-checked the
    same way unless the pack rebinds its slot, and the views' pointers made from their sources'."""
    lines = ["for key, value in variant_pack.items():", f"    slot = {slot_of}(key)", "    if slot is None:"]
    lines += [f"        {line}" for line in unknown]
    lines += [f"    {line}" for line in _operand_block(terms, "value", miss, exits, ints=True)]
    if extras:
        lines += [f"for slot, value in {bound}:", "    if ptrs[slot] != template[slot]:", "        continue"]
        lines += [f"    {line}" for line in _operand_block(terms, "value", miss, exits, ints=False)]
        lines += [f"for view, source, offset in {aliases}:",
                  "    ptrs[view] = ptrs[source] + offset if ptrs[source] else 0"]
    return lines


def _checked_source(terms: tuple[Term, ...]) -> str:
    """The source of ``Executor.execute``'s comparison (a method: every pointer, and whether all match)."""
    unknown = ["if key is None:", "    continue", "slot = self._slot(key)",
               "if slot < 0 or slot in self._fixed:",
               "    continue  # read by no operation, or a scalar whose value the graph carries"]
    body = _loop_lines(terms, ["same = False"], False, True, "slots.get", unknown, "self._bound_items",
                       "self._aliases")
    lines = ["def resolve(self, variant_pack):",
             "    slots, checked, template = self._fast_slots, self._checked, self._template",
             "    ptrs = template.copy()", "    placement, same = None, True",
             *(f"    {line}" for line in body), "    return ptrs, same, placement"]
    return "\n".join(lines) + "\n"


def fast_operand_lines(extras: bool, terms: tuple[Term, ...] = TORCH_TERMS) -> list[str]:
    """The bound execute's re-check (``execute_fast.py`` inlines it into its template): the pointers into ``ptrs``
    (a copy of ``template``) and the placement, or ``return slow(variant_pack, workspace, handle)`` (to
    ``Executor.execute``) at the first key or operand that is not as checked. ``extras``: the executor has data
    bound at build time or views."""
    slow = ["return slow(variant_pack, workspace, handle)"]
    return ["ptrs = template.copy()", "placement = None",
            *_loop_lines(terms, slow, True, extras, "slots_get", slow, "bound_items", "aliases")]


def split_operand_lines(terms: tuple[Term, ...] = TORCH_TERMS) -> list[str]:
    """The operands of the split form (``Executor.fast_trusted``): ``variant_pack`` is a sequence, its first
    ``len(checked_slots)`` operands re-checked as the bound execute re-checks each (into ``ptrs``, the placement
    from the first), the rest read for their pointers alone at ``trusted_slots`` (their signatures the caller's
    guarantee); any miss: ``slow``, the checked execute. The placement, where no operand was re-checked, is the one
    the first trusted slot's last full check recorded (none: the slots were reset, the checked execute)."""
    slow = ["return slow(variant_pack, workspace, handle)"]
    lines = ["ptrs = template.copy()", "placement = None",
             "for slot, value in zip(checked_slots, variant_pack):",
             *(f"    {line}" for line in _operand_block(terms, "value", slow, True, ints=False)),
             "for slot, value in zip(trusted_slots, variant_pack[len(checked_slots):]):",
             f"    ptrs[slot] = {TORCH_POINTER.format(v='value')}",
             "if placement is None:",
             "    placement = checked[trusted_slots[0]][4]",
             "    if placement is None:",
             f"        {slow[0]}"]
    return lines


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
def resolve_checked(terms: tuple[Term, ...] = TORCH_TERMS) -> Callable[..., Any]:
    """``OperandSlots._resolve``'s comparison: ``(self, variant_pack) -> (pointers, all matched, placement)``
    (compiled once per description)."""
    return _compile(_checked_source(terms), "resolve_checked")["resolve"]


@functools.cache
def hot_matcher(n: int, terms: tuple[Term, ...] = TORCH_TERMS) -> Callable[[dict, tuple, tuple], bool]:
    """The steady state's check of a pack of ``n`` operands: ``(variant_pack, keys, rows) -> bool`` (compiled once
    per n and description)."""
    return _compile(_hot_source(terms, n), f"hot_matcher({n})")["matches"]
