"""A region's gradient guard is deferred to the op that needs it (core's ``_region_guard``):
``where``, ``cat``, ``stack`` and indexing with per-example ints carry it to their result,
any other op applies it first, and the region's merge needs none.  Each case equals the
loop in values and gradients, with values for the examples not running a branch that would
send NaN back through the op that needs the guard."""

from __future__ import annotations

import torch
from control_cases import assert_batch_equals_loop, sequences

import matchbox
import matchbox.functional as MF
from matchbox import MaskedBatch
from matchbox._region_guard import deferred_mask


def _rows(values, dtype):
    xs = [torch.tensor([row], dtype=dtype) for row in values]
    return xs, MaskedBatch.fromlist(xs, (False,))


@matchbox.batch
def log_after_where(x):
    # The log is outside its domain for the examples with a negative x[0, i]: the guard,
    # carried through the index and the where, must be applied before it.
    i = 0  # a per-example int, as a stack pointer
    if x[:, 2] > 1:
        i = 1
    if x[:, i] > 0:
        picked = torch.where(x > 0, x, x * 0.5)[:, i]
        y = picked.log()
    else:
        y = x.sum(-1)
    return y


def test_a_guard_carried_through_indexing_and_where_reaches_the_log(dtype):
    xs, xb = _rows([[1.0, -2.0, 0.5], [-1.0, 0.0, 2.0], [0.0, 3.0, 1.0], [0.0, 3.0, 2.0]],
                   dtype)
    assert_batch_equals_loop(log_after_where, (xs, xb))


@matchbox.batch
def sqrt_of_cat(x, y):
    if x.sum(-1) > 0:
        z = torch.cat([x, y], -1).sqrt()   # sqrt(0) and sqrt(<0): inf and NaN slopes
    else:
        z = torch.cat([y, x], -1) * 2
    return z.sum(-1)


def test_a_guard_carried_through_cat_reaches_the_sqrt(dtype):
    xs, xb = _rows([[1.0, 4.0], [-1.0, 0.0], [0.0, 0.0]], dtype)
    ys, yb = _rows([[0.0, 9.0], [-4.0, 1.0], [2.0, 2.0]], dtype)
    assert_batch_equals_loop(sqrt_of_cat, (xs, xb), (ys, yb))


@matchbox.batch
def written_then_read(x):
    # An item read (a copy carrying the guard), then the batch written in place, then
    # the item and the batch used: the item keeps the value read, the batch the write.
    i = 2
    if x[:, 0] < 1:
        i = 1
    if x.sum(-1) > 0:
        item = x[:, i]
        x = x * 1.0
        x[:, 0] = item * 3
        y = x.sum(-1) + item.exp()
    else:
        y = x.sum(-1)
    return y


def test_an_item_read_before_an_in_place_write_keeps_its_value(dtype):
    xs, xb = _rows([[1.0, 2.0, 3.0], [-5.0, 1.0, 1.0], [0.5, 0.5, 0.5]], dtype)
    assert_batch_equals_loop(written_then_read, (xs, xb))


@matchbox.batch
def stacked(x):
    if x[:, 0] > 0:
        s = torch.stack([x, x * 2], 1).log()
    else:
        s = torch.stack([x, x], 1)
    return s.sum(-1).sum(-1)


def test_a_guard_carried_through_stack(dtype):
    xs, xb = _rows([[1.0, 2.0], [-1.0, 0.0], [3.0, -1.0]], dtype)
    assert_batch_equals_loop(stacked, (xs, xb))


@matchbox.batch
def nested(x):
    if x.sum(-1) > 0:
        if x[:, 0] > 0:
            y = x.log()
        else:
            y = torch.where(x > 0, x, x * 2)
        y = y.sqrt()
    else:
        y = x * 0
    return y.sum(-1)


def test_nested_regions_apply_the_outer_guard_first(dtype):
    xs, xb = _rows([[1.0, 2.0], [-1.0, 3.0], [-2.0, -1.0], [0.0, 0.0]], dtype)
    assert_batch_equals_loop(nested, (xs, xb))


_SEEN: dict = {}


def _see(name, value):
    _SEEN[name] = value


@matchbox.batch
def _write(stack, at, item):
    if item.sum(-1) > 0:
        _see("read", stack)
        stack = torch.where(at, item.unsqueeze(1), stack)
        _see("written", stack)
    return stack


def test_a_batch_the_region_only_reads_through_a_where_is_not_copied_for_the_guard():
    stack = torch.randn(3, 4, 2, requires_grad=True)
    item = torch.tensor([[1.0, 1.0], [-1.0, -1.0], [2.0, 0.0]], requires_grad=True)
    at = torch.tensor([True, False, False, False]).view(1, 4, 1)
    out = _write(MaskedBatch(stack, None, (False, False)), at, MaskedBatch(item, None, (False,)))
    # The guard of the stack the branch read was carried to the where's result, which the
    # merge took as it is: neither was applied (no copy of the stack for it).
    assert deferred_mask(_SEEN["read"]) is not None
    assert deferred_mask(_SEEN["written"]) is not None
    assert _SEEN["read"]._data is stack  # (reading .data would apply the guard)
    written = (item.sum(-1) > 0).view(3, 1, 1) & at
    torch.testing.assert_close(out.data, torch.where(written, item.unsqueeze(1), stack))
    out.data.sum().backward()
    torch.testing.assert_close(stack.grad, (~written).expand(3, 4, 2).to(stack.dtype))


@matchbox.batch
def read_by_methods(x):
    # Methods and helpers that read a batch's data themselves, not through the dispatch,
    # see it guarded (MaskedBatch.data applies a deferred guard when read).
    if x[:, 0] > 0:
        y = (x.to(x.dtype).sqrt() + x.cpu().log() + x.split_dim(-1, 2).join_dims(-1, 1).sqrt()
             + MF.stack([x, x], 1, dynamic=False).sum(1).sqrt())
    else:
        y = x * 1
    return y.sum(-1)


def test_a_guard_applies_when_a_method_reads_the_data_itself(dtype):
    xs, xb = _rows([[1.0, 4.0], [-1.0, 0.0], [2.0, -3.0], [0.0, 1.0]], dtype)
    assert_batch_equals_loop(read_by_methods, (xs, xb))


@matchbox.batch
def no_grad_inside(x):
    if x[:, 0] > 0:
        with torch.no_grad():
            scale = x.abs().max()  # read without gradient: the guard stays deferred
        y = x.log() * scale
    else:
        y = x * 1
    return y.sum(-1)


def test_a_read_without_gradient_leaves_the_guard_for_the_ops_after(dtype):
    xs, xb = _rows([[1.0, 4.0], [-1.0, 0.0], [2.0, -3.0]], dtype)
    assert_batch_equals_loop(no_grad_inside, (xs, xb))


@matchbox.batch
def appended_in_branch(x):
    out = []
    if x[:, 0] > 0:
        out.append(x)
    total = x.sum(-1) * 0
    for item in out:
        total = total + item.sqrt().sum(-1)
    return total


def test_an_item_appended_in_a_branch_is_guarded(dtype):
    xs, xb = _rows([[1.0, 4.0], [-1.0, 0.0], [2.0, -3.0]], dtype)
    assert_batch_equals_loop(appended_in_branch, (xs, xb))


@matchbox.batch
def sequence_branch(x):
    # A batch with a dynamic dimension (NaN padding, empty and one-long examples): the
    # guard carried through cat and a per-example index, then a log outside its domain
    # for the examples that do not take the branch.
    last = x.size_as_tensor(1) - 1
    if x.sum() > 0:
        y = torch.cat([x, x], -1).log().sum(1) + x[:, last].sqrt().sum(-1)
    else:
        y = x.sum(1) * 3
    return y.sum(-1)


def test_a_guard_carried_over_a_batch_with_padding_and_empty_examples(dtype):
    torch.manual_seed(0)
    xs, _ = sequences([2, 0, 1, 4], dtype=dtype)
    # Positive examples take the branch; the negative one does not, and its log and
    # sqrt there are NaN, whose slope must not reach its gradient.
    xs = [xs[0].abs() + 0.1, xs[1], -xs[2].abs() - 0.1, xs[3].abs() + 0.1]
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))
    assert_batch_equals_loop(sequence_branch, (xs, xb))
