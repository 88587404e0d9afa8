"""Shortcuts of the hot paths: they must be taken where they are valid and give
what the general path gives, and must not be taken where they are not.

- A batch built with ``padding_value=0`` (and the steps ``unbind`` cuts from it)
  records that its padding holds zeros, so products skip filling it; any write
  into the data, a new data tensor or a new mask drops the record.
- Masks that are views of the same memory with one layout are one mask
  (``same_mask``): ops combine them without an ``and`` and keep them shared.
"""

from __future__ import annotations

import operator
import random

import pytest
import torch
from op_counts import CountOps

import matchbox.functional as F
from matchbox import MaskedBatch, _masking
from matchbox._host_reads import host_reads
from matchbox.extending import EXAMPLE_SCALAR, mark_example_scalar
from matchbox.masked_batch import has_zero_padding
from matchbox.testing import mb_assert


def _examples(dtype=torch.float64, lengths=(3, 1, 0, 5), features=2):
    return [torch.randn(1, n, features, dtype=dtype) for n in lengths]


def test_a_batch_built_with_zero_padding_records_it_and_so_do_its_steps():
    xb = MaskedBatch.fromlist(_examples(), (True, False))
    assert has_zero_padding(xb)
    for step in xb.unbind(1):
        assert has_zero_padding(step)
        assert _masking.fill_padding(step, 0) is step.data
    assert _masking.fill_padding(xb, 0) is xb.data


def test_other_padding_values_and_fills_are_not_taken_for_zero():
    xb = MaskedBatch.fromlist(_examples(), (True, False), padding_value=float("nan"))
    assert not has_zero_padding(xb)
    zeros = MaskedBatch.fromlist(_examples(), (True, False))
    filled = _masking.fill_padding(zeros, float("-inf"))
    assert filled is not zeros.data
    assert torch.isneginf(filled[~zeros.mask.expand_as(filled)]).all()


def _write_nan_into_padding(xb):
    xb.data.masked_fill_(~xb.mask, float("nan"))


@pytest.mark.parametrize("change", ["write into the data", "write into a step",
                                    "new data tensor", "new mask"])
def test_any_change_drops_the_record(change):
    xb = MaskedBatch.fromlist(_examples(), (True, False))
    steps = xb.unbind(1)
    if change == "write into the data":
        _write_nan_into_padding(xb)
    elif change == "write into a step":
        steps[2].data.mul_(1)  # a view: the version counter is shared with the batch
    elif change == "new data tensor":
        xb.data = xb.data.clone()
    else:
        xb.mask = xb.mask.clone()
    assert not has_zero_padding(xb)
    if change.startswith("write"):
        assert not any(has_zero_padding(s) for s in steps)
        assert not any(has_zero_padding(s) for s in xb.unbind(1))


def test_nan_written_into_the_padding_after_construction_never_reaches_a_gradient(dtype):
    examples = _examples(dtype, lengths=(4, 2, 0, 3), features=3)
    xb = MaskedBatch.fromlist(examples, (True, False))
    xb.unbind(1)  # steps cut while the padding was zero
    _write_nan_into_padding(xb)
    w = torch.randn(3, 3, dtype=dtype, requires_grad=True)
    h = xb.batch_zeros(3)
    for xt in xb.unbind(1):
        h = F.update(h, (xt @ w).tanh() + h)
    h.data.sum().backward()
    assert torch.isfinite(w.grad).all()


def test_a_recurrence_over_zero_padding_equals_the_loop(dtype):
    # mb_assert rebuilds batches with NaN padding; here the batch keeps its zeros,
    # so the shortcut is what runs, values and gradients against the loop.
    rng = random.Random(0)
    lengths = [rng.randint(0, 6) for _ in range(5)]
    examples = [torch.randn(1, n, 3, dtype=dtype, requires_grad=True) for n in lengths]
    w = torch.randn(3, 3, dtype=dtype, requires_grad=True)

    def run(x):
        h = x.batch_zeros(3)
        for xt in x.unbind(1):
            h = F.update(h, (xt @ w + h).tanh())
        return h

    loop = torch.cat([run(x) for x in examples])
    loop_grads = torch.autograd.grad(loop.sum(), examples + [w], allow_unused=True)
    xb = MaskedBatch.fromlist(examples, (True, False))
    assert has_zero_padding(xb)
    batch = run(xb).data
    batch_grads = torch.autograd.grad(batch.sum(), examples + [w], allow_unused=True)
    torch.testing.assert_close(batch, loop)
    for got, expected in zip(batch_grads, loop_grads):
        torch.testing.assert_close(got, torch.zeros_like(got) if expected is None else expected)


def test_inference_tensors_keep_no_record():
    with torch.inference_mode():
        xb = MaskedBatch.fromlist(_examples(), (True, False))
        assert not has_zero_padding(xb)
        assert [s.data.shape for s in xb.unbind(1)]


def test_views_of_one_memory_are_one_mask():
    mask = torch.rand(4, 6, 1) > 0.5
    step = mask.unbind(1)[2]                      # (4, 1), strides (6, 1)
    as_rows = step.reshape(4).view(4, 1)          # (4, 1), strides (6, 6)
    assert as_rows.stride() != step.stride()
    assert _masking.same_mask(step, as_rows)
    assert _masking.combine_masks([step, None, as_rows]) is step
    assert not _masking.same_mask(step, mask.unbind(1)[3])  # another step
    assert not _masking.same_mask(step, step.clone())       # equal values, other memory
    assert not _masking.same_mask(mask[:, :2], mask[:, :3])


def test_two_fake_masks_are_two_masks():
    # matchbox.compile captures on fake tensors, which hold no memory: torch 2.3's give
    # every one the address 0, which made two masks one (a captured `while` whose
    # condition was taken for the loop's mask never ended). Their storages tell them apart.
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        a, b = torch.ones(4, 1, dtype=torch.bool), torch.zeros(4, 1, dtype=torch.bool)
        assert not _masking.same_mask(a, b)
        assert _masking.same_mask(a, a.view(4, 1))
    empty = torch.ones(0, 1, dtype=torch.bool)  # no address either
    assert not _masking.same_mask(empty, torch.ones(0, 1, dtype=torch.bool))


def test_ops_on_steps_of_one_batch_keep_sharing_its_step_mask():
    xb = MaskedBatch.fromlist(_examples(), (True, False), padding_value=float("nan"))
    yb = xb * 2
    for xt, yt in zip(xb.unbind(1), yb.unbind(1)):
        assert (xt + yt)._mask is xt._mask


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bias_shape", [(3,), (1,), (2, 1), (2, 3), (1, 2, 3)])
@pytest.mark.parametrize("batch_size", [1, 4])
def test_a_plain_tensor_on_a_batch_without_padding_equals_the_loop(dtype, bias_shape, batch_size):
    # Examples (1, 2, 3) have no dynamic dimension, so the batch has no mask: the
    # method shortcut applies to a plain tensor that fits every example (lower
    # rank, sizes 1 or equal); one of the example's rank, (1, 2, 3), takes the
    # general path, which broadcasts it too.
    examples = [torch.randn(1, 2, 3, dtype=dtype) for _ in range(batch_size)]
    xb = MaskedBatch.fromlist(examples, (False, False))
    assert xb._mask is None
    bias = torch.randn(bias_shape, dtype=dtype)
    for op in ("__add__", "__mul__", "__sub__", "__truediv__"):
        mb_assert(lambda x, op=op: getattr(x, op)(bias), [examples], [xb], batch_size,
                  params=[bias])


def test_a_plain_tensor_that_grows_an_example_takes_the_general_path():
    # (1, 2, 1) + (3,) is (1, 2, 3) for each example: not a fit, broadcast per example.
    examples = [torch.randn(1, 2, 1, dtype=torch.float64) for _ in range(3)]
    xb = MaskedBatch.fromlist(examples, (False, False))
    bias = torch.randn(3, dtype=torch.float64)
    mb_assert(lambda x: x + bias, [examples], [xb], 3, params=[bias])


@pytest.mark.parametrize("dim", [1, 2, -1, -2])
@pytest.mark.parametrize("keepdim", [False, True])
def test_a_static_reduction_of_a_batch_without_padding_equals_the_loop(dim, keepdim):
    examples = [torch.randn(1, 2, 3, dtype=torch.float64) for _ in range(3)]
    xb = MaskedBatch.fromlist(examples, (False, False))
    for name in ("sum", "mean", "amax", "logsumexp"):
        mb_assert(lambda x, name=name: getattr(x, name)(dim, keepdim=keepdim),
                  [examples], [xb], 3)
    with pytest.raises(ValueError, match="cannot reduce over dimension 0"):
        xb.sum(-3)
    with pytest.raises(IndexError, match="dimension 3 is out of range"):
        xb.sum(3)


def test_covers_follows_torch_broadcasting():
    from matchbox._execution import _covers

    shapes = [(), (1,), (3,), (2, 1), (2, 3), (1, 3), (4, 2, 3), (4, 1, 1), (2, 4)]
    for a in shapes:
        for b in shapes:
            try:
                expected = torch.broadcast_shapes(a, b) == torch.Size(a)
            except RuntimeError:
                expected = False
            assert _covers(torch.empty(a), torch.empty(b)) is expected, (a, b)


def test_a_per_example_index_is_not_compared_with_the_ellipsis():
    # ``list.count(...)`` and ``... in items`` call ``==`` on every tensor item (slow).
    from torch.overrides import TorchFunctionMode

    xb = MaskedBatch.fromlist(_examples(lengths=(3, 1, 2, 5)), (True, False))
    i = MaskedBatch(torch.tensor([0, 0, 0, 1]), None, ())
    seen = []

    class Record(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    with Record():
        xb[:, i]
        xb[:, i, ...]
    assert torch.Tensor.__eq__ not in seen


def test_a_batch_of_vectors_is_its_own_rows():
    # A linear layer on a batch of vectors (a recurrent state) reads its data as rows and
    # gives its result back with no view op either way (one each per layer, per step).
    from op_counts import CountOps

    xb = MaskedBatch.fromlist([torch.randn(1, 4) for _ in range(3)], (False,))
    with CountOps() as counted:
        rows = xb.rows()
        out = xb.from_rows(rows * 2)
    assert rows is xb.data and counted.ops["view"] == 0, counted.ops
    assert torch.equal(out.data, xb.data * 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_static_batches_that_broadcast_take_the_fast_path_and_equal_the_loop(dtype):
    # A one-hot write into a stack, where(at, item.unsqueeze(1), stack): three batches of
    # static dimensions and no mask whose shapes broadcast as each example's do. No
    # alignment (its views), values and gradients the loop's.
    from op_counts import CountOps

    torch.manual_seed(5)
    n = 4
    ats = [torch.rand(1, 3, 1) > 0.5 for _ in range(n)]
    items = [torch.randn(1, 1, 2, dtype=dtype) for _ in range(n)]
    stacks = [torch.randn(1, 3, 2, dtype=dtype) for _ in range(n)]
    batches = [MaskedBatch.fromlist(v, (False, False)) for v in (ats, items, stacks)]
    with CountOps() as counted:
        torch.where(*batches)
    assert dict(counted.ops) == {"where": 1}, counted.ops
    mb_assert(torch.where, [ats, items, stacks], batches, n)


def test_static_batches_that_do_not_broadcast_are_refused_with_the_op_name():
    a = MaskedBatch(torch.randn(3, 4, 2), None, (False, False))
    b = MaskedBatch(torch.randn(3, 5, 2), None, (False, False))
    with pytest.raises(ValueError, match=r"^Tensor\.__add__: static dimension 1 has different "
                                         r"sizes in the batch arguments: \[4, 5\]$"):
        a + b


def _counters(values, dtype=torch.long):
    """A batch of per-example ints (a ``@batch`` counter) and each example's own int."""
    batch = MaskedBatch(torch.tensor(values, dtype=dtype), None, ())
    batch._scalar = True  # a Python int in the loop (matchbox._example_scalars)
    return batch, values


@pytest.mark.parametrize("shape", [(1, 5), (1, 3, 2)])
@pytest.mark.parametrize("op", [torch.eq, torch.lt, operator.ge, operator.and_, torch.bitwise_and])
def test_a_plain_int_tensor_with_a_counter_is_each_examples_op(shape, op):
    # slots == top: the counter's ints viewed (batch, 1, ...) against the plain tensor, as
    # the general rule's alignment gives, in either order.
    plain = torch.arange(torch.Size(shape).numel()).reshape(shape) % 4
    batch, values = _counters([0, 3, 1, 7])
    for result, ordered in ((op(plain, batch), lambda v: op(plain, v)),
                            (op(batch, plain), lambda v: op(v, plain))):
        assert result.dims == (False,) * (len(shape) - 1)
        assert result.mask.all()
        for row, v in zip(result.data, values):
            torch.testing.assert_close(row.unsqueeze(0), ordered(torch.tensor(v)))


def test_a_plain_tensor_of_another_leading_size_is_still_refused():
    # Not one example's shape (1, ...): the general rule's error, not the shortcut's result.
    batch, _ = _counters([0, 1])
    with pytest.raises(ValueError, match=r"torch\.eq: a plain tensor argument has size 2 in "
                       r"dimension 0, which is the batch dimension of each example"):
        torch.eq(torch.arange(6).reshape(2, 3), batch)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("dim", [1, 2, -1])
def test_a_cat_of_unpadded_batches_is_one_cat_and_equals_the_loop(dtype, dim):
    # torch.cat([h_left, h_right], -1) in a tree's cell: static dimensions, no padding.
    from op_counts import CountOps

    torch.manual_seed(6)
    n = 3
    lefts = [torch.randn(1, 2, 3, dtype=dtype) for _ in range(n)]
    rights = [torch.randn(1, 2, 3, dtype=dtype) for _ in range(n)]
    batches = [MaskedBatch.fromlist(v, (False, False)) for v in (lefts, rights)]
    with CountOps() as counted:
        joined = torch.cat(batches, dim)
    assert dict(counted.ops) == {"cat": 1}, counted.ops
    assert joined.dims == (False, False) and joined._mask is None
    mb_assert(lambda a, b: torch.cat([a, b], dim), [lefts, rights], batches, n)


def test_a_cat_of_unpadded_batches_that_do_not_fit_gives_the_general_rules_error():
    a = MaskedBatch(torch.randn(3, 4, 2), None, (False, False))
    b = MaskedBatch(torch.randn(3, 5, 2), None, (False, False))
    with pytest.raises(ValueError, match=r"^torch\.cat: tensor 1 of the list has size 5 in "
                                         r"dimension 1 and tensor 0 has 4, the same in every "
                                         r"example"):
        torch.cat([a, b], -1)


@pytest.mark.parametrize("dim", [1, 2, -1, -3])
def test_unsqueeze_and_chunk_methods_of_an_unpadded_batch_equal_the_loop(dim):
    torch.manual_seed(7)
    examples = [torch.randn(1, 4, 6, dtype=torch.float64) for _ in range(3)]
    xb = MaskedBatch.fromlist(examples, (False, False))
    mb_assert(lambda x: x.unsqueeze(dim), [examples], [xb], 3)
    if dim != -3:
        mb_assert(lambda x: x.chunk(2, dim)[1], [examples], [xb], 3)


def test_a_method_call_with_more_arguments_than_the_op_takes_is_refused():
    xb = MaskedBatch.fromlist([torch.randn(1, 2, 3)], (False, False))
    with pytest.raises(TypeError, match="unsqueeze"):
        xb.unsqueeze(1, 2)
    with pytest.raises(TypeError, match="chunk"):
        xb.chunk(2, 1, 3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_one_hot_write_under_an_execution_mask_folds_the_running_examples(dtype):
    # where(at, item, stack) in a region: the examples that do not run it keep the stack,
    # in values and in gradient, in one where (and one and of the condition with the
    # running examples, viewed once).
    from op_counts import CountOps

    from matchbox.extending import EXECUTION_MASK

    torch.manual_seed(8)
    n = 4
    at = MaskedBatch(torch.rand(n, 3, 1) > 0.5, None, (False, False))
    item = MaskedBatch(torch.randn(n, 1, 2, dtype=dtype, requires_grad=True), None,
                       (False, False))
    stack = MaskedBatch(torch.randn(n, 3, 2, dtype=dtype, requires_grad=True), None,
                        (False, False))
    running = torch.tensor([True, False, True, False])
    token = EXECUTION_MASK.set(running)
    try:
        with CountOps() as counted:
            out = torch.where(at, item, stack)
    finally:
        EXECUTION_MASK.reset(token)
    assert dict(counted.ops) == {"view": 1, "bitwise_and": 1, "where": 1}, counted.ops
    fold = at.data & running.view(n, 1, 1)
    expected = torch.where(fold, item.data, stack.data)
    torch.testing.assert_close(out.data, expected, rtol=0, atol=0)
    out.data.sum().backward()
    torch.testing.assert_close(stack.data.grad, (~fold).to(dtype).expand(n, 3, 2))
    assert torch.equal(item.data.grad[~running], torch.zeros(2, 1, 2, dtype=dtype))


def test_a_one_hot_write_under_an_execution_mask_that_does_not_broadcast_is_the_general_error():
    # The shortcut lets torch's RuntimeError through no more than the general rule does (a
    # review): the error names the op and the dimension.
    from matchbox.extending import EXECUTION_MASK

    at = MaskedBatch(torch.rand(3, 3, 1) > 0.5, None, (False, False))
    item = MaskedBatch(torch.randn(3, 2, 2), None, (False, False))
    stack = MaskedBatch(torch.randn(3, 3, 2), None, (False, False))
    token = EXECUTION_MASK.set(torch.tensor([True, False, True]))
    try:
        with pytest.raises(ValueError, match=r"^torch\.where: static dimension 1 has different "
                                             r"sizes in the batch arguments: \[2, 3\]$"):
            torch.where(at, item, stack)
    finally:
        EXECUTION_MASK.reset(token)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("batch", [1, 4])
def test_a_per_example_index_in_range_everywhere_is_read_on_the_host_with_no_check(
        dtype, batch, monkeypatch):
    # Issue 22: on the CPU (host reads), x[:, i] into a static dimension reads every
    # example's index in one ``tolist``: in range for all (negative ones included, which
    # advanced indexing counts from the end), it runs no flags, no wrap and no check
    # (``stack[:, top - 1]``, a TreeLSTM's every read). Values and gradients as the loop's.
    xs = [torch.randn(1, 5, 3, dtype=dtype, requires_grad=True) for _ in range(batch)]
    xb = MaskedBatch.fromlist(xs, (False, False))
    own = [0, -1, 4, -5][:batch]
    index = mark_example_scalar(MaskedBatch(torch.tensor(own), None, ()), EXAMPLE_SCALAR)
    listed = []
    tolist = torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda t: listed.append(t) or tolist(t))
    with host_reads(True), CountOps() as counted:
        out = xb[:, index]
    assert counted.ops["any"] == 0 and counted.ops["remainder"] == 0, counted.ops
    assert counted.ops["clamp"] == 0 and counted.syncs == 0, counted.ops
    assert len(listed) == 1  # the indices, read once
    mb_assert(lambda x, i: x[:, i], [xs, own], [xb, index], batch)
    # On an accelerator's way (no host reads) the flags are computed and checked, deferred.
    with host_reads(False), CountOps() as masked:
        again = xb[:, index]
    assert masked.ops["clamp"] == 1 and masked.ops["remainder"] == 1, masked.ops
    torch.testing.assert_close(again.data, out.data, rtol=0, atol=0)


def test_a_per_example_index_of_many_examples_is_checked_with_ops():
    # Past 256 examples a list of the indices costs more than the ops it spares.
    xb = MaskedBatch(torch.randn(257, 3, 2), None, (False, False))
    index = mark_example_scalar(MaskedBatch(torch.arange(257) % 3 - 1, None, ()),
                                EXAMPLE_SCALAR)
    with host_reads(True), CountOps() as counted:
        out = xb[:, index]
    assert counted.ops["clamp"] == 1, counted.ops
    torch.testing.assert_close(out.data, xb.data[torch.arange(257), torch.arange(257) % 3 - 1])


def test_a_per_example_index_out_of_range_somewhere_takes_the_checked_path():
    # An index out of range for an example that does not run the read (a stack's top - 2
    # where it shifts) is no error; for a running one it is the loop's IndexError.
    xb = MaskedBatch(torch.arange(12.0).reshape(2, 3, 2), None, (False, False))
    index = mark_example_scalar(MaskedBatch(torch.tensor([1, -4]), None, ()), EXAMPLE_SCALAR)
    token = _masking.EXECUTION_MASK.set(torch.tensor([True, False]))
    try:
        out = xb[:, index]
    finally:
        _masking.EXECUTION_MASK.reset(token)
    assert out.data[0].tolist() == [2.0, 3.0]
    with pytest.raises(IndexError, match=r"index -4 is out of range for example 1, which has "
                                         r"size 3 in dimension 1"):
        xb[:, index]
