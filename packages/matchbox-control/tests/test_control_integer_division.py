"""An integer division guarded by a per-example condition: ``if n > 0: q = 12 // n``.

The loop never divides by the ``n == 0`` of the examples the guard excludes; the batch
computes the branch for every example, under an execution mask, and raised torch's bare
``RuntimeError: ZeroDivisionError`` for them (a user trial: a batch with an empty
example). Core reads an integer divisor as 1 where the example does not run the code
(and at padding), so the guard works as in the loop; a running example's zero divisor
still raises.
"""

from __future__ import annotations

import pytest
import torch
from control_cases import assert_batch_equals_loop, sequences

import matchbox


@matchbox.batch
def guarded_floor_division(x):
    n = x.size_as_tensor(1)
    if n > 0:
        q = 12 // n
    else:
        q = n * 0
    return x.sum(1) * q


@matchbox.batch
def guarded_remainder_expression(x):
    n = x.size_as_tensor(1)
    r = 7 % n if n > 0 else 0
    return x.sum(1) * r


@matchbox.batch
def cyclic_positions(x):
    n = x.size_as_tensor(1)
    out = x.sum(1) * 0
    for i in range(3):
        if n > 0:
            out = out + x[:, i % n] * (i + 1)
    return out


@matchbox.batch
def guarded_in_place_division(x):
    n = x.size_as_tensor(1)
    c = n * 0 + 20
    if n > 1:
        c //= n - 1
        c %= n
    return x.sum(1) * c


@matchbox.batch
def unguarded_floor_division(x):
    return x.sum(1) * (12 // x.size_as_tensor(1))


@pytest.mark.parametrize("lengths", [[3, 0, 5, 1], [0, 2], [1], [0], [4, 4]])
@pytest.mark.parametrize("f", [guarded_floor_division, guarded_remainder_expression,
                               cyclic_positions, guarded_in_place_division])
def test_an_integer_division_guarded_per_example_equals_the_loop(f, lengths, dtype):
    assert_batch_equals_loop(f, sequences(lengths, dtype=dtype))


def test_an_unguarded_division_by_an_empty_examples_length_raises_as_in_the_loop(dtype):
    xs, xb = sequences([2, 0], dtype=dtype)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        unguarded_floor_division(xs[1])
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        unguarded_floor_division(xb)
    assert unguarded_floor_division(xs[0]).shape == (1, 3)
    assert torch.equal(unguarded_floor_division(xs[0]), xs[0].sum(1) * 6)
