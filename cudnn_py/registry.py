"""The tables the op families fill: one :class:`Registry` per facet (the IR's specs, the lowerings, the float64
references), owned by the generic core that reads it.

The cores sit below the families in the layering, so they never import a family. Instead the families package
(``cudnn_py/families/``, one registration list) hands this module a *filler* when it is imported; a registry that
is read before its facet was loaded asks the filler to import that facet of every family, once. A family module
adds its entries with :meth:`Registry.add` (through the core's decorator: ``register``, ``@lowers``,
``@reference``). So the arrows point down: a family imports its core's registry, and the core finds its entries
without naming a family. Reading a registry before any filler exists (the families package was never imported)
gives what was added so far.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

from .errors import InvalidValueError

SPEC, LOWERING, REFERENCE = "spec", "lowering", "reference"
FACETS = (SPEC, LOWERING, REFERENCE)

Entry = TypeVar("Entry")

_filler: Callable[[str], None] | None = None
_filling = threading.local()  # .facets: the facets this thread is filling now


def fill_with(filler: Callable[[str], None]) -> None:
    """Install ``filler(facet)``: imports that facet of every family (the families package calls this)."""
    global _filler
    _filler = filler


class Registry(Mapping[str, Entry], Generic[Entry]):
    """``key -> entry`` for one facet, filled by the families on first read; a key is added once."""

    __slots__ = ("_entries", "_filled", "facet", "what")

    def __init__(self, facet: str, what: str) -> None:
        if facet not in FACETS:
            raise InvalidValueError(f"unknown facet {facet!r}; one of {FACETS}")
        self.facet = facet
        self.what = what  # for the duplicate message: "lowering", "reference function", "op spec"
        self._entries: dict[str, Entry] = {}
        self._filled = False

    def add(self, key: str, entry: Entry) -> None:
        if key in self._entries:
            raise InvalidValueError(f"{key!r} has two {self.what}s")
        self._entries[key] = entry

    def fill(self) -> dict[str, Entry]:
        """The entries, after the families' modules of this facet were imported (once a filler exists).

        Threads: ``_filled`` is set only once the filler has returned, so a thread never reads a registry another
        thread is still filling (it once saw a lowering missing: "no backend lowering for this op kind"). Each
        thread that comes before that runs the filler itself: the filler only imports modules, and Python's import
        locks make it wait for a module another thread is importing, so when it returns every module is loaded.
        A family module that reads its own registry while this thread loads it gets what was added so far (the
        per-thread guard: no recursion)."""
        if not self._filled and _filler is not None:
            busy: set[str] | None = getattr(_filling, "facets", None)
            if busy is None:
                busy = _filling.facets = set()
            if self.facet not in busy:
                busy.add(self.facet)
                try:
                    _filler(self.facet)
                finally:
                    busy.discard(self.facet)
                self._filled = True
        return self._entries

    def __getitem__(self, key: str) -> Entry:
        return self.fill()[key]

    def get(self, key: str, default: Entry | None = None) -> Entry | None:  # type: ignore[override]
        entries = self._entries if self._filled else self.fill()
        return entries.get(key, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self.fill())

    def __len__(self) -> int:
        return len(self.fill())

    def __contains__(self, key: object) -> bool:
        return key in self.fill()

    def __repr__(self) -> str:
        return f"Registry({self.facet!r}, {len(self._entries)} entries{'' if self._filled else ', not filled'})"


__all__ = ["FACETS", "LOWERING", "REFERENCE", "SPEC", "Registry", "fill_with"]
