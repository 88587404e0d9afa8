"""Gradients where a pointwise op's result is padding but an argument is real.

Pointwise ops combine masks with *and*: ``c + x_t`` with ``c`` a state (real
for every example) and ``x_t`` a step of a sequence that has ended for some
examples is padding there, although ``c`` is real.  Whatever the result's
padding computes (``tanh`` of NaN, ``c * nan``), its backward pass sends
``0 * nan`` towards ``c``; ``matchbox.functional.update`` then keeps ``c``
for those examples, so a NaN would land in a real gradient.  The per-example
loop never computes the step for those examples: their gradient through it is
zero.  Every test here runs on NaN padding and compares values and gradients
(inputs and parameters) with that loop.
"""

from __future__ import annotations

import operator
import random

import pytest
import torch
from hypothesis import given
from strategies import example_lists

import matchbox.functional as F
from matchbox import MaskedBatch
from matchbox.testing import mb_assert, mb_rand

BINARY = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul,
    "truediv": operator.truediv, "pow": lambda a, b: a.abs() ** b,
    "maximum": torch.maximum, "atan2": torch.atan2,
    "where": lambda a, b: torch.where(b > 0, a, b),
    "addcmul": lambda a, b: torch.addcmul(a, a, b),
}


def _sequences(batch_size, *dims, dtype, seed=0, min_size=0):
    """``mb_rand`` with a fixed draw of lengths, checked to differ (some steps end early)."""
    xs, xb = mb_rand(batch_size, *dims, dtype=dtype, min_size=min_size,
                     generator=random.Random(seed))
    assert len({x.size(1) for x in xs}) > 1
    return xs, xb


def _states(xs, width_dims=1):
    """Per-example states (1, features), real for every example, and their batch."""
    cs = [torch.randn(1, x.size(-1), dtype=x.dtype) for x in xs]
    return cs, MaskedBatch.fromlist(cs, (False,) * width_dims)


def _over_steps(step):
    """``c = update(c, step(c, x_t))`` over each example's own steps."""

    def run(c, x):
        for xt in x.unbind(1):
            c = F.update(c, step(c, xt))
        return c

    return run


@pytest.mark.parametrize("name", sorted(BINARY))
def test_state_combined_with_an_ended_step_gets_no_nan_gradient(name, dtype):
    op = BINARY[name]
    xs, xb = _sequences(5, (True, 4), (False, 3), dtype=dtype)
    cs, cb = _states(xs)
    mb_assert(_over_steps(op), [cs, xs], [cb, xb], 5)
    mb_assert(_over_steps(lambda c, x: op(x, c)), [cs, xs], [cb, xb], 5)


@pytest.mark.parametrize("name", ["tanh", "sigmoid", "exp", "sqrt"])
def test_a_nonlinearity_after_the_combination_gets_no_nan_gradient(name, dtype):
    xs, xb = _sequences(5, (True, 4), (False, 3), dtype=dtype)
    cs, cb = _states(xs)
    mb_assert(_over_steps(lambda c, x: getattr(c + x, name)() * c), [cs, xs], [cb, xb], 5)


def test_three_arguments_with_three_masks(dtype):
    xs, xb = _sequences(4, (True, 5), (False, 2), dtype=dtype)
    ys, yb = _sequences(4, (True, 3), (False, 2), dtype=dtype, seed=1)
    cs, cb = _states(xs)

    def run(c, x, y):
        for xt, yt in zip(x.unbind(1), y.unbind(1)):
            c = F.update(c, torch.addcmul(c, xt, yt).tanh())
        return c

    mb_assert(run, [cs, xs, ys], [cb, xb, yb], 4)


def test_inplace_update_of_a_state_by_an_ended_step(dtype):
    xs, xb = _sequences(5, (True, 4), (False, 3), dtype=dtype)
    cs, cb = _states(xs)

    def step(c, xt):
        new = c * 1
        new.mul_(xt)
        new.add_(c)
        return new.tanh()

    mb_assert(_over_steps(step), [cs, xs], [cb, xb], 5)


def test_inplace_op_whose_target_is_wider_than_the_result(dtype):
    xs, xb = _sequences(5, (True, 4), (False, 3), dtype=dtype)
    cs, cb = _states(xs)

    def step(c, xt):
        new = c + 1  # real everywhere; narrowed by the in-place op below
        new.mul_(xt)
        return new

    mb_assert(_over_steps(step), [cs, xs], [cb, xb], 5)


def test_rnn_written_in_core_ops(dtype):
    # The step enters pointwise (an elementwise input weight), so the padding
    # of ended examples is NaN in the pre-activation, next to the real state.
    xs, xb = _sequences(6, (True, 7), (False, 4), dtype=dtype, min_size=0)
    w_x = torch.randn(4, dtype=dtype, requires_grad=True)
    w_hh = torch.randn(4, 4, dtype=dtype, requires_grad=True)
    b = torch.randn(4, dtype=dtype, requires_grad=True)

    def rnn(x):
        h = x.batch_zeros(4)
        for xt in x.unbind(1):
            h = F.update(h, (xt * w_x + h @ w_hh + b).tanh())
        return h

    mb_assert(rnn, [xs], [xb], 6, params=[w_x, w_hh, b])


def _lstm(w_ih, w_hh, b, hidden):
    def lstm(x):
        h, c = x.batch_zeros(hidden), x.batch_zeros(hidden)
        outputs = []
        for xt in x.unbind(1):
            gates = xt @ w_ih + h @ w_hh + b
            i, f, g, o = gates.chunk(4, -1)
            # The step also enters pointwise (features == hidden): NaN padding
            # meets the real state c in ``f.sigmoid() * c``.
            c_new = f.sigmoid() * c + i.sigmoid() * (g + xt).tanh()
            h_new = o.sigmoid() * c_new.tanh()
            outputs.append(h_new)
            h, c = F.update(h, h_new), F.update(c, c_new)
        return h, c, F.stack(outputs, 1) if outputs else h

    return lstm


def test_lstm_written_in_core_ops(dtype):
    hidden = 3
    xs, xb = _sequences(6, (True, 7), (False, hidden), dtype=dtype, min_size=1)
    w_ih = torch.randn(hidden, 4 * hidden, dtype=dtype, requires_grad=True)
    w_hh = torch.randn(hidden, 4 * hidden, dtype=dtype, requires_grad=True)
    b = torch.randn(4 * hidden, dtype=dtype, requires_grad=True)
    mb_assert(_lstm(w_ih, w_hh, b, hidden), [xs], [xb], 6, params=[w_ih, w_hh, b])


@given(example_lists(dims=(True, False), min_length=0))
def test_lstm_in_core_ops_hypothesis(pair):
    xs, xb = pair
    dtype, hidden = xs[0].dtype, xs[0].size(-1)
    w_ih = torch.randn(hidden, 4 * hidden, dtype=dtype, requires_grad=True)
    w_hh = torch.randn(hidden, 4 * hidden, dtype=dtype, requires_grad=True)
    b = torch.randn(4 * hidden, dtype=dtype, requires_grad=True)
    lstm = _lstm(w_ih, w_hh, b, hidden)
    mb_assert(lambda x: lstm(x)[:2], [xs], [xb], len(xs), params=[w_ih, w_hh, b])


def test_memory_with_a_dynamic_dimension_combined_with_an_ended_step(dtype):
    # A memory (1, T, H) real for every example, updated by each step of a
    # sequence broadcast over T: where the sequence has ended, the whole result
    # is padding although the memory is real.
    ms, mb = _sequences(4, (True, 5), (False, 2), dtype=dtype, min_size=1)
    xs, xb = _sequences(4, (True, 3), (False, 2), dtype=dtype, seed=1)

    def run(memory, x):
        for xt in x.unbind(1):
            memory = F.update(memory, (memory * xt.unsqueeze(1)).sin())
        return memory

    mb_assert(run, [ms, xs], [mb, xb], 4)


def test_cat_of_a_state_and_an_ended_step(dtype):
    # cat along a static dimension also combines masks with *and*.
    xs, xb = _sequences(5, (True, 4), (False, 3), dtype=dtype)
    cs, cb = _states(xs)
    w = torch.randn(8, 3, dtype=dtype, requires_grad=True)
    bias = torch.randn(1, 2, dtype=dtype, requires_grad=True)
    # A reduction over the joined (static) dimension mixes the padding of the
    # ended step with the state's real values.
    mb_assert(_over_steps(lambda c, x: c * torch.cat([c, x], -1).logsumexp(-1, keepdim=True)),
              [cs, xs], [cb, xb], 5)
    mb_assert(_over_steps(lambda c, x: torch.cat([x, bias, c], -1).tanh() @ w), [cs, xs],
              [cb, xb], 5, params=[w, bias])


def test_stack_of_a_state_and_an_ended_step(dtype):
    xs, xb = _sequences(5, (True, 4), (False, 3), dtype=dtype)
    cs, cb = _states(xs)
    mb_assert(_over_steps(lambda c, x: c * torch.stack([c, x], 1).logsumexp(1)), [cs, xs],
              [cb, xb], 5)
