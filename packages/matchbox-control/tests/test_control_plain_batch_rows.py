"""Plain tensors with the batch size in dimension 0 beside batches under ``@batch``:

- ``cls.expand(x.size(0), -1, -1)`` (a ViT's class token, stride 0) is the same for every
  example: ``torch.cat`` takes it as pointwise ops do (core's ``expanded_row``), values
  and the token's gradient equal to the loop's.
- ``h = torch.zeros(x.size(0), H)`` as an accumulator is a plain tensor of B rows, which
  cannot be told from one shared by the examples: refused beside a batch of more than
  one example, the message saying what to write (``x.new_zeros(x.size(0), H)`` or
  ``torch.zeros(1, H)``), which equal the loop.
"""

from __future__ import annotations

import pytest
import torch
from control_cases import assert_batch_equals_loop, sequences

import matchbox

LENGTHS = [[3, 1, 2], [3, 0, 2], [1], [0, 4]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("lengths", LENGTHS)
def test_a_class_token_joined_in_a_decorated_loop_equals_the_loop(lengths, dtype):
    torch.manual_seed(0)
    cls = torch.randn(1, 1, 3, dtype=dtype, requires_grad=True)

    @matchbox.batch
    def summary(x):
        h = torch.cat([cls.expand(x.size(0), -1, -1), x], 1)
        acc = h[:, 0] * 0.0
        for ht in h.unbind(1):
            acc = acc * 0.5 + ht.tanh()
        return acc

    assert_batch_equals_loop(summary, sequences(lengths, dtype=dtype), params=[cls])


@matchbox.batch
def plain_state(x):
    h = torch.zeros(x.size(0), 3, dtype=x.dtype)
    for xt in x.unbind(1):
        h = h + xt
    return h


@matchbox.batch
def batch_state(x):
    h = x.new_zeros(x.size(0), 3)
    for xt in x.unbind(1):
        h = h * 0.5 + xt
    return h


@matchbox.batch
def shared_state(x):
    h = torch.zeros(1, 3, dtype=x.dtype)
    for xt in x.unbind(1):
        h = h * 0.5 + xt
    return h


def test_a_plain_state_built_with_x_size_0_is_refused_saying_what_to_build():
    with pytest.raises(ValueError, match=(
            r"Tensor\.add: a plain tensor argument has size 3 in dimension 0, .* Its size is "
            r"the batch size: built with x\.size\(0\) as a size \(torch\.zeros\(x\.size\(0\), "
            r"3\), a state\), it is a plain tensor, which cannot be told from one holding a "
            r"row per example; build a batch, one row per example, with "
            r"x\.new_zeros\(x\.size\(0\), 3\), or share one row, torch\.zeros\(1, 3\)$")):
        plain_state(sequences([3, 1, 2])[1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("lengths", LENGTHS)
def test_the_states_the_refusal_suggests_equal_the_loop(lengths, dtype):
    assert_batch_equals_loop(batch_state, sequences(lengths, dtype=dtype))
    assert_batch_equals_loop(shared_state, sequences(lengths, dtype=dtype))


def test_a_plain_state_of_one_example_equals_the_loop():
    assert_batch_equals_loop(plain_state, sequences([3]))
