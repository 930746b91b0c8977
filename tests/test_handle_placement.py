"""backend.handle.placement_of: a handle's device and context from one registry record."""
from __future__ import annotations

from cudnn_py.backend import handle, live


def test_placement_of_reads_device_and_context_from_one_record(monkeypatch):
    ptr = 0x7E57_0000
    live.register(ptr, 1, owned=False, origin="adopt_handle", context=0xC0)
    lookups: list = []
    real = live.lookup
    monkeypatch.setattr(live, "lookup", lambda v: lookups.append(v) or real(v))
    try:
        assert handle.placement_of(ptr) == (1, 0xC0) and len(lookups) == 1
        assert handle.device_of(ptr) == 1 and handle.context_of(ptr) == 0xC0
    finally:
        live.unregister(ptr, destroyed=False)
    unknown = handle.Handle(0x7E57_1000, 2)  # not registered: its own attributes answer
    assert handle.placement_of(unknown) == (2, unknown.context)
