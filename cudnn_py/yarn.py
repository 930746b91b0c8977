"""YaRN rotary-embedding frequencies (``cudnn.yarn``): the ``freqs`` table the graph's ``rope`` node reads and the
attention temperature to pass as its ``output_scale``, computed once on the host at model set-up.

YaRN (Peng et al., 2023, "YaRN: Efficient Context Window Extension of Large Language Models") stretches RoPE to a
longer context by treating each rotary dimension by its wavelength:

* dimensions that turn many times within the original context (short wavelengths, high frequencies) keep their
  frequency ("extrapolation");
* dimensions that turn less than once (long wavelengths) are slowed down by the scaling factor ("interpolation");
* between the two, the blend ramps linearly over the dimension range whose number of turns within the original
  context lies between ``beta_slow`` and ``beta_fast``.

and by sharpening the softmax with a temperature ``0.1 * ln(s) + 1``, which, folded into both q and k through the
rope's ``output_scale``, multiplies the attention logits by its square.

The functions take and return torch objects, as the official module's do (``device`` and ``dtype`` are torch's),
and compute in ``dtype`` on ``device``. This module is torch's side of the package: importing it imports torch
(``import cudnn_py`` does not), as importing the official ``cudnn.yarn`` does.
"""
from __future__ import annotations

import math

import torch

from .errors import InvalidValueError


def _correction_dim(turns: float, dim: int, base: float, original_max_position: int) -> float:
    """The (fractional) rotary dimension index that makes ``turns`` full turns within the original context:
    solving ``original_max_position / (2 pi base^(2i/dim)) = turns`` for ``i``."""
    return dim * math.log(original_max_position / (turns * 2.0 * math.pi)) / (2.0 * math.log(base))


def _ramp_range(beta_fast: float, beta_slow: float, dim: int, base: float, original_max_position: int) -> tuple:
    """[low, high]: below ``low`` a dimension is extrapolated, above ``high`` interpolated, clamped to the dims."""
    low = math.floor(_correction_dim(beta_fast, dim, base, original_max_position))
    high = math.ceil(_correction_dim(beta_slow, dim, base, original_max_position))
    return max(low, 0), min(high, dim - 1)


def yarn_get_mscale(scaling_factor: float, mscale_factor: float = 1.0) -> float:
    """The attention temperature ``0.1 * mscale_factor * ln(scaling_factor) + 1`` (1.0 when the factor is <= 1:
    YaRN is then plain RoPE)."""
    if scaling_factor <= 1.0:
        return 1.0
    return 0.1 * mscale_factor * math.log(scaling_factor) + 1.0


def compute_yarn_inv_freq(head_dim: int, *, base: float = 10000.0, scaling_factor: float = 1.0,
                          original_max_position: int = 4096, beta_fast: float = 32.0, beta_slow: float = 1.0,
                          device: torch.device | str = "cuda", dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The ``head_dim // 2`` inverse frequencies of YaRN (plain RoPE's when ``scaling_factor <= 1``), a 1-D torch
    tensor of ``dtype`` (default float32) on ``device``: ``angle[s, i] = s * inv_freq[i]``."""
    if head_dim % 2 != 0:
        raise InvalidValueError(f"YARN/RoPE require even head_dim, got {head_dim}")
    even = torch.arange(0, head_dim, 2, device=device, dtype=dtype)
    rope = 1.0 / (base ** (even / head_dim))  # plain RoPE: the extrapolated frequencies
    if scaling_factor <= 1.0:
        return rope
    slowed = rope / scaling_factor  # the interpolated frequencies
    low, high = _ramp_range(beta_fast, beta_slow, head_dim, base, original_max_position)
    if low == high:
        high = high + 0.001  # a ramp of zero width: a step at `low`
    ramp = torch.clamp((torch.arange(head_dim // 2, device=device, dtype=dtype) - low) / (high - low), 0.0, 1.0)
    keep = 1.0 - ramp  # 1: extrapolated (below low), 0: interpolated (above high)
    return slowed * (1.0 - keep) + rope * keep


def compute_yarn_freqs(max_seq_len: int, head_dim: int, *, base: float = 10000.0, scaling_factor: float = 1.0,
                       original_max_position: int = 4096, beta_fast: float = 32.0, beta_slow: float = 1.0,
                       mscale_factor: float = 1.0, mscale_all_dim_factor: float = 0.0,
                       device: torch.device | str = "cuda", dtype: torch.dtype = torch.float32,
                       ) -> tuple[torch.Tensor, float]:
    """``(freqs, mscale)``: ``freqs`` is ``[max_seq_len, 1, 1, head_dim]`` in the rope node's layout, the first half
    of the last dimension the angles ``position * inv_freq`` and the second half zeros (the rope reads only the
    first half); ``mscale`` the temperature for each rope's ``output_scale``: ``yarn_get_mscale(s, mscale_factor)``,
    divided by ``yarn_get_mscale(s, mscale_all_dim_factor)`` when that factor is not 0 (DeepSeek-V2/V3's form)."""
    inv_freq = compute_yarn_inv_freq(head_dim, base=base, scaling_factor=scaling_factor,
                                     original_max_position=original_max_position, beta_fast=beta_fast,
                                     beta_slow=beta_slow, device=device, dtype=dtype)
    positions = torch.arange(max_seq_len, device=device, dtype=dtype)
    freqs = torch.zeros(max_seq_len, 1, 1, head_dim, device=device, dtype=dtype)
    freqs[:, 0, 0, : head_dim // 2] = torch.outer(positions, inv_freq)
    mscale = yarn_get_mscale(scaling_factor, mscale_factor)
    if mscale_all_dim_factor != 0.0:
        mscale /= yarn_get_mscale(scaling_factor, mscale_all_dim_factor)
    return freqs, mscale


__all__ = ["compute_yarn_freqs", "compute_yarn_inv_freq", "yarn_get_mscale"]
