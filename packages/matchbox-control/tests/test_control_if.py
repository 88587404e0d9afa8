"""``if``/``elif``/``else`` with per-example conditions: each example takes its own branch."""

from __future__ import annotations

import pytest
import torch
from control_cases import assert_batch_equals_loop, assert_oracle, scalars, sequences
from hypothesis import given
from hypothesis import strategies as st

import matchbox
from matchbox import MaskedBatch
from matchbox.testing import mb_assert


@matchbox.batch
def step(x):
    if x > 1:
        x = x * 2
    elif x > 0:
        x = x - 10
    else:
        x = x + 100
    return x


def test_oracle_if_elif_else():
    # x > 1 doubles, 0 < x <= 1 subtracts 10, x <= 0 adds 100
    assert_oracle(step, [0, 1, 2, 3], [100, -9, 4, 6])


def test_if_elif_else_values_and_gradients(dtype):
    assert_batch_equals_loop(step, scalars([-1.5, 0.5, 2.0, 0.0, 3.0], dtype))


@matchbox.batch
def safe_log(x):
    # The examples that do not take the branch compute log of a negative
    # number (NaN): it must reach neither their value nor their gradient.
    if x > 0:
        y = x.log()
    else:
        y = -x
    return y * 3


def test_a_branch_outside_an_examples_domain_leaks_no_nan(dtype):
    assert_batch_equals_loop(safe_log, scalars([-2.0, 0.5, 3.0, -0.0], dtype))


@matchbox.batch
def mean_of_positives(x, w, v):
    # For an example with no positive entry, n is 0 and the branch it does not
    # take divides by zero: the zero gradient its discarded value gets becomes
    # 0 * inf = NaN on the way back, which must not reach the shared w and v.
    n = (x > 0).sum(1)
    if n > 0:
        y = (x @ w * v).sum(1) / n
    else:
        y = x.sum(1) * 0.0
    return y


def test_shared_weights_get_no_nan_from_examples_not_running_a_branch(dtype):
    w = torch.randn(3, 2, dtype=dtype, requires_grad=True)
    v = torch.randn(2, dtype=dtype, requires_grad=True)
    xs = [torch.tensor(row, dtype=dtype) for row in
          ([[1.0, -2.0, 0.5]], [[-1.0, -3.0, -0.5]], [[2.0, 1.0, 3.0]])]
    xb = MaskedBatch.fromlist(xs, (False,))
    assert_batch_equals_loop(mean_of_positives, (xs, xb), ([w] * 3, w), ([v] * 3, v))


class _Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)

    @matchbox.batch
    def forward(self, x):
        n = (x > 0).sum(1, keepdim=True)
        if n > 0:
            y = self.lin(x) / n
        else:
            y = x[:, :2] * 0.0
        return y


def test_module_weights_get_no_nan_from_examples_not_running_a_branch(dtype):
    pytest.importorskip("matchbox.nn", reason="nn.Linear on batches is in matchbox-nn, "
                                              "which the control environment does not install")
    module = _Scaled().to(dtype)
    xs = [torch.tensor(row, dtype=dtype) for row in
          ([[1.0, -2.0, 0.5]], [[-1.0, -3.0, -0.5]], [[2.0, 1.0, 3.0]])]
    mb_assert(module, [xs], [MaskedBatch.fromlist(xs, (False,))], 3,
              params=list(module.parameters()))


@matchbox.batch
def defined_in_branches(x):
    s = x.sum(-1)
    if s > 0:
        label = s * 2
        extra = x.exp()
    else:
        label = -s
        extra = x.sin()
    return label, extra


def test_variables_first_defined_in_both_branches(dtype):
    xs, xb = sequences([2, 2, 2, 2], dtype=dtype)
    static = [x.sum(1) for x in xs]  # (1, 3): static per-example rows
    assert_batch_equals_loop(defined_in_branches,
                             (static, MaskedBatch.fromlist(static, (False,))))


@matchbox.batch
def if_without_else(x):
    y = x * 1
    if x.sum() < 0:
        y = y * -1
    return y


@given(values=st.lists(st.floats(-5, 5, allow_nan=False), min_size=1, max_size=6))
def test_if_without_else_hypothesis(values):
    assert_batch_equals_loop(if_without_else, scalars(values))


@matchbox.batch
def branch_on_a_sequence(x, w):
    # the condition is a reduction over a dynamic dimension: one truth per example
    if x.sum(1).sum(-1) > 0:
        h = (x @ w).tanh().sum(1)
    else:
        h = x.mean(1) * 2
    return h


@given(lengths=st.lists(st.integers(1, 5), min_size=1, max_size=5))
def test_branch_on_sequences_of_different_lengths(lengths):
    w = torch.randn(3, 3, dtype=torch.float64)
    xs, xb = sequences(lengths)
    assert_batch_equals_loop(branch_on_a_sequence, (xs, xb), ([w] * len(xs), w))


@matchbox.batch
def nested(x):
    if x > 0:
        if x > 2:
            x = x * 3
        else:
            x = x + 1
    else:
        if x < -2:
            x = x * 0 - 1
    return x


def test_oracle_nested_branches():
    assert_oracle(nested, [-3, -1, 1, 3], [-1, -1, 2, 9])


def test_a_branch_no_example_takes_is_not_run():
    calls = []

    @matchbox.batch
    def f(x):
        if x > 100:
            calls.append("then")
            x = x + 1
        return x

    _, xb = scalars([1.0, 2.0])
    f(xb)
    assert calls == []


def test_plain_condition_runs_as_plain_python():
    @matchbox.batch
    def f(x, flag):
        if flag:
            x = x * 2
        return x

    xs, xb = scalars([1.0, 2.0])
    assert torch.equal(f(xb, True).data, xb.data * 2)
    assert f(xb, False) is xb


def test_condition_that_is_not_one_value_per_example_is_refused():
    @matchbox.batch
    def f(x):
        if x > 0:
            x = x + 1
        return x

    xb = MaskedBatch(torch.rand(2, 3), None, (False,))
    with pytest.raises(ValueError, match=r"a condition must hold one truth value per example, "
                                         r"but its examples have shape \(1, 3\)"):
        f(xb)


def test_condition_of_shape_one_by_one_per_example():
    @matchbox.batch
    def f(x):
        if x.sum(-1, keepdim=True) > 0:  # (1, 1) per example
            x = x * 2
        return x

    xs = [torch.tensor([[1.0, 2.0]]), torch.tensor([[-1.0, -2.0]])]
    assert_batch_equals_loop(f, (xs, MaskedBatch.fromlist(xs, (False,))))


@matchbox.batch
def choose_sequence(x):
    # a variable with a dynamic dimension, whose length depends on the branch
    if x.sum(1).sum(-1) > 0:
        y = x * 2
    else:
        y = x[:, 1:]
    return y


@given(lengths=st.lists(st.integers(0, 5), min_size=1, max_size=5))
def test_dynamic_dimensions_in_branches(lengths):
    assert_batch_equals_loop(choose_sequence, sequences(lengths))


@matchbox.batch
def drop_until_short(x):
    while x.size_as_tensor(1) > 2:
        x = x[:, 1:] * 1.5
    return x


def test_sequences_shrinking_in_a_loop(dtype):
    assert_batch_equals_loop(drop_until_short, sequences([5, 0, 2, 3, 1], dtype=dtype))


@matchbox.batch
def largest_or_zero(x):
    # the canonical guard: the loop never reduces an empty example
    if x.size_as_tensor(1) > 0:
        m = x.amax(1)
    else:
        m = x.batch_zeros(x.size(-1))
    return m


@given(lengths=st.lists(st.integers(0, 4), min_size=1, max_size=5))
def test_a_branch_guarding_an_empty_example(lengths):
    assert_batch_equals_loop(largest_or_zero, sequences(lengths))


@matchbox.batch
def else_reads_what_then_rebinds(x):
    a = x * 1.0
    if x > 0:
        a = x * 100.0
        out = a
    else:
        out = a + 1.0  # the value before the if: the then side ran first, for others
    return out


@matchbox.batch
def elif_reads_what_then_rebinds(x):
    a = x * 2.0
    if x > 1:
        a = a.exp()
        out = a
    elif x > -1:
        out = a * 3.0
    else:
        out = a - 1.0
    return out


def test_else_reads_the_value_the_then_side_rebinds_for_its_examples(dtype):
    # `a` is dead after the if, but the else side, run after the then side,
    # reads it: the then side must merge it, or the else examples read its value.
    assert_oracle(else_reads_what_then_rebinds, [2.0, -3.0, 0.5, -0.5],
                  [200.0, -2.0, 50.0, 0.5])
    assert_batch_equals_loop(else_reads_what_then_rebinds, scalars([2.0, -3.0, 0.0], dtype))
    assert_batch_equals_loop(elif_reads_what_then_rebinds,
                             scalars([2.0, 0.5, -3.0, 1.5, -0.2], dtype))


@matchbox.batch
def learned_state_updated_if_long(x, h0):
    h = h0.expand(x.size(0), -1)  # plain, stride 0: the same row for every example
    if x.size_as_tensor(1) > 2:
        h = h + x.sum(1)
    return h


@matchbox.batch
def learned_state_chosen_per_example(x, h0, h1):
    if x.size_as_tensor(1) > 2:
        h = (h0 * 2).expand(x.size(0), -1)  # two plain states, neither defined before
    else:
        h = h1.expand(x.size(0), -1)
    return h * x.sum(1)


@pytest.mark.parametrize("lengths", [[2, 3], [0, 3], [1, 4, 0], [3], [0]])
def test_a_plain_state_expanded_to_the_batch_size_is_merged_as_one_row(lengths, dtype):
    # Core takes a plain tensor expanded from size one to the batch size as its one
    # row beside a batch; so does a merge, on either side (values and gradients).
    h0, h1 = torch.randn(1, 3, dtype=dtype), torch.randn(1, 3, dtype=dtype)
    n = len(lengths)
    x = sequences(lengths, dtype=dtype)
    assert_batch_equals_loop(learned_state_updated_if_long, x, ([h0] * n, h0))
    assert_batch_equals_loop(learned_state_chosen_per_example, x, ([h0] * n, h0),
                             ([h1] * n, h1))


def test_a_plain_tensor_copied_to_the_batch_size_says_what_to_write():
    @matchbox.batch
    def f(x, h0):
        h = h0.expand(x.size(0), -1) * 2  # an op copied the expand: rows, not one row
        if x.size_as_tensor(1) > 2:
            h = x.sum(1)
        return h

    _, xb = sequences([2, 3])
    with pytest.raises(ValueError,
                       match=r"@batch: 'h' is a plain tensor of shape \(2, 3\) on one path and "
                             r"a batch of examples of rank 2 on another; a plain tensor is the "
                             r"same for every example, so it needs size 1 in dimension 0 .*"
                             r"keep it of shape \(1, d\) \(h = h0 \+ 0\.0\), or expand after "
                             r"the op \(\(h0 \* 2\)\.expand\(x\.size\(0\), -1\)\)"):
        f(xb, torch.randn(1, 3, dtype=torch.float64))
    with pytest.raises(ValueError,
                       match=r"@batch: 'h' is a plain tensor of shape \(2, 3\) that differs "
                             r"between examples, so it becomes a batch, whose examples need a "
                             r"leading dimension of size one; a plain tensor is the same"):
        learned_state_chosen_per_example(xb, torch.randn(2, 3, dtype=torch.float64),
                                         torch.randn(1, 3, dtype=torch.float64))


@matchbox.batch
def windows_of_the_long_examples(x):
    out = x.sum(1) * 0
    if x.size_as_tensor(1) >= 5:  # shorter examples have no window of 5: they skip it
        out = out + x.unfold(1, 5, 1).sum((1, 3))
    return out


@pytest.mark.parametrize("lengths", [[2, 3, 0], [6, 3, 0, 5]])
def test_unfold_wider_than_the_examples_that_do_not_run_it_equals_the_loop(lengths, dtype):
    # With no example of 5 steps, the window is wider than the padded batch: the examples
    # that skip the branch are padded to it, not refused.
    assert_batch_equals_loop(windows_of_the_long_examples, sequences(lengths, dtype=dtype))


@matchbox.batch
def add_if_same_shape(x, y):
    # Each example compares its own shapes (a Python bool in the loop): x + y only where
    # they match, which the other examples could not add.
    if x.shape == y.shape:
        z = x + y
    elif x.shape != (1, 0, 3):
        z = x * 2
    else:
        z = x - 1
    return z


@pytest.mark.parametrize("lengths", [((3, 0, 2, 1), (3, 1, 2, 4)), ((2,), (2,)), ((0, 2), (1, 2))])
def test_branch_on_a_comparison_of_shapes(lengths):
    xs, xb = sequences(lengths[0])
    ys, yb = sequences(lengths[1])
    assert_batch_equals_loop(add_if_same_shape, (xs, xb), (ys, yb))


@matchbox.batch
def checked_sum(x, y):
    assert x.shape == y.shape, "shapes differ"
    return x + y


def test_assert_of_a_comparison_of_shapes_names_the_examples_it_fails_for():
    xs, xb = sequences((3, 0, 2))
    assert_batch_equals_loop(checked_sum, (xs, xb), sequences((3, 0, 2)))
    with pytest.raises(AssertionError, match=r"shapes differ \(fails for examples \[1\]\)"):
        checked_sum(xb, sequences((3, 1, 2))[1])
