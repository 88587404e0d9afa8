"""Attention heads made examples of their own (``join_dims(0, d)``, the original
Matchbox's multi-head idiom) inside per-example control flow.

A batch of ``B * k`` examples built by ``join_dims(0, d)`` holds ``k`` slices of each
of the ``B``; under a per-example condition each slice runs where its example runs,
as the loop runs the whole plain ``(k, ...)`` tensor of its example.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import matchbox
from matchbox import MaskedBatch
from matchbox.testing import mb_assert

NAN = float("nan")


def batch(xs):
    return MaskedBatch.fromlist(xs, (True, False), padding_value=NAN)


def softmax(s, dim):
    """Softmax in core ops (``Tensor.softmax`` on batches is matchbox-nn's)."""
    return (s - s.logsumexp(dim, keepdim=True)).exp()


def heads(x, k=2):
    return x.split_dim(-1, k).join_dims(0, -1)


def unheads(h, k=2):
    return h.split_dim(0, k).join_dims(-1, 1)


@matchbox.batch
def heads_across_a_branch(x):
    h = heads(x)
    if x.sum() > 0:
        h = softmax(h, 1) * 2
    return unheads(h)


@matchbox.batch
def heads_inside_a_branch(x):
    if x.sum() > 0:
        x = unheads(heads(x).cumsum(1))
    return x


@matchbox.batch
def heads_in_a_loop(x):
    # Each example runs the attention as many times as it has positions.
    steps = x.size_as_tensor(1)
    while steps > 0:
        h = heads(x)
        x = unheads(softmax(h @ h.transpose(1, 2), -1) @ h)
        steps = steps - 1
    return x


@pytest.mark.parametrize("f", [heads_across_a_branch, heads_inside_a_branch, heads_in_a_loop])
@pytest.mark.parametrize("lengths", [[2, 1, 3, 2], [1], [3, 3]])
def test_heads_under_per_example_control_flow_equal_the_loop(f, lengths, dtype):
    xs = [torch.randn(1, n, 4, dtype=dtype) for n in lengths]
    mb_assert(f, [xs], [batch(xs)], len(xs))


class LogOfHeads(nn.Module):
    """A weight after a value that is not finite for the examples that skip the branch."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(-1, 1, 4).reshape(2, 2))

    @matchbox.batch
    def forward(self, x):
        y = x * 1
        if x.sum() > 0:
            y = unheads(heads(x).log() @ self.weight)
        return y


def test_a_weight_gets_no_gradient_from_the_heads_of_examples_that_skip_the_branch(dtype):
    # Examples 1 and 3 are negative: their log is NaN, which the loop never computes.
    xs = [torch.rand(1, n, 4, dtype=dtype) + 0.5 for n in (2, 3, 1, 2)]
    xs[1], xs[3] = -xs[1], -xs[3]
    module = LogOfHeads().to(dtype)
    mb_assert(module, [xs], [batch(xs)], 4)
    module.zero_grad()
    matchbox.batch_sum(module(batch(xs)).sum()).backward()
    assert torch.isfinite(module.weight.grad).all()


def test_a_batch_of_another_size_in_a_branch_is_refused():
    @matchbox.batch
    def f(x, other):
        if x.sum() > 0:
            other = other * 2
        return x + other.sum()

    xb = batch([torch.rand(1, n, 4) + 0.1 for n in (2, 1)])  # the branch runs
    other = batch([torch.randn(1, n, 4) for n in (1, 2, 3)])
    with pytest.raises(ValueError, match=r"@batch: 'other' holds 3 examples but the code runs "
                                         r"on a batch of 2"):
        f(xb, other)
