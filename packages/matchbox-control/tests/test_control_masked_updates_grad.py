"""An augmented assignment of a batch under a per-example condition (``x[:, 0] *= s``,
``x *= s``, ``x[:, 0] **= 2``) whose derivative needs the value before the update: the
loop's in-place op keeps that value (torch saves the original for ``mul_``/``pow_``), so
the batch's update must too; it failed in backward with torch's "modified by an inplace
operation" (the out-of-place op saved a view of the batch it then wrote)."""

from __future__ import annotations

import pytest
import torch
from control_cases import assert_batch_equals_loop, sequences

import matchbox


@matchbox.batch
def scale_first(x, s):
    x = x * 1
    if x.sum() > 0:
        x[:, 0] *= s
    return x


@matchbox.batch
def scale_all(x, s):
    x = x * 1
    if x.sum() > 0:
        x *= s
    return x


@matchbox.batch
def square_first(x, s):
    x = x * s
    if x.sum() > 0:
        x[:, 0] **= 2
    return x


@matchbox.batch
def divide_last(x, s):
    x = x * 1
    if x[:, 0, 0] > 0:
        x[:, -1] /= s
    return x


@matchbox.batch
def scale_in_a_loop(x, s):
    x = x * 1
    for t in range(x.size_as_tensor(1)):
        if x[:, t, 0] > 0:
            x[:, t] *= s
    return x


@matchbox.batch
def scale_at_a_counter(x, s):
    x = x * 1
    j = 0
    for t in range(x.size_as_tensor(1)):
        if x[:, t, 1] > 0:
            j = t
    if x.sum() > 0:
        x[:, j] *= s
    return x


@matchbox.batch
def scale_all_by_method(x, s):
    x = x * 1
    if x.sum() > 0:
        x.mul_(s)
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("f", [scale_first, scale_all, square_first, divide_last,
                               scale_in_a_loop, scale_at_a_counter,
                               scale_all_by_method])
@pytest.mark.parametrize("lengths", [[3, 2, 4, 1], [2]])
def test_an_update_whose_derivative_needs_the_old_value_equals_the_loop(f, lengths, dtype):
    s = torch.tensor(1.5, dtype=dtype)
    assert_batch_equals_loop(f, sequences(lengths, dtype=dtype), ([s] * len(lengths), s))


@matchbox.batch
def scale_first_of_empty(x, s):
    x = x * 1
    if x.size_as_tensor(1) > 0:
        x[:, 0] *= s
    return x


def test_an_empty_example_does_not_run_the_update():
    s = torch.tensor(-2.0, dtype=torch.float64)
    assert_batch_equals_loop(scale_first_of_empty, sequences([3, 0, 1]), ([s] * 3, s))


@matchbox.batch
def scale_first_by_method(x, s):
    x = x * 1
    if x.sum() > 0:
        x[:, 0].mul_(s)
    return x


def test_an_in_place_op_on_a_view_of_a_guarded_batch_is_refused():
    """``x[:, 0].mul_(s)`` under a per-example condition with ``x`` requiring grad: the
    region reads ``x`` through its gradient guard, a new tensor, so the view's write missed
    ``x`` (the running examples kept their old values, silently); refused, naming the op.
    Without grad (no guard) it writes into ``x``, as the loop's view does."""
    xs, xb = sequences([3, 2, 4, 1])
    s = torch.tensor(1.5, dtype=torch.float64)
    grad = matchbox.MaskedBatch.fromlist([x.clone().requires_grad_(True) for x in xs],
                                         (True, False))
    with pytest.raises(NotImplementedError, match=r"Tensor\.mul_: an in-place op on a view of "
                                                  r"a batch .* under a per-example condition, "
                                                  r"where the batch requires grad, is not "
                                                  r"supported.*x\[:, 0\] \*= v"):
        scale_first_by_method(grad, s)
    assert_batch_equals_loop(scale_first_by_method, (xs, xb), ([s] * 4, s), check_grad=False)
