"""A per-example counter (a loop-carried int that differs between examples) meets a
plain ``torch.arange``: in the loop the counter is a scalar and the comparison a vector
``(T,)``, which no batch can hold per example (each keeps dimension 0 of size one).  The
error says so and shows the spelling that works, ``arange(T).unsqueeze(0) < n``, which
equals the loop.
"""

from __future__ import annotations

import pytest
import torch

import matchbox
from matchbox import MaskedBatch
from matchbox.testing import mb_assert


@matchbox.batch
def steps_then_positions(x):
    steps = 0
    for _step in x.unbind(1):
        steps = steps + 1
    return (torch.arange(4).unsqueeze(0) < steps).to(x.dtype) * x.sum()


@matchbox.batch
def steps_against_a_vector(x):
    steps = 0
    for _step in x.unbind(1):
        steps = steps + 1
    return torch.arange(4) < steps


def examples(lengths, dtype):
    xs = [torch.randn(1, n, 2, dtype=dtype) for n in lengths]
    return xs, MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))


@pytest.mark.parametrize("lengths", [[2, 0, 3, 1], [4], [0]])
def test_a_counter_against_positions_with_a_leading_one_equals_the_loop(lengths, dtype):
    xs, xb = examples(lengths, dtype)
    mb_assert(steps_then_positions, [xs], [xb], len(xs))


def test_a_counter_against_a_plain_vector_says_why_the_shapes_differ(dtype):
    xs, xb = examples([2, 0, 3], dtype)
    assert steps_against_a_vector(xs[0]).shape == (4,)  # the loop: a vector per example
    with pytest.raises(ValueError, match=r"Tensor\.lt: a plain tensor of shape \(4,\) meets a "
                                         r"batch of per-example scalars .* in the loop each "
                                         r"example's scalar broadcasts to shape \(4,\), but a "
                                         r"batch holds each example with dimension 0 of size "
                                         r"one .* torch\.arange\(4\)\.unsqueeze\(0\) < n"):
        steps_against_a_vector(xb)


_SCALES = {1: 10.0, 2: 100.0, 3: 1000.0}


@matchbox.batch
def scaled_by_length(x):
    n = 0
    for _ in x.unbind(1):
        n = n + 1
    return x[:, 0] * _SCALES.get(n, -1.0)


def test_a_counter_as_a_dict_key_is_refused():
    # The loop looks each example's count up; the batch, hashed by identity, missed every
    # key and took the default, silently (a user trial).
    xs = [torch.ones(1, n, 2, dtype=torch.float64) for n in (3, 1, 2)]
    with pytest.raises(TypeError, match=r"^a MaskedBatch of one number per example cannot be a "
                                        r"dict key or a set member \(each example has its own "
                                        r"key\)"):
        scaled_by_length(matchbox.MaskedBatch.fromlist(xs, (True, False)))
