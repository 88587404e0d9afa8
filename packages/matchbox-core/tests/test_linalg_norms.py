"""``torch.linalg.norm`` and ``torch.linalg.matrix_norm`` against the per-example loop,
values and gradients: vector norms over one dimension (static or dynamic) or every one,
matrix norms over two (``'fro'`` over any, the others over static ones), and the
refusals of a matrix norm that padding would enter.

Dimension numbers are per example (dimension 0 is each example's size-one batch
dimension).  Padding holds NaN; zero-length examples and a batch of one are in the layouts.
"""

from __future__ import annotations

import math

import pytest
import torch
from family_cases import LAYOUTS, batch_of, check

from matchbox import MaskedBatch

INF = math.inf
# Examples (1, n, 3, 2): dynamic n and a static 3 x 2 matrix at each position.
MATRICES = {
    "dynamic-matrices": ((True, False, False), [(2, 3, 2), (0, 3, 2), (1, 3, 2), (4, 3, 2)]),
    "static": ((False, False, False), [(2, 3, 2), (2, 3, 2)]),
    "batch-of-one": ((True, False, False), [(1, 3, 2)]),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("keepdim", [False, True])
def test_vector_norms_match_loop(layout, keepdim, dtype):
    dims, shapes = LAYOUTS[layout]
    xs, xb = batch_of(shapes, dims, dtype)
    for f in (lambda x: torch.linalg.norm(x, keepdim=keepdim),
              lambda x: torch.linalg.norm(x, dim=1, keepdim=keepdim),
              lambda x: torch.linalg.norm(x, 1, -1, keepdim),
              lambda x: torch.linalg.norm(x, 3.0, dim=(2,), keepdim=keepdim),
              lambda x: torch.linalg.norm(x, 0.5, [1], keepdim)):
        check(f, xs, xb)


@pytest.mark.parametrize("layout", ["two-dynamic", "all-static", "batch-of-one"])
def test_orders_without_identity_match_loop_over_non_empty_examples(layout, dtype):
    dims, shapes = LAYOUTS[layout]
    xs, xb = batch_of(shapes, dims, dtype)
    for order in (INF, -INF, -1):
        check(lambda x, order=order: torch.linalg.norm(x, order, dim=1), xs, xb)
        check(lambda x, order=order: torch.linalg.norm(x, order, dim=-1, keepdim=True), xs,
              xb)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("keepdim", [False, True])
def test_frobenius_matrix_norms_match_loop_over_any_dimensions(layout, keepdim, dtype):
    dims, shapes = LAYOUTS[layout]
    xs, xb = batch_of(shapes, dims, dtype)
    for f in (lambda x: torch.linalg.norm(x, dim=(1, 2), keepdim=keepdim),
              lambda x: torch.linalg.norm(x, "fro", (-1, -2), keepdim),
              lambda x: torch.linalg.matrix_norm(x, keepdim=keepdim),
              lambda x: torch.linalg.matrix_norm(x, "fro", dim=(2, 1))):
        check(f, xs, xb)


@pytest.mark.parametrize("order", ["fro", "nuc", 2, -2, 1, -1, INF, -INF])
@pytest.mark.parametrize("layout", list(MATRICES))
def test_matrix_norms_over_static_dimensions_match_loop(layout, order, dtype):
    dims, shapes = MATRICES[layout]
    xs, xb = batch_of(shapes, dims, dtype)
    check(lambda x: torch.linalg.matrix_norm(x, order), xs, xb)
    check(lambda x: torch.linalg.norm(x, order, (2, 3), keepdim=True), xs, xb)
    check(lambda x: torch.linalg.norm(x, order, dim=(-1, -2)).sum(-1), xs, xb)


def test_examples_of_one_dimension_take_any_order_without_dim(dtype):
    # Scalars per example (dims ()): each a one-element vector.
    s = MaskedBatch(torch.randn(3, dtype=dtype), None, ())
    for order in (None, 1, INF, -2.0, 0.5):
        check(lambda x, order=order: torch.linalg.norm(x, order), list(s.examples()), s)
    # Rank-2 examples without dim: 'fro' is every element's 2-norm.
    xs, xb = batch_of([(3,), (0,), (1,)], (True,), dtype)
    check(lambda x: torch.linalg.norm(x, "fro"), xs, xb)
    check(lambda x: torch.linalg.norm(x, keepdim=True), xs, xb)


def test_refusals_name_the_op_the_dimension_and_what_to_write():
    _, xb = batch_of([(2, 3), (1, 3)], (True, False))
    with pytest.raises(NotImplementedError, match=r"^torch\.linalg\.matrix_norm: the matrix "
                                                  r"norm ord='nuc' over dimension 1, which is "
                                                  r"dynamic .* only ord='fro' is"):
        torch.linalg.matrix_norm(xb, "nuc")
    with pytest.raises(NotImplementedError, match=r"^torch\.linalg\.norm: the matrix norm ord=2 "
                                                  r"over dimension 1, which is dynamic"):
        torch.linalg.norm(xb, 2, (1, 2))
    _, vb = batch_of([(3,), (2,)], (True,))
    with pytest.raises(NotImplementedError, match=r"^torch\.linalg\.norm: ord=1 without dim is "
                                                  r"the matrix norm of each example's 2-D "
                                                  r"tensor.*torch\.linalg\.vector_norm\(x, ord, "
                                                  r"dim=-1\)"):
        torch.linalg.norm(vb, 1)
    with pytest.raises(RuntimeError, match=r"^torch\.linalg\.norm: If dim is not specified but "
                                           r"ord is, the input must be 1D or 2D. Got 3D"):
        torch.linalg.norm(xb, 2)
    with pytest.raises(RuntimeError, match=r"^torch\.linalg\.norm: If dim is specified, it must "
                                           r"be of length 1 or 2"):
        torch.linalg.norm(xb, 2, (0, 1, 2))
    with pytest.raises(RuntimeError, match=r"^torch\.linalg\.matrix_norm: dim must be a 2-tuple"):
        torch.linalg.matrix_norm(xb, dim=(1,))
    with pytest.raises(ValueError, match=r"^torch\.linalg\.norm: cannot reduce over dimension 0"):
        torch.linalg.norm(xb, dim=0)
    _, eb = batch_of([(2, 3), (0, 3)], (True, False))
    with pytest.raises(IndexError, match=r"^torch\.linalg\.norm: example 1 has size 0 in dynamic "
                                         r"dimension 1"):
        torch.linalg.norm(eb, INF, 1)


# ---------------------------------------------------------------- renorm

RENORMS = [
    pytest.param(lambda x: torch.renorm(x, 2, 1, 0.5), id="p2-dim1"),
    pytest.param(lambda x: x.renorm(1, 2, 1.0), id="p1-dim2"),
    pytest.param(lambda x: x.renorm(2, 0, 1.0), id="whole-example"),
    pytest.param(lambda x: torch.renorm(x, 0.5, -1, 0.3), id="p0.5-last"),
    pytest.param(lambda x: x.renorm(3, 1, 100.0), id="below-maxnorm"),
    pytest.param(lambda x: x.renorm(2, 1, 0.0), id="maxnorm-0"),
]


@pytest.mark.parametrize("f", RENORMS)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_renorm_matches_loop(f, layout, dtype):
    # The slices' norms over each example's own real values (NaN padding would show).
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    check(f, examples, batch)


def test_renorm_of_order_inf_matches_loop_and_refuses_an_empty_example(dtype):
    examples, batch = batch_of([(2, 3), (1, 3), (4, 3)], (True, False), dtype)
    check(lambda x: torch.renorm(x, INF, 2, 0.5), examples, batch)
    _, batch = batch_of([(2, 3), (0, 3)], (True, False), dtype)
    with pytest.raises(IndexError, match=r"^Tensor\.renorm: example 1 has size 0 in dynamic "
                                         r"dimension 1, and Tensor\.renorm of an empty "
                                         r"dimension is undefined$"):
        batch.renorm(INF, 2, 1.0)


def test_renorm_refusals_name_the_op():
    _, batch = batch_of([(2, 3), (1, 3)], (True, False))
    with pytest.raises(RuntimeError, match=r"^torch\.renorm: renorm: non-positive-norm not "
                                           r"supported"):
        torch.renorm(batch, 0, 1, 1.0)
    with pytest.raises(RuntimeError, match=r"^Tensor\.renorm: renorm: expected maxnorm to be "
                                           r">= 0 but got -1"):
        batch.renorm(2, 1, -1)
    with pytest.raises(RuntimeError, match=r"^Tensor\.renorm: renorm: input needs at least 2 "
                                           r"dimensions, got 1 dimensions \(these examples are "
                                           r"scalars\)"):
        MaskedBatch.fromlist([torch.ones(1), torch.ones(1)], ()).renorm(2, 0, 1.0)
    with pytest.raises(NotImplementedError, match=r"^torch\.renorm: out= is not supported"):
        torch.renorm(batch, 2, 1, 1.0, out=torch.empty(0))
