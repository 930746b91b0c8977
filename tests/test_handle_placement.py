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
    wrapped = handle.Handle(0x7E57_1000, 2)  # a foreign handle wrapped by the caller (1.32): adopted
    try:
        assert handle.placement_of(wrapped) == (2, None) and not live.lookup(wrapped).owned
        live.unregister(0x7E57_1000, destroyed=False)
        assert handle.placement_of(wrapped) == (2, None)  # not registered: its own attributes answer
    finally:
        live.unregister(0x7E57_1000, destroyed=False)
