"""``batch[:, ...]`` against the per-example loop, values and gradients.

Along a dynamic dimension, indices are each example's own: ``x[:, -1]`` is
every example's last element and ``x[:, 1:]`` drops every example's first.
Padding holds NaN, so a padding value that reaches a real output or a
gradient fails the comparison.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st
from op_counts import CountOps
from strategies import example_lists

from matchbox import MaskedBatch, _registry
from matchbox.extending import EXAMPLE_SCALAR, mark_example_scalar
from matchbox.testing import mb_assert, mb_rand


def assert_loop(f, pair):
    xs, xb = pair
    mb_assert(f, [xs], [xb], len(xs))


def batch_of(*lengths, width=2, dtype=torch.float64):
    xs = [torch.randn(1, n, width, dtype=dtype) for n in lengths]
    return xs, MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))


# Indices that every example takes, whatever its length (zero included).
ANY_LENGTH = {
    "x[:, 1:]": lambda x: x[:, 1:],
    "x[:, :-1]": lambda x: x[:, :-1],
    "x[:, -2:]": lambda x: x[:, -2:],
    "x[:, ::2]": lambda x: x[:, ::2],
    "x[:, 1::2]": lambda x: x[:, 1::2],
    "x[:, -3::2]": lambda x: x[:, -3::2],
    "x[:, 1:-1]": lambda x: x[:, 1:-1],
    "x[:, 2:4]": lambda x: x[:, 2:4],
    "x[:, -4:-1:2]": lambda x: x[:, -4:-1:2],
    "x[:, :10]": lambda x: x[:, :10],
    "x[:, 10:]": lambda x: x[:, 10:],
    "x[:, -10:]": lambda x: x[:, -10:],
    "x[:, :-10]": lambda x: x[:, :-10],
    "x[:, 0:0]": lambda x: x[:, 0:0],
    "x[..., 0]": lambda x: x[..., 0],
    "x[..., -1]": lambda x: x[..., -1],
    "x[..., 1:]": lambda x: x[..., 1:],
    "x[:, :, 1]": lambda x: x[:, :, 1],
    "x[:, :, -2]": lambda x: x[:, :, -2],
    "x[:, :, 1:3]": lambda x: x[:, :, 1:3],
    "x[:, :, ::2]": lambda x: x[:, :, ::2],
    "x[:, ..., 2]": lambda x: x[:, ..., 2],
    "x[:, None]": lambda x: x[:, None],
    "x[:, :, None]": lambda x: x[:, :, None],
    "x[..., None]": lambda x: x[..., None],
    "x[:, None, :, None, 0]": lambda x: x[:, None, :, None, 0],
    "x[:, 1:, 0]": lambda x: x[:, 1:, 0],
    "x[:, ::2, -1]": lambda x: x[:, ::2, -1],
    "x[:]": lambda x: x[:],
    "x[:, :]": lambda x: x[:, :],
    "x[...]": lambda x: x[...],
    "x[()]": lambda x: x[()],
    "x[0:1]": lambda x: x[0:1],  # each example's dimension 0, whole: the example itself
    "x[-1:, 1:]": lambda x: x[-1:, 1:],
    "x[:1, :, 0]": lambda x: x[:1, :, 0],
}


@pytest.mark.parametrize("index", ANY_LENGTH)
@given(pair=example_lists(dims=(True, False), min_length=0))
def test_index_with_a_dynamic_dim_first_equals_the_loop(index, pair):
    if pair[1].maxsize(2) < 3:
        pair = _widen(pair)
    assert_loop(ANY_LENGTH[index], pair)


def _widen(pair):
    """The same lengths with a static size of 3, so that every static index exists."""
    xs = [torch.cat([x, x, x], 2) for x in pair[0]]
    return xs, MaskedBatch.fromlist(xs, pair[1].dims, padding_value=float("nan"))


STATIC_FIRST = {
    "x[:, 1]": lambda x: x[:, 1],
    "x[:, -1]": lambda x: x[:, -1],
    "x[:, 1:]": lambda x: x[:, 1:],
    "x[:, :, 1:]": lambda x: x[:, :, 1:],
    "x[:, :, :-1]": lambda x: x[:, :, :-1],
    "x[:, 1, -2:]": lambda x: x[:, 1, -2:],
    "x[..., ::2]": lambda x: x[..., ::2],
    "x[:, None, 0, 1:]": lambda x: x[:, None, 0, 1:],
}


@pytest.mark.parametrize("index", STATIC_FIRST)
@given(pair=example_lists(dims=(False, True)))
def test_index_with_a_static_dim_first_equals_the_loop(index, pair):
    if pair[1].maxsize(1) < 2:
        pair = _doubled_along_dim_1(pair)
    assert_loop(STATIC_FIRST[index], pair)


def _doubled_along_dim_1(pair):
    xs = [torch.cat([x, x], 1) for x in pair[0]]
    return xs, MaskedBatch.fromlist(xs, pair[1].dims, padding_value=float("nan"))


@pytest.mark.parametrize("index", [lambda x: x[:, 0], lambda x: x[:, -1]])
@given(pair=example_lists(dims=(True, False), min_length=1))
def test_first_and_last_element_along_a_dynamic_dim_equal_the_loop(index, pair):
    assert_loop(index, pair)


@pytest.mark.parametrize("index", [lambda x: x[:, 1], lambda x: x[:, -2],
                                   lambda x: x[:, -2, 0]])
@given(pair=example_lists(dims=(True, False), min_length=2))
def test_int_index_along_a_dynamic_dim_equals_the_loop(index, pair):
    assert_loop(index, pair)


@pytest.mark.parametrize("index", [
    lambda x: x[:, -1], lambda x: x[:, :, -1], lambda x: x[:, 1:3, -2:],
    lambda x: x[:, -1, ::2], lambda x: x[:, ::2, None, 0],
])
@given(pair=example_lists(dims=(True, True), min_length=1))
def test_index_of_two_dynamic_dims_equals_the_loop(index, pair):
    # Int indices need the element in every example (the loop raises otherwise: tested
    # apart); slices that leave an example empty in one dimension are tested below.
    if any(x.size(1) < 2 for x in pair[0]):
        pair = _doubled_along_dim_1(pair)
    assert_loop(index, pair)


@pytest.mark.parametrize("index", [lambda x: x[:, 1:], lambda x: x[:, :, 5:],
                                   lambda x: x[:, 1:][:, :, :1], lambda x: x[:, :0].sum(2)])
def test_a_slice_that_empties_an_example_in_one_of_two_dynamic_dims_equals_the_loop(index):
    # Example 0 becomes (1, 0, 2): empty along dim 1 only; its mask is all false, and
    # the batch keeps its size 2 along dim 2 as lengths.
    xs = [torch.randn(1, n, m, dtype=torch.float64) for n, m in ((1, 2), (3, 1), (2, 0))]
    xb = MaskedBatch.fromlist(xs, (True, True), padding_value=float("nan"))
    mb_assert(index, [xs], [xb], 3)


def test_last_element_is_each_examples_own():
    xs, xb = batch_of(3, 1, 4)
    last = xb[:, -1]
    assert last.dims == (False,)
    for b, x in enumerate(xs):
        torch.testing.assert_close(last.data[b:b + 1], x[:, -1], rtol=0, atol=0)


@pytest.mark.parametrize(("index", "example", "size"),
                         [(0, 1, 0), (1, 1, 0), (2, 1, 0), (-1, 1, 0), (-2, 1, 0), (-3, 1, 0)])
def test_an_index_some_example_does_not_reach_raises_like_the_loop(index, example, size):
    xs, xb = batch_of(3, 0, 1, 2)
    with pytest.raises(IndexError):
        xs[example][:, index]
    with pytest.raises(IndexError, match=rf"Tensor.__getitem__: index {index} is out of range "
                                         rf"for example {example}, which has size {size} in "
                                         r"dynamic dimension 1"):
        xb[:, index]


def test_an_index_every_example_reaches_equals_the_loop():
    xs, xb = batch_of(3, 1, 2)
    for index in (0, -1):
        got = xb[:, index]
        for x, y in zip(xs, got.examples()):
            torch.testing.assert_close(y, x[:, index], rtol=0, atol=0)


# ------------------------------------------------------------------ errors

@pytest.mark.parametrize("index, hint", [
    (0, r"got 0; in the loop it drops each example's dimension 0 \(of size one\), which a "
        r"batch cannot do \(its examples keep it\); write x\[:\] for the same values with "
        r"dimension 0 kept \(x itself\)"),
    ((0, 0), r"got 0; in the loop it drops .* write x\[:, 0\] for the same values"),
    ((-1, slice(1, None), 1), r"got -1; in the loop it drops .* write x\[:, 1:, 1\] for"),
    ((Ellipsis, 0, 0, 0), r"got 0; in the loop it drops .* write x\[:, 0, 0\] for"),
    (3, r"got 3; each example's dimension 0 has size one, so index 3 is out of range for it, "
        r"in the loop too"),
    (slice(1, None), r"got slice\(1, None, None\); in the loop it leaves each example's "
                     r"dimension 0 empty, which a batch cannot hold; slice the dimensions "
                     r"after it \(x\[:, a:b\]\)"),
    (None, r"got None; in the loop it adds a dimension in front of each example's dimension "
           r"0, which a batch cannot hold; add a size-one dimension after it instead "
           r"\(x\[:, None\], x.unsqueeze\(1\)\)"),
    ((None, 0), r"got None; in the loop it adds a dimension in front"),
])
def test_first_index_other_than_a_full_slice_is_refused(index, hint):
    xs, xb = batch_of(3, 1)
    with pytest.raises(IndexError, match=r"Tensor.__getitem__: the first index must be ':' "
                                         r"\(every example keeps its batch dimension 0\), "
                                         + hint):
        xb[index]
    if index not in (3, None) and index != (None, 0) and index != slice(1, None):
        expected = xs[0][index]  # the loop runs it: one dimension fewer than the batch holds
        assert expected.dim() < xs[0].dim()


def test_indexing_dimension_0_whole_equals_the_loop(dtype):
    # Each example's dimension 0 has size one: x[0:1], x[-1:] are the example itself.
    for lengths in [(3, 0, 1, 2), (1,), (0,)]:
        xs, xb = batch_of(*lengths, width=3, dtype=dtype)
        n = len(lengths)
        mb_assert(lambda x: x[0:1] * 2, [xs], [xb], n)
        mb_assert(lambda x: x[-1:, :, 1:], [xs], [xb], n)
        mb_assert(lambda x: x[:1, -1:] - x, [xs], [xb], n)


@pytest.mark.parametrize("index, message", [
    ((slice(None), True), "bool indices are not supported for batches"),
    ((slice(None), slice(None), torch.tensor([True, False])),
     r"bool \(mask\) indices are not supported for batches"),
])
def test_bool_indices_are_refused(index, message):
    # Tensor and list indices are test_gather.py's (each example's own positions).
    _, xb = batch_of(3, 1)
    with pytest.raises(NotImplementedError, match=message):
        xb[index]


def test_a_float_batch_as_an_index_is_refused():
    _, xb = batch_of(3, 1)
    with pytest.raises(NotImplementedError, match="a batch used as an index must hold integers"):
        xb[:, xb]
    with pytest.raises(NotImplementedError, match="a batch used as an index must hold integers"):
        xb[:, MaskedBatch(torch.tensor([0.0, 1.0]), None, ())]  # not ints


@pytest.mark.parametrize("dynamic", [True, False])
@given(data=st.data())
def test_an_index_of_per_example_ints_equals_the_loop(dynamic, data):
    # x[:, i] with i one int per example (each example's own index)
    lengths = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    if not dynamic:
        lengths = [lengths[0]] * len(lengths)
    xs = [torch.randn(1, n, 2, dtype=torch.float64) for n in lengths]
    xb = MaskedBatch.fromlist(xs, (dynamic, False), padding_value=float("nan"))
    indices = [torch.tensor([data.draw(st.integers(-n, n - 1))]) for n in lengths]
    # Examples of shape (1,): the loop's tensor index keeps the dimension.
    ib = MaskedBatch.fromlist(indices, ())
    mb_assert(lambda x, i: x[:, i], [xs, indices], [xb, ib], len(xs))
    # Python ints (0-d in the loop): the dimension is dropped.
    ints = mark_example_scalar(MaskedBatch(torch.cat(indices), None, ()), EXAMPLE_SCALAR)
    mb_assert(lambda x, i: x[:, int(i)] if isinstance(i, torch.Tensor) else x[:, i],
              [xs, indices], [xb, ints], len(xs))


def test_reads_at_per_example_ints_share_the_batchs_mask():
    # An index out of range for a running example raises, so a read's mask is the batch's
    # own at the position, not one of its own: two reads of one batch combine with no
    # guard between them (a shift-reduce stack's two top items).
    torch.manual_seed(0)
    stack = MaskedBatch(torch.randn(3, 4, 2), None, (False, False))
    top = mark_example_scalar(MaskedBatch(torch.tensor([1, 3, 2]), None, ()), EXAMPLE_SCALAR)
    left, right = stack[:, top - 1], stack[:, top]
    assert left._mask is None and right._mask is None
    xs = [torch.randn(1, n, 2) for n in (3, 1, 2)]
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))
    at = mark_example_scalar(MaskedBatch(torch.tensor([2, 0, -1]), None, ()), EXAMPLE_SCALAR)
    first = xb[:, at]  # the only dynamic dimension: every element read is real
    assert first._mask is None
    assert [e.tolist() for e in first.examples()] == [xs[0][:, 2].tolist(), xs[1][:, 0].tolist(),
                                                      xs[2][:, -1].tolist()]


def test_an_index_of_per_example_ints_past_an_examples_end_raises_like_the_loop():
    _, xb = batch_of(3, 1, 2)
    index = MaskedBatch(torch.tensor([2, 1, 0]), None, ())
    with pytest.raises(IndexError, match=r"Tensor.__getitem__: index 1 is out of range for "
                                         r"example 1, which has size 1 in dimension 1"):
        xb[:, index]


def test_malformed_indices_are_refused_with_the_op_name():
    _, xb = batch_of(3, 1)
    with pytest.raises(IndexError, match=r"Tensor\.__getitem__: too many indices for examples "
                                         "of rank 3"):
        xb[:, 0, 0, 0]
    with pytest.raises(IndexError, match="an index can only have a single ellipsis"):
        xb[..., ...]
    with pytest.raises(IndexError, match="index 2 is out of range for dimension 2 of size 2"):
        xb[:, :, 2]
    with pytest.raises(IndexError, match="index 3 is out of range for example 0, which has "
                                         "size 3 in dynamic dimension 1"):
        xb[:, 3]
    with pytest.raises(NotImplementedError, match="index 'a' is not supported for batches"):
        xb[:, "a"]


ASSIGNMENTS = {
    "x[:, 0] = x[:, 0] * 3": lambda x: x.__setitem__((slice(None), 0), x[:, 0] * 3),
    "x[:, 1:3] = 0.5": lambda x: x.__setitem__((slice(None), slice(1, 3)), 0.5),
    "x[:, :, 1] = x[:, :, 0].exp()": lambda x: x.__setitem__((slice(None), slice(None), 1),
                                                             x[:, :, 0].exp()),
    "x[..., 0] = w": lambda x: x.__setitem__((Ellipsis, 0), torch.tensor(2.0, dtype=x.dtype)),
    "x[:, 1] += 1": lambda x: x.__setitem__((slice(None), 1), x[:, 1] + 1),
}


@pytest.mark.parametrize("name", sorted(ASSIGNMENTS))
def test_item_assignment_at_the_same_position_in_every_example_equals_the_loop(name, dtype):
    # At least two positions: the loop's x[:, 1] needs them (as the batch's check does).
    _assert_write_equals_loop(ASSIGNMENTS[name], dtype, min_size=2)


def _assert_write_equals_loop(write, dtype, min_size):
    """``write(x)`` on a non-leaf copy of each example and of the batch: equal values and
    gradients (the write changes the batch in place, as it changes each example)."""
    def f(x):
        x = x * 1  # a non-leaf, which may be written in place
        write(x)
        return x

    xs, xb = mb_rand(4, (True, 5), (False, 2), dtype=dtype, min_size=min_size)
    mb_assert(f, [xs], [xb], 4)


FROM_EACH_END = {
    "x[:, -1] = x[:, -1] * 3": lambda x: x.__setitem__((slice(None), -1), x[:, -1] * 3),
    "x[:, -2, 1:] = 0.5": lambda x: x.__setitem__((slice(None), -2, slice(1, None)), 0.5),
    "x[:, 0] = 1; x[..., -1, :] = x[:, 0]": lambda x: (
        x.__setitem__((slice(None), 0), 1.0),
        x.__setitem__((Ellipsis, -1, slice(None)), x[:, 0])),
}


@pytest.mark.parametrize("name", sorted(FROM_EACH_END))
def test_item_assignment_counted_from_each_examples_end_equals_the_loop(name, dtype):
    # Each example's own position from its own end (ops/one_position_writes.py), read
    # after a write too (x[:, -1] reads by positions, not by a gather that saves the data).
    _assert_write_equals_loop(FROM_EACH_END[name], dtype, min_size=2)


@pytest.mark.parametrize("index, message", [
    ((slice(None), slice(None, -1)), r"^Tensor.__setitem__: x\[:, :-1\] selects positions "
                                     r"that differ between examples .*torch.where"),
    ((slice(None), slice(-2, None)), r"^Tensor.__setitem__: x\[:, -2:\] selects positions"),
])
def test_item_assignment_where_examples_differ_is_refused(index, message):
    _, xb = batch_of(3, 1)
    with pytest.raises(NotImplementedError, match=message):
        xb[index] = 0
    with pytest.raises(NotImplementedError, match=r"^Tensor.__setitem__: x\[\.\.\., 0\] "
                                                  r"selects positions that differ"):
        xb[index][..., 0] = 0  # an index of a copy is a view of the copy only
    with pytest.raises(NotImplementedError, match=r"^Tensor.__setitem__: x\[\.\.\., 0\] "
                                                  r"selects positions that differ"):
        xb[:, -1][..., 0] = 0


def test_item_assignment_errors_are_the_loops():
    xs, xb = batch_of(3, 1)
    with pytest.raises(IndexError, match=r"the first index must be ':'"):
        xb[0] = 0
    short = MaskedBatch.fromlist([torch.ones(1, n, 2) for n in (3, 1)], (True, False))
    with pytest.raises(IndexError, match=r"index 2 is out of range for example 1"):
        short[:, 2] = 0  # example 1 has one position, as in the loop
    other = MaskedBatch.fromlist([torch.ones(1, n, 2) for n in (1, 3)], (True, False))
    with pytest.raises(ValueError, match=r"example 0 has size 3 in one argument and 1 in another"):
        short[:, :3] = other
    # A step example 0 does not have (it is padding there): the loop has no value for it.
    step = other.unbind(1)[2]
    with pytest.raises(ValueError, match=r"^Tensor.copy_: example 0 of the value is padding at "
                                         r"positions where the batch written to is real"):
        short[:, 0] = step


def test_item_assignment_into_a_plain_tensor_with_a_batch_is_refused():
    # As plain += batch, plain.copy_(batch) are: the plain tensor cannot hold every
    # example (before, an AttributeError from inside getitem).
    _, xb = batch_of(3, 1)
    n = MaskedBatch.fromlist([torch.tensor([k]) for k in (0, 2)], ())
    seen = torch.zeros(1, 3, dtype=torch.bool)
    message = (r"^Tensor.__setitem__: x\[:, 0\] = value is an in-place op on a plain tensor of "
               r"shape \(1, 3\), which cannot take a batch argument \(the tensor would have to "
               r"hold every example\); create x from a batch \(b.batch_zeros\(3\), zeros of "
               r"shape \(1, 3\) for each example of b\).*under @matchbox.batch a plain tensor "
               r"held by a local variable becomes a batch of per-example copies")
    with pytest.raises(ValueError, match=message):
        seen[:, 0] = seen[:, 0] | (xb[:, 0, 0] > 4)
    with pytest.raises(ValueError, match=r"^Tensor.__setitem__: x\[:, MaskedBatch.*\] = value "
                                         r"is an in-place op on a plain tensor of shape \(1, 3\)"):
        seen[:, n] = True  # a per-example index is a batch argument too
    assert not seen.any()


@pytest.mark.parametrize("step", [0, -1])
def test_a_non_positive_step_along_a_dynamic_dim_is_refused(step):
    _, xb = batch_of(3, 1)
    with pytest.raises(ValueError, match=rf"Tensor\.__getitem__: slice step must be positive, "
                                         rf"got {step}"):
        xb[:, ::step]


# ------------------------------------------------------------------ the registry

INDEXING_OPS = [e.name for e in _registry.entries() if e.family == "indexing"]


def _assigned(x):
    x = x * 1
    x[:, :1] = x[:, :1] * 2
    return x


def _copied(x):
    x = x * 1
    return x.copy_(x.exp())


COVERED = {"Tensor.__getitem__": lambda x: x[:, 1:, 0], "Tensor.__setitem__": _assigned,
           "Tensor.copy_": _copied, "torch.select": lambda x: torch.select(x, 2, 0),
           "Tensor.select": lambda x: x.select(-1, -1)}


@given(pair=example_lists(dims=(True, False), min_length=1), index=st.sampled_from([0, 1, -1]))
def test_select_along_a_dynamic_dim_takes_each_examples_own_position(pair, index):
    # (A user trial found Tensor.select unsupported.)  Index 1 of a length-one example
    # raises in the loop and is absent in the batch: only examples that have it compare.
    assume(index != 1 or min(x.size(1) for x in pair[0]) >= 2)
    assert_loop(lambda x: x.select(1, index), pair)


def test_select_along_each_examples_batch_dimension_is_refused():
    _, xb = batch_of(3, 1)
    with pytest.raises(ValueError, match=r"Tensor.select: dim=0 is each example's own batch "
                                         r"dimension \(size one\): selecting along it would "
                                         r"drop it"):
        xb.select(0, 0)


@pytest.mark.parametrize("name", INDEXING_OPS)
@given(pair=example_lists(dims=(True, False)))
def test_every_registered_indexing_op_has_a_case_equal_to_the_loop(name, pair):
    assert name in COVERED, f"{name} is registered as an indexing op but has no test case here"
    assert_loop(COVERED[name], pair)


@given(data=st.data())
def test_an_index_chain_equals_the_loop(data):
    pair = data.draw(example_lists(dims=(True, False, False), min_length=0))
    assert_loop(lambda x: x[:, 1:][:, :-1][..., None][:, ::2, 0], pair)


@pytest.mark.parametrize("index", [0, 1, -1, -2])
def test_an_index_a_non_running_example_does_not_reach_gives_it_padding(index):
    # Under an execution mask (matchbox-control's @batch), only running examples
    # must reach the index; the others' results are padding (and discarded).
    from matchbox._masking import EXECUTION_MASK

    xs, xb = batch_of(3, 0, 1, 2)
    running = torch.tensor([True, False, False, True])
    token = EXECUTION_MASK.set(running)
    try:
        got = xb[:, index]
        with pytest.raises(IndexError, match=rf"index {index} is out of range for example 1"):
            EXECUTION_MASK.set(torch.tensor([True, True, False, True]))
            xb[:, index]
    finally:
        EXECUTION_MASK.reset(token)
    for b, x in enumerate(xs):
        reaches = -x.size(1) <= index < x.size(1)
        assert bool(got.mask[b].all()) == reaches
        if reaches:
            torch.testing.assert_close(got.data[b:b + 1], x[:, index], rtol=0, atol=0)


IN_PLACE_ON_SLICES = {
    "x[:, :2].mul_(2)": lambda x: x[:, :2].mul_(2),
    "x[:, 1:3].zero_()": lambda x: x[:, 1:3].zero_(),
    "x[:, 1:].add_(1)": lambda x: x[:, 1:].add_(1),
    "x[:, 0:4:2].masked_fill_": lambda x: x[:, 0:4:2].masked_fill_(x[:, 0:4:2] > 0, 9.0),
}


@pytest.mark.parametrize("name", sorted(IN_PLACE_ON_SLICES))
def test_in_place_op_on_a_dynamic_slice_writes_through_as_in_the_loop(name, dtype):
    # A slice with bounds that are the same for every example is a view of just
    # its positions: the op changes the batch there and nowhere else.
    _assert_write_equals_loop(IN_PLACE_ON_SLICES[name], dtype, min_size=0)


@pytest.mark.parametrize("index", ["x[:, -2:]", "x[:, :-1]", "x[:, -1][..., 0]",
                                   "x[:, n][..., :1]", "x[:, -2:][:, :1]"])
def test_in_place_op_on_a_copy_made_by_indexing_is_refused(index):
    # Positions that differ between examples (counted from each example's end,
    # or given per example) are gathered: a copy, so the op could not reach x. (With the
    # loop's (1,) index, x[:, i] is a copy in the loop too, and an in-place op on x[:, n]
    # or x[:, -1] itself writes back: test_per_example_index_writes.)
    xb = MaskedBatch.fromlist([torch.ones(1, n, 2) for n in (3, 1, 2)], (True, False))
    n = MaskedBatch(torch.tensor([2, 0, 1]), None, ())
    n._scalar = True  # a Python int in the loop (a @batch counter)
    part = eval(index, {"x": xb, "n": n})
    with pytest.raises(NotImplementedError, match=r"^Tensor.add_: the batch was indexed along "
                                                  r"a dynamic dimension at positions that "
                                                  r"differ between examples .* use the "
                                                  r"out-of-place op$"):
        part.add_(1)
    assert torch.equal((part + 1).data, part.data + 1)  # out of place: as before


@pytest.mark.parametrize("index", ["x[:, n]", "x[:, -1]", "x[:, n][:, :2]"])
@pytest.mark.parametrize("view", ["unsqueeze(1)", "chunk(2, -1)[0]", "view(1, 1, 2)",
                                  "unsqueeze(1).squeeze(1)", "narrow(-1, 0, 1)",
                                  "expand(1, 2)", "[..., :1]"])
@pytest.mark.parametrize("op", ["add_(1)", "zero_()", "copy_(torch.ones(1))"])
def test_in_place_op_on_a_view_of_a_copy_made_by_indexing_is_refused(index, view, op):
    # x[:, n] is a copy where the loop's is a view of x: so is a view of that copy, through
    # which the loop's write reaches x too (a review found this silently leaving x as it was).
    xb = MaskedBatch.fromlist([torch.ones(1, n, 2) for n in (3, 1, 2)], (True, False))
    n = MaskedBatch(torch.tensor([2, 0, 1]), None, ())
    n._scalar = True  # a Python int in the loop (a @batch counter)
    part = eval(index + ("" if view.startswith("[") else ".") + view, {"x": xb, "n": n})
    with pytest.raises(NotImplementedError, match=r"^Tensor\.\w+: the batch was indexed along "
                                                  r"a dynamic dimension at positions that "
                                                  r"differ between examples .* \(on it or on a "
                                                  r"view of it\) .* use the out-of-place "
                                                  r"op$"):
        eval(f"part.{op}", {"part": part, "torch": torch})


def test_in_place_ops_on_views_of_real_views_and_of_copies_made_by_clone_still_run():
    xs = [torch.randn(1, n, 2, dtype=torch.float64) for n in (3, 1, 2)]

    def f(x):
        x = x.clone()
        x[:, 0].unsqueeze(1).mul_(0)  # a view of x in the batch too: written through
        y = x[:, -1].clone()          # a copy in the loop as well
        y.unsqueeze(1).add_(1)
        return x.sum(-1) + y.sum(-1, keepdim=True)

    mb_assert(f, [xs], [MaskedBatch.fromlist(xs, (True, False))], 3)


def test_truncating_slice_bounds_the_padded_size():
    # x[:, :max_len] is at most max_len long in every example: its padded size
    # too, so a positional table sliced with maxsize lines up with it.
    xs, xb = mb_rand(3, (True, 7), (False, 2), min_size=1)
    pos = torch.randn(4, 2)

    def f(x):
        x = x[:, :4]
        return x + pos[:x.maxsize(1)]

    assert xb[:, :4].maxsize(1) == min(4, int(xb.maxsize(1)))  # int(): the padded size
    mb_assert(f, [xs], [xb], 3)


@pytest.mark.parametrize("own", [3, -4])
def test_a_per_example_index_past_a_static_dimension_raises_with_its_own_value(own):
    xb = MaskedBatch(torch.randn(2, 3, 2), None, (False, False))
    index = MaskedBatch(torch.tensor([-3, own]), None, ())
    with pytest.raises(IndexError, match=rf"index {own} is out of range for example 1, which "
                                         r"has size 3 in dimension 1"):
        xb[:, index]


def test_a_per_example_index_reads_one_element_and_saves_only_the_index():
    # Issue 22: one advanced index (no gather of an index expanded over the other
    # dimensions and squeezed: 21 ops -> 11), and the backward keeps the positions only
    # (a gather kept the whole tensor: the TreeLSTM's stack, once per read).
    x = torch.randn(8, 16, 32, requires_grad=True)
    xb = MaskedBatch(x, None, (False, False))
    index = mark_example_scalar(MaskedBatch(torch.tensor([0, 1, 2, 3, -1, -2, 15, 7]), None, ()),
                                EXAMPLE_SCALAR)  # Python ints, as a @batch counter
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        with CountOps() as counted:
            out = xb[:, index]
    assert counted.total <= 11
    assert sum(t.numel() * t.element_size() for t in saved) <= 2 * 8 * 8  # rows, positions
    expected = x[torch.arange(8), torch.tensor([0, 1, 2, 3, 15, 14, 15, 7])]
    torch.testing.assert_close(out.data, expected)


def test_per_example_indices_into_one_batch_sum_its_lengths_once():
    # A loop reads one batch at a new index each step (the TreeLSTM's leaves[:, position]).
    xs, xb = batch_of(3, 2)
    with CountOps() as counted:
        reads = [xb[:, mark_example_scalar(MaskedBatch(torch.tensor([k, 0]), None, ()),
                                           EXAMPLE_SCALAR)] for k in (0, 1, -1)]
    assert counted.ops["sum"] == 1
    for k, read in zip((0, 1, -1), reads):
        torch.testing.assert_close(next(iter(read.examples())), xs[0][:, k])


def test_item_assignment_drops_the_values_leading_size_one_dims_as_torch_does():
    # x[:, i] = v with v of shape (1, 1, D) (as x[:, idx] with a (1,) index gives) into a
    # (1, D) slot: torch drops v's leading ones; the batch refused it as a change of rank
    # (a user trial).
    xs = [torch.randn(1, n, 3, dtype=torch.float64) for n in (4, 2, 3)]
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))
    idx = [torch.tensor([k]) for k in (3, 0, 1)]  # each example's own row, a (1,) tensor

    def f(x, i):
        h = x * 1
        h[:, 1] = torch.tanh(x[:, i])  # a batch value of rank 3 into a rank-2 slot
        h[:, 0] = torch.ones(1, 1, 3, dtype=x.dtype)  # a plain one
        return h

    mb_assert(f, [xs, idx], [xb, MaskedBatch.fromlist(idx, ())], len(xs))
