"""bilinear / nn.Bilinear on batches equal the loop (linear itself: test_recurrent_cells.py)."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from matchbox import MaskedBatch
from matchbox.testing import mb_assert

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def pair(lengths, dtype, trailing=(), sizes=(3, 2), padding=float("nan")):
    """Two batches of the same examples' layout, feature sizes ``sizes``."""
    first = [torch.randn(1, n, *trailing, sizes[0], dtype=dtype) for n in lengths]
    second = [torch.randn(1, n, *trailing, sizes[1], dtype=dtype) for n in lengths]
    dims = (True,) + (False,) * (len(trailing) + 1)
    return (first, second, MaskedBatch.fromlist(first, dims, padding_value=padding),
            MaskedBatch.fromlist(second, dims, padding_value=padding))


@pytest.mark.parametrize("bias", [True, False])
def test_module_matches_loop(bias, dtype):
    for lengths in ([0, 1, 4, 2], [3]):
        xs, ys, xb, yb = pair(lengths, dtype)
        module = torch.nn.Bilinear(3, 2, 4, bias=bias).to(dtype)
        mb_assert(module, [xs, ys], [xb, yb], len(lengths))


def test_functional_with_static_trailing_dims(dtype):
    xs, ys, xb, yb = pair([2, 0, 3], dtype, trailing=(2,))
    w, b = torch.randn(4, 3, 2, dtype=dtype), torch.randn(4, dtype=dtype)
    mb_assert(lambda x, y, w, b: F.bilinear(x, y, w, b), [xs, ys, [w] * 3, [b] * 3],
              [xb, yb, w, b], 3)


def padded_further(y, extra=2):
    """The same examples as ``y`` with ``extra`` more (NaN) padding steps."""
    if not isinstance(y, MaskedBatch):
        return y
    b, _, f = y.data.shape
    data = torch.cat([y.data, y.data.new_full((b, extra, f), float("nan"))], 1)
    mask = torch.cat([y.mask, y.mask.new_zeros(b, extra, 1)], 1)
    return MaskedBatch(data, mask, y.dims)


def test_batches_padded_to_different_sizes(dtype):
    xs, ys, xb, yb = pair([1, 3], dtype)
    module = torch.nn.Bilinear(3, 2, 4).to(dtype)
    mb_assert(lambda x, y: module(x, padded_further(y)), [xs, ys], [xb, yb], 2,
              params=list(module.parameters()))


@given(batch=st.integers(1, 5), max_len=st.integers(0, 6), seed=st.integers(0, 10_000),
       dtype=st.sampled_from([torch.float32, torch.float64]))
def test_hypothesis_shapes(batch, max_len, seed, dtype):
    rng = random.Random(seed)
    xs, ys, xb, yb = pair([rng.randint(0, max_len) for _ in range(batch)], dtype)
    mb_assert(torch.nn.Bilinear(3, 2, 2).to(dtype), [xs, ys], [xb, yb], batch)


def test_errors():
    xs, ys, xb, yb = pair([1, 2], torch.float32)
    w = torch.randn(4, 3, 2)
    with pytest.raises(NotImplementedError, match=r"torch.bilinear: input1 and input2 must both "
                                                  r"be batches"):
        F.bilinear(xb, torch.randn(1, 1, 2), w)
    with pytest.raises(ValueError, match=r"torch.bilinear: example 0 has size 1 in one argument "
                                         r"and 2 in another"):
        F.bilinear(xb, MaskedBatch.fromlist([ys[1], ys[0]], (True, False)), w)
    with pytest.raises(ValueError, match=r"torch.bilinear: input1 has dims \(True, False\) but "
                                         r"input2 has \(False, True\)"):
        F.bilinear(xb, MaskedBatch.fromlist([torch.rand(1, 1, 2)] * 2, (False, True)), w)
    with pytest.raises(NotImplementedError, match=r"torch.bilinear: weight and bias must be plain "
                                                  r"tensors shared by every example"):
        F.bilinear(xb, yb, MaskedBatch(w[None].expand(2, 4, 3, 2), None, (False,) * 3))
    dynamic = MaskedBatch.fromlist([torch.rand(1, 3), torch.rand(1, 2)], (True,))
    with pytest.raises(ValueError, match=r"torch.bilinear: the feature dimension \(the last\) of "
                                         r"the inputs is dynamic"):
        F.bilinear(dynamic, dynamic, torch.randn(1, 3, 3))


@needs_cuda
def test_on_cuda():
    xs, ys, xb, yb = pair([0, 1, 4], torch.float64)
    xs, ys, xb, yb = [x.cuda() for x in xs], [y.cuda() for y in ys], xb.cuda(), yb.cuda()
    mb_assert(torch.nn.Bilinear(3, 2, 4).double().cuda(), [xs, ys], [xb, yb], 3)


def test_linear_errors_name_the_example_not_the_flattened_batch():
    xb = MaskedBatch.fromlist([torch.rand(1, n, 4) for n in (3, 1, 5)], (True, False))
    # PyTorch's own message would say "(15x4 and 5x2)": the padded batch, flattened.
    with pytest.raises(ValueError, match=r"torch.nn.functional.linear: each example has 4 "
                                         r"features \(its last dimension\) but the weight of "
                                         r"shape \(2, 5\) expects 5"):
        torch.nn.Linear(5, 2)(xb)
    scalars = MaskedBatch.fromlist([torch.rand(1), torch.rand(1)], ())
    with pytest.raises(ValueError, match=r"torch.nn.functional.linear: the feature dimension "
                                         r"\(the last\) would cover dimension 0 of each "
                                         r"example, its batch dimension \(size one\): examples "
                                         r"of rank 1"):
        F.linear(scalars, torch.randn(2, 1))
    dynamic = MaskedBatch.fromlist([torch.rand(1, 3), torch.rand(1, 2)], (True,))
    with pytest.raises(ValueError, match=r"torch.nn.functional.linear: the feature dimension "
                                         r"\(the last\) covers dimension 1, which is dynamic"):
        F.linear(dynamic, torch.randn(2, 3))
