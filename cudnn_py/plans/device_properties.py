"""``cudnn.create_device_properties(device_id | json)``: a ``CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR`` for deviceless
(ahead-of-time) planning (cuDNN >= 9.8).

From a device id cuDNN reads that GPU's properties (``DEVICEPROP_DEVICE_ID``, INT32; finalize). ``serialize()``
writes them as JSON, and ``create_device_properties(json)`` rebuilds them on a machine without that GPU. A graph
given ``pygraph(device_property=dp)`` plans for those properties: heuristics get ``ENGINEHEUR_DEVICEPROP``,
explicit engines ``ENGINE_DEVICEPROP``, the operation graph has no handle and plans are finalized without one.

What cuDNN 9.28 allows without a GPU (the CPU machine, libcuda stand-in): a descriptor from a device id does not
finalize (``NOT_INITIALIZED``: cuDNN's ``cudaDeviceGetAttribute`` fails); a JSON must be one cuDNN wrote. A
hand-written one is refused at finalize (``BAD_PARAM``): cuDNN names the first fields it misses (``maxGridSize`` and
``maxBlockSize``, arrays; ``smCountOrigin`` must be 1 of 0..3), then stops naming them (``HasMember(key)``) even
with every field name found in libcudnn_graph given - so the JSON has to come from a machine with the GPU.
cuDNN 9.28 also accepts some JSON it should not (``warpSize`` 0, ``multiProcessorCount`` -1, ``maxGridSize`` of
strings): ``backend/json_check.py`` checks every field's type and range first (``SerializedJSONError``).
"""
from __future__ import annotations

from .._generated.names import attr, desc
from ..errors import CudnnError, InvalidTypeError, InvalidValueError
from .backend_json import read_json_attribute

# the descriptor layer, json_check and the version gates are imported by the calls that use them (not at import:
# reading `cudnn_py.pygraph` imports this module for its isinstance check)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..backend.descriptor import Descriptor

KIND = desc.DEVICEPROP_DESCRIPTOR
_JSON = attr.DEVICEPROP_JSON_REPRESENTATION


class DeviceProperties:
    """The classic ``device_properties`` object: ``serialize() -> str``; pass it to ``pygraph(device_property=)``."""

    def __init__(self, descriptor: Descriptor, device_id: int | None):
        self.descriptor = descriptor  # finalized
        self.device_id = device_id  # the GPU it was read from; None when rebuilt from JSON

    @classmethod
    def from_device(cls, device_id: int) -> DeviceProperties:
        from ..backend.descriptor import Descriptor

        desc = Descriptor(KIND)
        desc.set(attr.DEVICEPROP_DEVICE_ID, int(device_id))
        try:
            desc.finalize()
        except CudnnError as e:
            e.args = (f"create_device_properties({device_id}): cuDNN could not read the properties of CUDA device "
                      f"{device_id} (building them from a device needs that GPU; on a machine without it, pass the "
                      f"JSON that serialize() wrote where the GPU is): {e.args[0]}",)
            raise
        return cls(desc, int(device_id))

    @classmethod
    def from_json(cls, text: str) -> DeviceProperties:
        if not text:
            raise InvalidValueError("create_device_properties(json): the JSON is empty")
        from ..backend import json_check
        from ..backend.descriptor import Descriptor

        json_check.check_device_properties(text, "create_device_properties(json): device properties JSON")
        desc = Descriptor(KIND)
        desc.set(_JSON, text)
        try:
            desc.finalize()
        except CudnnError as e:
            raise InvalidValueError(f"create_device_properties(json): cuDNN refused the JSON (it takes what "
                             f"device_properties.serialize() wrote): {e}") from e
        return cls(desc, None)

    def serialize(self) -> str:
        """The properties as cuDNN's JSON (``DEVICEPROP_JSON_REPRESENTATION``)."""
        return read_json_attribute(self.descriptor, _JSON, "device_properties.serialize()")

    def __repr__(self) -> str:
        source = f"device {self.device_id}" if self.device_id is not None else "JSON"
        return f"<device_properties from {source}, descriptor #{self.descriptor.id}>"


def create_device_properties(device_id_or_json: int | str) -> DeviceProperties:
    """Classic ``cudnn.create_device_properties(device_id)`` or ``(json)``."""
    from ..backend import versions

    versions.require(KIND, what="create_device_properties()")
    arg = device_id_or_json
    if isinstance(arg, bytes):
        arg = arg.decode()
    if isinstance(arg, str):
        return DeviceProperties.from_json(arg)
    if isinstance(arg, bool) or not isinstance(arg, int):
        raise InvalidTypeError(f"create_device_properties() takes a device id (int) or the JSON serialize() wrote "
                               f"(str), "
                        f"not {type(arg).__name__}")
    if not 0 <= arg < 1 << 31:
        raise InvalidValueError(f"create_device_properties({arg}): a CUDA device id is a non-negative int32")
    return DeviceProperties.from_device(arg)
