"""Scaled dot-product attention, backward (sdpa_backward, a composite; attention_view): spec, lowering, reference."""
from ... import ir as _ir  # noqa: F401  (first: the IR registers every family's spec, this one's included)
