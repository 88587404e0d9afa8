"""A batch of padded size one along a dynamic dimension (``x[:, :1]``, ``x[:, -1:]``)
broadcasts against the longer examples of another argument, as each example's size one
does in the loop; an empty example broadcasts only against an example of size zero or one.

The oracle is the loop over examples (``mb_assert``: values and gradients), in float32 and
float64, with NaN padding, empty and one-long examples and a batch of one.
"""

from __future__ import annotations

import pytest
import torch

from matchbox import MaskedBatch
from matchbox.testing import mb_assert

LENGTHS = [(3, 0, 1, 2), (1,), (0,), (4,), (2, 2)]


def _batch(lengths, dtype, *rest):
    torch.manual_seed(0)
    xs = [torch.randn(1, n, *rest, dtype=dtype) for n in lengths]
    return xs, MaskedBatch.fromlist(xs, (True,) + (False,) * len(rest),
                                    padding_value=float("nan"))


FIRST_OR_LAST = {
    "x - x[:, :1]": lambda x: x - x[:, :1],
    "x - x[:, -1:]": lambda x: x - x[:, -1:],
    "x[:, :1] * x": lambda x: x[:, :1] * x,
    "x / norm(x[:, :1])": lambda x: x / (x[:, :1].norm(dim=-1, keepdim=True) + 1),
    "x / x[:, -1:]": lambda x: x / (x[:, -1:] ** 2 + 1),
    "maximum(x, x[:, -2:-1])": lambda x: torch.maximum(x, x[:, -2:-1] + 0.5),
    "where(x > x[:, :1])": lambda x: torch.where(x > x[:, :1], x, x[:, -1:]),
    "x - x[:, :1].mean(-1, keepdim)": lambda x: x - x[:, :1].mean(-1, keepdim=True),
}


@pytest.mark.parametrize("f", FIRST_OR_LAST.values(), ids=FIRST_OR_LAST.keys())
@pytest.mark.parametrize("lengths", LENGTHS, ids=str)
def test_a_slice_of_size_one_broadcasts_as_in_the_loop(f, lengths, dtype):
    xs, xb = _batch(lengths, dtype, 3)
    mb_assert(f, [xs], [xb], len(lengths))


def test_the_last_position_has_padded_size_one():
    _, xb = _batch((3, 0, 1, 2), torch.float64, 3)
    assert xb[:, -1:].data.size(1) == 1
    assert xb[:, -2:-1].data.size(1) == 1
    assert xb[:, -2:].data.size(1) == 2
    assert xb[:, -5:].data.size(1) == 3  # never wider than the batch


@pytest.mark.parametrize("f", [lambda x: x - x[:, :1], lambda x: x - x[:, :, -1:],
                               lambda x: x * x[:, :1, :1]], ids=["dim1", "dim2", "both"])
def test_two_dynamic_dimensions_broadcast_each(f, dtype):
    torch.manual_seed(0)
    xs = [torch.randn(1, n, m, dtype=dtype) for n, m in [(3, 2), (0, 2), (1, 4), (2, 0), (2, 1)]]
    xb = MaskedBatch.fromlist(xs, (True, True), padding_value=float("nan"))
    mb_assert(f, [xs], [xb], len(xs))


def test_an_empty_example_of_size_one_slice_needs_the_others_of_size_at_most_one():
    # Example 1 is empty in `first` and of size 2 in `x`: the loop raises (0 against 2).
    xs = [torch.randn(1, 3, 4), torch.randn(1, 2, 4)]
    xb = MaskedBatch.fromlist(xs, (True, False))
    first = MaskedBatch.fromlist([torch.randn(1, 1, 4), torch.randn(1, 0, 4)], (True, False))
    with pytest.raises(RuntimeError):
        xs[1] - torch.randn(1, 0, 4)
    with pytest.raises(ValueError, match=r"Tensor.__sub__: example 1 has size 2 in one argument "
                                         r"and 0 in another along dynamic dimension 1; the "
                                         r"examples would not combine in a loop either"):
        xb - first


def test_an_empty_slice_beside_examples_of_size_one_is_empty():
    xs = [torch.randn(1, 1, 4, dtype=torch.float64), torch.randn(1, 0, 4, dtype=torch.float64),
          torch.randn(1, 3, 4, dtype=torch.float64)]
    ss = [torch.randn(1, 0, 4, dtype=torch.float64), torch.randn(1, 1, 4, dtype=torch.float64),
          torch.randn(1, 1, 4, dtype=torch.float64)]
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))
    sb = MaskedBatch.fromlist(ss, (True, False), padding_value=float("nan"))
    mb_assert(lambda x, s: x * s, [xs, ss], [xb, sb], 3)
