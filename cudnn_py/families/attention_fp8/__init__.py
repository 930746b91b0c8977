"""Per-tensor FP8 attention, forward and backward (composites, no lowering): spec, float64 reference."""
from ... import ir as _ir  # noqa: F401  (first: the IR registers every family's spec, this one's included)
