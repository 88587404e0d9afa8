"""``torch.einsum`` with ``'...'`` against the per-example loop, values and gradients.

Each operand's ``...`` covers, per example, the dimensions its letters leave (dimension 0
included), right-aligned across the operands, as torch reads it for one example.  Padding
holds NaN; zero-length examples and a batch of one are in the layouts.
"""

from __future__ import annotations

import pytest
import torch
from family_cases import LAYOUTS, batch_of

from matchbox import MaskedBatch
from matchbox.testing import mb_assert


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_ellipsis_with_a_plain_tensor_matches_loop(layout, dtype):
    dims, shapes = LAYOUTS[layout]
    xs, xb = batch_of(shapes, dims, dtype)
    n = len(xs)
    last = 1 if dims[-1] else shapes[0][-1]  # size one broadcasts along a dynamic dimension
    v = torch.randn(1, last, dtype=dtype)  # its '...' (1,) aligned with the middle dimension
    for f in (lambda x, v: torch.einsum("...i,...i->...", x, v),
              lambda x, v: torch.einsum("...i,...i", v, x)):  # implicit: '...'
        mb_assert(f, [xs, [v] * n], [xb, v], n)
    if not dims[-1]:
        w = torch.randn(last, 3, dtype=dtype)
        mb_assert(lambda x, w: torch.einsum("...i,ij->...j", x, w), [xs, [w] * n], [xb, w], n)
        mb_assert(lambda x, w: torch.einsum("ij,...i->...j", w, x), [xs, [w] * n], [xb, w], n)
        mb_assert(lambda x, w: torch.einsum("...i,ij", x, w), [xs, [w] * n], [xb, w], n)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_ellipsis_of_batches_alone_matches_loop(layout, dtype):
    dims, shapes = LAYOUTS[layout]
    xs, xb = batch_of(shapes, dims, dtype)
    ys, yb = batch_of(shapes, dims, dtype)
    for f in (lambda x, y: torch.einsum("...i,...i->...", x, y),
              lambda x, y: torch.einsum("...ij,...ij->...", x, y),
              lambda x, y: torch.einsum("b...,b...->b...", x, y),
              lambda x, y: torch.einsum("...->...", x) * y,
              lambda x, y: torch.einsum("b...j->b...", x) + torch.einsum("...ij->...i", y),
              lambda x, y: torch.einsum("...i", x) + y):  # implicit: the same
        mb_assert(f, [xs, ys], [xb, yb], len(xs))


def test_ellipsis_attention_scores_match_loop(dtype):
    # Queries and keys of their own lengths, empty ones included.
    qs = [torch.randn(1, n, 4, dtype=dtype) for n in (3, 0, 1, 5)]
    ks = [torch.randn(1, n, 4, dtype=dtype) for n in (2, 4, 0, 5)]
    qb = MaskedBatch.fromlist(qs, (True, False), padding_value=float("nan"))
    kb = MaskedBatch.fromlist(ks, (True, False), padding_value=float("nan"))
    mb_assert(lambda q, k: torch.einsum("...qd,...kd->...qk", q, k), [qs, ks], [qb, kb], 4)
    mb_assert(lambda q, k: torch.einsum("...qd,...kd->...qk", q, k).sum(1)
              + torch.einsum("...qd,...kd->...k", q.tanh(), k), [qs, ks], [qb, kb], 4)


def test_ellipsis_of_scalar_examples_matches_loop(dtype):
    s = MaskedBatch(torch.randn(3, dtype=dtype), None, ())
    t = MaskedBatch(torch.randn(3, dtype=dtype), None, ())
    mb_assert(lambda a, b: torch.einsum("...,...->...", a, b), [list(s.examples()),
                                                                list(t.examples())], [s, t], 3)


def test_ellipsis_refusals_name_the_op():
    _, xb = batch_of([(3, 4), (1, 4)], (True, False))
    with pytest.raises(ValueError, match=r"^torch\.einsum: dimension 0 of each example of "
                                         r"operand 0 \('\.\.\.i', a batch; size one\) is the "
                                         r"first of its '\.\.\.', and must be the first "
                                         r"dimension of the output, but the equation spelled "
                                         r"out is '[A-Za-z]{2}i,[A-Za-z]{3}i->[A-Za-z]{3}'"):
        torch.einsum("...i,...i->...", xb, torch.randn(2, 1, 1, 4))
    with pytest.raises(ValueError, match=r"^torch\.einsum: operand 0 \('\.\.\.\.i'\) has more "
                                         r"than one ellipsis or a stray '\.'"):
        torch.einsum("....i->...", xb)
    with pytest.raises(ValueError, match=r"^torch\.einsum: operand 0 \('abcd\.\.\.'\) has more "
                                         r"letters than its examples' 3 dimensions"):
        torch.einsum("abcd...->a", xb)
    with pytest.raises(ValueError, match=r"^torch\.einsum: the output \('\.\.\.\.\.\.'\) has "
                                         r"more than one ellipsis"):
        torch.einsum("...i->......", xb)
    with pytest.raises(ValueError, match=r"^torch\.einsum: the equation has 2 operands, got 1"):
        torch.einsum("...i,...i->...", xb)
