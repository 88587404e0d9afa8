"""``while`` (and ``while ... else``): each example iterates until its own condition fails."""

from __future__ import annotations

import torch
from control_cases import assert_batch_equals_loop, assert_oracle, doubling, jax_oracle, scalars
from hypothesis import given
from hypothesis import strategies as st

import matchbox
from matchbox import MaskedBatch


def test_oracle_while():
    # JAX's batched while_loop test: `while x < 3: x += 2` over [0, 1, 2, 3]
    assert_oracle(jax_oracle, [0, 1, 2, 3], [4, 3, 4, 3])


def test_oracle_while_on_integers():
    assert_oracle(jax_oracle, [0, 1, 2, 3], [4, 3, 4, 3], dtype=torch.int64)


def test_while_values_gradients_and_counter(dtype):
    assert_batch_equals_loop(doubling, scalars([0.1, 3.0, 12.0, -1.0, 0.0], dtype))


# x -> 2x + 0.5 doubles the distance from its fixed point -0.5: values near it take
# many steps, and -0.5 itself never ends (in the loop as in the batch).
ENDING = st.floats(-20, 20, allow_nan=False).filter(lambda v: abs(v + 0.5) > 0.01)


@given(values=st.lists(ENDING, min_size=1, max_size=6))
def test_while_hypothesis(values):
    assert_batch_equals_loop(doubling, scalars(values))


@matchbox.batch
def with_else(x):
    while x < 5:
        x = x + 2
    else:
        x = x * 10
    return x


def test_oracle_while_else():
    # without a break, the else clause runs for every example
    assert_oracle(with_else, [0, 5, 8], [60, 50, 80])


class Halting(torch.nn.Module):
    """Iterate a cell until a per-example halting score passes a threshold (at most 20 steps)."""

    def __init__(self, size):
        super().__init__()
        self.cell = torch.nn.Parameter(torch.randn(size, size) / size ** 0.5)
        self.halt = torch.nn.Parameter(torch.randn(size, 1))

    @matchbox.batch
    def forward(self, h):
        steps = 0
        score = (h @ self.halt).sigmoid().sum(-1)
        while score < 0.9 and steps < 20:
            h = (h @ self.cell).tanh() + h
            score = score + (h @ self.halt).sigmoid().sum(-1) * 0.3
            steps = steps + 1
        return h, steps


def test_halting_model_values_and_gradients(dtype):
    model = Halting(4).to(dtype)
    xs = [torch.randn(1, 4, dtype=dtype) for _ in range(6)]
    assert_batch_equals_loop(model, (xs, MaskedBatch.fromlist(xs, (False,))))


def test_halting_model_batch_size_one(dtype):
    model = Halting(4).to(dtype)
    xs = [torch.randn(1, 4, dtype=dtype)]
    assert_batch_equals_loop(model, (xs, MaskedBatch.fromlist(xs, (False,))))


def test_while_stops_when_no_example_is_left():
    iterations = []

    @matchbox.batch
    def f(x):
        while x < 3:
            iterations.append(1)
            x = x + 1
        return x

    _, xb = scalars([0.0, 2.0, 10.0])
    f(xb)
    assert len(iterations) == 3  # the longest example's count, not more


def test_loop_variable_that_becomes_a_batch():
    # `i` is a plain int at first; examples leave the loop at different counts.
    @matchbox.batch
    def f(n):
        i = 0
        while i < n:
            i = i + 1
        return i

    assert_oracle(f, [0, 3, 1], [0, 3, 1], dtype=torch.int64)
