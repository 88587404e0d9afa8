"""Views of a batch (matchbox-nn's time-major ``TimeMajorBatch``: an RNN module's final
states) assigned under a per-example condition merge through the batch they hold.

The oracle is the loop: each example runs the module on its own sequence and
changes its own ``(layers, 1, hidden)`` states, values and gradients.
"""

from __future__ import annotations

import pytest
import torch
from control_cases import assert_batch_equals_loop, sequences

import matchbox
from matchbox import MaskedBatch

pytest.importorskip("matchbox.nn", reason="RNN modules on batches (and their state views) are "
                                          "in matchbox-nn, which the control environment "
                                          "does not install")

LENGTHS = [3, 1, 4, 2]  # PyTorch's RNN modules refuse an empty sequence in the loop


def lstm(dtype: torch.dtype) -> torch.nn.LSTM:
    torch.manual_seed(0)
    return torch.nn.LSTM(3, 4, num_layers=2, batch_first=True).to(dtype)


def per_example_flags(values, dtype):
    flags = [torch.tensor([v], dtype=dtype) for v in values]
    return flags, MaskedBatch.fromlist(flags, ())


def test_states_changed_under_a_branch_equal_the_loop(dtype):
    module = lstm(dtype)

    @matchbox.batch
    def final_states(x, flag):
        _, (h, c) = module(x)
        if flag > 0:
            h = h * 2 + c
        else:
            c = c.tanh()
        return h, c

    xs, xb = sequences(LENGTHS, dtype=dtype)
    flags, fb = per_example_flags([1.0, -1.0, 1.0, -1.0], dtype)
    assert_batch_equals_loop(final_states, (xs, xb), (flags, fb),
                             params=list(module.parameters()))


def test_states_carried_through_a_per_example_loop_equal_the_loop(dtype):
    module = lstm(dtype)

    @matchbox.batch
    def refined(x, steps):
        _, (h, c) = module(x)
        for _ in range(steps):
            h, c = (h + c).tanh(), c * 0.5
        return h

    xs, xb = sequences(LENGTHS, dtype=dtype)
    counts = [torch.tensor([n]) for n in (2, 0, 3, 1)]
    assert_batch_equals_loop(refined, (xs, xb), (counts, MaskedBatch.fromlist(counts, ())),
                             params=list(module.parameters()))


def test_a_view_on_one_path_and_a_batch_on_the_other_is_refused():
    module = lstm(torch.float64)

    @matchbox.batch
    def mixed(x, flag):
        _, (h, _) = module(x)
        if flag > 0:
            h = matchbox.nn.batch_major(h)
        return h

    _, xb = sequences(LENGTHS)
    _, fb = per_example_flags([1.0, -1.0, 1.0, -1.0], torch.float64)
    with pytest.raises(TypeError, match=r"@batch: 'h' is a batch for the examples on one path "
                                        r"and TimeMajorBatch .* for the others"):
        mixed(xb, fb)
