"""Reading a CHAR JSON attribute (``KERNEL_CACHE_JSON_REPRESENTATION``, ``DEVICEPROP_JSON_REPRESENTATION``):
count, then fill. A kernel cache can grow between the two calls (another graph's plan adds a kernel), and cuDNN
9.28 then answers the fill with ``BAD_PARAM_SIZE_INSUFFICIENT``; the frontend gives up
there, we count again."""
from __future__ import annotations

from .._generated.names import Status
from ..errors import CudnnError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..backend.descriptor import Descriptor

JSON_READ_ATTEMPTS = 4


def read_json_attribute(desc: Descriptor, attribute: str, what: str) -> str:
    """The JSON text of ``attribute`` (``Descriptor.get`` counts and fills); retried while the fill finds the
    buffer too small. ``what`` names the object for the error message."""
    for _ in range(JSON_READ_ATTEMPTS - 1):
        try:
            return str(desc.get(attribute))
        except CudnnError as e:
            if e.status_name != Status.BAD_PARAM_SIZE_INSUFFICIENT:
                raise
    try:
        return str(desc.get(attribute))
    except CudnnError as e:
        if e.status_name == Status.BAD_PARAM_SIZE_INSUFFICIENT:
            e.args = (f"{what}: the JSON kept growing between the size query and the read ({JSON_READ_ATTEMPTS} "
                      f"attempts): {e.args[0]}",)
        raise
