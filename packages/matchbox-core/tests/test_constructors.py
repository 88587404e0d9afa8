"""Constructors on ``MaskedBatch``: ``new_*`` and ``*_like`` against the per-example loop.

``x.new_zeros(1, x.size_as_tensor(1), 3)`` builds, for each example, a tensor
of that example's own size; on a plain tensor (one example) it is torch's
``new_zeros``.  Padding of the argument holds NaN and must not show anywhere.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from strategies import example_lists
from torch_features import NUMBER_ARGUMENTS_REACH_TORCH_FUNCTION, batch_needs, lacks

import matchbox.functional as MF
from matchbox import MaskedBatch, _registry
from matchbox.testing import mb_assert, mb_rand


def assert_loop(f, pair):
    xs, xb = pair
    mb_assert(f, [xs], [xb], len(xs))


def assert_same_layout(xb, expected):
    """``xb``'s examples have exactly the shapes and dtype of ``expected``."""
    got = list(xb.examples())
    assert [tuple(g.shape) for g in got] == [tuple(e.shape) for e in expected]
    assert all(g.dtype == e.dtype for g, e in zip(got, expected))


NEW = {
    "new_zeros static": lambda x: x.new_zeros(1, 3),
    "new_zeros as a tuple": lambda x: x.new_zeros((1, 2, 3)),
    "new_zeros, size=": lambda x: x.new_zeros(size=(1, 2)),
    "new_zeros first size x.size(0)": lambda x: x.new_zeros(x.size(0), 3),
    "new_zeros dynamic": lambda x: x.new_zeros(1, x.size_as_tensor(1), 3),
    "new_zeros dynamic last": lambda x: x.new_zeros((1, 2, x.size_as_tensor(1))),
    "new_zeros static size of x": lambda x: x.new_zeros(1, x.size(2)),
    "new_zeros dtype": lambda x: x.new_zeros(1, 2, dtype=torch.float16),
    "new_ones static": lambda x: x.new_ones(1, 4),
    "new_ones dynamic": lambda x: x.new_ones(x.size(0), x.size_as_tensor(1)),
    "new_ones int dtype": lambda x: x.new_ones(1, x.size_as_tensor(1), dtype=torch.long),
    "new_full static": lambda x: x.new_full((1, 2), 3.5),
    "new_full dynamic": lambda x: x.new_full((1, x.size_as_tensor(1), 2), -1.25),
    "new_full, keywords": lambda x: x.new_full(size=(1, 2), fill_value=7.0),
    "new_zeros + x": lambda x: x.new_zeros(1, x.size_as_tensor(1), x.size(2)) + x,
    "x * new_ones": lambda x: x * x.new_ones(x.size(0), x.size_as_tensor(1), 1),
    "new_full + x": lambda x: x + x.new_full((1, x.size_as_tensor(1), x.size(2)), 2.0),
    # A per-example fill value: each example's own (its length, a detached reduction).
    "new_full, per-example fill": lambda x: x.new_full((1, 3), x.size_as_tensor(1)),
    "new_full, per-example fill, dynamic size": lambda x: x + x.new_full(
        (x.size(0), x.size_as_tensor(1), x.size(2)), x.size_as_tensor(1)),
    "new_full, a detached per-example sum": lambda x: x.sum(1) * x.new_full(
        (1, x.size(2)), x.sum().detach()),
    "new_full, per-example fill, dtype": lambda x: x.new_full(
        (1, 2), x.size_as_tensor(1), dtype=torch.float16),
    "torch.full, per-example fill": lambda x: torch.full((1, 2), x.size_as_tensor(1)),
    "torch.full, per-example float fill": lambda x: x.sum(1) + torch.full(
        (1, x.size(2)), x.sum().detach(), dtype=x.dtype),
    # (It called itself on the batch fill value: a RecursionError; a user trial.)
    "torch.full_like, per-example fill": lambda x: x + torch.full_like(x, x.size_as_tensor(1)),
}


# torch.full with a batch as fill_value reaches Matchbox only where torch hands a
# tensor-like given as a number to __torch_function__ (not torch 2.3: its own TypeError,
# pinned below; x.new_full is a batch method and works on every torch).
FULL_OF_A_BATCH = batch_needs(NUMBER_ARGUMENTS_REACH_TORCH_FUNCTION,
                              "hands a batch given as torch.full's fill_value to Matchbox")


def torch_full_needs_dispatch(names):
    """``names``, those of the torch.full and torch.full_like cases marked."""
    return [pytest.param(n, marks=FULL_OF_A_BATCH)
            if n.split(",")[0] in ("torch.full", "torch.full_like") else n for n in names]


@pytest.mark.parametrize("case", torch_full_needs_dispatch(NEW))
@given(pair=example_lists(dims=(True, False)))
def test_new_constructors_equal_the_loop(case, pair):
    assert_loop(NEW[case], pair)


@given(pair=example_lists(dims=(False, True)))
def test_new_zeros_with_a_later_dynamic_size_equals_the_loop(pair):
    assert_loop(lambda x: x.new_zeros(1, x.size(1), x.size_as_tensor(2)) + x, pair)
    assert_loop(lambda x: x.new_ones(1, x.size_as_tensor(2), 2), pair)


@given(pair=example_lists(dims=(True, True)))
def test_new_zeros_with_two_dynamic_sizes_equals_the_loop(pair):
    assert_loop(lambda x: x.new_zeros(1, x.size_as_tensor(2), x.size_as_tensor(1)), pair)
    assert_loop(lambda x: x.new_ones(1, x.size_as_tensor(1), x.size_as_tensor(2)) * x, pair)


@given(pair=example_lists(dims=(True, False)))
def test_new_empty_has_the_loop_shapes(pair):
    xs, xb = pair
    assert_same_layout(xb.new_empty(1, xb.size_as_tensor(1), 3),
                       [x.new_empty(1, x.size_as_tensor(1), 3) for x in xs])
    assert_same_layout(xb.new_empty((xb.size(0), 2)), [x.new_empty((x.size(0), 2)) for x in xs])


def test_new_constructors_give_the_dynamic_sizes_as_a_mask():
    xs = [torch.randn(1, n, 2) for n in (2, 0, 3)]
    xb = MaskedBatch.fromlist(xs, (True, False))
    out = xb.new_ones(1, xb.size_as_tensor(1), 4)
    assert out.dims == (True, False)
    assert out.lengths().flatten().tolist() == [2, 0, 3]
    assert out.dtype == xb.dtype and out.device == xb.device
    assert not out.requires_grad


def test_new_constructors_honour_requires_grad():
    xb = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (2, 1)], (True, False))
    for out in (xb.new_zeros(1, 2, requires_grad=True), xb.new_empty(1, 2, requires_grad=True),
                xb.new_full((1, 2), 1.0, requires_grad=True)):
        assert out.requires_grad and out.data.is_leaf


@pytest.mark.parametrize("f", [
    lambda x: x.new_zeros(2, 3), lambda x: x.new_ones(4), lambda x: x.new_empty(()),
    lambda x: x.new_full((2, 1), 0.0), lambda x: x.new_zeros(),
])
def test_a_first_size_other_than_one_or_the_batch_size_is_refused(f):
    xb = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (2, 1, 3)], (True, False))
    with pytest.raises(ValueError, match=r"the first size is each example's batch dimension "
                                         r"and must be 1 \(or the batch size 3\)"):
        f(xb)


@FULL_OF_A_BATCH
def test_torch_full_infers_its_dtype_from_a_per_example_fill_as_torch_does():
    xb = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (2, 1, 3)], (True, False))
    assert torch.full((1, 2), xb.size_as_tensor(1)).dtype == torch.long
    assert torch.full((1, 2), xb.sum().detach().double()).dtype == torch.get_default_dtype()
    assert torch.full((1, 2), xb.sum() > 0).dtype == torch.bool
    assert xb.new_full((1, 2), xb.size_as_tensor(1)).dtype == xb.dtype


def test_a_bad_per_example_fill_value_is_refused():
    xb = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (2, 1, 3)], (True, False))
    with pytest.raises(ValueError, match=r"Tensor\.new_full: a per-example fill_value must be a "
                                         r"batch of per-example scalars \(dims \(\)\), got one "
                                         r"with dims \(True, False\)"):
        xb.new_full((1, 2), xb)
    other = MaskedBatch.fromlist([torch.randn(1, 2)], (True,)).size_as_tensor(1)
    with pytest.raises(ValueError, match=r"Tensor\.new_full: fill_value has values for 1 "
                                         "examples, but the batch has 3"):
        xb.new_full((1, 2), other)
    # torch reads a fill value as a number: one that requires grad is refused in the loop.
    x = torch.randn(1, 2, 2, requires_grad=True)
    with pytest.raises(TypeError, match="must be Number, not Tensor"):
        x.new_full((1, 2), x.sum())
    xb.requires_grad_()
    with pytest.raises(TypeError, match=r"Tensor\.new_full: fill_value requires grad, and a "
                                        r"fill value is a number to torch, which has no "
                                        r"gradient; detach it, or multiply: "
                                        r"x\.new_ones\(size\) \* v"):
        xb.new_full((1, 2), xb.sum())


@FULL_OF_A_BATCH
def test_torch_full_of_a_bad_size_is_refused():
    xb = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (2, 1, 3)], (True, False))
    with pytest.raises(ValueError, match=r"torch\.full: the first size is each example's batch "
                                         r"dimension and must be 1 \(or the batch size 3\)"):
        torch.full((2, 2), xb.size_as_tensor(1))


@lacks(NUMBER_ARGUMENTS_REACH_TORCH_FUNCTION, "hands a batch given as torch.full's "
       "fill_value to Matchbox")
def test_torch_full_of_a_batch_is_torchs_type_error_where_torch_does_not_hand_it_on():
    xb = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (2, 1, 3)], (True, False))
    with pytest.raises(TypeError, match=r"full\(\): argument 'fill_value' \(position 2\) "
                                        r"must be Number, not MaskedBatch"):
        torch.full((1, 2), xb.size_as_tensor(1))


def test_a_bad_per_example_size_is_refused():
    xb = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (2, 1, 3)], (True, False))
    with pytest.raises(ValueError, match=r"Tensor\.new_zeros: size 1 must be a batch of "
                                         "per-example scalars"):
        xb.new_zeros(1, xb)
    other = MaskedBatch.fromlist([torch.randn(1, 2)], (True,)).size_as_tensor(1)
    with pytest.raises(ValueError, match="size 2 gives sizes for 1 examples, but the batch "
                                         "has 3"):
        xb.new_ones(1, 2, other)
    with pytest.raises(TypeError, match="'float' object cannot be interpreted as an integer"):
        xb.new_zeros(1, 2.5)


# ------------------------------------------------------------------ *_like

LIKE = {
    "zeros_like": lambda x: torch.zeros_like(x),
    "ones_like": lambda x: torch.ones_like(x),
    "full_like": lambda x: torch.full_like(x, 2.5),
    "full_like int": lambda x: torch.full_like(x, 3, dtype=torch.int32),
    "zeros_like dtype": lambda x: torch.zeros_like(x, dtype=torch.float16),
    "ones_like + x": lambda x: torch.ones_like(x) + x,
    "x * full_like": lambda x: x * torch.full_like(x, -2.0),
}


@pytest.mark.parametrize("case", LIKE)
@given(pair=example_lists(dims=(True, False, True)))
def test_like_constructors_equal_the_loop(case, pair):
    assert_loop(LIKE[case], pair)


@pytest.mark.parametrize("func", [torch.rand_like, torch.randn_like, torch.empty_like])
@given(pair=example_lists(dims=(True, False)))
def test_random_and_empty_like_keep_the_examples_layout(func, pair):
    xs, xb = pair
    out = func(xb)
    assert out.dims == xb.dims and torch.equal(out.mask, xb.mask)
    assert_same_layout(out, [func(x) for x in xs])
    if func is torch.rand_like:
        values = torch.cat([e.flatten() for e in out.examples()])
        assert ((values >= 0) & (values < 1)).all()


# ------------------------------------------------------------------ the registry

# Registered constructor -> a case: deterministic ones against the loop's
# values, uninitialised and random ones against the loop's shapes.
VALUES = {
    "Tensor.new_zeros": NEW["new_zeros dynamic"], "Tensor.new_ones": NEW["new_ones dynamic"],
    "Tensor.new_full": NEW["new_full dynamic"], "torch.zeros_like": LIKE["zeros_like"],
    "torch.full": NEW["torch.full, per-example fill"],
    "torch.ones_like": LIKE["ones_like"], "torch.full_like": LIKE["full_like"],
}
LAYOUTS = {
    "Tensor.new_empty": lambda x: x.new_empty(1, x.size_as_tensor(1), 2),
    "Tensor.new": lambda x: x.new(1, x.size_as_tensor(1), 2),
    "torch.empty_like": torch.empty_like, "torch.rand_like": torch.rand_like,
    "torch.randn_like": torch.randn_like,
}
CONSTRUCTORS = [e.name for e in _registry.entries() if e.family == "constructor"]


@pytest.mark.parametrize("name", torch_full_needs_dispatch(CONSTRUCTORS))
@given(pair=example_lists(dims=(True, False)))
def test_every_registered_constructor_has_a_case_equal_to_the_loop(name, pair):
    assert name in VALUES or name in LAYOUTS, (
        f"{name} is registered as a constructor but has no test case here")
    if name in VALUES:
        assert_loop(VALUES[name], pair)
    else:
        xs, xb = pair
        assert_same_layout(LAYOUTS[name](xb), [LAYOUTS[name](x) for x in xs])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_legacy_new_constructor_equals_the_loop(dtype):
    # ``x.new(1, n).zero_()``: how the original Matchbox README started a state.
    def f(x):
        h = x.new(1, x.size(-1)).zero_()
        return (h + x.sum(1)).tanh()

    xs, xb = mb_rand(4, (True, 3), (False, 2), dtype=dtype, min_size=0)
    mb_assert(f, [xs], [xb], 4)
    sizes = xb.new(torch.Size([1, 2]))
    assert isinstance(sizes, MaskedBatch) and sizes.dtype == dtype and sizes.dims == (False,)
    data = xb.new([[1.0, 2.0]])  # data, not sizes: a plain tensor, as in the loop
    assert type(data) is torch.Tensor and data.dtype == dtype
    assert data.tolist() == [[1.0, 2.0]]


def test_legacy_new_with_sizes_that_name_no_batch_dimension_is_a_plain_tensor():
    # The original Matchbox's x.new was data.new: x.new(T) is a plain tensor, the same
    # for every example, as in the loop; torch.arange(0, T, out=x.new(T)) its positions.
    xs, xb = mb_rand(4, (True, 3), (False, 2), min_size=0)
    for sizes in [(3,), (1,), (4,), (5, 3), ()]:
        made = xb.new(*sizes)
        assert type(made) is torch.Tensor and made.dtype == xb.dtype
        assert made.shape == xs[0].new(*sizes).shape
    assert isinstance(xb.new(xb.size(0), 2), MaskedBatch)
    assert isinstance(xb.new(1, xb.size_as_tensor(1)), MaskedBatch)

    def positions(x):
        length = x.maxsize(1)
        return x + torch.arange(0, length, out=x.new(length)).unsqueeze(-1)

    for dtype in (torch.float32, torch.float64):
        xs, xb = mb_rand(4, (True, 3), (False, 2), dtype=dtype, min_size=0)
        mb_assert(positions, [xs], [xb], 4)
        mb_assert(positions, [xs[:1]], [MaskedBatch.fromlist(xs[:1], xb.dims)], 1)


def test_functional_cat_is_torch_cat():
    xs, xb = mb_rand(3, (True, 3), (False, 2), dtype=torch.float64, min_size=0)
    mb_assert(lambda x: MF.cat((x, x * 2), 2), [xs], [xb], 3)


def test_a_factory_writing_into_a_batch_is_refused_with_the_plain_spelling():
    xb = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (2, 1, 3)], (True, False))
    with pytest.raises(NotImplementedError, match=r"torch\.arange: out= a MaskedBatch is not "
                                                  r"supported .* x\.new\(T\) with a single size "
                                                  r"is one"):
        torch.arange(0, 3, out=xb.new(xb.size(0), 3))


@batch_needs(NUMBER_ARGUMENTS_REACH_TORCH_FUNCTION,
             "hands a batch given as torch.arange's end to Matchbox")
def test_arange_of_a_per_example_size_points_to_a_spelling_that_works():
    # It said only "torch.arange is not implemented for MaskedBatch".
    xb = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (3, 1, 2)], (True, False))
    with pytest.raises(NotImplementedError, match=(
            r"^torch\.arange is not implemented for MaskedBatch: with a per-example n .* "
            r"each example's torch\.arange\(n\) is \(n,\), a shape no batch holds .* write "
            r"x\.new_ones\(1, n, dtype=torch\.long\)\.cumsum\(1\) - 1, which equals "
            r"torch\.arange\(n\)\.unsqueeze\(0\) in the loop")):
        torch.arange(xb.size_as_tensor(1))


def test_the_spelling_the_arange_refusal_gives_is_each_examples_positions():
    xs = [torch.randn(1, n, 2) for n in (3, 1, 2)]
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))

    def positions(x):
        n = x.size_as_tensor(1)
        return x.new_ones(1, n, dtype=torch.long).cumsum(1) - 1

    got = positions(xb)
    assert [e.tolist() for e in got.examples()] == [torch.arange(x.size(1)).unsqueeze(0).tolist()
                                                    for x in xs]
    mb_assert(lambda x: x * positions(x).unsqueeze(-1), (xs,), (xb,), 3)


def test_new_constructors_of_a_batchs_shape_give_each_example_its_own_shape():
    # x.new_ones(y.shape): in the loop each example's y.shape; the batch's shape (with its
    # dynamic sizes) was refused as a first size other than 1 (a user trial).
    xs = [torch.randn(1, n, 2, dtype=torch.float64) for n in (3, 0, 1)]
    ys = [torch.randn(1, 2, n, 4, dtype=torch.float64) for n in (1, 2, 0)]
    xb, yb = (MaskedBatch.fromlist(xs, (True, False)),
              MaskedBatch.fromlist(ys, (False, True, False)))
    mb_assert(lambda x, y: y + x.new_ones(y.shape), [xs, ys], [xb, yb], len(xs))
    mb_assert(lambda x, y: y * x.new_full(y.shape, 2.0), [xs, ys], [xb, yb], len(xs))
    mb_assert(lambda x: x.new_zeros(x.shape) + x, [xs], [xb], len(xs))
