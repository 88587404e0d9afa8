"""Shape ops of ``MaskedBatch`` against the per-example loop, values and gradients.

Every case runs ``f`` on each example alone and on the batch (``mb_assert``);
padding holds NaN, so a padding value that reaches a real output or gradient
fails the comparison.  Per-example lengths include zero and one, batch sizes
include one, and both float32 and float64 are drawn.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from family_cases import assert_refused_beside_static
from hypothesis import given
from hypothesis import strategies as st
from strategies import example_lists
from torch.nn.utils.rnn import pad_sequence

import matchbox
import matchbox.functional as MF
from matchbox import MaskedBatch, _registry
from matchbox.testing import mb_assert

NAN = float("nan")


@st.composite
def batches(draw, shape, *, n=1, same_lengths=False, min_length=0, max_length=5):
    """``n`` (examples, batch) pairs sharing batch size, dtype and static sizes.

    ``shape`` lists the dimensions after the first: an int is a static size,
    ``None`` a dynamic one whose per-example length is drawn from
    ``[min_length, max_length]`` (from 1 when there are several dynamic
    dimensions, which cannot hold an empty example).
    """
    batch_size = draw(st.integers(1, 4))
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    if sum(s is None for s in shape) > 1:
        min_length = max(min_length, 1)

    def sizes():
        return [[draw(st.integers(min_length, max_length)) if s is None else s for s in shape]
                for _ in range(batch_size)]

    first = sizes()
    pairs = []
    for _ in range(n):
        g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
        xs = [torch.randn(1, *s, generator=g, dtype=dtype)
              for s in (first if same_lengths else sizes())]
        pairs.append((xs, MaskedBatch.fromlist(xs, [s is None for s in shape],
                                               padding_value=NAN)))
    return pairs


def one_batch(shape, **kwargs):
    """One (examples, batch) pair; see :func:`batches`."""
    return batches(shape, **kwargs).map(lambda pairs: pairs[0])


def assert_loop(f, *pairs):
    """``f`` on the batches equals ``f`` on each example: values and gradients."""
    mb_assert(f, [xs for xs, _ in pairs], [xb for _, xb in pairs], len(pairs[0][0]))


def assert_batch_equals_examples(xb, expected):
    """``xb``'s examples are exactly ``expected`` (NaN padding must not show)."""
    got = list(xb.examples())
    assert len(got) == len(expected)
    for j, (g, e) in enumerate(zip(got, expected)):
        assert g.shape == e.shape, f"example {j}: shape {tuple(g.shape)} vs {tuple(e.shape)}"
        torch.testing.assert_close(g, e, rtol=0, atol=0, msg=f"example {j}")


# ------------------------------------------------------------------ one case per registered op

# Registered shape op -> (shape of the argument batches, count, function).  The
# registry-parametrised test below runs every registered op through its case,
# so a newly registered op fails until it gets one.
OP_CASES = {
    "Tensor.view": ((None, 6), 1, lambda x: x.view(1, -1, 2, 3)),
    "Tensor.reshape": ((None, 2, 3), 1, lambda x: x.reshape(1, -1, 6)),
    "torch.reshape": ((None, 2, 3), 1, lambda x: torch.reshape(x, (1, -1))),
    "Tensor.view_as": ((None, 2, 3), 2, lambda x, y: x.view_as(y.flatten(2))),
    "Tensor.reshape_as": ((None, 6), 2, lambda x, y: x.reshape_as(y.unflatten(2, (2, 3)))),
    "Tensor.transpose": ((None, 3, 2), 1, lambda x: x.transpose(1, 3)),
    "torch.transpose": ((None, 3), 1, lambda x: torch.transpose(x, -1, -2)),
    "Tensor.swapaxes": ((None, 3), 1, lambda x: x.swapaxes(1, 2)),
    "torch.swapaxes": ((3, None), 1, lambda x: torch.swapaxes(x, 1, 2)),
    "Tensor.swapdims": ((None, 3), 1, lambda x: x.swapdims(2, 1)),
    "torch.swapdims": ((None, 3), 1, lambda x: torch.swapdims(x, 1, 2)),
    "Tensor.permute": ((None, 3, 2), 1, lambda x: x.permute(0, 3, 1, 2)),
    "torch.permute": ((None, 3, 2), 1, lambda x: torch.permute(x, (0, 2, 3, 1))),
    "Tensor.unsqueeze": ((None, 3), 1, lambda x: x.unsqueeze(2)),
    "torch.unsqueeze": ((None, 3), 1, lambda x: torch.unsqueeze(x, -1)),
    "Tensor.squeeze": ((None, 1, 3), 1, lambda x: x.squeeze(2)),
    "torch.squeeze": ((None, 3, 1), 1, lambda x: torch.squeeze(x, -1)),
    "Tensor.flatten": ((None, 2, 3), 1, lambda x: x.flatten(1)),
    "torch.flatten": ((None, 2, 3), 1, lambda x: torch.flatten(x, 2)),
    "Tensor.unflatten": ((None, 6), 1, lambda x: x.unflatten(2, (3, 2))),
    "torch.unflatten": ((None, 6), 1, lambda x: torch.unflatten(x, -1, (2, -1))),
    "Tensor.expand": ((None, 1), 1, lambda x: x.expand(1, -1, 4)),
    "Tensor.expand_as": ((None, 3), 2, lambda x, y: x.sum(2, keepdim=True).expand_as(y)),
    "torch.broadcast_to": ((None, 1), 1, lambda x: torch.broadcast_to(x, (1, -1, 4))),
    "Tensor.broadcast_to": ((None, 1), 1, lambda x: x.broadcast_to(1, 2, -1, 3)),
    "Tensor.narrow": ((None, 4), 1, lambda x: x.narrow(2, 1, 2)),
    "Tensor.unfold": ((None, 5), 1, lambda x: x.unfold(2, 2, 2)),
    "torch.narrow": ((None, 4), 1, lambda x: torch.narrow(x, -1, 0, 3)),
    "Tensor.contiguous": ((None, 3), 1, lambda x: x.transpose(1, 2).contiguous()),
    "Tensor.split": ((None, 5), 1, lambda x: x.split(2, 2)),
    "torch.split": ((None, 5), 1, lambda x: torch.split(x, [1, 4], dim=-1)),
    "Tensor.chunk": ((None, 5), 1, lambda x: x.chunk(3, 2)),
    "torch.chunk": ((None, 4), 1, lambda x: torch.chunk(x, 2, -1)),
    "Tensor.unbind": ((None, 3), 1, lambda x: x.unbind(2)),
    "torch.unbind": ((None, 3), 1, lambda x: torch.unbind(x, -1)),
    "torch.cat": ((None, 3), 2, lambda x, y: torch.cat([x, y], 1)),
    "torch.concat": ((None, 3), 2, lambda x, y: torch.concat([x, y], 2)),
    "torch.concatenate": ((None, 3), 2, lambda x, y: torch.concatenate([y, x], axis=1)),
    "torch.stack": ((None, 3), 1, lambda x: torch.stack([x, 2 * x], 2)),
    "torch.hstack": ((None, 3), 2, lambda x, y: torch.hstack([x, y])),
    "torch.column_stack": ((None, 3), 2, lambda x, y: torch.column_stack([y, x])),
    "torch.dstack": ((None, 3), 2, lambda x, y: torch.dstack((x, y))),
    "torch.vstack": ((None, 3), 1, lambda x: torch.vstack([x])),
    "torch.row_stack": ((3, None), 1, lambda x: torch.row_stack((x,))),
    "torch.atleast_1d": ((None, 3), 1, lambda x: torch.atleast_1d(x)),
    "torch.atleast_2d": ((None,), 2, lambda x, y: torch.atleast_2d(x, y)),
    "torch.atleast_3d": ((None,), 1, lambda x: torch.atleast_3d(x)),
    "torch.broadcast_tensors": ((None, 3), 2, lambda x, y: torch.broadcast_tensors(
        x.sum(2, keepdim=True), y, x[:, :, :1].unsqueeze(1))),
    "torch.nn.utils.rnn.pad_sequence": ((None, 3), 2, lambda x, y: pad_sequence([x, y])),
}

SHAPE_OPS = [e.name for e in _registry.entries() if e.family == "shape"]


@pytest.mark.parametrize("name", SHAPE_OPS)
@given(data=st.data())
def test_every_registered_shape_op_equals_the_loop(name, data):
    assert name in OP_CASES, f"{name} is registered as a shape op but has no test case here"
    shape, count, f = OP_CASES[name]
    assert_loop(f, *data.draw(batches(shape, n=count, same_lengths=True)))


# ------------------------------------------------------------------ view / reshape

RESHAPES = {
    "split a static dim after the dynamic one": ((None, 6), lambda x: x.view(1, -1, 2, 3)),
    "merge static dims after the dynamic one": ((None, 2, 3), lambda x: x.view(1, -1, 6)),
    "merge one static dim into the dynamic one": ((None, 2, 3), lambda x: x.view(1, -1, 3)),
    "merge every static dim into the dynamic one": ((None, 2, 3), lambda x: x.reshape(1, -1)),
    "merge into the dynamic one, then split back": (
        (None, 2, 3), lambda x: x.reshape(1, -1).reshape(1, -1, 2, 3)),
    "merge static dims before the dynamic one": ((2, 3, None), lambda x: x.reshape(1, 6, -1)),
    "split a static dim before the dynamic one": ((6, None), lambda x: x.view(1, 3, 2, -1)),
    "add size-one dims": ((None, 3), lambda x: x.view(1, 1, -1, 1, 3)),
    "shape as a tuple": ((None, 4), lambda x: x.reshape((1, -1, 2, 2))),
    "padded size for the dynamic dim": ((None, 4), lambda x: x.view(1, x.maxsize(1), 2, 2)),
    "static examples": ((2, 3), lambda x: x.view(1, 3, 2)),
    "static examples, -1": ((2, 3), lambda x: x.reshape(1, -1)),
    "two dynamic dims, static run between": (
        (None, 2, 3, None, 4), lambda x: x.reshape(1, x.maxsize(1), 6, -1, 2, 2)),
    "two dynamic dims, merge after the last": (
        (None, 2, None, 2, 2), lambda x: x.reshape(1, x.maxsize(1), 2, -1)),
    "two dynamic dims, merge into the first": (
        (None, 2, 3, None), lambda x: x.reshape(1, -1, 3, x.maxsize(4))),
}


@pytest.mark.parametrize("case", RESHAPES)
@given(data=st.data())
def test_view_and_reshape_equal_the_loop(case, data):
    shape, f = RESHAPES[case]
    assert_loop(f, data.draw(one_batch(shape)))


@given(pairs=batches((None, 2, 3), n=2, same_lengths=True))
def test_view_as_and_reshape_as_take_the_other_batch_shape(pairs):
    assert_loop(lambda x, y: x.view_as(y.flatten(2)), *pairs)
    assert_loop(lambda x, y: x.reshape(1, -1).reshape_as(y), *pairs)


@given(pair=one_batch((2, 3)))
def test_view_as_a_plain_tensor_on_static_examples(pair):
    assert_loop(lambda x: x.view_as(torch.empty(1, 6)), pair)


@given(pair=one_batch((None, 4), min_length=1))
def test_reshape_accepts_minus_one_for_the_leading_dim(pair):
    assert_loop(lambda x: x.reshape(-1, x.maxsize(1), 2, 2), pair)


@given(pair=one_batch((None, 2, 3), min_length=1))
def test_reshape_to_the_padded_size_then_a_static_minus_one(pair):
    # Zero-length examples excluded: torch cannot infer a -1 among zero elements.
    assert_loop(lambda x: x.view(1, x.maxsize(1), -1), pair)
    assert_loop(lambda x: x.view(1, x.maxsize(1), 3, -1), pair)


def test_view_with_a_dtype_is_refused_with_the_op_name():
    xb = MaskedBatch.fromlist([torch.randn(1, 2, 3)], (True, False))
    with pytest.raises(NotImplementedError, match=r"Tensor\.view\(dtype\) is not supported"):
        xb.view(torch.int32)


@pytest.mark.parametrize("f", [
    lambda x: x.reshape(1, 4, -1),        # the dynamic dim would be split across rows
    lambda x: x.reshape(1, -1, 3),        # rows of 3 would mix real values and padding
])
def test_reshape_that_would_interleave_padding_is_refused(f):
    xb = MaskedBatch.fromlist([torch.randn(1, n, 4) for n in (3, 1)], (True, False))
    with pytest.raises(ValueError, match=r"cannot reshape examples of padded shape \(1, 3, 4\)"):
        f(xb)


def test_reshape_merging_a_static_dim_into_a_later_dynamic_one_is_refused():
    xb = MaskedBatch.fromlist([torch.randn(1, 2, n) for n in (3, 1)], (False, True))
    with pytest.raises(ValueError, match="would put padding between real values"):
        xb.reshape(1, -1)


def test_reshape_must_keep_the_leading_one():
    xb = MaskedBatch.fromlist([torch.randn(1, n, 4) for n in (3, 1)], (True, False))
    with pytest.raises(ValueError, match=r"Tensor.view: the new shape \(3, -1, 4\) must start "
                                         r"with 1 \(or -1, or the batch size 2 as x.size\(0\) "
                                         r"gives it\)"):
        xb.view(3, -1, 4)


@pytest.mark.parametrize("reshape", [
    pytest.param(lambda x: x.view(-1, 4), id="view(-1, C)"),
    pytest.param(lambda x: x.reshape(-1), id="reshape(-1)"),
    pytest.param(lambda x: x.view(-1, x.maxsize(1)), id="view(-1, padded size)"),
    pytest.param(lambda x: x.view(-1, 2, 2), id="view(-1, 2, 2)"),
])
def test_inferring_dimension_0_from_the_positions_is_refused_naming_the_dim(reshape):
    # The token-flattening idiom of per-position losses: dimension 0 would be T.
    xb = MaskedBatch.fromlist([torch.randn(1, n, 4) for n in (3, 1)], (True, False))
    with pytest.raises(ValueError, match=r"the new shape \(-1.*\) would infer dimension 0 "
                                         r"\(-1\) from each example's size, merging dynamic "
                                         r"dimension 1 into it; .* F.cross_entropy\(logits"):
        reshape(xb)


@given(pair=one_batch((None, 2, 3)))
def test_the_x_size_0_idiom_keeps_each_examples_leading_one(pair):
    # x.size(0) is 1 on an example and the batch size on a batch: both mean dimension 0.
    assert_loop(lambda x: x.view(x.size(0), -1), pair)
    assert_loop(lambda x: x.reshape(x.size(0), -1, 6), pair)
    assert_loop(lambda x: x.sum(1).view(x.size(0), -1), pair)
    assert_loop(lambda x: x[:, :, :1].expand(x.size(0), -1, 2, 3), pair)


def test_splitting_a_dynamic_dim_needs_every_length_divisible():
    xb = MaskedBatch.fromlist([torch.randn(1, n) for n in (4, 3)], (True,))
    with pytest.raises(ValueError, match=r"cannot split dynamic dimension 1 into groups of 2: "
                                         r"the examples have sizes \[4, 3\]"):
        xb.reshape(1, -1, 2)


# ------------------------------------------------------------------ permutations

@pytest.mark.parametrize("shape", [(None, 2, 3), (2, None, 3)])
@pytest.mark.parametrize("order", list(itertools.permutations([1, 2, 3])))
@given(data=st.data())
def test_permute_every_order_equals_the_loop(shape, order, data):
    assert_loop(lambda x: x.permute(0, *order), data.draw(one_batch(shape)))


@pytest.mark.parametrize("dims", [(1, 2), (2, 1), (-1, 1), (1, 3), (-2, -1)])
@given(data=st.data())
def test_transpose_and_swapaxes_equal_the_loop(dims, data):
    pair = data.draw(one_batch((None, 2, 3)))
    assert_loop(lambda x: x.transpose(*dims), pair)
    assert_loop(lambda x: x.swapaxes(*dims), pair)


@given(pair=example_lists(dims=(True, True)))
def test_transpose_of_two_dynamic_dims_swaps_their_lengths(pair):
    assert_loop(lambda x: x.transpose(1, 2), pair)


@pytest.mark.parametrize("f", [
    lambda x: x.transpose(0, 2), lambda x: x.transpose(-3, 2), lambda x: x.swapaxes(2, 0),
    lambda x: x.squeeze(0), lambda x: x.unsqueeze(0), lambda x: x.unbind(0),
    lambda x: x.unbind(), lambda x: x.narrow(0, 0, 1), lambda x: x.split(1),
    lambda x: x.chunk(2, 0), lambda x: torch.cat([x, x]), lambda x: torch.stack([x, x], 0),
    lambda x: x.unflatten(0, (1, 1)),
])
def test_moving_or_removing_dim_0_is_refused(f):
    xb = MaskedBatch.fromlist([torch.randn(1, n, 4) for n in (3, 1)], (True, False))
    with pytest.raises(ValueError, match="dimension 0 is the batch dimension of each example"):
        f(xb)


def test_moving_dim_0_to_1_is_refused_without_a_view_provider(monkeypatch):
    # matchbox-nn, when installed, provides a time-major view for this swap
    # (packages/matchbox-nn/tests/test_nn_attention.py); core alone refuses it.
    from matchbox import _batch_views

    monkeypatch.setattr(_batch_views, "_BATCH_DIM_VIEWS", {})
    xb = MaskedBatch.fromlist([torch.randn(1, n, 4) for n in (3, 1)], (True, False))
    for f in (lambda x: x.transpose(0, 1), lambda x: x.swapaxes(1, 0)):
        with pytest.raises(ValueError, match="dimension 0 is the batch dimension of each example"):
            f(xb)
    # A new dimension 0 in front of (1, H) examples: a time-major view with matchbox-nn
    # (packages/matchbox-nn/tests/test_nn_time_major_views.py).
    rows = MaskedBatch.fromlist([torch.randn(1, 4) for _ in range(2)], (False,))
    for f in (lambda x: x.unsqueeze(0), lambda x: torch.stack([x, x])):
        with pytest.raises(ValueError, match="dimension 0 is the batch dimension of each example"):
            f(rows)


def test_permute_must_keep_dim_0_first():
    xb = MaskedBatch.fromlist([torch.randn(1, n, 4) for n in (3, 1)], (True, False))
    with pytest.raises(ValueError, match=r"dimension 0 \(the batch dimension\) must stay first"):
        xb.permute(1, 0, 2)
    with pytest.raises(ValueError, match=r"\[0, 1, 1\] is not a permutation of the 3"):
        xb.permute(0, 1, 1)


# ------------------------------------------------------------------ size-one dims

@pytest.mark.parametrize("dim", [1, 2, 3, -1, -2, -3])
@given(data=st.data())
def test_unsqueeze_then_squeeze_equal_the_loop(dim, data):
    pair = data.draw(one_batch((None, 3)))
    assert_loop(lambda x: x.unsqueeze(dim), pair)
    assert_loop(lambda x: x.unsqueeze(dim).squeeze(dim), pair)


@given(pair=one_batch((None, 1, 3, 1)))
def test_squeeze_of_static_dims_equals_the_loop(pair):
    assert_loop(lambda x: x.squeeze(2), pair)
    assert_loop(lambda x: x.squeeze(3), pair)       # size 3: unchanged, as in torch
    assert_loop(lambda x: x.squeeze((2, 4)), pair)
    assert_loop(lambda x: torch.squeeze(x, -1), pair)


def test_squeeze_without_dim_is_refused():
    xb = MaskedBatch.fromlist([torch.randn(1, n, 1) for n in (3, 1)], (True, False))
    for f in (lambda: xb.squeeze(), lambda: torch.squeeze(xb)):
        with pytest.raises(ValueError, match=r"squeeze\(\) without a dimension would remove "
                                             "dimension 0"):
            f()


def test_squeeze_of_a_dynamic_dim_is_refused():
    xb = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (1, 1)], (True, False))
    with pytest.raises(ValueError, match="dimension 1 is dynamic; its size differs between "
                                         "examples"):
        xb.squeeze(1)


# ------------------------------------------------------------------ flatten / unflatten

FLATTENS = {
    "from the dynamic dim": ((None, 2, 3), lambda x: x.flatten(1)),
    "static dims after the dynamic one": ((None, 2, 3), lambda x: x.flatten(2)),
    "dynamic dim and the next": ((None, 2, 3), lambda x: x.flatten(1, 2)),
    "static dims before the dynamic one": ((2, 3, None), lambda x: x.flatten(1, 2)),
    "one dim (no-op)": ((None, 2), lambda x: x.flatten(2, 2)),
    "into a dynamic dim before another": ((None, 2, None), lambda x: x.flatten(1, 2)),
    "negative dims": ((None, 2, 3), lambda x: x.flatten(-2, -1)),
    "static examples": ((2, 3), lambda x: torch.flatten(x, 1)),
}


@pytest.mark.parametrize("case", FLATTENS)
@given(data=st.data())
def test_flatten_equals_the_loop(case, data):
    shape, f = FLATTENS[case]
    assert_loop(f, data.draw(one_batch(shape)))


@pytest.mark.parametrize("f", [lambda x: x.flatten(0), lambda x: x.flatten(),
                               lambda x: torch.flatten(x)])
def test_flatten_from_dim_0_is_refused(f):
    xb = MaskedBatch.fromlist([torch.randn(1, n, 4) for n in (3, 1)], (True, False))
    with pytest.raises(ValueError, match="start_dim=0 would merge dimension 0"):
        f(xb)


def test_flatten_with_a_dynamic_dim_after_the_first_is_refused():
    xb = MaskedBatch.fromlist([torch.randn(1, 4, n) for n in (3, 1)], (False, True))
    with pytest.raises(ValueError, match=r"cannot merge dimensions 1\.\.2: only the first of "
                                         "the merged dimensions may be dynamic"):
        xb.flatten(1)


UNFLATTENS = {
    "a static dim": ((None, 6), lambda x: x.unflatten(2, (2, 3))),
    "a static dim, -1": ((None, 6), lambda x: x.unflatten(-1, (-1, 3))),
    "a static dim before the dynamic one": ((6, None), lambda x: x.unflatten(1, (3, -1))),
    "the dynamic dim back out of a merge": (
        (None, 2, 3), lambda x: x.flatten(1).unflatten(1, (-1, 2, 3))),
    "out of a dynamic dim before another": (
        (None, 2, None), lambda x: x.flatten(1, 2).unflatten(1, (-1, 2))),
}


@pytest.mark.parametrize("case", UNFLATTENS)
@given(data=st.data())
def test_unflatten_equals_the_loop(case, data):
    shape, f = UNFLATTENS[case]
    assert_loop(f, data.draw(one_batch(shape)))


# ------------------------------------------------------------------ expand, narrow, contiguous

@given(pairs=batches((None, 3), n=2, same_lengths=True))
def test_expand_and_expand_as_equal_the_loop(pairs):
    assert_loop(lambda x: x[:, :, :1].expand(1, -1, 5), pairs[0])
    assert_loop(lambda x: x.unsqueeze(2).expand(1, -1, 4, -1), pairs[0])
    assert_loop(lambda x: x.unsqueeze(1).expand(1, 2, -1, 3), pairs[0])
    assert_loop(lambda x: x[:, :, :1].expand(1, 1, -1, 3), pairs[0])   # a new leading dim
    assert_loop(lambda x, y: x[:, :, 1:2].expand_as(y), *pairs)


@given(pair=one_batch((1, 3)))
def test_expand_as_a_plain_tensor_on_static_examples(pair):
    assert_loop(lambda x: x.expand_as(torch.empty(1, 4, 3)), pair)


@given(pair=one_batch((None, 3)))
def test_expand_as_a_batch_takes_each_examples_own_size(pair):
    # A size-one dimension takes each example's own size of the other batch.
    assert_loop(lambda x: x.sum(1, keepdim=True).expand_as(x), pair)
    assert_loop(lambda x: x.sum(1).expand_as(x), pair)                  # a lower rank
    assert_loop(lambda x: x.sum((1, 2), keepdim=True).expand_as(x), pair)


@given(pair=one_batch((None, None, 2)))
def test_expand_as_a_batch_with_two_dynamic_dims(pair):
    assert_loop(lambda x: x.amax(2, keepdim=True).expand_as(x), pair)
    assert_loop(lambda x: x.sum((1, 2), keepdim=True).expand_as(x), pair)


@given(pair=one_batch((None, 3)))
def test_a_plain_tensor_expanded_as_a_batch_equals_the_loop(pair):
    t = torch.randn(1, 1, 3, dtype=pair[1].dtype, requires_grad=True)
    mb_assert(lambda x: t.expand_as(x) * x, [pair[0]], [pair[1]], len(pair[0]), params=[t])
    v = torch.randn(3, dtype=pair[1].dtype, requires_grad=True)     # a lower rank
    mb_assert(lambda x: v.expand_as(x), [pair[0]], [pair[1]], len(pair[0]), params=[v])


def test_expand_as_a_batch_refuses_sizes_other_than_one():
    xb = MaskedBatch.fromlist([torch.randn(1, n, 3) for n in (3, 1)], (True, False))
    sb = MaskedBatch.fromlist([torch.randn(1, 2, 3) for _ in range(2)], (False, False))
    with pytest.raises(ValueError, match=r"Tensor\.expand_as: dimension 1 has size 2, and the "
                                         r"batch it is expanded as is dynamic there \(each "
                                         r"example's own size\); only a dimension of size one "
                                         r"expands"):
        sb.expand_as(xb)
    with pytest.raises(ValueError, match=r"Tensor\.expand_as: dimension 1 is dynamic in the "
                                         r"batch but static \(size 2\) in the batch it is "
                                         r"expanded as"):
        xb.expand_as(sb)
    with pytest.raises(ValueError, match=r"Tensor\.expand_as: the plain tensor of shape "
                                         r"\(2, 1, 3\) is the same for every example"):
        torch.randn(2, 1, 3).expand_as(xb)


def test_a_plain_tensor_type_as_a_batch_takes_its_dtype():
    xb = MaskedBatch.fromlist([torch.randn(1, n, 3) for n in (3, 1)], (True, False))
    t = torch.randn(1, 1, 3)
    out = t.type_as(xb.double())
    assert type(out) is torch.Tensor and out.dtype == torch.float64
    torch.testing.assert_close(out, t.double())


@given(pair=one_batch((2, 3)))
def test_a_plain_tensor_viewed_as_static_examples_equals_the_loop(pair):
    t = torch.randn(6, dtype=pair[1].dtype, requires_grad=True)
    mb_assert(lambda x: t.view_as(x) + x, [pair[0]], [pair[1]], len(pair[0]), params=[t])
    mb_assert(lambda x: t.reshape_as(x), [pair[0]], [pair[1]], len(pair[0]), params=[t])


@pytest.mark.parametrize("f", [
    pytest.param(lambda t, x: t.view_as(x), id="view_as"),
    pytest.param(lambda t, x: t.reshape_as(x), id="reshape_as"),
])
def test_a_plain_tensor_viewed_as_dynamic_examples_is_refused(f):
    xb = MaskedBatch.fromlist([torch.randn(1, n, 3) for n in (3, 1)], (True, False))
    with pytest.raises(ValueError, match=r"Tensor\.(view|reshape)_as: the plain tensor is the "
                                         r"same for every example, but the batch argument is "
                                         r"dynamic in dimension\(s\) \[1\]"):
        f(torch.randn(1, 1, 3), xb)


def test_view_as_a_batch_of_other_lengths_is_refused():
    # The loop's view_as needs as many elements as the other example has.
    xb = MaskedBatch.fromlist([torch.randn(1, n, 6) for n in (3, 1)], (True, False))
    yb = MaskedBatch.fromlist([torch.randn(1, n, 2, 3) for n in (3, 2)], (True, False, False))
    with pytest.raises(ValueError, match=r"Tensor\.view_as: example 1 has size 2 in one "
                                         r"argument and 1 in another"):
        xb.view_as(yb)


def test_expand_must_keep_dynamic_sizes_and_the_leading_one():
    xb = MaskedBatch.fromlist([torch.randn(1, n, 1) for n in (3, 1)], (True, False))
    with pytest.raises(ValueError, match="dimension 1 is dynamic; pass -1 to keep it"):
        xb.expand(1, 5, 2)
    with pytest.raises(ValueError, match=r"Tensor.expand: the size of dimension 0 .* must stay "
                                         r"1 \(or be the batch size 2 as x.size\(0\) gives "
                                         r"it\), got 3"):
        xb.expand(3, -1, 2)


@given(pair=one_batch((None, 5), min_length=2))
def test_narrow_equals_the_loop(pair):
    assert_loop(lambda x: x.narrow(2, 1, 3), pair)
    assert_loop(lambda x: x.narrow(-1, -2, 2), pair)
    assert_loop(lambda x: x.narrow(1, 0, 2), pair)     # along the dynamic dim, from 0
    assert_loop(lambda x: x.narrow(1, 1, 1), pair)


@pytest.mark.parametrize("f, name", [
    (lambda x, n: x.narrow(1, 0, n), "length"),
    (lambda x, n: torch.narrow(x, 1, n, 1), "start"),
])
def test_narrow_by_a_per_example_length_is_refused_with_the_op_name(f, name):
    xb = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (3, 1)], (True, False))
    n = MaskedBatch.fromlist([torch.tensor([2]), torch.tensor([1])], ())
    with pytest.raises(NotImplementedError, match=rf"narrow: the {name} argument is a batch "
                                                  rf"\(one value per example.*per-example "
                                                  rf"starts and lengths are not implemented"):
        f(xb, n)


def test_narrow_from_a_negative_start_along_a_dynamic_dim_is_refused():
    xb = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (3, 1)], (True, False))
    with pytest.raises(NotImplementedError, match="a negative start along dynamic dimension 1"):
        xb.narrow(1, -1, 1)


def test_narrow_past_an_examples_end_along_a_dynamic_dim_is_refused_like_the_loop():
    # A slice x[:, 0:2] clips to each example; narrow raises in the loop instead.
    xb = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (3, 1)], (True, False))
    with pytest.raises(RuntimeError, match=r"Tensor.narrow: start \(0\) \+ length \(2\) "
                                           r"exceeds the size of example 1, 1, in dynamic "
                                           r"dimension 1"):
        xb.narrow(1, 0, 2)
    with pytest.raises(RuntimeError, match=r"torch.narrow: start \(3\) \+ length \(0\) exceeds "
                                           r"the size of example 1"):
        torch.narrow(xb, 1, 3, 0)


# ------------------------------------------------------------------ unfold (windows)

@pytest.mark.parametrize(("size", "step"), [(1, 1), (2, 1), (3, 2), (2, 3)])
@given(data=st.data())
def test_unfold_along_a_dynamic_dim_gives_each_example_its_own_windows(size, step, data):
    # An example of length n has (n - size) // step + 1 windows, each of real positions
    # only: a window reaching NaN padding would show in its values or its gradient (unfold's
    # backward adds a window's gradient into every position it covers).
    pair = data.draw(one_batch((None, 2), min_length=size, max_length=7))
    assert_loop(lambda x: x.unfold(1, size, step), pair)
    assert_loop(lambda x: x.unfold(-2, size, step).sum(-1).cumsum(1), pair)
    # A product's gradient at a padding window is the other factor's padding (NaN):
    # dropped there, it never reaches the real positions that window covers.
    pairs = data.draw(batches((None, 2), n=2, same_lengths=True, min_length=size, max_length=7))
    assert_loop(lambda x, y: x.unfold(1, size, step) * y.unfold(1, size, step), *pairs)


@given(pair=one_batch((2, None, 3), min_length=2))
def test_unfold_along_a_static_dim_and_dim_0_equal_the_loop(pair):
    assert_loop(lambda x: x.unfold(3, 2, 1), pair)
    assert_loop(lambda x: x.unfold(1, 2, 1).transpose(2, 4), pair)
    assert_loop(lambda x: x.unfold(0, 1, 3), pair)  # each example's size-one dimension 0


def test_unfold_of_two_dynamic_dims_keeps_an_example_empty_in_the_other():
    # (1, 3, 0): three rows of no columns, whose three rows must give one window of them.
    xs = [torch.randn(1, 3, 0), torch.randn(1, 4, 2), torch.randn(1, 2, 5)]
    xb = MaskedBatch.fromlist(xs, (True, True), padding_value=NAN)
    assert_loop(lambda x: x.unfold(1, 2, 1), (xs, xb))
    wide = xs[1:]  # (every example with two columns at least)
    assert_loop(lambda x: x.unfold(2, 2, 2), (wide, MaskedBatch.fromlist(wide, (True, True))))


def test_unfold_drops_a_gradient_arriving_at_a_padding_window():
    # A window that reaches padding covers real positions too; what reaches it in the
    # backward (here ones everywhere, padding included) must not add to theirs.
    data = torch.randn(2, 4, 1, requires_grad=True)
    xb = MaskedBatch(data, torch.tensor([4, 2]).view(2, 1, 1) > torch.arange(4).view(1, 4, 1),
                     (True, False))
    (grad,) = torch.autograd.grad(xb.unfold(1, 2, 1).data.sum(), data)
    loop = torch.autograd.grad(data[1:, :2].unfold(1, 2, 1).sum(), data)[0]
    torch.testing.assert_close(grad[1], loop[1])  # example 1: positions 0 and 1, one window


@pytest.mark.parametrize("args, message", [
    ((1, 2, 1), r"size \(2\) exceeds the size of example 1, 1, in dynamic dimension 1"),
    ((1, 5, 1), r"size \(5\) exceeds the size of example 0, 4"),
    ((0, 2, 1), r"size \(2\) exceeds the size of dimension 0 of each example, 1"),
    ((1, 0, 1), r"size \(0\) and step \(1\) must be positive"),
])
def test_unfold_wider_than_an_example_is_refused_like_the_loop(args, message):
    xb = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (4, 1, 3)], (True, False))
    with pytest.raises(RuntimeError, match=r"Tensor.unfold: " + message):
        xb.unfold(*args)


@given(pair=example_lists(dims=(True, False, False)))
def test_contiguous_equals_the_loop(pair):
    assert_loop(lambda x: x.permute(0, 3, 1, 2).contiguous(), pair)
    assert pair[1].transpose(1, 2).contiguous().data.is_contiguous()


# ------------------------------------------------------------------ split, chunk, unbind

@pytest.mark.parametrize("f", [
    lambda x: x.split(2, 2), lambda x: x.split([2, 3], -1), lambda x: x.split([5], 2),
    lambda x: x.chunk(2, 2), lambda x: x.chunk(5, -1), lambda x: torch.split(x, 1, 2),
    lambda x: torch.chunk(x, 3, dim=2),
])
@given(data=st.data())
def test_split_and_chunk_along_static_dims_equal_the_loop(f, data):
    assert_loop(f, data.draw(one_batch((None, 5))))


@given(pair=one_batch((2, None, 4)))
def test_split_along_a_static_dim_before_the_dynamic_one(pair):
    assert_loop(lambda x: x.split(1, 1), pair)
    assert_loop(lambda x: x.chunk(2, 3), pair)


@pytest.mark.parametrize("f", [lambda x: x.split(1, 1), lambda x: x.chunk(2, 1),
                               lambda x: torch.split(x, [1, 2], 1)])
def test_split_of_a_dynamic_dim_is_refused(f):
    xb = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (3, 1)], (True, False))
    with pytest.raises(ValueError, match="dimension 1 is dynamic; splitting it would give each "
                                         "example different pieces"):
        f(xb)


@given(pair=example_lists(dims=(True, False, False)))
def test_unbind_along_static_dims_equals_the_loop(pair):
    assert_loop(lambda x: x.unbind(2), pair)
    assert_loop(lambda x: torch.unbind(x, -1), pair)


def _restack(x, dim):
    """Unbind dimension 1 and stack back at ``dim``; an empty example stays as is."""
    parts = list(x.unbind(1))
    return MF.stack(parts, dim, dynamic=True) if parts else x.transpose(1, dim)


@given(pair=example_lists(dims=(True, False)))
def test_unbind_along_a_dynamic_dim_pads_examples_past_their_end(pair):
    xs, xb = pair
    slices = xb.unbind(1)
    assert len(slices) == xb.maxsize(1)
    for t, xt in enumerate(slices):
        assert xt.dims == (False,)
        for b, x in enumerate(xs):
            real = t < x.size(1)
            assert bool(xt.mask[b].all()) == real, f"slice {t}, example {b}"
            if real:
                torch.testing.assert_close(xt.data[b:b + 1], x[:, t], rtol=0, atol=0)


@given(pair=example_lists(dims=(True, False)))
def test_unbind_then_dynamic_stack_restores_the_batch(pair):
    xs, xb = pair
    back = _restack(xb, 1)
    assert back.dims == xb.dims
    assert torch.equal(back.mask, xb.mask)
    assert_batch_equals_examples(back, xs)
    assert_loop(lambda x: _restack(x, 1), pair)


@given(pair=example_lists(dims=(True, False)))
def test_dynamic_stack_at_another_position_equals_the_loop(pair):
    assert_loop(lambda x: _restack(x, 2), pair)


@given(pair=example_lists(dims=(True, False)))
def test_loop_over_dynamic_slices_stacked_equals_the_loop(pair):
    """The loop pattern: per-step results stacked into a new dynamic dimension."""

    def f(x):
        steps = [xt.tanh() * (t + 1) for t, xt in enumerate(x.unbind(1))]
        return MF.stack(steps, 1) if steps else x.tanh()

    assert_loop(f, pair)


def test_dynamic_stack_gathers_each_examples_present_steps_first(dtype):
    # Parts real for different examples with gaps (items appended under a
    # per-example condition): example 0 has parts 0 and 2, example 1 only part 1.
    a, b, c = (torch.randn(2, 3, dtype=dtype, requires_grad=True) for _ in range(3))
    present = [[True, False], [False, True], [True, False]]
    parts = [MaskedBatch(t, torch.tensor(m).reshape(2, 1), (False,))   # examples (1, 3)
             for t, m in zip((a, b, c), present)]
    stacked = MF.stack(parts, 1, dynamic=True)
    first, second = stacked.examples()
    torch.testing.assert_close(first, torch.stack([a[0:1], c[0:1]], 1))
    torch.testing.assert_close(second, b[1:2].unsqueeze(1))
    matchbox.batch_sum(stacked.sum((1, 2))).backward()
    for t, m in zip((a, b, c), present):
        torch.testing.assert_close(t.grad, torch.tensor(m, dtype=dtype)[:, None].expand(2, 3))


@given(pair=example_lists(dims=(False, True)))
def test_unbind_along_a_later_dynamic_dim_then_stack_equals_the_loop(pair):
    def f(x):
        parts = list(x.unbind(2))
        return MF.stack(parts, 2, dynamic=True) if parts else x

    assert_loop(f, pair)


# ------------------------------------------------------------------ cat

@given(pair=example_lists(dims=(True, False, False)))
def test_cat_along_static_dims_equals_the_loop(pair):
    assert_loop(lambda x: torch.cat([x, 2 * x], 2), pair)
    assert_loop(lambda x: torch.cat([x[..., :1], x, x.exp()], -1), pair)
    assert_loop(lambda x: torch.concat([x, x[:, :, :1]], dim=2), pair)


@given(pairs=batches((None, 3), n=3))
def test_cat_along_a_dynamic_dim_puts_each_examples_parts_end_to_end(pairs):
    assert_loop(lambda x, y: torch.cat([x, y], 1), *pairs[:2])
    assert_loop(lambda x, y, z: torch.cat([x, y, z], 1), *pairs)
    assert_loop(lambda x, y: torch.cat([y, x, y], -2), *pairs[:2])


def test_cat_along_a_dynamic_dim_with_zero_length_parts():
    xs = [torch.randn(1, n, 2, dtype=torch.float64) for n in (0, 2, 0, 1)]
    ys = [torch.randn(1, n, 2, dtype=torch.float64) for n in (0, 0, 3, 1)]
    xb, yb = (MaskedBatch.fromlist(v, (True, False), padding_value=NAN) for v in (xs, ys))
    out = torch.cat([xb, yb, xb], 1)
    assert_batch_equals_examples(out, [torch.cat([x, y, x], 1) for x, y in zip(xs, ys)])
    assert_loop(lambda x, y: torch.cat([x, y, x], 1), (xs, xb), (ys, yb))


@given(pairs=batches((3, None), n=2))
def test_cat_along_a_later_dynamic_dim_and_a_static_dim(pairs):
    assert_loop(lambda x, y: torch.cat([x, y], 2), *pairs)
    assert_loop(lambda x: torch.cat([x, x[:, :1]], 1), pairs[0])


@given(pair=one_batch((None, 3)))
def test_cat_with_a_plain_tensor_along_a_dynamic_dim_equals_the_loop(pair):
    w = torch.randn(1, 2, 3, dtype=pair[1].dtype)
    assert_loop(lambda x: torch.cat([x, w], 1), pair)
    assert_loop(lambda x: torch.cat([w, x, w], 1), pair)


@given(pair=one_batch((2, 3)))
def test_cat_with_a_plain_tensor_along_a_static_dim_equals_the_loop(pair):
    w = torch.randn(1, 2, 1, dtype=pair[1].dtype)
    assert_loop(lambda x: torch.cat([x, w], 2), pair)
    assert_loop(lambda x: torch.cat([w, x], -1), pair)


def test_cat_refuses_mismatched_batch_sizes_and_bad_plain_tensors():
    xb = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (3, 1)], (True, False))
    yb = MaskedBatch.fromlist([torch.randn(1, 2, 2)], (True, False))
    with pytest.raises(ValueError, match=r"torch\.cat: the batches in the list have different "
                                         r"batch sizes \(2 and 1\)"):
        torch.cat([xb, yb], 1)
    with pytest.raises(ValueError, match=r"a plain tensor in the list must look like one "
                                         r"example .* got shape \(2, 1, 2\)"):
        torch.cat([xb, torch.ones(2, 1, 2)], 1)


@pytest.mark.parametrize("join", [
    pytest.param(lambda x, y: torch.cat([x, y], 2), id="cat-static"),
    pytest.param(lambda x, y: torch.cat([x.unsqueeze(1), y.unsqueeze(1)], 1), id="cat-new-dim"),
    pytest.param(lambda x, y: torch.cat([x.unsqueeze(-1), y.unsqueeze(-1)], 2), id="cat-dynamic"),
    pytest.param(lambda x, y: torch.stack([x, y], 2), id="stack"),
    pytest.param(lambda x, y: MF.stack([x, y], 1), id="F.stack-dynamic"),
])
def test_cat_and_stack_refuse_parts_of_different_lengths(join):
    # The loop's torch.cat/stack raises for example 1; the batch must not keep the overlap.
    xb = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (3, 1, 4)], (True, False))
    yb = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (3, 2, 4)], (True, False))
    with pytest.raises(ValueError, match=r"example 1 has size 1 in one argument and 2 in "
                                         r"another along dynamic dimension"):
        join(xb, yb)
    full = MaskedBatch.fromlist([torch.randn(1, 4, 2) for _ in range(3)], (True, False))
    with pytest.raises(ValueError, match=r"example 0 has size 4 in one argument and 3"):
        join(full, xb)


@pytest.mark.parametrize("size", [1, 3, 6])
def test_cat_refuses_a_plain_part_not_spanning_the_padded_size(size):
    xb = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (3, 1, 5)], (True, False))
    with pytest.raises(ValueError, match=rf"torch\.cat: tensor 1 of the list is the same for "
                                         rf"every example .* has size {size} in dimension 1, "
                                         rf"which is dynamic in the batches; it must span their "
                                         rf"padded size 5"):
        torch.cat([xb, torch.randn(1, size, 2)], 2)


@given(pair=one_batch((None, 3)))
def test_cat_and_stack_with_a_plain_part_spanning_the_padded_size(pair):
    positions = torch.randn(1, 8, 3, dtype=pair[1].dtype)
    assert_loop(lambda x: torch.cat([x, positions[:, : x.maxsize(1)]], 2), pair)
    assert_loop(lambda x: torch.stack([positions[:, : x.maxsize(1)], x], 3), pair)


@given(pair=one_batch((None, None, 2)))
def test_f_stack_dynamic_of_steps_some_examples_have_left(pair):
    # Unbinding the first of two dynamic dims gives steps from which an example
    # past its end is absent (size 0 along the other dynamic dim): not a mismatch.
    assert_loop(lambda x: _restack(x, 1), pair)
    assert_loop(lambda x: _restack(x, 2), pair)


@given(pairs=batches((None, 3), n=2))
def test_shape_ops_on_a_batch_padded_past_its_longest_example(pairs):
    # x[:, :-1] keeps the padded size but every example loses one element.
    assert_loop(lambda x, y: torch.cat([x[:, :-1], y], 1), *pairs)
    assert_loop(lambda x: x[:, :-1].reshape(1, -1), pairs[0])
    assert_loop(lambda x: x[:, :-1].transpose(1, 2).flatten(1, 1), pairs[0])
    assert_loop(lambda x: torch.stack([x[:, :-1], x[:, 1:]], 2), pairs[0])
    assert_loop(lambda x: _restack(x[:, :-1], 1), pairs[0])


@pytest.mark.parametrize("join", [
    pytest.param(lambda steps: torch.stack(steps, 1), id="torch.stack"),
    pytest.param(lambda steps: MF.stack(steps, 1, dynamic=False), id="F.stack-static"),
    pytest.param(lambda steps: torch.stack(steps, -1), id="torch.stack-last"),
    pytest.param(lambda steps: torch.cat([s.unsqueeze(1) for s in steps], 1), id="torch.cat"),
    pytest.param(lambda steps: torch.cat(steps, -1), id="torch.cat-last"),
])
def test_a_static_join_of_steps_some_examples_lack_is_refused(join):
    # The loop joins each example's own number of steps; a static dimension
    # cannot hold that, and the and of the masks would drop example 1.
    xb = MaskedBatch.fromlist([torch.arange(1.0, 4.0).reshape(1, 3, 1), torch.ones(1, 1, 1)],
                              (True, False), padding_value=NAN)
    steps = [s * 10 for s in xb.unbind(1)]
    with pytest.raises(ValueError, match=r"example 1 is real in some of the 3 tensors "
                                         r"(stacked|concatenated) and padding in others .* "
                                         r"different numbers of real parts, which a static "
                                         r"dimension cannot hold; .*matchbox\.functional\."
                                         r"stack\(tensors, dim, dynamic=True\)"):
        join(steps)


def test_a_static_join_of_steps_names_the_op():
    xb = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (3, 1)], (True, False))
    with pytest.raises(ValueError, match=r"^torch\.stack: example 1 is real"):
        torch.stack(xb.unbind(1), 1)
    with pytest.raises(ValueError, match=r"^matchbox\.functional\.stack: example 1 is real"):
        MF.stack(xb.unbind(1), 1, dynamic=False)
    with pytest.raises(ValueError, match=r"^torch\.cat: example 1 is real"):
        torch.cat(xb.unbind(1), 1)


@given(pairs=batches((None, 3), n=2, same_lengths=True, min_length=1))
def test_a_static_join_of_parts_with_equal_masks_equals_the_loop(pairs):
    # Two batches of the same lengths: distinct mask objects with equal values.
    assert_loop(lambda x, y: torch.stack([x[:, 0], y[:, 0]], 1), *pairs)
    assert_loop(lambda x, y: torch.cat([x[:, -1], y[:, 0]], 1), *pairs)
    assert_loop(lambda x, y: torch.stack([x, y], 2), *pairs)


def test_a_static_join_of_steps_only_non_running_examples_lack_is_allowed():
    # Under an execution mask (matchbox-control's @batch) only the running
    # examples must have every step; the others' results are discarded.
    from matchbox._masking import EXECUTION_MASK

    xs = [torch.randn(1, n, 2) for n in (3, 1, 3)]
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=NAN)
    token = EXECUTION_MASK.set(torch.tensor([True, False, True]))
    try:
        got = torch.stack(xb.unbind(1), 1)
        EXECUTION_MASK.set(torch.tensor([True, True, False]))
        with pytest.raises(ValueError, match=r"torch\.stack: example 1 is real in some"):
            torch.stack(xb.unbind(1), 1)
    finally:
        EXECUTION_MASK.reset(token)
    for b in (0, 2):
        torch.testing.assert_close(got.data[b:b + 1], torch.stack(xs[b].unbind(1), 1))


@pytest.mark.parametrize("join", [
    pytest.param(lambda steps: torch.stack(steps, 1), id="stack"),
    pytest.param(lambda steps: torch.cat(steps, -1), id="cat"),
])
def test_a_static_join_of_steps_every_example_has_equals_the_loop(join):
    # Steps of a batch with a mask that is all true: its steps' masks are views
    # of one memory at different offsets, equal in value.
    xs = [torch.randn(1, 3, 2, dtype=torch.float64) for _ in range(2)]
    xb = MaskedBatch(torch.cat(xs), torch.ones(2, 3, 1, dtype=torch.bool), (True, False))
    assert xb.unbind(1)[0]._mask is not None
    assert_batch_equals_examples(join(xb.unbind(1)), [join(x.unbind(1)) for x in xs])


# ------------------------------------------------------------------ stack

@pytest.mark.parametrize("f", [
    pytest.param(lambda a, b: torch.stack([a, b]).sum(), id="stack"),
    pytest.param(lambda a, b: a.unsqueeze(0), id="unsqueeze"),
])
def test_a_new_dim_0_in_front_of_per_example_scalars_says_how_to_combine_them(f):
    # Losses are 0-d in the loop, where torch.stack(losses).sum() works; a batch holds
    # them as (1,) examples, so the message says to add them instead.
    a = MaskedBatch.fromlist([torch.rand(1), torch.rand(1)], ())
    with pytest.raises(ValueError, match=r"dimension 0 is the batch dimension of each example "
                                         r".*; these are per-example scalars \(a loss, say\), "
                                         r"0-d in the loop but \(1,\) in a batch, .* combine "
                                         r"them with \+ or sum\(\[...\]\) instead"):
        f(a, 2 * a)


@pytest.mark.parametrize("dim", [1, 2, 3, -1, -3])
@given(data=st.data())
def test_torch_stack_adds_a_static_dim_equal_to_the_loop(dim, data):
    pair = data.draw(example_lists(dims=(True, False)))
    assert_loop(lambda x: torch.stack([x, x.sin(), 3 * x], dim), pair)
    new_dim = dim % 4   # the rank of the result is 4
    assert not torch.stack([pair[1], pair[1]], dim).dims[new_dim - 1]


@given(pair=one_batch((None, 2)))
def test_dynamic_false_stack_equals_torch_stack(pair):
    assert_loop(lambda x: MF.stack([x, x.neg()], 2, dynamic=False), pair)
    assert MF.stack([pair[1], pair[1]], 2, dynamic=False).dims == (True, False, False)


@pytest.mark.parametrize("dynamic", [None, True])
@given(data=st.data())
def test_f_stack_of_batches_makes_a_dynamic_dim_by_default(dynamic, data):
    # From length 1: a zero-length part would have no real step in the new dim.
    pairs = data.draw(batches((None, 2), n=2, same_lengths=True, min_length=1))
    assert_loop(lambda x, y: MF.stack([x, y.exp()], 1, dynamic=dynamic), *pairs)
    assert MF.stack([pairs[0][1], pairs[1][1]], 1, dynamic=dynamic).dims == (True, True, False)


def test_f_stack_of_plain_tensors_is_torch_stack():
    xs = [torch.randn(1, 3), torch.randn(1, 3)]
    for dynamic in (None, True, False):
        torch.testing.assert_close(MF.stack(xs, 1, dynamic=dynamic), torch.stack(xs, 1))


# ------------------------------------------------------------------ dynamic beside static

JOINS_BESIDE_STATIC = [
    pytest.param(lambda x, s: torch.cat([x, s], 2), id="cat-static"),
    pytest.param(lambda x, s: torch.cat([s, x], 2), id="cat-static-first"),
    pytest.param(lambda x, s: torch.cat([x.unsqueeze(-1), s.unsqueeze(-1)], 3), id="cat-new"),
    pytest.param(lambda x, s: torch.cat([x.transpose(1, 2), s.transpose(1, 2)], 1),
                 id="cat-static-dim-1"),
    pytest.param(lambda x, s: torch.stack([x, s], 1), id="stack"),
    pytest.param(lambda x, s: MF.stack([x, s], 1), id="F.stack-dynamic"),
]


@pytest.mark.parametrize("join", JOINS_BESIDE_STATIC)
@pytest.mark.parametrize("lengths, example, size", [([3, 2], 1, 2), ([3, 1], 1, 1),
                                                    ([5, 3], 0, 5)])
def test_joins_check_a_static_part_against_each_examples_length(join, lengths, example, size):
    # The loop's cat/stack raises where a length is not the static part's size;
    # the batch used to keep the example's own length silently.
    xb = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in lengths], (True, False))
    sb = MaskedBatch.fromlist([torch.randn(1, 3, 2) for _ in lengths], (False, False))
    assert_refused_beside_static(join, xb, sb, example, size)


@pytest.mark.parametrize("join", JOINS_BESIDE_STATIC)
def test_joins_of_a_static_part_of_every_examples_length_match_loop(join):
    xs = [torch.randn(1, 3, 2, dtype=torch.float64, requires_grad=True) for _ in range(3)]
    ss = [torch.randn(1, 3, 2, dtype=torch.float64, requires_grad=True) for _ in range(3)]
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=NAN)
    sb = MaskedBatch.fromlist(ss, (False, False))
    mb_assert(join, [xs, ss], [xb, sb], 3)
    # Padded past the longest example: x[:, :-1] keeps the padded size 4, lengths 3.
    ys = [torch.randn(1, 4, 2, dtype=torch.float64, requires_grad=True) for _ in range(3)]
    yb = MaskedBatch.fromlist(ys, (True, False))
    mb_assert(lambda y, s: join(y[:, :-1], s), [ys, ss], [yb, sb], 3)


@pytest.mark.parametrize("join", [
    pytest.param(lambda a, b: torch.cat([a, b], 1), id="cat"),
    pytest.param(lambda a, b: torch.stack([a, b], 1), id="stack"),
])
def test_joins_of_mismatched_static_sizes_name_the_tensor_and_sizes(join):
    # torch's own error shows the batched shapes.
    a = MaskedBatch.fromlist([torch.randn(1, 3, 2)] * 2, (False, False))
    b = MaskedBatch.fromlist([torch.randn(1, 3, 3)] * 2, (False, False))
    with pytest.raises(ValueError, match=r"tensor 1 of the list has size 3 in dimension 2 and "
                                         r"tensor 0 has 2, the same in every example; the "
                                         r"tensors must have equal sizes in every dimension but "
                                         r"the one they are joined along"):
        join(a, b)


def test_expand_to_a_per_example_size_is_refused_naming_the_op():
    # expand(1, k, 2) with one k per example asked the batch for a truth value (a user trial).
    xb = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (3, 2)], (True, False))
    with pytest.raises(NotImplementedError,
                       match=r"Tensor.expand: the size is a batch \(one value per example\); "
                             r"per-example values are not implemented here: size must be the "
                             r"same int for every example; .* x.expand_as\(y\)"):
        xb.sum(1, keepdim=True).expand(1, xb.size_as_tensor(1), 2)


def test_torch_tensor_of_a_batch_says_the_batch_is_already_each_examples_tensor():
    xb = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (3, 2)], (True, False))
    with pytest.raises(TypeError, match=r"len\(\) of a MaskedBatch is ambiguous: .*"
                                        r"torch.tensor\(v\) or torch.as_tensor\(v\) of a batch v"):
        torch.tensor(xb.sum((1, 2)))
