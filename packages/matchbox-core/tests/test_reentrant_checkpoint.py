"""``torch.utils.checkpoint`` and custom ``autograd.Function``s on batches.

Reentrant checkpointing runs the function inside an ``autograd.Function``'s
``forward``, which tracks tensor arguments only and disables gradients.  Before
the refusal, a batch argument came out with no gradient: ``backward()`` on the
result failed with torch's "element 0 of tensors does not require grad", and
``checkpoint(block, x, use_reentrant=True) + x`` trained neither the block's
parameters nor its path back to ``x``, silently.  Now the first batch op inside
such a ``forward`` refuses with the ``use_reentrant=False`` hint; that spelling
equals the loop, values and gradients.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import matchbox.functional as MF
from matchbox import MaskedBatch
from matchbox.testing import mb_assert

NAN = float("nan")
REENTRANT = r"torch\.utils\.checkpoint with use_reentrant=True was given a batch; .* pass " \
            r"use_reentrant=False, which works on batches"


def examples(lengths, dtype, width=4):
    xs = [torch.randn(1, n, width, dtype=dtype) for n in lengths]
    return xs, MaskedBatch.fromlist(xs, (True, False), padding_value=NAN)


class Block(nn.Module):
    """A layer in core ops (``nn.Linear`` on batches is matchbox-nn's)."""

    def __init__(self, width=4):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(width, width))
        self.bias = nn.Parameter(torch.randn(width))

    def forward(self, x):
        return torch.tanh(x @ self.weight + self.bias)


# Blocks whose first op on the batch goes through each way an op is reached: a torch
# function (__torch_function__), a pointwise method, an operator, a matmul method, a
# generated method of another family, a convenience method, a function of a list.
W = torch.linspace(-1, 1, 16).reshape(4, 4)
FIRST_OPS = {
    "a module": Block(),
    "torch.tanh": lambda x: torch.tanh(x),
    "x.tanh()": lambda x: x.tanh(),
    "x * 2": lambda x: x * 2,
    "x @ W": lambda x: x @ W,
    "x.sum(1)": lambda x: x.sum(1),
    "x.split_dim": lambda x: x.split_dim(-1, 2),
    "MF.join_dims": lambda x: MF.join_dims(x, 0, 2),
    "torch.cat([x, x])": lambda x: torch.cat([x, x], 2),
}


@pytest.mark.parametrize("name", FIRST_OPS)
def test_reentrant_checkpoint_on_a_batch_is_refused_at_the_call(name):
    _, xb = examples([2, 0, 3], torch.float64)
    xb.requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "None of the inputs have requires_grad=True"
        with pytest.raises(RuntimeError, match=REENTRANT):
            checkpoint(FIRST_OPS[name], xb, use_reentrant=True)


def test_the_silently_wrong_mix_is_refused():
    # Plus a path that carries gradients: the block's would have been lost silently.
    block = Block().double()
    _, xb = examples([2, 1], torch.float64)
    xb.requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match=REENTRANT):
            checkpoint(block, xb, use_reentrant=True) + xb


@pytest.mark.parametrize("lengths", [[2, 0, 3, 1], [1], [0, 2]])
def test_non_reentrant_checkpoint_equals_the_loop(lengths, dtype):
    block = Block().to(dtype)

    def f(x):
        return checkpoint(block, x, use_reentrant=False) + x

    xs, xb = examples(lengths, dtype)
    mb_assert(f, [xs], [xb], len(xs), params=list(block.parameters()))


def test_a_layer_of_matchbox_nn_is_refused_too():
    pytest.importorskip("matchbox.nn", reason="nn.Linear on batches is in matchbox-nn")
    _, xb = examples([2, 0, 3], torch.float64)
    xb.requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match=r"torch\.nn\.functional\.linear: " + REENTRANT):
            checkpoint(nn.Linear(4, 4).double(), xb, use_reentrant=True)


def test_a_batch_that_needs_no_gradient_runs_as_torch_runs_it():
    # No argument requires grad: torch warns and the result carries no gradient, in the
    # loop and in the batch alike; nothing is lost that the loop would keep.
    block = Block().double()
    xs, xb = examples([2, 1], torch.float64)
    with pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
        out = checkpoint(block, xb, use_reentrant=True)
    for got, x in zip(out.examples(), xs):
        with torch.no_grad():
            assert torch.allclose(got, block(x))
    assert not out.requires_grad


def test_no_grad_alone_is_not_refused():
    _, xb = examples([2, 1], torch.float64)
    xb.requires_grad_()
    with torch.no_grad():
        out = (xb * 2).tanh().sum(1)
    assert not out.requires_grad


class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, factor):
        return x * factor

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def test_a_custom_autograd_function_given_a_batch_is_refused():
    _, xb = examples([2, 1], torch.float64)
    xb.requires_grad_()
    with pytest.raises(RuntimeError, match=r"Tensor\.__mul__: the torch\.autograd\.Function "
                                           r"Scale was given a batch that requires grad; an "
                                           r"autograd\.Function tracks only tensor arguments"):
        Scale.apply(xb, 2.0)
    x = torch.randn(1, 2, 4, requires_grad=True)
    assert torch.equal(Scale.apply(x, 2.0), x * 2)
