"""Gather, scatter, index_select, take_along_dim and tensor indices against the loop.

Parametrised over the registry's ``gather`` family: every registered op needs a case in
``CASES``.  Float batches are rebuilt with NaN padding by ``mb_assert``; index batches
are padded with an index no example has (``GARBAGE``), so an index padding position that
was read, or padding that reached a real value or gradient, fails the comparison.
Indices are each example's own positions.
"""

from __future__ import annotations

import math
import random
import re

import pytest
import torch
from family_cases import LAYOUTS, NAN, assert_every_op_has_a_case, batch_of, registered
from hypothesis import given
from hypothesis import strategies as st
from strategies import example_lists
from torch_features import TAKE_ALONG_DIM_TAKES_NEGATIVE_INDICES, lacks

from matchbox import MaskedBatch
from matchbox._masking import EXECUTION_MASK
from matchbox.testing import mb_assert

GARBAGE = 10**6


def index_batch(indices, dims):
    return MaskedBatch.fromlist(indices, dims, padding_value=GARBAGE)


DIMS = [0, 1, 2, -1]


def index_like(rng, examples, dims, d, *, k=3, broadcast=False, equal=False, negative=False,
               distinct=False):
    """Per-example index tensors for examples ``(1, *S)`` along dim ``d``.

    In every other dimension an index is no larger than its example (a random size
    there, the same for every example where the dimension is static; 1 with
    ``broadcast``, the example's own with ``equal``); along ``d`` it has ``k`` positions (a random number up to ``k`` for
    each example where ``d`` is dynamic, none in an example empty there).  Values are
    positions of the example along ``d`` (from ``-n`` with ``negative``; ``distinct``:
    no two alike along ``d``, for ``scatter``).
    """
    rank = examples[0].dim()
    static = {j: (1 if broadcast else examples[0].size(j) if equal
                  else rng.randint(1, examples[0].size(j)))
              for j in range(1, rank) if j != d and not dims[j - 1]}
    dynamic_d = d > 0 and dims[d - 1]
    several = sum(dims) > 1
    fixed_k = k
    if not dynamic_d and distinct:
        fixed_k = min(k, examples[0].size(d))
    indices = []
    for x in examples:
        shape = [1]
        for j in range(1, rank):
            if j == d:
                n = x.size(d)
                if dynamic_d:
                    high = min(k, n) if distinct else k
                    size = 0 if n == 0 else rng.randint(1 if several else 0, high)
                else:
                    size = fixed_k
                shape.append(size)
            elif dims[j - 1]:
                shape.append(1 if broadcast else x.size(j) if equal
                             else rng.randint(1 if several else 0, x.size(j)))
            else:
                shape.append(static[j])
        n = x.size(d) if d else 1
        other = shape[:d] + shape[d + 1:]
        lines = math.prod(other)
        if distinct and shape[d] and lines:
            values = torch.stack([torch.randperm(n)[:shape[d]] for _ in range(lines)])
            values = values.reshape(*other, shape[d]).movedim(-1, d)
        elif distinct:
            values = torch.zeros(shape, dtype=torch.long)
        else:
            values = torch.randint(-n if negative else 0, max(n, 1), shape)
        indices.append(values.reshape(shape))
    # A broadcast index has a static size one (unsqueeze(j)) where it broadcasts.
    index_dims = tuple(dynamic_d if j == d else dims[j - 1] and not broadcast
                       for j in range(1, rank))
    return indices, index_batch(indices, index_dims)


def check(f, args, batches, n):
    mb_assert(f, args, batches, n)


# op name -> (f(x, dim, index, src), index options, whether it takes a src)
CASES = {
    "torch.gather": (lambda x, d, i, s: torch.gather(x, d, i), {}),
    "Tensor.gather": (lambda x, d, i, s: x.gather(d, i), {}),
    # Negative indices where the loop's take_along_dim takes them (not torch 2.3's).
    "torch.take_along_dim": (lambda x, d, i, s: torch.take_along_dim(x, i, d),
                             {"negative": TAKE_ALONG_DIM_TAKES_NEGATIVE_INDICES,
                              "equal": True}),
    "Tensor.take_along_dim": (lambda x, d, i, s: x.take_along_dim(i, dim=d),
                              {"broadcast": True}),
    "torch.scatter": (lambda x, d, i, s: torch.scatter(x, d, i, s), {"distinct": True}),
    "Tensor.scatter": (lambda x, d, i, s: x.scatter(d, i, 2.5), {"distinct": True}),
    "Tensor.scatter_": (lambda x, d, i, s: (2 * x).scatter_(d, i, s), {"distinct": True}),
    "torch.scatter_add": (lambda x, d, i, s: torch.scatter_add(x, d, i, s), {}),
    "Tensor.scatter_add": (lambda x, d, i, s: x.scatter_add(d, i, s), {}),
    "Tensor.scatter_add_": (lambda x, d, i, s: (x * 1).scatter_add_(d, i, s), {}),
    "torch.scatter_reduce": (lambda x, d, i, s: torch.scatter_reduce(x, d, i, s, "sum"), {}),
    "Tensor.scatter_reduce": (
        lambda x, d, i, s: x.scatter_reduce(d, i, s, reduce="amax", include_self=False), {}),
    "Tensor.scatter_reduce_": (lambda x, d, i, s: (x + 0).scatter_reduce_(d, i, s, "mean"),
                               {}),
}
# ops without a per-example index of the input's rank: their own tests below.
# (index_add/index_copy/index_fill and their in-place forms: test_index_writes.py)
OWN_TESTS = {"torch.index_select", "Tensor.index_select",
             *(f"{owner}.index_{op}" for owner in ("torch", "Tensor")
               for op in ("add", "copy", "fill")),
             *(f"Tensor.index_{op}_" for op in ("add", "copy", "fill"))}

REGISTERED = registered("gather")


def test_every_registered_gather_op_has_a_case_here():
    assert_every_op_has_a_case("gather", REGISTERED, CASES, OWN_TESTS)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_op_with_per_example_indices_matches_loop(name, dim, layout, dtype):
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    f, options = CASES[name]
    d = dim % examples[0].dim()
    rng = random.Random(f"{name}{dim}{layout}")
    indices, ib = index_like(rng, examples, dims, d, **options)
    sources = [torch.randn(i.shape, dtype=dtype) for i in indices]
    sb = MaskedBatch.fromlist(sources, ib.dims, padding_value=NAN)
    check(lambda x, i, s: f(x, dim, i, s), [examples, indices, sources], [batch, ib, sb],
          len(examples))


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_plain_index_and_plain_table_are_shared_by_every_example(layout, dtype):
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    short = min(min(s) for s in shapes)
    if short == 0:
        return  # no position every example has
    index = torch.zeros(1, 1, 1, dtype=torch.long)
    # -1: each example's own last position, where the loop takes it (not torch 2.3).
    last = index - 1 if TAKE_ALONG_DIM_TAKES_NEGATIVE_INDICES else index
    mb_assert(lambda x: x.gather(1, index) + torch.take_along_dim(x, last, 2),
              [examples], [batch], len(examples))
    # A plain table indexed per example.
    table = torch.randn(1, 5, 3, dtype=dtype)
    rng = random.Random(layout)
    ids = [torch.randint(0, 5, (1, rng.randint(0, 4), 3)) for _ in shapes]
    mb_assert(lambda i: torch.gather(table, 1, i), [ids],
              [index_batch(ids, (True, False))], len(ids))


def test_scatter_with_a_larger_src_and_a_plain_src_match_loop(dtype):
    # Values only: torch cannot differentiate a scatter whose src is larger than the
    # index (its backward gives src a gradient of the index's shape), loop or batch.
    examples, batch = batch_of([(4, 3), (2, 3), (0, 3)], (True, False), dtype)
    indices = [torch.tensor([[[0, 1, 1]]]), torch.tensor([[[1, 0, 1], [0, 0, 0]]]),
               torch.zeros(1, 0, 3, dtype=torch.long)]
    ib = index_batch(indices, (True, False))
    sources = [torch.randn(1, 3, 3, dtype=dtype) for _ in indices]
    sb = MaskedBatch.fromlist(sources, (True, False), padding_value=NAN)
    mb_assert(lambda x, i, s: x.scatter_add(1, i, s), [examples, indices, sources],
              [batch, ib, sb], 3, check_grad=False)
    plain = torch.randn(1, 2, 3, dtype=dtype)
    mb_assert(lambda x, i: torch.scatter_add(x, 1, i, plain), [examples, indices],
              [batch, ib], 3, check_grad=False)


# ---------------------------------------------------------------- index_select


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("method", [False, True])
def test_index_select_with_a_plain_index_matches_loop(layout, method, dtype):
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    for d in (1, 2):
        n = min(s[d - 1] for s in shapes)
        for index in (torch.tensor([n - 1, 0, n - 1]) if n else torch.tensor([], dtype=torch.long),
                      torch.tensor(max(n - 1, 0))):
            if n == 0 and index.numel():
                continue
            f = ((lambda x, d=d, index=index: x.index_select(d, index)) if method
                 else (lambda x, d=d, index=index: torch.index_select(x, d, index)))
            mb_assert(f, [examples], [batch], len(examples))


def test_index_select_with_one_int_per_example_matches_loop(dtype):
    examples, batch = batch_of([(3, 2), (1, 2), (4, 2)], (True, False), dtype)
    picks = [torch.tensor(2), torch.tensor(0), torch.tensor(3)]
    pb = MaskedBatch.fromlist([p.view(1) for p in picks], ())
    mb_assert(lambda x, p: x.index_select(1, p), [examples, picks], [batch, pb], 3)


# ---------------------------------------------------------------- tensor indices


TENSOR_INDICES = {
    "x[:, tensor]": lambda x: x[:, torch.tensor([0, -1, 0])],
    "x[:, list]": lambda x: x[:, [0, 0]],
    "x[:, 0-d tensor]": lambda x: x[:, torch.tensor(-1)],
    "x[:, 2-d tensor]": lambda x: x[:, torch.tensor([[0], [-1]])],
    "x[..., tensor]": lambda x: x[..., torch.tensor([1, 0])],
    "x[:, :, tensor]": lambda x: x[:, :, torch.tensor([[1, 0, 1]])],
    "x[:, tensor, 0]": lambda x: x[:, torch.tensor([0, -1]), 0],
    "x[:, None, tensor]": lambda x: x[:, None, torch.tensor([0])],
}


@pytest.mark.parametrize("index", TENSOR_INDICES)
@pytest.mark.parametrize("layout", ["dynamic-static", "static-dynamic", "two-dynamic",
                                    "all-static", "batch-of-one"])
def test_a_plain_tensor_index_is_the_same_for_every_example(index, layout, dtype):
    dims, shapes = LAYOUTS[layout]
    shapes = [tuple(max(s, 2) for s in shape) for shape in shapes]  # every index exists
    examples, batch = batch_of(shapes, dims, dtype)
    mb_assert(TENSOR_INDICES[index], [examples], [batch], len(examples))


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("where", [1, 2])
def test_a_batch_of_per_example_index_tensors_matches_loop(layout, where, dtype):
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    rng = random.Random(f"{layout}{where}")
    several = sum(dims) > 1
    indices = []
    for x in examples:
        n = x.size(where)
        # An example empty in its other dynamic dimension gets an empty index: a batch
        # cannot hold a result empty in one of two dynamic dimensions (tested below).
        empty = n == 0 or (dims[where % 2] and x.size(3 - where) == 0)
        k = 0 if empty else rng.randint(1 if several else 0, 3)
        indices.append(torch.randint(-n, max(n, 1), (1, k)))
    ib = index_batch(indices, (True,))
    f = (lambda x, i: x[:, i]) if where == 1 else (lambda x, i: x[:, :, i] * 2)
    mb_assert(f, [examples, indices], [batch, ib], len(examples))


def test_int32_indices_work_where_torch_takes_them(dtype):
    examples, batch = batch_of([(4, 2), (2, 2)], (True, False), dtype)
    index = torch.tensor([1, 0], dtype=torch.int32)
    mb_assert(lambda x: x[:, index] + x.index_select(1, index), [examples], [batch], 2)
    with pytest.raises(NotImplementedError, match=r"bool \(mask\) indices are not supported"):
        batch[:, index.to(torch.uint8)]


def test_per_example_index_tensors_of_rank_three_match_loop(dtype):
    examples, batch = batch_of([(4, 2), (2, 2), (3, 2)], (True, False), dtype)
    indices = [torch.tensor([[[0, 3], [1, 1]]]), torch.tensor([[[1, 0]]]),
               torch.tensor([[[2, 2], [0, 1], [-1, -3]]])]
    ib = index_batch(indices, (True, False))
    mb_assert(lambda x, i: x[:, i].sum(-1), [examples, indices], [batch, ib], 3)


# ---------------------------------------------------------------- hypothesis


@given(case=example_lists(dims=(True, False), min_length=0), seed=st.integers(0, 2**16),
       dim=st.sampled_from([1, 2]),
       name=st.sampled_from(["Tensor.gather", "torch.take_along_dim", "torch.scatter_add",
                             "Tensor.scatter_"]))
def test_random_batches_match_loop(case, seed, dim, name):
    examples, batch = case
    f, options = CASES[name]
    rng = random.Random(seed)
    indices, ib = index_like(rng, examples, batch.dims, dim, **options)
    sources = [torch.randn(i.shape, dtype=batch.dtype) for i in indices]
    sb = MaskedBatch.fromlist(sources, ib.dims, padding_value=NAN)
    mb_assert(lambda x, i, s: f(x, dim, i, s), [examples, indices, sources], [batch, ib, sb],
              len(examples))


@given(case=example_lists(dims=(True, False), min_length=0), seed=st.integers(0, 2**16))
def test_random_tensor_indices_match_loop(case, seed):
    examples, batch = case
    rng = random.Random(seed)
    indices = [torch.randint(-n, max(n, 1), (1, 0 if n == 0 else rng.randint(0, 3)))
               for n in (x.size(1) for x in examples)]
    mb_assert(lambda x, i: x[:, i], [examples, indices],
              [batch, index_batch(indices, (True,))], len(examples))


# ---------------------------------------------------------------- padding and errors


def test_an_index_into_an_examples_padding_raises_naming_the_example():
    _, batch = batch_of([(3, 2), (1, 2)], (True, False))
    index = index_batch([torch.tensor([[[2, 0]]]), torch.tensor([[[1, 0]]])], (True, False))
    message = r"index 1 is out of range for example 1, which has size 1 in dimension 1"
    with pytest.raises(IndexError, match=r"^torch\.gather: " + message):
        torch.gather(batch, 1, index)
    with pytest.raises(IndexError, match=r"^Tensor\.scatter_add: " + message):
        batch.scatter_add(1, index, torch.ones(1, 1, 2, dtype=torch.float64))
    with pytest.raises(IndexError, match=r"^Tensor\.take_along_dim: " + message):
        batch.take_along_dim(index, 1)
    with pytest.raises(IndexError, match=r"^Tensor\.__getitem__: index 1 is out of range for "
                                         r"example 1"):
        batch[:, torch.tensor([1])]
    with pytest.raises(IndexError, match=r"^Tensor\.__getitem__: index -2 is out of range for "
                                         r"example 1"):
        batch[:, index_batch([torch.tensor([[0]]), torch.tensor([[-2]])], (True,))]
    with pytest.raises(IndexError, match=r"^torch\.index_select: index 2 is out of range for "
                                         r"example 1"):
        torch.index_select(batch, 1, torch.tensor([2]))
    with pytest.raises(IndexError, match=r"^torch\.gather: index -1 is out of range for "
                                         r"example 0"):
        torch.gather(batch, 1, torch.full((1, 1, 2), -1))


@lacks(TAKE_ALONG_DIM_TAKES_NEGATIVE_INDICES, "reads a negative take_along_dim index from "
       "the end")
def test_a_negative_take_along_dim_index_raises_where_the_loops_does():
    examples, batch = batch_of([(3, 2), (1, 2)], (True, False))
    index = torch.full((1, 1, 2), -1)
    with pytest.raises(RuntimeError, match="index -1 is out of bounds"):
        torch.take_along_dim(examples[0], index, 1)
    with pytest.raises(IndexError, match=r"^torch\.take_along_dim: index -1 is out of range "
                                         r"for example 0, which has size 3 in dimension 1"):
        torch.take_along_dim(batch, index, 1)


def test_an_index_of_an_example_that_is_not_running_is_not_checked():
    _, batch = batch_of([(3, 2), (1, 2)], (True, False))
    index = index_batch([torch.tensor([[[2, 0]]]), torch.tensor([[[1, 0]]])], (True, False))
    token = EXECUTION_MASK.set(torch.tensor([True, False]))
    try:
        out = torch.gather(batch, 1, index)
    finally:
        EXECUTION_MASK.reset(token)
    expected = torch.stack([batch.data[0, 2, 0], batch.data[0, 0, 1]]).view(1, 2)
    assert torch.equal(out.data[0], expected)


def test_an_index_larger_than_the_input_raises_naming_the_example():
    _, batch = batch_of([(3, 2), (1, 2)], (True, False))
    index = index_batch([torch.zeros(1, 1, 2, dtype=torch.long),
                         torch.zeros(1, 1, 2, dtype=torch.long)], (True, False))
    with pytest.raises(RuntimeError, match=r"^torch\.gather: the index has size 2 in dimension "
                                           r"2 but the input has 1"):
        torch.gather(batch[:, :, :1], 1, index)
    wide = index_batch([torch.zeros(1, 3, 1, dtype=torch.long),
                        torch.zeros(1, 2, 1, dtype=torch.long)], (True, False))
    with pytest.raises(RuntimeError, match=r"^torch\.gather: example 1 has size 2 in dimension "
                                           r"1 of the index but 1 in the input"):
        torch.gather(batch, 2, wide)
    with pytest.raises(RuntimeError, match=r"^Tensor\.scatter: the index has size 2 in "
                                           r"dimension 2 but the src has 1"):
        batch.scatter(1, index, batch[:, :, :1])


def test_errors_of_tensor_indices_name_what_is_refused():
    _, batch = batch_of([(3, 2), (1, 2)], (True, False))
    with pytest.raises(NotImplementedError, match=r"^Tensor\.__getitem__: more than one tensor "
                                                  r"index in one subscript"):
        batch[:, torch.tensor([0]), torch.tensor([0])]
    with pytest.raises(NotImplementedError, match=r"^Tensor\.__getitem__: bool \(mask\) indices "
                                                  r"are not supported"):
        batch[:, :, torch.tensor([True, False])]
    with pytest.raises(NotImplementedError, match=r"^Tensor\.__getitem__: bool indices are not "
                                                  r"supported"):
        batch[:, True]
    with pytest.raises(NotImplementedError, match=r"^Tensor\.__getitem__: a batch used as an "
                                                  r"index must hold integers"):
        batch[:, batch]
    with pytest.raises(NotImplementedError, match=re.escape(
            "Tensor.__setitem__: x[:, tensor([0])] = value with a tensor index is not "
            "supported for batches; write the positions with x.scatter(dim, index, src)")):
        batch[:, torch.tensor([0])] = 1.0


def test_a_result_empty_in_one_of_two_dynamic_dims_is_refused():
    _, batch = batch_of([(2, 3), (2, 0)], (False, True))
    index = index_batch([torch.tensor([[0]]), torch.tensor([[1]])], (True,))
    with pytest.raises(ValueError, match=re.escape(
            "Tensor.__getitem__: example 1 would be empty in some but not all of the result's "
            "dynamic dimensions (sizes [0, 1])")):
        batch[:, index]


def test_errors_of_index_select_and_take_along_dim():
    _, batch = batch_of([(3, 2), (1, 2)], (True, False))
    with pytest.raises(ValueError, match=r"^torch\.take_along_dim: dim=None flattens each "
                                         r"example"):
        torch.take_along_dim(batch, torch.zeros(1, 1, 1, dtype=torch.long))
    with pytest.raises(ValueError, match=r"^Tensor\.index_select: dim=0 is the batch dimension"):
        batch.index_select(0, torch.tensor([0]))
    with pytest.raises(ValueError, match=r"^Tensor\.index_select: a batch index must hold one "
                                         r"int per example"):
        batch.index_select(1, index_batch([torch.tensor([[0]]), torch.tensor([[0]])], (True,)))
    with pytest.raises(IndexError, match=r"^Tensor\.index_select: the index must be a 1-D "
                                         r"tensor"):
        batch.index_select(1, torch.tensor([[0]]))
    with pytest.raises(RuntimeError, match=r"^Tensor\.take_along_dim: the input has size 2 and "
                                           r"the indices 3 in dimension 2"):
        batch.take_along_dim(torch.zeros(1, 1, 3, dtype=torch.long), 1)
    with pytest.raises(TypeError, match=r"^torch\.gather: the index must hold integers"):
        torch.gather(batch, 1, batch)
    with pytest.raises(ValueError, match=r"^torch\.gather: a plain index is the same for every "
                                         r"example and must look like one example"):
        torch.gather(batch, 1, torch.zeros(2, 1, 1, dtype=torch.long))


def test_an_index_of_another_rank_is_refused_naming_both_ranks():
    _, batch = batch_of([(3, 2), (1, 2)], (True, False))
    idx = index_batch([torch.zeros(1, 3, dtype=torch.long), torch.zeros(1, 1, dtype=torch.long)],
                      (True,))
    ranks = r"\(rank 2\) and the input \(rank 3\) must have the same number of dimensions"
    with pytest.raises(RuntimeError, match=r"^torch\.gather: the index " + ranks):
        torch.gather(batch, 1, idx)
    with pytest.raises(RuntimeError, match=r"^Tensor\.take_along_dim: the indices " + ranks):
        batch.take_along_dim(idx, 1)
    with pytest.raises(RuntimeError, match=r"^Tensor\.scatter: the index " + ranks):
        batch.scatter(1, idx, 0.0)


def test_in_place_scatter_writes_into_the_batch_and_refuses_copies():
    examples, batch = batch_of([(3, 2), (1, 2)], (True, False))
    index = index_batch([torch.tensor([[[2, 0]]]), torch.tensor([[[0, 0]]])], (True, False))
    target = batch * 1
    result = target.scatter_(1, index, 7.0)
    assert result is target
    assert target.data[0, 2, 0] == 7.0 and target.data[0, 0, 1] == 7.0
    assert target.data[1, 0, 0] == 7.0
    with pytest.raises(NotImplementedError, match=r"^Tensor\.scatter_: the batch was indexed "
                                                  r"along a dynamic dimension"):
        batch[:, -1:].scatter_(1, index, 0.0)
    with pytest.raises(NotImplementedError, match=r"^torch\.scatter: out= is not supported"):
        torch.scatter(batch, 1, index, 0.0, out=batch.data)


def test_out_is_refused():
    _, batch = batch_of([(3, 2), (1, 2)], (True, False))
    index = torch.zeros(1, 1, 2, dtype=torch.long)
    with pytest.raises(NotImplementedError, match=r"^torch\.gather: out= is not supported"):
        torch.gather(batch, 1, index, out=torch.empty(0))
