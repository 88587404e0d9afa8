"""Reductions and softmax on PackedBatch: segment ops over the packed dimension, row ops over
static ones, each against the per-example loop (values and gradients)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from packed_strategies import examples_of_lengths, packed_examples

import matchbox
from matchbox import MaskedBatch, _registry
from matchbox.packed import PackedBatch
from matchbox.testing import mb_assert

REGISTERED = {e.name for e in _registry.entries("PackedBatch")
              if e.family in ("reduction", "softmax")}
# Each registered op, called as a user would (the loop is the same call on a tensor).
CALLS = {
    "torch.sum": lambda x, d, k: torch.sum(x, d, keepdim=k),
    "Tensor.sum": lambda x, d, k: x.sum(d, keepdim=k),
    "torch.mean": lambda x, d, k: torch.mean(x, d, keepdim=k),
    "Tensor.mean": lambda x, d, k: x.mean(d, keepdim=k),
    "torch.amax": lambda x, d, k: torch.amax(x, d, keepdim=k),
    "Tensor.amax": lambda x, d, k: x.amax(d, keepdim=k),
    "torch.amin": lambda x, d, k: torch.amin(x, d, keepdim=k),
    "Tensor.amin": lambda x, d, k: x.amin(d, keepdim=k),
    "torch.logsumexp": lambda x, d, k: torch.logsumexp(x, d, keepdim=k),
    "Tensor.logsumexp": lambda x, d, k: x.logsumexp(d, keepdim=k),
    "torch.max": lambda x, d, k: tuple(torch.max(x, d[0], keepdim=k)),
    "Tensor.max": lambda x, d, k: tuple(x.max(d[0], keepdim=k)),
    "torch.min": lambda x, d, k: tuple(torch.min(x, d[0], keepdim=k)),
    "Tensor.min": lambda x, d, k: tuple(x.min(d[0], keepdim=k)),
}
SOFTMAX = {
    "torch.nn.functional.softmax": lambda x, d: F.softmax(x, d),
    "torch.softmax": lambda x, d: torch.softmax(x, d),
    "Tensor.softmax": lambda x, d: x.softmax(d),
    "torch.nn.functional.log_softmax": lambda x, d: F.log_softmax(x, d),
    "torch.log_softmax": lambda x, d: torch.log_softmax(x, d),
    "Tensor.log_softmax": lambda x, d: x.log_softmax(d),
    "torch.nn.functional.softmin": lambda x, d: F.softmin(x, d),
}
NEEDS_NONEMPTY = ("max", "min", "amax", "amin")


def test_every_registered_op_is_tested_here():
    assert REGISTERED == set(CALLS) | set(SOFTMAX)


def _lengths(name):
    return [3, 1, 5, 2] if any(n in name for n in NEEDS_NONEMPTY) else [3, 0, 5, 1]


DIMS = {"packed": (1,), "static": (2,), "packed+static": (1, 2), "packed+last": (1, 3),
        "last": (-1,)}
# max/min take one dimension (torch.max(x, (1, 2)) is an error in the loop too).
CASES = [(name, dims) for name in sorted(CALLS) for dims in DIMS
         if len(DIMS[dims]) == 1 or not name.endswith(("max", "min"))]


@pytest.mark.parametrize("name,dims", CASES, ids=[f"{n}-{d}" for n, d in CASES])
@pytest.mark.parametrize("keepdim", [False, True], ids=["", "keepdim"])
def test_reduction_equals_loop(name, dims, keepdim, dtype):
    xs = examples_of_lengths(_lengths(name), static=(2, 3), dtype=dtype)
    call = CALLS[name]
    dims = DIMS[dims]
    dim = dims if len(dims) > 1 or name.endswith(("max", "min")) else dims[0]
    mb_assert(lambda x: call(x, dim, keepdim), [xs], [PackedBatch.fromlist(xs)], len(xs))


@pytest.mark.parametrize("name", ["torch.sum", "Tensor.mean", "torch.amax", "torch.logsumexp"])
def test_reduction_over_every_dimension_gives_per_example_scalars(name, dtype):
    xs = examples_of_lengths(_lengths(name), static=(2,), dtype=dtype)
    func = {"torch.sum": torch.sum, "Tensor.mean": lambda x: x.mean(), "torch.amax": torch.amax,
            "torch.logsumexp": lambda x: torch.logsumexp(x, (1, 2))}[name]
    pb = PackedBatch.fromlist(xs)
    mb_assert(func, [xs], [pb], len(xs))
    result = func(pb)
    assert isinstance(result, MaskedBatch) and result.dims == () and result._mask is None


def test_max_without_dim_and_binary_max(dtype):
    xs = examples_of_lengths([3, 1, 4], dtype=dtype)
    ys = examples_of_lengths([3, 1, 4], dtype=dtype)
    pb, pb2 = PackedBatch.fromlist(xs), PackedBatch.fromlist(ys)
    mb_assert(lambda x: x.max(), [xs], [pb], 3)
    mb_assert(lambda x, y: torch.max(x, y) + torch.min(x, y), [xs, ys], [pb, pb2], 3)


@given(packed_examples(static=(3,)), st.sampled_from(sorted(SOFTMAX)), st.sampled_from([1, 2]))
def test_softmax_equals_loop(pair, name, dim):
    xs, pb = pair
    mb_assert(lambda x: SOFTMAX[name](x, dim), [xs], [pb], len(xs))


def test_softmax_over_the_packed_dimension_stays_packed_and_sums_to_one(dtype):
    pb = PackedBatch.fromlist(examples_of_lengths([3, 0, 5, 1], dtype=dtype))
    probs = F.softmax(pb, 1)
    assert probs.layout is pb.layout
    totals = probs.sum(1)
    torch.testing.assert_close(totals.data, torch.tensor([[1.0] * 3, [0.0] * 3, [1.0] * 3,
                                                          [1.0] * 3], dtype=dtype))
    assert F.log_softmax(pb, 1, dtype=torch.float32).dtype == torch.float32


def test_large_values_stay_finite():
    xs = [x * 1e4 for x in examples_of_lengths([3, 2, 4])]
    pb = PackedBatch.fromlist(xs)
    mb_assert(lambda x: torch.logsumexp(x, 1), [xs], [pb], 3)
    mb_assert(lambda x: F.log_softmax(x, 1), [xs], [pb], 3)


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "logsumexp"])
def test_infinite_values_give_the_loops_results(op):
    # An example holding +inf: softmax is NaN and logsumexp inf, as torch gives
    # each example; -inf entries (masked scores) and an all -inf example too.
    inf = float("inf")
    xs = [torch.tensor([[[1.0], [inf], [0.5]]]), torch.tensor([[[0.2], [-inf]]]),
          torch.tensor([[[-inf], [-inf]]]), torch.tensor([[[inf], [-inf], [inf]]])]
    got = list(getattr(PackedBatch.fromlist(xs), op)(1).examples())
    for x, value in zip(xs, got):
        torch.testing.assert_close(value, getattr(x, op)(1), equal_nan=True)


def test_empty_examples_reduce_as_in_the_loop():
    pb = PackedBatch.fromlist(examples_of_lengths([0, 2]))
    assert pb.sum(1).data[0].eq(0).all()
    assert pb.mean(1).data[0].isnan().all()
    assert pb.logsumexp(1).data[0].eq(float("-inf")).all()


def test_max_over_the_packed_dimension_returns_the_first_maximal_step():
    x = torch.tensor([[[1.0], [3.0], [3.0], [2.0]]])
    y = torch.tensor([[[5.0], [5.0]]])
    values, indices = PackedBatch.fromlist([x, y]).max(1)
    assert values.data.tolist() == [[3.0], [5.0]] and indices.data.tolist() == [[1], [0]]
    assert indices.dtype == torch.int64


def test_integer_sum_promotes_like_torch():
    ids = [torch.randint(0, 5, (1, n)) for n in (3, 0, 2)]
    mb_assert(lambda x: x.sum(1), [ids], [PackedBatch.fromlist(ids)], 3, check_grad=False)
    mb_assert(lambda x: torch.sum(x, 1, dtype=torch.float64), [ids],
              [PackedBatch.fromlist(ids)], 3, check_grad=False)


def test_one_segment_call_for_the_whole_batch():
    pb = PackedBatch.fromlist(examples_of_lengths([5, 1, 0, 3, 2, 4]))
    with torch.autograd.profiler.profile() as prof:
        pb.sum(1)
    names = [e.name for e in prof.function_events]
    assert names.count("aten::index_add") == 1


def test_errors_name_the_op_example_and_dimension():
    pb = PackedBatch.fromlist(examples_of_lengths([2, 0, 3]))
    with pytest.raises(IndexError, match=r"torch.amax: example 1 has size 0 in dynamic dimension "
                                         r"1, and torch.amax of an empty dimension is undefined"):
        torch.amax(pb, 1)
    with pytest.raises(IndexError, match=r"Tensor.max: example 1 has size 0"):
        pb.max(1)
    with pytest.raises(ValueError, match=r"torch.sum: cannot reduce over dimension 0, the batch "
                                         r"dimension of each example"):
        torch.sum(pb, 0)
    with pytest.raises(ValueError, match=r"torch.nn.functional.softmax: dimension 0 is the batch "
                                         r"dimension"):
        F.softmax(pb, 0)
    with pytest.raises(ValueError, match=r"Tensor.softmax: dim must be given"):
        pb.softmax(None)
    ids = PackedBatch.fromlist([torch.tensor([[1, 2]]), torch.tensor([[3]])])
    with pytest.raises(RuntimeError, match=r"torch.mean: could not infer output dtype"):
        torch.mean(ids, 1)


def test_batch_sum_and_batch_mean_of_packed_batches():
    xs = examples_of_lengths([3, 0, 2])
    pb = PackedBatch.fromlist(xs)
    expected = sum(x.sum() for x in xs)
    torch.testing.assert_close(matchbox.batch_sum(pb), expected)
    torch.testing.assert_close(matchbox.batch_mean(pb.sum()), expected / 3)
    with pytest.raises(ValueError, match=r"batch_mean: expected a batch of per-example scalars "
                                         r"\(dims == \(\)\), got a PackedBatch"):
        matchbox.batch_mean(pb)
