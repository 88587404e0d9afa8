"""Writes into a plain tensor under a per-example condition, or of a batch value: the
tensor differs between examples afterwards, so the local variable becomes a batch (one
copy per example), as the loop over examples gives; where that cannot be, the error
says what to write."""

from __future__ import annotations

import pytest
import torch
from control_cases import assert_batch_equals_loop, assert_oracle, scalars, sequences

import matchbox
import matchbox.functional as F
from matchbox import MaskedBatch


@matchbox.batch
def flag_positive(x):
    w = torch.zeros(1, 3)
    if x > 0:
        w[:, 1] = 2.0
    return w.sum()


def test_oracle_item_assignment_into_a_plain_tensor():
    assert_oracle(flag_positive, [1.0, -1.0, 3.0], [2.0, 0.0, 2.0], dtype=torch.float32)


@matchbox.batch
def written_per_example(x):
    w = torch.zeros(1, 3, dtype=x.dtype)
    if x.sum() > 0:
        w[:, 1] = x.sum(1) * 2
        w[:, 2] += x.sum(1).exp()
    return x.sum(1, keepdim=True) * w


def test_item_writes_values_and_gradients(dtype):
    assert_batch_equals_loop(written_per_example, sequences([3, 1, 0, 2, 4], dtype=dtype))


@matchbox.batch
def augmented_plain(x):
    w = torch.zeros(1, 3, dtype=x.dtype)
    for xt in x.unbind(1):
        if xt.sum() > 0:
            w += xt  # a plain tensor updated for only some examples
    return w


def test_augmented_assignment_to_a_plain_tensor_is_per_example(dtype):
    # Python would update the tensor in place for every example.
    assert_batch_equals_loop(augmented_plain, sequences([3, 1, 0, 2, 4], dtype=dtype))


@matchbox.batch
def extended(x):
    items = []
    for xt in x.unbind(1):
        if xt.sum() > 0:
            items += [xt * 2]
    return F.stack(items + [x.sum(1)], 1, dynamic=True)


def test_list_plus_equals_under_a_condition_extends_per_example(dtype):
    assert_batch_equals_loop(extended, sequences([3, 1, 0, 2], dtype=dtype))


@matchbox.batch
def aliased(x):
    out = x * 1
    alias = out
    if x.sum() > 0:
        out[:, 0] = 0.0
    return alias


def test_item_write_into_a_batch_reaches_its_aliases(dtype):
    assert_batch_equals_loop(aliased, sequences([3, 1, 2], dtype=dtype))


def test_a_plain_tensor_without_a_leading_size_one_says_what_to_write():
    @matchbox.batch
    def f(x):
        w = torch.zeros(3)
        if x.sum() > 0:
            w[1] = 2.0
        return w

    _, xb = scalars([1.0, -1.0])
    with pytest.raises(ValueError,
                       match=r"@batch: w\[\.\.\.\] = \.\.\. writes into the plain tensor 'w' of "
                             r"shape \(3,\) under a per-example condition, so it differs between "
                             r"examples and becomes a batch, whose examples need a leading "
                             r"dimension of size one: create it as torch.zeros\(1, 3\) and index "
                             r"past that dimension \(w\[:, i\] = v\)"):
        f(xb)


def test_a_plain_tensor_attribute_is_refused():
    class Holder:
        buffer = torch.zeros(1, 3)

    @matchbox.batch
    def f(x, holder):
        if x.sum() > 0:
            holder.buffer[:, 0] = 1.0
        return x

    _, xb = scalars([1.0, -1.0])
    with pytest.raises(NotImplementedError,
                       match=r"writes into a plain tensor of shape \(1, 3\) under a per-example "
                             r"condition: it would change for every example.*Hold the tensor "
                             r"in a local variable"):
        f(xb, Holder())


def test_an_in_place_method_on_a_plain_tensor_is_refused():
    @matchbox.batch
    def f(x):
        w = torch.zeros(1, 3)
        if x.sum() > 0:
            w.add_(1.0)
        return w

    _, xb = scalars([1.0, -1.0])
    with pytest.raises(NotImplementedError,
                       match=r"Tensor.add_\(\) on a plain tensor under a per-example condition "
                             r"would change it for every example.*t = t.add\(\.\.\.\)"):
        f(xb)


def test_plain_conditions_write_in_place_as_python():
    @matchbox.batch
    def f(x):
        w = torch.zeros(1, 3)
        alias = w
        if x.sum() > 0:
            w[:, 1] = 2.0
            w.add_(1.0)
        return alias

    assert torch.equal(f(torch.ones(1, 2)), torch.tensor([[1.0, 3.0, 1.0]]))


@matchbox.batch
def seen_above(ids):
    seen = torch.zeros(1, 3, dtype=torch.bool)
    for tok in ids.unbind(1):
        seen[:, 0] = seen[:, 0] | (tok > 4)  # every example runs the steps all have
    return seen


@pytest.mark.parametrize("lengths", [[1], [0], [2, 3], [0, 2], [1, 1], [3, 0, 1]])
def test_a_batch_written_into_a_plain_local_where_every_example_runs(lengths):
    # A batch value makes the write differ between examples even where every example
    # runs it: the local becomes a batch of copies, as under a condition (before, the
    # steps every example has raised an AttributeError from inside core).
    xs = [torch.randint(0, 9, (1, n)) for n in lengths]
    assert_batch_equals_loop(seen_above, (xs, MaskedBatch.fromlist(xs, (True,))))


@matchbox.batch
def decayed_sums(x):
    w = torch.zeros(1, 3, dtype=x.dtype)
    w[:, 2] = x.sum(1).sum(1)  # no condition at all
    for xt in x.unbind(1):
        w[:, 0] = w[:, 0] * 0.5 + xt.sum(1)
        w[:, 1] += xt[:, 0].exp()
    return w * 2


@pytest.mark.parametrize("lengths", [[2, 3], [0, 2], [1], [0], [3, 0, 1]])
def test_item_writes_of_batches_into_a_plain_local_values_and_gradients(lengths, dtype):
    assert_batch_equals_loop(decayed_sums, sequences(lengths, dtype=dtype))


def test_a_batch_written_into_a_plain_tensor_reached_otherwise_is_refused_by_core():
    class Holder:
        buffer = torch.zeros(1, 3)

    @matchbox.batch
    def f(x, holder):
        holder.buffer[:, 0] = x.sum(1).sum(1)
        return x

    _, xb = sequences([2, 3])
    with pytest.raises(ValueError, match=r"^Tensor.__setitem__: x\[:, 0\] = value is an in-place "
                                         r"op on a plain tensor of shape \(1, 3\), which cannot "
                                         r"take a batch argument"):
        f(xb, Holder())
    assert not Holder.buffer.any()


def test_a_batch_written_into_a_plain_local_without_a_leading_size_one_says_what_to_write():
    @matchbox.batch
    def f(x):
        w = torch.zeros(3, dtype=x.dtype)
        w[0] = x.sum()
        return w

    _, xb = sequences([2, 3])
    with pytest.raises(ValueError,
                       match=r"@batch: w\[\.\.\.\] = \.\.\. writes into the plain tensor 'w' of "
                             r"shape \(3,\) with a batch value or index, so it differs between "
                             r"examples and becomes a batch, whose examples need a leading "
                             r"dimension of size one: create it as torch.zeros\(1, 3\)"):
        f(xb)
