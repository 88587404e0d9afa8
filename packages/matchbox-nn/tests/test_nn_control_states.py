"""Under ``@matchbox.batch``, the state of a loop that a recurrent module's steps give as
a time-major view (``TimeMajorBatch``: final states ``(L, 1, H)`` per example) merges
with a plain initial state ``h0`` of shape ``(L, 1, H)`` shared by every example, as in
the loop over examples (values and gradients, ``h0``'s included); an example with no step
keeps ``h0``."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import matchbox
from matchbox import MaskedBatch
from matchbox.testing import mb_assert

pytest.importorskip("matchbox.control", reason="@matchbox.batch is matchbox-control's (not in "
                    "the nn environment; the all environment runs these tests)")

LENGTHS = [(3, 0, 1, 2), (1,), (0,), (2, 5)]


def _inputs(lengths, dtype):
    torch.manual_seed(0)
    xs = [torch.randn(1, n, 3, dtype=dtype) for n in lengths]
    return xs, MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))


def _stepper(kind, dtype):
    rnn = getattr(nn, kind)(3, 4, num_layers=2, batch_first=True).to(dtype)

    @matchbox.batch
    def steps(x, h0):
        h = h0
        for t in range(x.size_as_tensor(1)):
            _, h = rnn(x[:, t:t + 1], h)
        return h

    return rnn, steps


@pytest.mark.parametrize("kind", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("lengths", LENGTHS, ids=str)
def test_a_plain_initial_state_merges_with_the_steps_views(kind, lengths, dtype):
    rnn, steps = _stepper(kind, dtype)
    h0 = torch.randn(2, 1, 4, dtype=dtype, requires_grad=True)
    c0 = torch.randn(2, 1, 4, dtype=dtype, requires_grad=True)
    xs, xb = _inputs(lengths, dtype)
    n = len(lengths)
    if kind == "LSTM":
        mb_assert(lambda x, h, c: steps(x, (h, c)), [xs, [h0] * n, [c0] * n], [xb, h0, c0], n,
                  params=list(rnn.parameters()))
    else:
        mb_assert(steps, [xs, [h0] * n], [xb, h0], n, params=list(rnn.parameters()))


def test_a_plain_state_set_under_a_condition_merges_with_a_view(dtype):
    rnn = nn.GRU(3, 4, batch_first=True).to(dtype)

    @matchbox.batch
    def reset(x, h0):
        _, h = rnn(x, h0)
        if x.sum() > 0:
            h = h0
        return h * 2

    h0 = torch.randn(1, 1, 4, dtype=dtype, requires_grad=True)
    xs, xb = _inputs((3, 1, 2, 4), dtype)
    mb_assert(reset, [xs, [h0] * 4], [xb, h0], 4, params=list(rnn.parameters()))


def test_a_plain_state_of_another_shape_than_an_example_of_the_view_is_refused():
    rnn = nn.GRU(3, 4, batch_first=True).double()

    @matchbox.batch
    def mixed(x):
        _, h = rnn(x)
        if x.sum() > 0:
            h = torch.zeros(1, 4, dtype=torch.float64)  # (1, 4), not a (1, 1, 4) state
        return h

    _, xb = _inputs((2, 1), torch.float64)
    with pytest.raises(TypeError, match=r"@batch: 'h' is a plain tensor of shape \(1, 4\) for "
                                        r"the examples that ran this code and TimeMajorBatch "):
        mixed(xb)


class Experts(nn.Module):
    """Each example's own expert layer, chosen by a per-example int (mixture of experts
    routed per example), then a shared recurrent cell."""

    def __init__(self, dtype):
        super().__init__()
        self.experts = nn.ModuleList([nn.Linear(3, 4) for _ in range(3)]).to(dtype)
        self.cell = nn.GRUCell(4, 4).to(dtype)

    @matchbox.batch
    def forward(self, x):
        k = int(x.sum() > 0) + int(x.sum() > 1)
        h = self.experts[k](x).mean(1)
        return self.cell(h)


@pytest.mark.parametrize("lengths", [(3, 1, 2, 4), (1,), (2, 2)], ids=str)
def test_modules_chosen_per_example_equal_the_loop(lengths, dtype):
    torch.manual_seed(0)
    model = Experts(dtype)
    xs, xb = _inputs(lengths, dtype)
    mb_assert(model, [xs], [xb], len(lengths))
