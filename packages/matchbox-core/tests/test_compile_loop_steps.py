"""A loop's steps as ``matchbox.compiler.loops`` takes them (``matchbox/compiler/loop_steps.py``):
a list, or slices along a dimension whose number stays a symbol in a graph captured with
symbolic sizes, so that one graph serves every length.  Against a plain Python loop over
the steps, values and gradients; eagerly (no capture) and compiled.
"""

from __future__ import annotations

import pytest
import torch
from test_compile import BACKEND

import matchbox
from matchbox import MaskedBatch
from matchbox.compiler import loop_steps, loops, symbolic


def step(x, h, w):
    """One step of a plain RNN: the new state, and the state emitted."""
    new = (x @ w + h).tanh()
    return new, new


def scanned(x, w, sliced=True):
    """The final state and every step's state, ``(T, B, H)``, of the RNN over ``x.data``."""
    data = x.data
    h = data.new_zeros(data.size(0), data.size(-1))
    if sliced:
        steps = loop_steps.SlicedSteps(data.size(1), lambda take: take(data, 1))
    else:
        steps = list(data.unbind(1))
    (final,), states = loops.scan_stacked(lambda item, h: step(item, h, w), (h,), steps)
    return final, states[0]


def looped(x, w):
    h = x.new_zeros(x.size(0), x.size(-1))
    states = []
    for xt in x.unbind(1):
        h, _ = step(xt, h, w)
        states.append(h)
    return h, torch.stack(states)


def padded_batch(lengths, size=3, dtype=torch.float64):
    torch.manual_seed(len(lengths))
    return MaskedBatch.fromlist([torch.randn(1, n, size, dtype=dtype) for n in lengths],
                                (True, False))


def test_sliced_and_listed_steps_give_the_loops_values_eagerly():
    x = padded_batch([4, 2, 5])
    w = torch.randn(3, 3, dtype=torch.float64)
    expected = looped(x.data, w)
    for sliced in (True, False):
        for got, want in zip(scanned(x, w, sliced), expected):
            torch.testing.assert_close(got, want)


def test_sliced_steps_read_one_step_and_the_stacked_rest():
    data = torch.arange(24.0).view(2, 4, 3)
    steps = loop_steps.SlicedSteps(4, lambda take: (take(data, 1), take(data[:, :, 0], 1)))
    first, column = steps[1]
    torch.testing.assert_close(first, data[:, 1])
    torch.testing.assert_close(column, data[:, 1, 0])
    _, (rest, columns) = steps.stacked(2)
    torch.testing.assert_close(rest, data[:, 2:].movedim(1, 0))
    torch.testing.assert_close(columns, data[:, 2:, 0].movedim(1, 0))
    assert [s[0].tolist() for s in steps.listed(3)] == [data[:, 3].tolist()]


@pytest.mark.skipif(not symbolic.available(),
                    reason="this torch cannot capture with symbolic sizes")
def test_a_loop_over_sliced_steps_is_one_graph_for_every_length():
    w = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    compiled = matchbox.compile(scanned, backend=BACKEND, bucket=None)  # x.data as given
    for lengths in ([5, 2, 1], [9, 9, 3], [14, 0, 6, 2]):
        x = padded_batch(lengths)
        final, states = compiled(x, w)
        want_final, want_states = looped(x.data, w)
        torch.testing.assert_close(final, want_final)
        torch.testing.assert_close(states, want_states)
        grads = torch.autograd.grad((final.sum() + states.sum()), w)
        want = torch.autograd.grad((want_final.sum() + want_states.sum()), w)
        torch.testing.assert_close(grads, want)
    specs = compiled.specializations
    if loops.available():  # the steps' number a symbol: one graph, one scan
        assert [(s.calls, s.scans, s.fixed_sizes_because) for s in specs] == [(3, 1, None)]
    else:  # torch without scan: the steps unroll, one graph per length
        assert len(specs) == 3
