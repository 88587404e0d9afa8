"""A batch's sizes given where an op needs one int for every example.

``x.size(0)`` (a ``BatchSize``) is 1 in the loop over examples, and ``x.maxsize(d)`` of a
dynamic dimension (a ``PaddedSize``) each example's own size there: as a count, an offset,
a window, a shift or an index (``x.chunk(T, 2)``, ``x.topk(T, 1)``, ``x.tril(T)``,
``x.narrow(1, 0, T)``) the loop's examples would each use their own, and the batch would
use the batch size or the longest example's.  Each is refused naming the op and the
argument, then the size's own message; as a size (``x.new_zeros(x.size(0), T, H)``,
``x[:, :T]``) they work where the loop's and the batch's agree, and are refused elsewhere
(``x.size(0)`` as a later size, a bound of another batch's or dimension's size).
"""

from __future__ import annotations

import pytest
import torch
from family_cases import batch_of, check

from matchbox.testing import mb_assert

PADDED = (r"x\.maxsize\(1\) is the padded size of dimension 1, which is dynamic: the "
          r"longest example's size there")
BATCH = r"x\.size\(0\) of a MaskedBatch \(x\.shape\[0\]\) is the batch size"

SHAPES = [(3, 4), (1, 4), (0, 4), (5, 4)]


def _batch(dtype=torch.float64):
    return batch_of(SHAPES, (True, False), dtype)


# name: (f(x, n) with n the size, the op's name, the argument's name)
INT_ARGUMENTS = {
    "x.chunk(n, 2)": (lambda x, n: x.chunk(n, 2), "Tensor.chunk", "number of chunks"),
    "torch.chunk(x, n, 2)": (lambda x, n: torch.chunk(x, n, 2), "torch.chunk",
                             "number of chunks"),
    "x.topk(n, 2)": (lambda x, n: x.topk(n, 2), "Tensor.topk", "k"),
    "x.topk(n, 1)": (lambda x, n: x.topk(n, 1), "Tensor.topk", "k"),
    "torch.topk(x, n, 1)": (lambda x, n: torch.topk(x, n, 1), "torch.topk", "k"),
    "x.kthvalue(n, 2)": (lambda x, n: x.kthvalue(n, 2), "Tensor.kthvalue", "k"),
    "x.kthvalue(n, 1)": (lambda x, n: x.kthvalue(n, 1), "Tensor.kthvalue", "k"),
    "x.narrow(1, 0, n)": (lambda x, n: x.narrow(1, 0, n), "Tensor.narrow", "length"),
    "x.narrow(2, 0, n)": (lambda x, n: x.narrow(2, 0, n), "Tensor.narrow", "length"),
    "torch.narrow(x, 2, n, 0)": (lambda x, n: torch.narrow(x, 2, n, 0), "torch.narrow",
                                 "start"),
    "x.split(n, 2)": (lambda x, n: x.split(n, 2), "Tensor.split", "split size"),
    "x.split([n, 1], 2)": (lambda x, n: x.split([n, 1], 2), "Tensor.split", "split size"),
    "x.unfold(2, n, 1)": (lambda x, n: x.unfold(2, n, 1), "Tensor.unfold",
                          "window size or step"),
    "x.unfold(1, 1, n)": (lambda x, n: x.unfold(1, 1, n), "Tensor.unfold",
                          "window size or step"),
    "x.tril(n)": (lambda x, n: x.tril(n), "Tensor.tril", "diagonal"),
    "torch.triu(x, n)": (lambda x, n: torch.triu(x, n), "torch.triu", "diagonal"),
    "x.tril_(n)": (lambda x, n: (x * 1).tril_(n), "Tensor.tril_", "diagonal"),
    "x.diagonal(n, 1, 2)": (lambda x, n: x.diagonal(n, 1, 2), "Tensor.diagonal", "offset"),
    "x.roll(n, 2)": (lambda x, n: x.roll(n, 2), "Tensor.roll", "shift"),
    "torch.roll(x, (n,), (1,))": (lambda x, n: torch.roll(x, (n,), (1,)), "torch.roll",
                                  "shift"),
    "x.select(2, n)": (lambda x, n: x.select(2, n), "Tensor.select", "index"),
    "torch.diff(x, n, 2)": (lambda x, n: torch.diff(x, n, 2), "torch.diff", "order n"),
    "x.scatter(2, index, n)": (lambda x, n: x.scatter(2, torch.zeros(1, 1, 1, dtype=torch.long),
                                                      n), "Tensor.scatter", "value"),
    "x.scatter_(2, index, value=n)": (
        lambda x, n: (x * 1).scatter_(2, torch.zeros(1, 1, 1, dtype=torch.long), value=n),
        "Tensor.scatter_", "value"),
    "x.repeat_interleave(n, 2)": (lambda x, n: x.repeat_interleave(n, 2),
                                  "Tensor.repeat_interleave", "repeats"),
    "x.repeat_interleave(1, 2, output_size=n)": (
        lambda x, n: x.repeat_interleave(1, 2, output_size=n), "Tensor.repeat_interleave",
        "output_size"),
}


@pytest.mark.parametrize("name", list(INT_ARGUMENTS))
def test_the_padded_size_as_an_int_argument_is_refused(name):
    f, op, argument = INT_ARGUMENTS[name]
    _, xb = _batch()
    with pytest.raises(TypeError, match=rf"^{op.replace('.', r'[.]')}: the {argument} must "
                                        rf"be the same number for every example, but it is a "
                                        rf"batch's size: {PADDED}"):
        f(xb, xb.maxsize(1))


@pytest.mark.parametrize("name", list(INT_ARGUMENTS))
def test_the_batch_size_as_an_int_argument_is_refused(name):
    # Static examples: the loop's x.size(0) is 1, the batch's x.size(0) is 2.
    f, op, argument = INT_ARGUMENTS[name]
    _, xb = batch_of([(3, 4), (3, 4)], (False, False))
    with pytest.raises(TypeError, match=rf"^{op.replace('.', r'[.]')}: the {argument} must "
                                        rf"be the same number for every example, but it is a "
                                        rf"batch's size: {BATCH}"):
        f(xb, xb.size(0))


@pytest.mark.parametrize("f, op", [
    (lambda x: x.repeat(1, 1, x.size(0)), "Tensor.repeat"),
    (lambda x: x.tile(1, x.size(0)), "Tensor.tile"),
])
def test_the_batch_size_as_a_count_is_refused(f, op):
    _, xb = batch_of([(3, 4), (3, 4)], (False, False))
    with pytest.raises(TypeError, match=rf"^{op.replace('.', r'[.]')}: the count must be the "
                                        rf"same number for every example, but it is a batch's "
                                        rf"size: {BATCH}"):
        f(xb)


def test_ints_equal_to_the_sizes_still_work(dtype):
    # The plain ints the sizes stand for, and int() of them, are one int for every example.
    examples, xb = batch_of([(3, 4), (1, 4), (5, 4)], (True, False), dtype)
    check(lambda x: x.topk(int(x.maxsize(2)) - 1, 2).values.sum(2, keepdim=True)
          + x.chunk(2, 2)[0].sum(2, keepdim=True) + x.tril(1).roll(1, 2), examples, xb)


# ------------------------------------------------------------------ x.size(0) as a size

LATER_BATCH_SIZE = {
    "x.new_zeros(B, B)": (lambda x: x.new_zeros(x.size(0), x.size(0)), "Tensor.new_zeros", 1),
    "x.new_ones((1, B))": (lambda x: x.new_ones((1, x.size(0))), "Tensor.new_ones", 1),
    "x.new_full((B, T, B), 1)": (lambda x: x.new_full((x.size(0), x.maxsize(1), x.size(0)),
                                                      1.0), "Tensor.new_full", 2),
    "x[:, :, :1].expand(B, -1, B)": (lambda x: x[:, :, :1].expand(x.size(0), -1, x.size(0)),
                                     "Tensor.expand", 2),
    "x.reshape(B, -1, 2, B)": (lambda x: x.reshape(x.size(0), -1, 2, x.size(0)),
                               "Tensor.reshape", 3),
    "x.view(1, -1, B, 2)": (lambda x: x.view(1, -1, x.size(0), 2), "Tensor.view", 2),
    "x.unflatten(2, (B, -1))": (lambda x: x.unflatten(2, (x.size(0), -1)),
                                "Tensor.unflatten", 2),
}


@pytest.mark.parametrize("name", list(LATER_BATCH_SIZE))
@pytest.mark.parametrize("dims", [(True, False), (False, False)], ids=["dynamic", "static"])
def test_the_batch_size_as_a_later_size_is_refused(name, dims):
    # In the loop x.new_zeros(x.size(0), x.size(0)) is (1, 1): the batch's would be (1, B).
    f, op, k = LATER_BATCH_SIZE[name]
    _, xb = batch_of([(2, 4), (2, 4)], dims)
    with pytest.raises(TypeError, match=rf"^{op.replace('.', r'[.]')}: size {k} is x\.size\(0\) "
                                        rf"of a batch, which names each example's batch "
                                        rf"dimension only as the first size; .*{BATCH}"):
        f(xb)


def test_the_batch_size_first_still_names_the_batch_dimension(dtype):
    examples, xb = batch_of([(3, 4), (1, 4), (5, 4)], (True, False), dtype)
    check(lambda x: x + x.new_zeros(x.size(0), x.maxsize(1), 4)
          + x.sum(1, keepdim=True).expand(x.size(0), -1, 4)
          + x.reshape(x.size(0), -1, 2, 2).flatten(2), examples, xb)


# ------------------------------------------------------------------ indices and slice bounds

SIZE_INDICES = {
    "x[:, :, :B]": (lambda x, y: x[:, :, :x.size(0)], "a slice bound of static dimension 2",
                    BATCH),
    "x[:, :B]": (lambda x, y: x[:, :x.size(0)], "a slice bound of dynamic dimension 1", BATCH),
    "x[:, B]": (lambda x, y: x[:, x.size(0)], "the index of dimension 1", BATCH),
    "x[:, T]": (lambda x, y: x[:, x.maxsize(1)], "the index of dimension 1", PADDED),
    "x[:, :, :T]": (lambda x, y: x[:, :, :x.maxsize(1)], "a slice bound of static dimension 2",
                    PADDED),
    "x[:, ::T]": (lambda x, y: x[:, ::x.maxsize(1)], "a slice step of dynamic dimension 1",
                  PADDED),
}


@pytest.mark.parametrize("name", list(SIZE_INDICES))
def test_a_size_as_an_index_or_bound_the_loop_reads_otherwise_is_refused(name):
    f, where, message = SIZE_INDICES[name]
    _, xb = batch_of([(3, 4), (1, 4), (5, 4)], (True, False))
    with pytest.raises(TypeError, match=rf"^Tensor\.__getitem__: {where} is a batch's size, "
                                        r"which in the loop over examples is each example's "
                                        r"own.*" + message):
        f(xb, xb)


OWN_BOUNDS = {
    "x[:, :T]": lambda x, y: x[:, :x.maxsize(1)] * 2,
    "x[:, 1:T]": lambda x, y: x[:, 1:x.maxsize(1)] * 2,
    "x[:, T:]": lambda x, y: x[:, x.maxsize(1):] + 1,
    "x[..., :T, :]": lambda x, y: x[..., :x.maxsize(1), :] * 2,
    "x[:, None, :T]": lambda x, y: x[:, None, :x.maxsize(1)] * 2,
    "x[:, :(x * 2).T]": lambda x, y: x[:, :(x * 2).maxsize(1)] * 2,
    "x.t()[:, :, :T]": lambda x, y: x.transpose(1, 2)[:, :, :x.transpose(1, 2).maxsize(2)],
    # Another batch's sizes: in the loop each example's own bound.
    "x[:, :y.T]": lambda x, y: x[:, :y.maxsize(1)] * 2,
    "x[:, y.T:]": lambda x, y: x[:, y.maxsize(1):] * 2,
    "x[:, 1:y.T]": lambda x, y: x[:, 1:y.maxsize(1)] * 2,
    "x[:, y.T:x.T]": lambda x, y: x[:, y.maxsize(1):x.maxsize(1)] * 2,
    "x[:, y.T::2]": lambda x, y: x[:, y.maxsize(1)::2] * 2,
}


BOUND_SHAPES = {
    "mixed": ([(3, 4), (1, 4), (0, 4), (5, 4)], [(2, 4), (4, 4), (1, 4), (0, 4)]),
    "batch-of-one": ([(2, 4)], [(1, 4)]),
    "one-long": ([(1, 4), (1, 4)], [(1, 4), (0, 4)]),
}


@pytest.mark.parametrize("name", list(OWN_BOUNDS))
@pytest.mark.parametrize("shapes", list(BOUND_SHAPES))
def test_a_padded_size_as_a_bound_of_a_dynamic_dimension_equals_the_loop(name, shapes, dtype):
    # y's examples are shorter or longer than x's: x[:, :y.maxsize(1)] takes, of each of x's
    # examples, as many positions as y's has (all it has where y's is longer), as the loop.
    xs, ys = BOUND_SHAPES[shapes]
    examples, xb = batch_of(xs, (True, False), dtype)
    others, yb = batch_of(ys, (True, False), dtype)
    mb_assert(OWN_BOUNDS[name], [examples, others], [xb, yb], len(xs))


def test_a_bound_of_another_number_of_examples_is_refused():
    _, xb = batch_of([(3, 4), (5, 4)], (True, False))
    _, yb = batch_of([(3, 4), (1, 4), (5, 4)], (True, False))
    with pytest.raises(ValueError, match=r"Tensor\.__getitem__: slice bound is x\.maxsize\(1\) "
                                         r"of a batch of 3 examples, but the batch it builds "
                                         r"has 2"):
        xb[:, :yb.maxsize(1)]


def test_writing_through_a_bound_of_another_batchs_size_is_refused():
    # Each example's own positions: at different places in different examples.
    _, xb = batch_of([(3, 4), (5, 4)], (True, False))
    _, yb = batch_of([(2, 4), (1, 4)], (True, False))
    with pytest.raises(NotImplementedError, match=r"Tensor\.__setitem__: x\[:, :2\] selects "
                                                  r"positions that differ between examples"):
        xb[:, :yb.maxsize(1)] = 0
