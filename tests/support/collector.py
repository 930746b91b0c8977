"""The cyclic garbage collector switched off for a block (tests of what goes by reference counting alone)."""
from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_off() -> Iterator[None]:
    """One collection first (earlier garbage is not counted), then the collector off inside the block: an object
    kept alive by a reference cycle stays alive there. The collector's state before is restored after."""
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        (gc.enable if was else gc.disable)()
