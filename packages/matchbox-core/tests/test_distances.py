"""cosine_similarity, pairwise_distance and dist against the per-example loop, values and
gradients of both arguments (batches on either or both sides, a plain tensor shared by
every example on one), reduced over a static and over a dynamic dimension.

Padding holds NaN: any leak into a value or a gradient shows as a mismatch.  Zero- and
one-length examples and a batch of one are in the layouts.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from family_cases import LAYOUTS, NAN, assert_every_op_has_a_case, batch_of, check, registered

from matchbox import MaskedBatch
from matchbox.testing import mb_assert

INF = float("inf")

# Two-argument cases, f(x1, x2) over the layouts' two-dimensional examples.
CASES = {
    "torch.cosine_similarity": [
        lambda a, b: torch.cosine_similarity(a, b),  # dim=1
        lambda a, b: F.cosine_similarity(a, b, dim=2),
        lambda a, b: F.cosine_similarity(a, b, -1, eps=1e-3),
    ],
    "torch.pairwise_distance": [
        lambda a, b: F.pairwise_distance(a, b),
        lambda a, b: torch.pairwise_distance(a, b, 1.0, 1e-3, True),
        lambda a, b: F.pairwise_distance(a, b, p=3.0),
    ],
    "torch.dist": [
        lambda a, b: torch.dist(a, b),
        lambda a, b: torch.dist(a, b, 1),
        lambda a, b: torch.dist(a, b, 0.5),
    ],
    "Tensor.dist": [lambda a, b: a.dist(b, 3)],
}

REGISTERED = registered("distance")


def test_every_registered_distance_op_has_a_case_here():
    assert_every_op_has_a_case("distance", REGISTERED, CASES)


def _pair(layout, dtype):
    dims, shapes = LAYOUTS[layout]
    xs, xb = batch_of(shapes, dims, dtype)
    ys, yb = batch_of(shapes, dims, dtype)
    return xs, xb, ys, yb


@pytest.mark.parametrize("name", REGISTERED)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_two_batches_match_loop(name, layout, dtype):
    xs, xb, ys, yb = _pair(layout, dtype)
    for f in CASES[name]:
        mb_assert(f, [xs, ys], [xb, yb], len(xs))


@pytest.mark.parametrize("name", REGISTERED)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_plain_tensor_on_either_side_matches_loop(name, layout, dtype):
    dims, shapes = LAYOUTS[layout]
    xs, xb = batch_of(shapes, dims, dtype)
    # Size one along a dynamic dimension (it broadcasts over each example's own length),
    # the padded size along a static one.
    shape = [1 if d else n for d, n in zip(dims, shapes[0])]
    for plain in (torch.randn(shape, dtype=dtype), torch.randn(1, *shape, dtype=dtype)):
        shared = [plain] * len(xs)  # one leaf for the loop, one for the batch: its gradient
        for f in CASES[name]:
            mb_assert(f, [xs, shared], [xb, plain], len(xs))
            mb_assert(f, [shared, xs], [plain, xb], len(xs))


@pytest.mark.parametrize("layout", ["dynamic-static", "batch-of-one", "all-static"])
def test_a_shared_query_vector_against_each_position_matches_loop(layout, dtype):
    # The commonest use: each position's similarity to (distance from) one feature vector.
    dims, shapes = LAYOUTS[layout]
    xs, xb = batch_of(shapes, dims, dtype)
    query = torch.randn(shapes[0][-1], dtype=dtype)
    shared = [query] * len(xs)
    mb_assert(lambda x, q: F.cosine_similarity(x, q, dim=-1), [xs, shared], [xb, query], len(xs))
    mb_assert(lambda x, q: F.pairwise_distance(q, x), [xs, shared], [xb, query], len(xs))
    mb_assert(lambda x, q: torch.dist(x, q), [xs, shared], [xb, query], len(xs))


@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 0.5, 4.0, INF, -1.0, -INF])
@pytest.mark.parametrize("layout", ["static-dynamic", "two-dynamic", "dynamic-static"])
def test_distance_orders_over_a_dynamic_dimension_match_loop(p, layout, dtype):
    xs, xb, ys, yb = _pair(layout, dtype)
    if p in (INF, -INF) or p < 0:
        # Without an identity: the loop raises for an empty example (below).
        keep = [j for j, x in enumerate(xs) if x.numel()]
        xs, ys = [xs[j] for j in keep], [ys[j] for j in keep]
        xb = MaskedBatch.fromlist(xs, xb.dims, padding_value=NAN)
        yb = MaskedBatch.fromlist(ys, yb.dims, padding_value=NAN)
    # torch's norm of order 0 has no gradient (the loop's backward fails).
    grad = p != 0
    mb_assert(lambda a, b: F.pairwise_distance(a, b, p), [xs, ys], [xb, yb], len(xs),
              check_grad=grad)
    mb_assert(lambda a, b: torch.dist(a, b, p), [xs, ys], [xb, yb], len(xs), check_grad=grad)


def test_cosine_similarity_along_a_dynamic_dimension_ignores_padding_and_empty_examples():
    # Examples (1, n, 2) compared along their n positions: an empty one gives 0 as in the
    # loop (each norm clamped to eps), NaN padding reaches neither values nor gradients.
    xs = [torch.randn(1, n, 2, dtype=torch.float64) for n in (3, 0, 1, 5)]
    ys = [torch.randn(1, n, 2, dtype=torch.float64) for n in (3, 0, 1, 5)]
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=NAN)
    yb = MaskedBatch.fromlist(ys, (True, False), padding_value=NAN)
    mb_assert(lambda a, b: F.cosine_similarity(a, b, dim=1), [xs, ys], [xb, yb], 4)
    weights = torch.randn(1, 1, 2, dtype=torch.float64)  # shared, broadcast along n
    mb_assert(lambda a, w: F.cosine_similarity(w, a, dim=1), [xs, [weights] * 4], [xb, weights],
              4)


def test_results_feed_further_ops_like_the_loop(dtype):
    xs, xb, ys, yb = _pair("two-dynamic", dtype)
    mb_assert(lambda a, b: F.cosine_similarity(a, b, 2).sum() + F.pairwise_distance(a, b).mean(),
              [xs, ys], [xb, yb], len(xs))


def test_refusals_name_the_op():
    _, xb = batch_of([(2, 3), (2, 0)], (False, True))
    with pytest.raises(IndexError, match=r"^torch\.pairwise_distance: example 1 has size 0 in "
                                         r"dynamic dimension 2, and torch\.pairwise_distance of "
                                         r"an empty dimension is undefined"):
        F.pairwise_distance(xb, xb, INF)
    with pytest.raises(IndexError, match=r"^torch\.dist: example 1 has size 0"):
        torch.dist(xb, xb, -1.0)
    with pytest.raises(ValueError, match=r"^torch\.cosine_similarity: dimension 0 is the batch "
                                         r"dimension of each example \(size one; dim=0\); the "
                                         r"similarity along it would mix the examples"):
        F.cosine_similarity(xb, xb, 0)
    scalars = MaskedBatch(torch.randn(3), None, ())
    for f, what in ((lambda s: F.cosine_similarity(s, s, 0), "cosine_similarity"),
                    (lambda s: F.pairwise_distance(s, s), "pairwise_distance")):
        with pytest.raises(ValueError, match=rf"^torch\.{what}: the examples are scalars \(dims "
                                             r"\(\)\), whose only dimension is each example's "
                                             r"dimension 0"):
            f(scalars)
    with pytest.raises(ValueError, match=r"^torch\.cosine_similarity: a plain tensor argument "
                                         r"has size 7 in dimension 2, which is dynamic"):
        F.cosine_similarity(xb, torch.randn(7), -1)
    # dist of scalars is the loop's (an order with no dimension to reduce).
    s = MaskedBatch(torch.randn(3, dtype=torch.float64), None, ())
    check(lambda x: torch.dist(x, x * 2), list(s.examples()), s)
