"""``torch.where`` in a ``@batch`` region folds the running examples into its condition
(core's ``ops/pointwise.where``): the examples that do not run it take its ``other``, so
``stack = torch.where(at, item, stack)`` merged at the end of the region needs no second
``where`` over the stack (issue 22: the TreeLSTM's stack was copied twice a step for its
two sides' merges).  Each case equals the loop in values and gradients, with NaN padding;
the counts are pinned on the accelerator's way (no mask read on the host)."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
import torch
from control_cases import assert_batch_equals_loop, sequences
from hypothesis import given, settings
from op_counts import CountOps
from torch.utils._python_dispatch import TorchDispatchMode

import matchbox
from matchbox import MaskedBatch
from matchbox._masking import host_reads

SLOTS = torch.arange(4).unsqueeze(0)  # (1, 4): a one-hot write's positions


@matchbox.batch
def writes_in_both_sides(x):
    """A stack written in each side of an ``if`` at a per-example pointer."""
    stack = x.new_zeros(1, 4, 3)
    top = 0
    for x_t in x.unbind(1):
        at = (SLOTS == top).unsqueeze(-1)
        if x_t.sum() > 0:
            stack = torch.where(at, x_t.unsqueeze(1).exp(), stack)
            top = top + 1
        else:
            stack = torch.where(at, stack * x_t.unsqueeze(1), stack)
        if top > 3:
            top = 0
    return stack.tanh().sum(1)


@pytest.mark.parametrize("lengths", [[3, 0, 5, 1], [1], [0], [6, 6], [2, 7, 4]])
def test_writes_in_both_sides_equal_the_loop(lengths, dtype):
    torch.manual_seed(len(lengths))
    assert_batch_equals_loop(writes_in_both_sides, sequences(lengths, dtype=dtype))


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(0, 7), min_size=1, max_size=5), st.integers(0, 2**16))
def test_writes_in_both_sides_equal_the_loop_for_any_lengths(lengths, seed):
    torch.manual_seed(seed)
    assert_batch_equals_loop(writes_in_both_sides, sequences(lengths))


@matchbox.batch
def where_into_another_variable(x):
    """The where's ``other`` is not the variable it is assigned to: a real merge."""
    kept = x.new_zeros(1, 3)
    other = x.new_ones(1, 3)
    for x_t in x.unbind(1):
        if x_t.sum() > 0:
            kept = torch.where(x_t > 0.5, x_t, other)
        other = other * 2
    return kept


def test_a_where_into_another_variable_equals_the_loop(dtype):
    torch.manual_seed(1)
    assert_batch_equals_loop(where_into_another_variable, sequences([4, 1, 0, 6], dtype=dtype))


@matchbox.batch
def written_after_the_where(x):
    """The where's result, or its ``other``, changed in place after it: no record holds."""
    state = x.new_zeros(1, 3)
    for x_t in x.unbind(1):
        if x_t.sum() > 0:
            state = torch.where(x_t > 0, x_t, state)
            state.mul_(2)
        else:
            before = state
            state = torch.where(x_t > 0, x_t, before)
            before.add_(1)
    return state


def test_writes_after_the_where_equal_the_loop(dtype):
    torch.manual_seed(2)
    assert_batch_equals_loop(written_after_the_where, sequences([5, 2, 0, 3], dtype=dtype))


class _WhereShapes(TorchDispatchMode):
    """The output shapes of the ``where`` ops run."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket.__name__ == "where":
            self.shapes.append(tuple(out.shape))
        return out


def test_a_stack_written_in_both_sides_is_not_copied_again_to_be_merged():
    torch.manual_seed(3)
    steps = 6
    xs = [torch.randn(1, steps, 3) for _ in range(3)]
    x = MaskedBatch.fromlist(xs, (False, False))  # no padding: every value real
    with host_reads(False), _WhereShapes() as counted:
        out = writes_in_both_sides(x)
    stack_sized = sum(shape == (len(xs), 4, 3) for shape in counted.shapes)
    # The two sides' own writes, once a step each: their merges (and the step's) select
    # nothing more over the stack (four a step before). But in the first step: there the
    # pointer is still the int 0, the condition a plain tensor, not folded (its merges
    # select, two more).
    assert stack_sized == 2 * steps + 2, counted.shapes
    with host_reads(False), CountOps() as ops:
        writes_in_both_sides(x)
    assert ops.syncs == 0, ops.ops
    for example, value in zip(xs, out.examples()):
        torch.testing.assert_close(value, writes_in_both_sides(example))


def test_a_written_value_padded_where_the_stack_is_real_is_merged_by_a_select():
    # x_t of examples that ended is padding: a where's result then has a mask of its own,
    # not the stack's, and the merge selects (the fold gives it nothing to skip); four
    # stack-sized selects a step, and the loop's values (the cases above).
    torch.manual_seed(4)
    _, x = sequences([4, 6, 2], dtype=torch.float32)
    with host_reads(False), _WhereShapes() as counted:
        writes_in_both_sides(x)
    assert sum(shape == (3, 4, 3) for shape in counted.shapes) == 4 * 6, counted.shapes


@matchbox.batch
def nested_writes(x):
    """A write under an ``if`` inside an ``if`` in a loop step: its record is carried from
    the inner region to the outer one and to the step (``select._as_kept``)."""
    stack = x.new_zeros(1, 4, 3)
    top = 0
    for x_t in x.unbind(1):
        at = (SLOTS == top).unsqueeze(-1)
        if x_t.sum() > -1:
            if x_t[:, 0] > 0:
                stack = torch.where(at, x_t[:, :1].sqrt() * x_t.unsqueeze(1), stack)
            else:
                stack = torch.where(at, (-x_t[:, :1]).log1p() + stack, stack)
            top = top + 1
        if top > 3:
            top = 0
    return stack.sum(1)


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(0, 7), min_size=1, max_size=5), st.integers(0, 2**16))
def test_nested_writes_equal_the_loop(lengths, seed):
    # For the examples not running a side, its sqrt (of x_t[0] <= 0) or log1p (of
    # -x_t[0] < -1) is NaN or has an infinite slope: no NaN may reach x or the stack.
    torch.manual_seed(seed)
    assert_batch_equals_loop(nested_writes, sequences(lengths))


def test_nested_writes_give_no_nan():
    torch.manual_seed(5)
    xs, xb = sequences([3, 5, 1])
    xs[0][0, :, 0] = torch.tensor([2.0, -3.0, 0.0])  # a NaN or inf for each other side
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))
    assert_batch_equals_loop(nested_writes, (xs, xb))
    loop = [nested_writes(x) for x in xs]
    assert all(torch.isfinite(v).all() for v in loop)
