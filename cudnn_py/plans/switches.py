"""Environment switches of the planning layer: features that are on unless a variable turns them off."""
from __future__ import annotations

import os

OFF_VALUES = ("0", "off", "false", "no")  # case and surrounding blanks ignored


def switched_off(variable: str) -> str | None:
    """``"VARIABLE=value"`` when the environment turns the feature off, else None (unset or any other value)."""
    value = os.environ.get(variable)
    if value is not None and value.strip().lower() in OFF_VALUES:
        return f"{variable}={value}"
    return None
