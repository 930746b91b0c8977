"""``cudnn.experimental``: the official module's experimental namespace. Its ``ops`` are lazy aliases of operators
that live with their families (``cudnn.experimental.ops.rms_norm`` is ``cudnn.ops.norm.rms_norm``)."""
from __future__ import annotations

from . import ops

__all__ = ["ops"]
