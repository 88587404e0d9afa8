"""``matchbox.compile`` of code that turns gradients off for a part of it (``torch.no_grad()``,
``torch.set_grad_enabled(False)``): what that part computes sends no gradient back, as in
eager mode and in the loop over examples (the captured graph records ops below autograd;
without the detaches the capture adds, AOTAutograd sent gradients through them)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import matchbox
from matchbox import MaskedBatch
from matchbox.testing import mb_assert

BACKEND = "aot_eager"
LENGTHS = [[3, 0, 5, 1], [1], [0], [2, 2]]


def compiled_on_batches(f):
    """``f`` compiled for batches; the loop's plain examples run ``f`` itself (the oracle:
    compiled on plain tensors too, a wrong gradient would be the same on both sides)."""
    compiled = matchbox.compile(f, backend=BACKEND, fallback="raise")
    return lambda x, *rest: (compiled if isinstance(x, MaskedBatch) else f)(x, *rest)


def self_distilled(x, w):
    """A loss against a target the input makes itself, held constant (``no_grad``)."""
    # (softmax and log_softmax spelt in core's ops: tox's core environment has no
    # matchbox-nn, which implements them)
    with torch.no_grad():
        scores = (x @ w).exp()
        target = scores / scores.sum(-1, keepdim=True)
    z = x @ w
    return (-(target * (z - z.logsumexp(-1, keepdim=True))).sum(-1).sum(1)
            + (x * x).sum(-1).mean(1))


def grad_disabled(x, w):
    with torch.set_grad_enabled(False):
        scale = (x * w[0]).tanh().sum(-1, keepdim=True)
    return (x * scale).sum(-1).sum(1)


def plain_weight_under_no_grad(x, w):
    """An op of plain tensors only (no batch) under ``no_grad``: the weight's doubled copy
    is a constant to the rest."""
    with torch.no_grad():
        w2 = w * 2
    return ((x @ w2) * (x @ w)).sum(-1).sum(1)


@pytest.mark.parametrize("f", [self_distilled, grad_disabled, plain_weight_under_no_grad])
@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_what_no_grad_computes_sends_no_gradient(f, lengths, dtype):
    torch.manual_seed(0)
    examples = [torch.randn(1, n, 3, dtype=dtype) for n in lengths]
    w = torch.randn(3, 3, dtype=dtype)
    batch = MaskedBatch.fromlist(examples, (True, False), padding_value=float("nan"))
    mb_assert(compiled_on_batches(f), [examples, [w] * len(lengths)], [batch, w], len(lengths))


class Distilled(nn.Module):
    """A parameter used under ``no_grad`` (a frozen teacher) and with gradients."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 3, dtype=torch.float64))

    def forward(self, x):
        with torch.no_grad():
            teacher = x @ self.w
        h = x @ self.w
        h = torch.where(h.sum(-1, keepdim=True) > 0, h * 2, h)
        return ((h - teacher) ** 2 + h).sum(-1).sum(1)


def test_a_parameter_read_under_no_grad_gets_the_gradient_of_its_other_reads_only():
    torch.manual_seed(0)
    model = Distilled()
    examples = [torch.randn(1, n, 3, dtype=torch.float64) for n in (3, 0, 5, 1)]
    batch = MaskedBatch.fromlist(examples, (True, False), padding_value=float("nan"))
    mb_assert(compiled_on_batches(model), [examples], [batch], 4, params=list(model.parameters()))


class _StraightThroughRound(torch.autograd.Function):
    """``round`` forward, identity backward (quantisation-aware training)."""

    @staticmethod
    def forward(ctx, w):
        return w.round()

    @staticmethod
    def backward(ctx, grad):
        return grad


def quantised(x, w):
    return (x @ (_StraightThroughRound.apply(w * 4) / 4)).sum(-1).sum(1) + x.amax(1).sum(-1)


def test_a_users_autograd_function_on_a_tensor_that_requires_grad_is_not_captured():
    """The graph would hold ``round`` and differentiate it (zero), not the Function's
    backward (identity): refused, so the call runs eagerly, equal to the loop."""
    torch.manual_seed(0)
    examples = [torch.randn(1, n, 3, dtype=torch.float64) for n in (3, 1, 5)]
    batch = MaskedBatch.fromlist(examples, (True, False), padding_value=float("nan"))
    w = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    with pytest.raises(matchbox.compiler.CaptureError,
                       match=r"autograd.Function _StraightThroughRound is given a tensor that "
                             r"requires grad: a graph holds its forward's ops, not its backward"):
        matchbox.compile(quantised, backend=BACKEND, fallback="raise")(batch, w)
    compiled = matchbox.compile(quantised, backend=BACKEND)
    with pytest.warns(UserWarning, match="_StraightThroughRound"):
        mb_assert(lambda x, v: (compiled if isinstance(x, MaskedBatch) else quantised)(x, v),
                  [examples, [w] * 3], [batch, w], 3)
    assert compiled.specializations[0].eager_reason is not None


def test_core_ops_made_of_autograd_functions_are_still_captured():
    torch.manual_seed(0)
    examples = [torch.randn(1, n, 3, dtype=torch.float64) for n in (3, 1, 5)]
    batch = MaskedBatch.fromlist(examples, (True, False), padding_value=float("nan"))
    compiled = matchbox.compile(lambda x: x.amax(1) + x.var(1), backend=BACKEND,
                                fallback="raise")
    compiled(batch)
    assert [s.eager_reason for s in compiled.specializations] == [None]
