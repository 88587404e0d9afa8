"""``x.item()``, ``int(x)``, ``float(x)`` and ``bool(x)`` of a per-example scalar give,
inside ``@batch``, each example's own value (a batch of per-example numbers), usable
as a loop bound, a condition, an index and in arithmetic, as the loop's Python
numbers are."""

from __future__ import annotations

import pytest
import torch
from control_cases import assert_batch_equals_loop, assert_oracle, scalars, sequences
from torch_features import NUMBER_ARGUMENTS_REACH_TORCH_FUNCTION

import matchbox


@matchbox.batch
def triangle(n):
    total = 0
    for i in range(n.item()):
        total = total + i
    return total


@matchbox.batch
def triangle_int(n):
    total = 0
    for i in range(int(n) + 1):
        total = total + i
    return total


def test_oracle_item_and_int_as_a_range_bound():
    assert_oracle(triangle, [0, 1, 3, 4], [0, 0, 3, 6], dtype=torch.int64)
    assert_oracle(triangle_int, [0.5, 1.9, -0.5, 3.0], [0, 1, 0, 6])


@matchbox.batch
def scaled(x):
    steps = x.size_as_tensor(1)
    h = x.sum(1)
    for t in range(steps.item()):
        h = h * 0.5 + x[:, t] * float(t)
    return h / (float(steps) + 1.0)


def test_item_and_float_in_a_loop_and_arithmetic(dtype):
    assert_batch_equals_loop(scaled, sequences([3, 1, 0, 2], dtype=dtype))


@matchbox.batch
def branch_on_int(x):
    k = int(x.sum() * 2)
    if k > 1:
        return x * k
    return x + 3 * bool(x.sum() > 0)


def test_int_and_bool_as_conditions_and_values(dtype):
    assert_batch_equals_loop(branch_on_int, scalars([0.3, 1.4, -2.0, 0.9], dtype))


@matchbox.batch
def item_is_detached(x):
    return x * x.item()


def test_item_has_no_gradient_as_a_python_number(dtype):
    assert_batch_equals_loop(item_is_detached, scalars([2.0, -1.0, 0.5], dtype))


def test_index_of_a_batch_by_int(dtype):
    @matchbox.batch
    def f(x, j):
        return x[:, int(j)]

    xs, xb = sequences([3, 2, 4], dtype=dtype)
    js, jb = scalars([2.0, 0.0, 3.0], dtype)
    assert_batch_equals_loop(f, (xs, xb), (js, jb))


def test_int_of_nan_raises_naming_the_examples():
    _, xb = scalars([1.0, float("nan"), 2.0])

    @matchbox.batch
    def f(x):
        return int(x)

    with pytest.raises(ValueError, match=r"cannot convert float NaN or infinity to integer "
                                         r"\(examples \[1\]\)"):
        f(xb)


def test_several_values_per_example_are_refused():
    _, xb = sequences([2, 3])

    @matchbox.batch
    def f(x):
        return x.item()

    with pytest.raises(ValueError, match=r"@batch: item\(\) needs one value per example, but "
                                         r"the examples have shape \(1, \*, 3\).*reduce each "
                                         r"example first"):
        f(xb)


def test_a_per_example_size_works_where_a_batch_takes_one():
    @matchbox.batch
    def f(x, n):
        return x.new_zeros(1, n.item()) + n.item()

    xs, xb = sequences([1, 2], dtype=torch.float64)
    ns, nb = scalars([2, 3], dtype=torch.int64)
    assert_batch_equals_loop(f, (xs, xb), (ns, nb))


def test_a_per_example_size_of_a_plain_constructor_names_the_op():
    _, nb = scalars([2, 3], dtype=torch.int64)

    @matchbox.batch
    def f(n):
        return torch.zeros(n.item())

    if NUMBER_ARGUMENTS_REACH_TORCH_FUNCTION:
        refused = pytest.raises(NotImplementedError, match=r"torch.zeros is not implemented "
                                                           r"for MaskedBatch")
    else:  # torch 2.3 refuses a batch as a size itself, before Matchbox sees the call
        refused = pytest.raises(TypeError, match=r"zeros\(\): argument 'size' .* found "
                                                 r"element of type MaskedBatch")
    with refused:
        f(nb)


def test_plain_values_are_pythons_own():
    @matchbox.batch
    def f(t, s):
        return t.item(), int(t), float(t), bool(t), int(s, 16), float(s[:1])

    assert f(torch.tensor(2.5), "1f") == (2.5, 2, 2.5, True, 31, 1.0)


def test_outside_batch_item_is_refused_by_core():
    _, xb = scalars([1.0, 2.0])
    with pytest.raises(TypeError, match=r"a MaskedBatch holds one value per example"):
        xb.item()
