"""``x.maxsize(d)`` (a ``PaddedSize``) or ``x.size(0)`` as the output size of an op whose
output depends on that size (adaptive pooling, ``F.interpolate``/``nn.Upsample``): each
example's own size in the loop, the longest example's on the batch, so refused
(``TypeError``) rather than silently pooled to the longest's size; a plain int equals the
loop.

Adaptive pooling of an input static in its pooled dimensions used to hand the padded size
to PyTorch's op as it was (a batch of outputs all the longest example's size).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from matchbox import MaskedBatch
from matchbox.testing import mb_assert

DTYPES = [torch.float32, torch.float64]
PADDED = r"output_size must be the same int for every example .*x\.maxsize\(1\) is the " \
         r"padded size of dimension 1, which is dynamic"
BATCH_SIZE = r"output_size must be the same int for every example .*x\.size\(0\) of a " \
             r"MaskedBatch"
RESAMPLED = r"x\.maxsize\(1\) is the padded size of dimension 1, which is dynamic"

POOLS = {
    "adaptive_avg_pool1d": (1, lambda h, t: F.adaptive_avg_pool1d(h, t)),
    "adaptive_max_pool1d": (1, lambda h, t: F.adaptive_max_pool1d(h, t)),
    "adaptive_max_pool1d indices": (1, lambda h, t: F.adaptive_max_pool1d(h, t, True)),
    "AdaptiveAvgPool1d": (1, lambda h, t: torch.nn.AdaptiveAvgPool1d(t)(h)),
    "AdaptiveMaxPool1d": (1, lambda h, t: torch.nn.AdaptiveMaxPool1d(t)(h)),
    "adaptive_avg_pool2d": (2, lambda h, t: F.adaptive_avg_pool2d(h, t)),
    "adaptive_avg_pool2d pair": (2, lambda h, t: F.adaptive_avg_pool2d(h, (2, t))),
    "adaptive_max_pool2d pair with None": (2, lambda h, t: F.adaptive_max_pool2d(h, (t, None))),
    "AdaptiveMaxPool2d": (2, lambda h, t: torch.nn.AdaptiveMaxPool2d((t, 1))(h)),
}
RESAMPLING = {
    "interpolate": lambda h, t: F.interpolate(h, size=t),
    "interpolate linear": lambda h, t: F.interpolate(h, size=t, mode="linear"),
    "Upsample": lambda h, t: torch.nn.Upsample(size=t)(h),
}


def _inputs(n, lengths, dtype, static_sizes=(7, 3)):
    """``x``: a batch dynamic in dimension 1 (``x.maxsize(1)``: the longest of ``lengths``);
    ``h``: a batch static in its pooled dimensions (every example the same sizes)."""
    torch.manual_seed(0)
    xs = [torch.randn(1, t, 4, dtype=dtype) for t in lengths]
    hs = [torch.randn(1, 2, *static_sizes[:n], dtype=dtype) for _ in lengths]
    return (xs, MaskedBatch.fromlist(xs, (True, False)), hs,
            MaskedBatch.fromlist(hs, (False,) * (n + 1)))


@pytest.mark.parametrize("name", POOLS)
@pytest.mark.parametrize("lengths", [[5, 3], [4], [6, 0, 1]])
@pytest.mark.parametrize("dtype", DTYPES)
def test_adaptive_pooling_to_a_padded_size_is_refused(name, lengths, dtype):
    n, pool = POOLS[name]
    _, xb, _, hb = _inputs(n, lengths, dtype)
    with pytest.raises(TypeError, match=PADDED):
        pool(hb, xb.maxsize(1))


@pytest.mark.parametrize("name", POOLS)
def test_adaptive_pooling_to_the_batch_size_is_refused(name):
    n, pool = POOLS[name]
    _, xb, _, hb = _inputs(n, [2, 3], torch.float64)
    with pytest.raises(TypeError, match=BATCH_SIZE):
        pool(hb, xb.size(0))


@pytest.mark.parametrize("name", RESAMPLING)
@pytest.mark.parametrize("dtype", DTYPES)
def test_resampling_to_a_padded_size_is_refused(name, dtype):
    _, xb, _, hb = _inputs(1, [5, 3, 0], dtype)
    with pytest.raises(TypeError, match=RESAMPLED):
        RESAMPLING[name](hb, xb.maxsize(1))


@pytest.mark.parametrize("name", POOLS)
@pytest.mark.parametrize("lengths", [[5, 3], [4], [6, 0, 1]])
@pytest.mark.parametrize("dtype", DTYPES)
def test_adaptive_pooling_of_a_static_input_to_a_plain_int_equals_the_loop(name, lengths,
                                                                           dtype):
    n, pool = POOLS[name]
    _, _, hs, hb = _inputs(n, lengths, dtype)

    def f(h):
        out = pool(h, 5)
        return out[0] + 2 * out[1] if isinstance(out, tuple) else out

    mb_assert(f, [hs], [hb], len(hs))


@pytest.mark.parametrize("name", RESAMPLING)
@pytest.mark.parametrize("dtype", DTYPES)
def test_resampling_a_static_input_to_a_plain_int_equals_the_loop(name, dtype):
    _, _, hs, hb = _inputs(1, [5, 3, 0], dtype)
    mb_assert(lambda h: RESAMPLING[name](h, 5), [hs], [hb], len(hs))
