"""``x.maxsize(d)`` of a dynamic dimension as a size of an op that builds a batch.

In the loop over examples ``T = x.maxsize(1)`` is each example's own size, so
``x.new_zeros(x.size(0), T, H)``, ``h.expand(x.size(0), T, H)`` and ``h.repeat(1, T, 1)``
build, per example, a tensor of its own size there: the batch they build is dynamic
there, each example of its size in the batch ``T`` was read from (zero padding, or
masked).  Where that cannot be known the op is refused, naming the op and the argument;
a ``view``/``reshape`` to ``T`` where the examples are static there is refused unless
every example's own size is ``T``.
"""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from family_cases import batch_of, check
from test_compile import BACKEND, assert_values_and_gradients_equal_the_loop
from test_compile import batch_of as compile_batch_of

import matchbox
from matchbox import MaskedBatch
from matchbox.compiler import symbolic
from matchbox.extending import PaddedSize


def _b(x):
    return x.size(0)


def _t(x):
    return x.maxsize(1)


BUILDS = {
    "new_zeros(B, T, 4)": lambda x: x.new_zeros(_b(x), _t(x), 4),
    "x + new_zeros(B, T, 4)": lambda x: x + x.new_zeros(_b(x), _t(x), 4),
    "x + new_zeros(1, T, 4)": lambda x: x + x.new_zeros(1, _t(x), 4),
    "x + new_zeros((B, T, 4))": lambda x: x + x.new_zeros((_b(x), _t(x), 4)),
    "x * new_ones(B, T, 4)": lambda x: x * x.new_ones(_b(x), _t(x), 4),
    "x + new_full((B, T, 4), 2)": lambda x: x + x.new_full((_b(x), _t(x), 4), 2.0),
    "new_empty(B, T, 4).fill_(3)": lambda x: x + x.new_empty(_b(x), _t(x), 4).fill_(3),
    "new(B, T, 4).fill_(3)": lambda x: x + x.new(_b(x), _t(x), 4).fill_(3),
    "scores + new_zeros(B, T, T)":
        lambda x: x @ x.transpose(1, 2) + x.new_zeros(_b(x), _t(x), _t(x)),
    "expand(B, T, 4)":
        lambda x: x + x.sum(1, keepdim=True).expand(_b(x), _t(x), 4),
    "expand(-1, T, -1)":
        lambda x: x * x.sum(1, keepdim=True).expand(-1, _t(x), -1),
    "new_ones.unsqueeze.expand":
        lambda x: x + x.new_ones(_b(x), 4).unsqueeze(1).expand(_b(x), _t(x), 4),
    "expand a new leading dim": lambda x: x + x.sum(1).expand(1, _t(x), 4),
    "broadcast_to": lambda x: x + torch.broadcast_to(x.mean(1, keepdim=True), (1, _t(x), 4)),
    "expand alone": lambda x: x.sum(1, keepdim=True).expand(_b(x), _t(x), 4) * 2,
    "x[:, :1].expand(B, T, 4)": lambda x: x[:, :1].expand(_b(x), _t(x), 4) * 2,
    "x.expand(B, T, 4)": lambda x: x.expand(_b(x), _t(x), 4) * 2,
    "repeat(1, T, 1)": lambda x: x + x.sum(1, keepdim=True).repeat(1, _t(x), 1),
    "repeat(1, T, 1) of 2 rows": lambda x: x.sum(1, keepdim=True).repeat(1, 2, 1)
                                            .repeat(1, _t(x), 1) * 2,
    "repeat a new leading dim": lambda x: x * x.sum(1).repeat(1, _t(x), 1),
    "tile(1, T, 1)": lambda x: x + x.sum(1, keepdim=True).tile(1, _t(x), 1),
    "tile((T, 1))": lambda x: x + x.sum(1, keepdim=True).tile((_t(x), 1)),
}

SHAPES = {
    "mixed": [(3, 4), (1, 4), (0, 4), (5, 4)],
    "batch-of-one": [(2, 4)],
    "one-long": [(1, 4), (1, 4)],
    "with-empty": [(0, 4), (2, 4)],
}


@pytest.mark.parametrize("name", list(BUILDS))
@pytest.mark.parametrize("shapes", list(SHAPES))
def test_a_batch_built_to_the_padded_size_equals_the_loop(name, shapes, dtype):
    examples, xb = batch_of(SHAPES[shapes], (True, False), dtype)
    check(BUILDS[name], examples, xb)


def test_a_built_batch_is_dynamic_with_the_sources_sizes_and_zero_padding():
    _, xb = batch_of([(3, 4), (0, 4), (5, 4)], (True, False))
    zeros = xb.new_zeros(xb.size(0), xb.maxsize(1), 4)
    assert zeros.dims == (True, False) and zeros.lengths().tolist() == [[3], [0], [5]]
    assert zeros.data.shape == (3, 5, 4) and not zeros.data.isnan().any()
    expanded = xb.new_ones(xb.size(0), 1, 4).expand(xb.size(0), xb.maxsize(1), 4)
    assert expanded.dims == (True, False) and expanded.lengths().tolist() == [[3], [0], [5]]


def test_the_sizes_of_another_batch_of_the_same_examples():
    # In the loop, h.new_zeros(1, y.maxsize(1)) has y's example's size: here, y's sizes.
    _, xb = batch_of([(3, 4), (0, 4), (5, 4)], (True, False))
    _, yb = batch_of([(1, 2), (4, 2), (2, 2)], (True, False))
    built = xb.new_zeros(xb.size(0), yb.maxsize(1), 4)
    assert built.lengths().tolist() == [[1], [4], [2]]


def test_the_padded_size_first_is_refused():
    _, xb = batch_of([(3, 4), (5, 4)], (True, False))
    with pytest.raises(ValueError, match=r"Tensor\.new_zeros: the first size is each "
                                         r"example's batch dimension \(1, or the batch size "
                                         r"x\.size\(0\)\); got x\.maxsize\(1\)"):
        xb.new_zeros(xb.maxsize(1), 4)


def test_x_new_with_the_padded_size_first_is_a_plain_tensor():
    # As x.new(T) is (the original Matchbox's x.new of sizes not naming the batch dimension).
    _, xb = batch_of([(3, 4), (2, 4)], (True, False))
    t = xb.new(xb.maxsize(1), 4)
    assert type(t) is torch.Tensor and t.shape == (3, 4)


def test_a_padded_size_of_other_examples_is_refused():
    _, xb = batch_of([(3, 4), (1, 4), (5, 4)], (True, False))
    _, yb = batch_of([(2, 4), (4, 4)], (True, False))
    with pytest.raises(ValueError, match=r"Tensor\.new_zeros: size 1 is x\.maxsize\(1\) of a "
                                         r"batch of 3 examples, but the batch it builds has 2"):
        yb.new_zeros(yb.size(0), xb.maxsize(1), 4)
    with pytest.raises(ValueError, match=r"Tensor\.expand: size 1 is x\.maxsize\(1\) of a "
                                         r"batch of 3 examples, but the batch it builds has 2"):
        yb.sum(1, keepdim=True).expand(yb.size(0), xb.maxsize(1), 4)
    with pytest.raises(ValueError, match=r"Tensor\.repeat: count 1 is x\.maxsize\(1\) of a "
                                         r"batch of 3 examples, but the batch it builds has 2"):
        yb.sum(1, keepdim=True).repeat(1, xb.maxsize(1), 1)


def test_a_padded_size_without_its_batch_is_refused():
    _, xb = batch_of([(3, 4), (5, 4)], (True, False))
    with pytest.raises(ValueError, match=r"Tensor\.new_zeros: size 1 is a padded size "
                                         r"\(x\.maxsize\(1\) of a dynamic dimension\) that "
                                         r"does not say which batch it was read from"):
        xb.new_zeros(xb.size(0), PaddedSize(5, 1), 4)


def test_expanding_a_static_dimension_wider_than_one_is_refused():
    _, xb = batch_of([(3, 4), (5, 4)], (True, False))
    with pytest.raises(ValueError, match=r"Tensor\.expand: size 1 is x\.maxsize\(1\), each "
                                         r"example's own size there in the loop over "
                                         r"examples, but dimension 1 has size 2: only a "
                                         r"dimension of size one expands to it"):
        xb.new_ones(xb.size(0), 2, 4).expand(xb.size(0), xb.maxsize(1), 4)


def test_expanding_a_dynamic_dimension_to_other_sizes_is_refused():
    # In the loop example 0 expands (1, 3, 4) to (1, 1, 4): torch refuses it too.
    _, xb = batch_of([(3, 4), (5, 4)], (True, False))
    _, yb = batch_of([(1, 4), (5, 4)], (True, False))
    with pytest.raises(ValueError, match=r"Tensor\.expand: example 0 has size 3 in one "
                                         r"argument and 1 in another along dynamic "
                                         r"dimension 1"):
        xb.expand(xb.size(0), yb.maxsize(1), 4)


def test_repeating_by_the_padded_size_is_refused_where_unsupported():
    _, xb = batch_of([(3, 4), (5, 4)], (True, False))
    with pytest.raises(ValueError, match=r"Tensor\.repeat: count 1 is x\.maxsize\(1\), each "
                                         r"example's own size in the loop over examples, and "
                                         r"dimension 1 is dynamic: repeating each example's "
                                         r"values by its own count there is not supported"):
        xb.repeat(1, xb.maxsize(1), 1)
    with pytest.raises(ValueError, match=r"Tensor\.repeat: count 0 is x\.maxsize\(1\), the "
                                         r"padded size of a dynamic dimension; the first "
                                         r"count repeats each example's batch dimension"):
        xb.repeat(xb.maxsize(1), 1, 1)


STATIC_THERE = (r"\(size {p}, x\.maxsize\(1\)\): the padded size of a dynamic dimension "
                r"stands for each example's own size there \(as in the loop over examples\), "
                r"but the examples reshaped here are static in dimension {p}")


@pytest.mark.parametrize("op, f, p", [
    ("Tensor.view", lambda x, s: s.view(x.size(0), x.maxsize(1), 2), 1),
    ("Tensor.reshape", lambda x, s: s.reshape(1, x.maxsize(1), 2), 1),
    ("Tensor.unflatten", lambda x, s: s.unflatten(1, (x.maxsize(1), 2)), 1),
    # (1, n * 5) viewed as (1, 5, n) in the loop: the batch's (1, n, 5) would transpose.
    ("Tensor.view", lambda x, s: x.view(1, -1, x.maxsize(1)), 2),
])
def test_a_reshape_static_where_the_padded_size_stands_is_refused(op, f, p):
    _, xb = batch_of([(3, 5), (5, 5)], (True, False))
    static = xb.new_ones(xb.size(0), 10)
    with pytest.raises(ValueError, match=op.replace(".", r"\.") + " " + STATIC_THERE.format(p=p)):
        f(xb, static)


def test_a_reshape_static_there_where_every_example_has_the_padded_size_is_the_loop():
    examples, xb = batch_of([(1, 2, 3)], (True, False, False))
    check(lambda x: x.view(1, x.maxsize(1), -1), examples, xb)


def test_a_view_to_another_batchs_sizes_is_refused():
    # In the loop example 0's 3 rows of 4 cannot be viewed as 1 row: torch refuses it too.
    _, xb = batch_of([(3, 4), (5, 4)], (True, False))
    _, yb = batch_of([(1, 4), (5, 4)], (True, False))
    with pytest.raises(ValueError, match=r"Tensor\.view \(size 1, x\.maxsize\(1\)\): example 0 "
                                         r"has size 1 in one argument and 3 in another"):
        (xb * 2).view(xb.size(0), yb.maxsize(1), 4)


def test_the_padded_size_says_which_batch_it_was_read_from():
    _, xb = batch_of([(3, 4), (5, 4)], (True, False))
    assert xb.maxsize(1).source is xb and xb.maxsize(-2).source is xb
    assert type(xb.maxsize(2)) is int  # a static dimension's: a plain int


COMPILED_BUILDS = {
    "new_ones": lambda x, h: h + x.new_ones(x.size(0), x.maxsize(1), 3),
    "expand": lambda x, h: h + h.sum(1, keepdim=True).expand(x.size(0), x.maxsize(1), 3),
    "repeat": lambda x, h: h + h.sum(1, keepdim=True).repeat(1, x.maxsize(1), 1),
}


@pytest.mark.skipif(not symbolic.available(),
                    reason="this torch cannot capture with symbolic sizes")
@pytest.mark.parametrize("name", list(COMPILED_BUILDS))
def test_a_compiled_build_to_the_symbolic_padded_size_is_one_graph_equal_to_the_loop(name):
    def f(x, w):
        return COMPILED_BUILDS[name](x, (x @ w).tanh()).sum(1)

    w = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    compiled = matchbox.compile(f, backend=BACKEND)
    for lengths in ([3, 1, 4], [9, 0, 2, 13, 1], [30, 7]):
        examples, xb = compile_batch_of(lengths, dtype=torch.float64)
        loop = [f(x, w) for x in examples]
        assert_values_and_gradients_equal_the_loop(compiled(xb, w), loop, examples, xb, w)
    [spec] = compiled.specializations
    assert spec.calls == 3 and spec.summary == "batch(B=*, <=*, 3), tensor(3, 3)"


TWO_DYNAMIC = {
    "new_zeros(B, T1, T2) + x": lambda x: x + x.new_zeros(x.size(0), x.maxsize(1),
                                                          x.maxsize(2)),
    "new_ones(B, T2, T1)": lambda x: x.new_ones(x.size(0), x.maxsize(2), x.maxsize(1)) * 2,
    "new_ones(B, T1, 3)": lambda x: x.new_ones(x.size(0), x.maxsize(1), 3) * 2,
    "expand(B, T1, T2)": lambda x: x + x.sum((1, 2), keepdim=True)
                                     .expand(x.size(0), x.maxsize(1), x.maxsize(2)),
}


@pytest.mark.parametrize("name", list(TWO_DYNAMIC))
@pytest.mark.parametrize("shapes", [[(2, 3), (0, 2), (3, 0), (1, 1)], [(2, 0)]],
                         ids=["empty-in-part", "batch-of-one"])
def test_batches_built_to_two_padded_sizes_equal_the_loop(name, shapes, dtype):
    examples, xb = batch_of(shapes, (True, True), dtype)
    check(TWO_DYNAMIC[name], examples, xb)


def test_a_kept_padded_size_does_not_keep_its_batch_alive():
    # self.T = x.maxsize(1) in a model: the size holds x's mask and sizes, not x, its
    # values or the graph that made them; it builds batches of x's sizes after x is gone.
    w = torch.randn(4, 4, dtype=torch.float64, requires_grad=True)
    examples, xb = batch_of([(3, 4), (0, 4), (5, 4), (1, 4)], (True, False))
    h = xb @ w
    values = weakref.ref(h.data)  # (its graph's output: freed with the graph)
    size = h.maxsize(1)
    assert size.source is h  # (while it lives, the batch itself)
    del h
    gc.collect()
    assert values() is None
    built = xb.new_ones(xb.size(0), size, 4)
    assert built.dims == (True, False) and built.lengths().tolist() == [[3], [0], [5], [1]]
    # In the loop each example's size there is its own (h's examples are xb's).
    check(lambda x: x + x.new_zeros(x.size(0), size, 4) if isinstance(x, MaskedBatch) else
          x + x.new_zeros(1, x.size(1), 4), examples, xb)


# ------------------------------------------- x.new_zeros(x.maxsize()): every padded size


PADDED_SHAPE = (r"Tensor\.{op}: sizes \(3, 3, 2\) are the batch's padded sizes "
                r"\(x\.maxsize\(\)\), but dimensions \[1\] are dynamic: in the loop over "
                r"examples x\.maxsize\(\) is each example's own shape.*x\.new_zeros\(x\.shape\)")


@pytest.mark.parametrize("build", [
    ("new_zeros", lambda x: x.new_zeros(x.maxsize())),
    ("new_ones", lambda x: x.new_ones(*x.maxsize())),
    ("new_empty", lambda x: x.new_empty(tuple(x.maxsize()))),
    ("new_full", lambda x: x.new_full(x.maxsize(), 2.0)),
], ids=lambda b: b[0])
def test_every_padded_size_of_a_dynamic_batch_is_refused(build):
    """``x.maxsize()`` holds plain ints: each example would be built at the longest's,
    where the loop's ``x.maxsize()`` is each example's own shape (it was silent)."""
    _, xb = batch_of([(3, 2), (1, 2), (0, 2)], (True, False))
    with pytest.raises(ValueError, match=PADDED_SHAPE.format(op=build[0])):
        build[1](xb)


@pytest.mark.parametrize("shapes", [[(3, 2), (1, 2), (0, 2)], [(2, 2)]],
                         ids=["mixed", "batch-of-one"])
def test_each_examples_own_shape_equals_the_loop(shapes, dtype):
    """What the message says to write, ``x.new_zeros(x.shape)``, and a batch of one (or
    of static examples), whose padded sizes are each example's own, equal the loop."""
    examples, xb = batch_of(shapes, (True, False), dtype)
    check(lambda x: x + x.new_ones(x.shape), examples, xb)
    check(lambda x: x + x.new_ones(x.maxsize()), examples[:1], MaskedBatch.fromlist(
        examples[:1], (True, False)))
    static, sb = batch_of([(2, 2), (2, 2)], (False, False), dtype)
    check(lambda x: x + x.new_ones(x.maxsize()), static, sb)
