"""The pointwise family on PackedBatch, op by op over the registry itself.

Every op registered for PackedBatch in the pointwise family (core's rule finds
them) is called on random examples packed into a PackedBatch and compared with
the per-example loop, values and gradients, so a newly registered op is tested
by default (the probing of how to call each op is shared with the MaskedBatch
tests: tests/support/pointwise_patterns.py).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from packed_strategies import examples_of_lengths, packed_examples
from pointwise_patterns import check_op_against_loop
from torch_features import INPLACE_LDEXP_HAS_DERIVATIVE, lacks

from matchbox import _registry
from matchbox.masked_batch import MaskedBatch
from matchbox.ops.pointwise import pointwise_ops
from matchbox.packed import PackedBatch
from matchbox.testing import mb_assert

POINTWISE = [e.func for e in _registry.entries("PackedBatch") if e.family == "pointwise"]


def test_the_family_is_cores_rule():
    assert set(POINTWISE) == set(pointwise_ops())


def _packed_random(batched, first):
    assert isinstance(batched, PackedBatch) and batched.layout is first.layout
    assert batched.data.shape == first.data.shape


@pytest.mark.parametrize("func", POINTWISE, ids=[_registry.op_name(f) for f in POINTWISE])
def test_pointwise_op_equals_loop(func):
    check_op_against_loop(func, examples_of_lengths([3, 0, 5, 1], static=(2,)),
                          PackedBatch.fromlist, _packed_random)


@given(packed_examples(static=(3,)))
def test_plain_tensors_broadcast_like_the_examples(pair):
    xs, pb = pair
    bias = torch.randn(3, dtype=xs[0].dtype)
    row = torch.randn(1, 1, 3, dtype=xs[0].dtype)
    mb_assert(lambda x, b, r: (x * 2 - b).tanh() / (1 + x.abs()) + r,
              [xs, [bias] * len(xs), [row] * len(xs)], [pb, bias, row], len(xs))


def test_plain_tensor_spanning_the_longest_example_gives_each_row_its_step(dtype):
    # Positional encodings sliced with maxsize(1): per example that is its own length.
    xs = examples_of_lengths([3, 0, 5, 1], dtype=dtype)
    table = torch.randn(1, 8, 3, dtype=dtype, requires_grad=True)
    pb = PackedBatch.fromlist(xs)
    mb_assert(lambda x, t: x + t[:, : x.maxsize(1)], [xs, [table] * 4], [pb, table], 4)
    mb_assert(lambda x, t: x * t[0, : x.maxsize(1)], [xs, [table] * 4], [pb, table], 4)


def test_two_batches_with_another_tie_order_combine():
    xs = examples_of_lengths([2, 2, 3])
    ys = examples_of_lengths([2, 2, 3])
    pb = PackedBatch.fromlist(xs)
    # The same lengths, rows in another order (what a foreign PackedSequence may hold).
    reordered = PackedBatch.fromlist(ys)
    layout = reordered.layout
    swapped = torch.tensor([2, 1, 0])
    other = PackedBatch(
        reordered.data.view(-1, 3)[_swap_rows(layout, swapped)], layout.batch_sizes, swapped)
    assert not other.layout.same_as(pb.layout)
    result = pb + other
    for r, x, y in zip(result.examples(), xs, ys):
        torch.testing.assert_close(r, x + y)


def _swap_rows(layout, sorted_indices):
    # Rows of `layout` rearranged into the layout with the given slot order.
    rows = []
    for t, size in enumerate(layout.batch_sizes.tolist()):
        for slot in range(size):
            example = int(sorted_indices[slot])
            rows.append(int(layout.offsets[t]) + int(layout.unsorted_cpu[example]))
    return torch.tensor(rows)


def test_inplace_ops_return_the_same_batch():
    pb = PackedBatch.fromlist(examples_of_lengths([3, 1]))
    target = pb * 1
    assert target.add_(1.0) is target and F.relu(target, inplace=True) is target
    target += pb
    assert isinstance(target, PackedBatch)
    torch.testing.assert_close(target.data, (pb.data + 1).relu() + pb.data)


def test_comparisons_and_where(dtype):
    xs = examples_of_lengths([3, 0, 4], dtype=dtype)
    ys = examples_of_lengths([3, 0, 4], dtype=dtype)
    mb_assert(lambda x, y: torch.where(x > y, x, y * 2), [xs, ys],
              [PackedBatch.fromlist(xs), PackedBatch.fromlist(ys)], 3)


def test_errors_name_the_op_and_the_problem():
    pb = PackedBatch.fromlist(examples_of_lengths([2, 3]))
    with pytest.raises(ValueError, match=r"torch.add: example 0 has length 2 in one argument and "
                                         r"3 in another along the packed dimension 1"):
        torch.add(pb, PackedBatch.fromlist(examples_of_lengths([3, 3])))
    with pytest.raises(ValueError, match=r"Tensor.__mul__: batch arguments have examples of rank "
                                         r"3 and 2"):
        pb * PackedBatch.fromlist([torch.randn(1, 2), torch.randn(1, 3)])
    with pytest.raises(ValueError, match=r"torch.add: a plain tensor argument has size 4 in "
                                         r"dimension 1, the packed dimension"):
        torch.add(pb, torch.zeros(1, 4, 3))
    with pytest.raises(ValueError, match=r"torch.add: a plain tensor argument has size 5 in "
                                         r"dimension 0"):
        torch.add(pb, torch.zeros(5, 1, 3))
    with pytest.raises(ValueError, match=r"torch.add: a plain tensor argument has rank 4, more "
                                         r"than the examples' rank 3"):
        torch.add(pb, torch.zeros(2, 1, 1, 3))
    with pytest.raises(NotImplementedError, match=r"torch.add: out= is not supported"):
        torch.add(pb, 1, out=torch.zeros(5, 3))
    assert torch.equal(torch.add(pb, 1, out=None).data, pb.data + 1)  # torch's default
    with pytest.raises(ValueError, match=r"torch.add: batch arguments have different batch sizes "
                                         r"\(2 and 3\)"):
        torch.add(pb, PackedBatch.fromlist(examples_of_lengths([2, 3, 1])))
    with pytest.raises(ValueError, match=r"Tensor.add_: an in-place op on a plain tensor cannot "
                                         r"take a batch argument"):
        torch.zeros(3).add_(pb)


def test_a_plain_tensor_of_the_batch_size_gets_cores_hint():
    # As for a MaskedBatch (one rule): a state built with x.size(0) as a size.
    pb = PackedBatch.fromlist(examples_of_lengths([2, 3]))
    with pytest.raises(ValueError, match=r"torch.add: a plain tensor argument has size 2 in "
                                         r"dimension 0, which is the batch dimension of each "
                                         r"example \(size one\); .* Its size is the batch "
                                         r"size: built with x.size\(0\) as a size .* build a "
                                         r"batch, one row per example, with x.new_zeros\("
                                         r"x.size\(0\), 1, 3\), or share one row, "
                                         r"torch.zeros\(1, 1, 3\)"):
        torch.add(pb, torch.zeros(2, 1, 3))


@pytest.mark.parametrize("lengths", [[2, 0, 3], [1], [0]], ids=str)
def test_a_row_expanded_to_the_batch_size_is_every_examples_own(lengths, dtype):
    # One row expanded to the batch size (stride 0): the same for every example, as core.
    xs = [x.to(dtype) for x in examples_of_lengths(lengths)]
    pb = PackedBatch.fromlist(xs)
    row = torch.randn(1, 1, 3, dtype=dtype, requires_grad=True)
    loop = [x + row for x in xs]
    batched = pb + row.expand(len(xs), 1, 3)
    for y, expected in zip(batched.examples(), loop):
        torch.testing.assert_close(y, expected, rtol=0, atol=0)
    (grad_loop,) = torch.autograd.grad(sum(y.sum() for y in loop), row)
    (grad_batch,) = torch.autograd.grad(sum(y.sum() for y in batched.examples()), row)
    torch.testing.assert_close(grad_batch, grad_loop)


@lacks(INPLACE_LDEXP_HAS_DERIVATIVE, "differentiates the in-place ldexp_")
def test_inplace_op_torch_cannot_differentiate_is_refused_by_name():
    target = PackedBatch.fromlist(examples_of_lengths([2, 0, 3])).requires_grad_() * 1
    with pytest.raises(NotImplementedError, match=r"Tensor\.ldexp_: this torch \(.+\) cannot "
                       r"differentiate the in-place ldexp_"):
        target.ldexp_(torch.ones(3, dtype=target.dtype))


def test_one_call_for_the_whole_batch():
    pb = PackedBatch.fromlist(examples_of_lengths([5, 1, 0, 3, 2, 4]))
    with torch.autograd.profiler.profile() as prof:
        torch.tanh(pb * 2)
    names = [e.name for e in prof.function_events]
    assert names.count("aten::tanh") == 1 and names.count("aten::mul") == 1


def test_masked_batch_is_not_a_pointwise_argument_of_the_packed_rule():
    # The packed handler never sees a MaskedBatch: the mixing rule hands it over.
    xs = examples_of_lengths([2, 3])
    assert isinstance(PackedBatch.fromlist(xs) * MaskedBatch.fromlist(xs, (True, False)),
                      MaskedBatch)
