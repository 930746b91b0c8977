"""Environment switches of the planning layer: features that are on unless a variable turns them off."""
from __future__ import annotations

from ..cache_home import OFF_VALUES, switched_off  # noqa: F401  (one reading of an off switch for the package)
