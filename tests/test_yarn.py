"""``cudnn.yarn``: YaRN's frequency table and temperature, against the definition recomputed in float64 (numpy)."""
from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="cudnn.yarn works on torch tensors")
yarn = pytest.importorskip("cudnn_py.yarn")


def _turns(i: np.ndarray, dim: int, base: float, context: int) -> np.ndarray:
    """How many full turns rotary pair i makes within the original context (its wavelength is 2 pi base^(2i/dim))."""
    return context / (2 * math.pi * base ** (2 * i / dim))


def _reference_inv_freq(dim, base, s, context, beta_fast, beta_slow):
    i = np.arange(dim // 2, dtype=np.float64)
    rope = 1.0 / base ** (2 * i / dim)
    if s <= 1:
        return rope
    # the ramp's ends: the (fractional) dims making beta_fast and beta_slow turns, floored / ceiled and clamped
    solve = lambda turns: dim * math.log(context / (turns * 2 * math.pi)) / (2 * math.log(base))  # noqa: E731
    low, high = max(math.floor(solve(beta_fast)), 0), min(math.ceil(solve(beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    interpolated = np.clip((i - low) / (high - low), 0, 1)  # 0 below low (fast dims keep RoPE), 1 above high
    return rope * (1 - interpolated) + rope / s * interpolated


@pytest.mark.parametrize("dim,base,s,context,fast,slow", [
    (64, 10000.0, 40.0, 4096, 32.0, 1.0), (128, 500000.0, 8.0, 8192, 32.0, 1.0), (64, 10000.0, 1.0, 4096, 32.0, 1.0),
    (16, 10000.0, 4.0, 2048, 2.0, 1.0), (8, 100.0, 2.0, 64, 32.0, 16.0)])
def test_inverse_frequencies_follow_the_definition(dim, base, s, context, fast, slow):
    got = yarn.compute_yarn_inv_freq(dim, base=base, scaling_factor=s, original_max_position=context,
                                     beta_fast=fast, beta_slow=slow, device="cpu", dtype=torch.float64)
    want = _reference_inv_freq(dim, base, s, context, fast, slow)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    if s > 1:  # the fastest dims are RoPE's and the slowest are RoPE's slowed by s
        i = np.arange(dim // 2)
        fast_dims = _turns(i, dim, base, context) > fast
        np.testing.assert_allclose(got.numpy()[fast_dims], (1.0 / base ** (2 * i / dim))[fast_dims], rtol=1e-12)


def test_freqs_table_layout_and_temperature():
    freqs, mscale = yarn.compute_yarn_freqs(37, 64, scaling_factor=40.0, device="cpu", dtype=torch.float64)
    assert freqs.shape == (37, 1, 1, 64) and freqs.dtype == torch.float64
    inv = _reference_inv_freq(64, 10000.0, 40.0, 4096, 32.0, 1.0)
    np.testing.assert_allclose(freqs[:, 0, 0, :32].numpy(), np.outer(np.arange(37), inv), rtol=1e-12)
    assert not freqs[:, 0, 0, 32:].any()  # the rope reads only the first half
    assert mscale == pytest.approx(0.1 * math.log(40.0) + 1)
    _, ratio = yarn.compute_yarn_freqs(4, 8, scaling_factor=40.0, mscale_factor=1.0, mscale_all_dim_factor=1.0,
                                       device="cpu")
    assert ratio == pytest.approx(1.0)  # DeepSeek's form: equal factors cancel
    assert yarn.yarn_get_mscale(0.5) == 1.0 and yarn.yarn_get_mscale(1.0) == 1.0
    assert yarn.compute_yarn_freqs(3, 8, device="cpu")[0].dtype == torch.float32  # the default dtype


def test_odd_head_dim_is_refused():
    with pytest.raises(ValueError, match="even head_dim"):
        yarn.compute_yarn_inv_freq(63, device="cpu")
