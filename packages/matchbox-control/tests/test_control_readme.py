"""The README's RNN under ``@matchbox.batch`` (``h = self.cell(xt, h)``, no manual
masking) equals the loop over examples, values and gradients; and with plain tensors
a decorated function computes exactly what the undecorated one does."""

from __future__ import annotations

import pytest
import torch
from control_cases import sequences
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

import matchbox
from matchbox.testing import mb_assert


class CoreCell(nn.Module):
    """An Elman cell in core ops (``nn.RNNCell`` on batches is matchbox-nn's)."""

    def __init__(self, size):
        super().__init__()
        self.w_ih = nn.Parameter(torch.randn(size, size) / size ** 0.5)
        self.w_hh = nn.Parameter(torch.randn(size, size) / size ** 0.5)
        self.b = nn.Parameter(torch.randn(size) / size ** 0.5)

    def forward(self, x, h):
        return torch.tanh(x @ self.w_ih + h @ self.w_hh + self.b)


class RNN(nn.Module):
    """The README's model, with the decorator instead of hand-written masking."""

    def __init__(self, size, cell=None):
        super().__init__()
        self.cell = cell if cell is not None else nn.RNNCell(size, size)

    @matchbox.batch
    def forward(self, x):
        h = x.new_zeros(x.size(0), x.size(-1))
        for xt in x.unbind(1):
            h = self.cell(xt, h)
        return h


class SpecRNN(RNN):
    """SPEC §3's variant: ``x.batch_zeros`` for the initial state."""

    @matchbox.batch
    def forward(self, x):
        h = x.batch_zeros(x.size(-1))
        for xt in x.unbind(1):
            h = self.cell(xt, h)
        return h


def check(model, lengths, dtype):
    model = model.to(dtype)
    xs, xb = sequences(lengths, size=4, dtype=dtype)
    mb_assert(model, [xs], [xb], len(lengths))


@pytest.mark.parametrize("kind", [RNN, SpecRNN])
@pytest.mark.parametrize("lengths", [[3, 7, 1, 5], [0, 2, 0], [1], [4], [0]])
def test_readme_rnn_with_core_cell(kind, lengths, dtype):
    check(kind(4, CoreCell(4)), lengths, dtype)


@pytest.mark.parametrize("kind", [RNN, SpecRNN])
@given(lengths=st.lists(st.integers(0, 6), min_size=1, max_size=6))
def test_readme_rnn_hypothesis(kind, lengths):
    check(kind(4, CoreCell(4)), lengths, torch.float64)


@pytest.mark.parametrize("kind", [RNN, SpecRNN])
@pytest.mark.parametrize("lengths", [[3, 7, 1, 5], [0, 2, 1], [1]])
def test_readme_rnn_with_nn_rnncell(kind, lengths, dtype):
    pytest.importorskip("matchbox.nn", reason="nn.RNNCell on batches is in matchbox-nn, "
                                              "which the control environment does not install")
    check(kind(4), lengths, dtype)


def test_readme_script_runs():
    pytest.importorskip("matchbox.nn", reason="the README's script uses nn.RNNCell on batches "
                                              "(matchbox-nn)")
    from random import randint

    from matchbox import MaskedBatch

    b, t, c = 32, 10, 128
    model = RNN(c)
    x_unbatched = torch.rand(1, randint(1, t), c)
    x_manual_batch = MaskedBatch.fromlist(
        [torch.rand(1, randint(1, t), c) for i in range(b)], (True, False))
    assert model(x_unbatched).shape == (1, c)
    h = model(x_manual_batch)
    for x, batched in zip(x_manual_batch.examples(), h.examples()):
        torch.testing.assert_close(batched, model(x))


@pytest.mark.parametrize("kind", [RNN, SpecRNN])
def test_plain_tensor_gives_exactly_the_undecorated_result(kind, dtype):
    model = kind(4, CoreCell(4)).to(dtype)
    x = torch.randn(1, 5, 4, dtype=dtype, requires_grad=True)
    decorated = model(x)
    plain = kind.forward.__wrapped__(model, x)
    assert torch.equal(decorated, plain)
    (g_decorated,) = torch.autograd.grad(decorated.sum(), x)
    (g_plain,) = torch.autograd.grad(plain.sum(), x)
    assert torch.equal(g_decorated, g_plain)


def test_every_test_function_is_plain_python_on_plain_values():
    # Decorated functions of the construct tests, called with plain tensors,
    # against the same functions undecorated.
    import test_control_assign as assign
    import test_control_break as breaks
    import test_control_for as fors
    import test_control_if as ifs
    import test_control_logic as logic
    import test_control_return as returns
    import test_control_while as whiles

    cases = [
        (ifs.step, [torch.tensor([v]) for v in (-1.5, 0.5, 2.0)]),
        (ifs.safe_log, [torch.tensor([v]) for v in (-2.0, 3.0)]),
        (whiles.doubling, [torch.tensor([v]) for v in (0.1, 12.0)]),
        (breaks.first_power_above, [torch.tensor([v]) for v in (0, 20)]),
        (returns.sign, [torch.tensor([v]) for v in (-2, 0, 3)]),
        (returns.collatz_steps, [torch.tensor([v]) for v in (1, 7)]),
        (logic.in_band, [torch.tensor([v]) for v in (-1, 2)]),
        (assign.augmented, [torch.tensor([v]) for v in (0.0, 3.0)]),
        (fors.count_up, [torch.tensor([v]) for v in (0, 4)]),
    ]
    for f, inputs in cases:
        for x in inputs:
            got, want = f(x.clone()), f.__wrapped__(x.clone())
            assert type(got) is type(want)
            assert torch.equal(torch.as_tensor(got), torch.as_tensor(want)), f.__name__
