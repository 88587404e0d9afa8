"""torch.broadcast_tensors of batches and plain tensors against the per-example loop: each
argument expanded as the examples' would be, values and gradients (NaN padding, zero- and
one-length examples, a batch of one, plain tensors shared by every example)."""

from __future__ import annotations

import pytest
import torch

from matchbox import MaskedBatch
from matchbox.testing import mb_assert

NAN = float("nan")


def _batch(shapes, dims, dtype):
    xs = [torch.randn(1, *s, dtype=dtype) for s in shapes]
    return xs, MaskedBatch.fromlist(xs, dims, padding_value=NAN)


@pytest.mark.parametrize("lengths", [[3, 0, 1, 5], [2]])
def test_batches_and_shared_tensors_broadcast_like_the_loop(lengths, dtype):
    xs, xb = _batch([(n, 3) for n in lengths], (True, False), dtype)
    ys, yb = _batch([(n, 1) for n in lengths], (True, False), dtype)
    row = torch.randn(3, dtype=dtype)  # shared: broadcast over every example's positions
    column = torch.randn(1, 1, 1, dtype=dtype)
    size = len(lengths)
    # Each output on its own, and used with a NaN-padded batch: the shared tensors'
    # gradients sum the examples' real positions only.
    mb_assert(lambda x, y, r, c: torch.broadcast_tensors(x, y, r, c),
              [xs, ys, [row] * size, [column] * size], [xb, yb, row, column], size)
    mb_assert(lambda x, y, r: [t * x for t in torch.broadcast_tensors(r, y)],
              [xs, ys, [row] * size], [xb, yb, row], size)
    mb_assert(lambda x, r: sum((t * x).sum() for t in torch.broadcast_tensors(r, x)),
              [xs, [row] * size], [xb, row], size)


def test_static_examples_and_a_list_argument(dtype):
    xs, xb = _batch([(1, 4), (1, 4)], (False, False), dtype)
    ys, yb = _batch([(3, 1), (3, 1)], (False, False), dtype)
    mb_assert(lambda x, y: torch.broadcast_tensors(x, y), [xs, ys], [xb, yb], 2)
    out = torch.broadcast_tensors(xb, yb)
    assert isinstance(out, tuple) and all(o.dims == (False, False) for o in out)


def test_lengths_that_do_not_broadcast_are_refused_naming_the_op():
    _, xb = _batch([(3, 2), (2, 2)], (True, False), torch.float64)
    _, yb = _batch([(3, 2), (1, 2)], (True, False), torch.float64)
    with pytest.raises(ValueError, match=r"^torch\.broadcast_tensors: example 1 has size 2 in "
                                         r"one argument and 1 in another along dynamic "
                                         r"dimension 1"):
        torch.broadcast_tensors(xb, yb)
    with pytest.raises(ValueError, match=r"^torch\.broadcast_tensors: a plain tensor argument "
                                         r"has size 7 in dimension 1, which is dynamic"):
        torch.broadcast_tensors(xb, torch.randn(1, 7, 1))
