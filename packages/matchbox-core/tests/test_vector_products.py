"""dot, vdot, outer/ger, mv and kron on batches against the per-example loop (values and
gradients, a plain operand's included).  Padding holds NaN, so padding summed into a
product, or reaching a gradient, shows up as a mismatch."""

from __future__ import annotations

import pytest
import torch
from family_cases import LAYOUTS, batch_of, check
from hypothesis import given
from hypothesis import strategies as st
from strategies import example_lists

from matchbox import MaskedBatch

# Batches of one number per example (dims ()): each example a 1-D tensor of size one.
SCALARS = [[()] * 4, [()]]


def _weight(*shape, dtype):
    return torch.randn(shape, dtype=dtype, requires_grad=True)


@pytest.mark.parametrize("shapes", SCALARS, ids=["four", "batch-of-one"])
@pytest.mark.parametrize("case", [
    pytest.param(lambda x, w: torch.dot(x, w[:1]), id="dot"),
    pytest.param(lambda x, w: x.dot(x), id="dot-itself"),
    pytest.param(lambda x, w: torch.vdot(w[:1], x), id="vdot"),
    pytest.param(lambda x, w: x.vdot(w[:1]), id="Tensor.vdot"),
    pytest.param(lambda x, w: torch.outer(x, w), id="outer"),
    pytest.param(lambda x, w: x.outer(x), id="outer-itself"),
    pytest.param(lambda x, w: torch.ger(x, w), id="ger"),
    pytest.param(lambda x, w: x.ger(w), id="Tensor.ger"),
])
def test_products_of_one_number_per_example_match_loop(case, shapes, dtype):
    examples, batch = batch_of(shapes, (), dtype)
    w = _weight(3, dtype=dtype)
    check(lambda x: case(x, w), examples, batch, params=[w])


@pytest.mark.parametrize("layout", ["dynamic-static", "all-static", "batch-of-one"])
def test_mv_of_rows_matches_loop(layout, dtype):
    # each example (1, n, s) summed to a (1, s) matrix: mv by a plain vector of size s
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    w = _weight(batch.data.size(2), dtype=dtype)
    check(lambda x: torch.mv(x.sum(1), w), examples, batch, params=[w])
    check(lambda x: (x * 2).sum(1).mv(w), examples, batch, params=[w])


def test_mv_along_a_dynamic_dimension_matches_loop(dtype):
    # (1, n) rows of equal lengths: the vector spans each example's own length
    examples, batch = batch_of([(3,), (3,)], (True,), dtype)
    w = _weight(3, dtype=dtype)
    check(lambda x: torch.mv(x, w), examples, batch, params=[w])


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("shape", [(), (2,), (1, 3), (2, 1), (1, 2, 2)], ids=str)
def test_kron_of_a_batch_and_a_plain_tensor_matches_loop(layout, shape, dtype):
    # zero- and one-length examples, a batch of one; dynamic dims grow to n * q
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    w = _weight(*shape, dtype=dtype)
    check(lambda x: torch.kron(x, w), examples, batch, params=[w])
    check(lambda x: x.kron(w).sum(-1), examples, batch, params=[w])


def test_kron_with_a_0d_tensor_of_another_dtype_promotes_as_the_loop_does():
    # (torch.kron promotes the two dtypes, a 0-d tensor's too: float64 here)
    examples, batch = batch_of([(3, 2), (0, 2)], (True, False), torch.float32)
    w = torch.tensor(1.5, dtype=torch.float64)
    check(lambda x: torch.kron(x, w), examples, batch)
    assert torch.kron(batch, w).dtype == torch.float64


@given(example_lists(dims=(True, False), min_length=0), st.integers(1, 3), st.integers(1, 3))
def test_kron_of_hypothesis_shapes_matches_loop(case, p, q):
    examples, batch = case
    w = torch.randn(p, q, dtype=batch.dtype)
    check(lambda x: torch.kron(x, w), examples, batch)


@given(example_lists(dims=(), min_length=0), st.integers(1, 4))
def test_outer_of_hypothesis_batches_matches_loop(case, n):
    examples, batch = case
    w = torch.randn(n, dtype=batch.dtype)
    check(lambda x: torch.outer(x, w), examples, batch)
    check(lambda x: torch.dot(x, w[:1]), examples, batch)


def test_vector_products_refuse_what_the_loop_refuses_naming_the_op():
    _, scalars = batch_of([(), ()], ())
    _, rows = batch_of([(3,), (1,)], (True,))
    vector = torch.ones(3, dtype=torch.float64)
    with pytest.raises(RuntimeError, match=r"^torch\.dot: each example of input must have 1 "
                                           r"dimension, got 2"):
        torch.dot(rows, vector)
    with pytest.raises(RuntimeError, match=r"^torch\.vdot: tensor must have 1 dimension, got 2"):
        torch.vdot(scalars, vector.view(1, 3))
    with pytest.raises(RuntimeError, match=r"^torch\.dot: expected both arguments to have the "
                                           r"same dtype, but found torch\.float64 and "
                                           r"torch\.float32"):
        torch.dot(scalars, torch.ones(1))
    with pytest.raises(RuntimeError, match=r"^Tensor\.outer: each example of input must have 1 "
                                           r"dimension, got 2"):
        rows.outer(vector)
    with pytest.raises(ValueError, match=r"^torch\.ger: vec2 is a batch, and its dimension 0"):
        torch.ger(vector, scalars)
    with pytest.raises(RuntimeError, match=r"^torch\.mv: input must have 2 dimensions, got 1"):
        torch.mv(vector, scalars)
    with pytest.raises(ValueError, match=r"^torch\.mv: vec is a batch, and its dimension 0"):
        torch.mv(torch.ones(2, 1, dtype=torch.float64), scalars)
    with pytest.raises(RuntimeError, match=r"^torch\.mv: expected both arguments to have the "
                                           r"same dtype"):
        torch.mv(rows, torch.ones(3))
    with pytest.raises(ValueError, match=r"^torch\.mv: index '.' is dynamic in the batch "
                                         r"operands; plain operand 1"):
        torch.mv(rows, torch.ones(2, dtype=torch.float64))
    with pytest.raises(NotImplementedError, match=r"^torch\.dot: out= is not supported"):
        torch.dot(scalars, torch.ones(1, dtype=torch.float64), out=torch.empty(0))


def test_kron_refusals_name_the_op():
    _, rows = batch_of([(3,), (1,)], (True,))
    with pytest.raises(NotImplementedError, match=r"^torch\.kron: other is a batch: each of its "
                                                  r"positions would be repeated in blocks"):
        torch.kron(torch.ones(1, 2), rows)
    with pytest.raises(NotImplementedError, match=r"^Tensor\.kron: both arguments are batches"):
        rows.kron(rows)
    with pytest.raises(ValueError, match=r"^torch\.kron: other has 3 dimensions, more than "
                                         r"each example's 2"):
        torch.kron(rows, torch.ones(1, 1, 2))
    with pytest.raises(ValueError, match=r"^torch\.kron: other's dimension 0 \(aligned with "
                                         r"each example's own, of size one\) has size 2"):
        torch.kron(rows, torch.ones(2, 2))
    with pytest.raises(NotImplementedError, match=r"^torch\.kron: out= is not supported"):
        torch.kron(rows, torch.ones(2), out=torch.empty(0))


def test_kron_of_a_batch_empty_in_one_of_two_dynamic_dims_is_refused():
    # (its lengths are carried beside the mask, which kron does not build)
    batch = MaskedBatch.fromlist([torch.randn(1, 2, 0), torch.randn(1, 1, 2)], (True, True))
    with pytest.raises(NotImplementedError, match=r"torch\.kron"):
        torch.kron(batch, torch.ones(2))


# Examples with a static last dimension of size 3 (vectors in space), zero- and one-long
VECTORS = {
    "dynamic": ((True, False), [(3, 3), (0, 3), (1, 3), (4, 3)]),
    "static": ((False, False), [(2, 3), (2, 3)]),
    "batch-of-one": ((True, False), [(2, 3)]),
}


@pytest.mark.parametrize("layout", list(VECTORS))
@pytest.mark.parametrize("case", [
    pytest.param(lambda x, w: torch.linalg.cross(x, w), id="linalg.cross-plain"),
    pytest.param(lambda x, w: torch.linalg.cross(w, x, dim=2), id="linalg.cross-plain-first"),
    pytest.param(lambda x, w: torch.cross(x, x.exp(), dim=-1), id="cross-two-batches"),
    pytest.param(lambda x, w: x.cross(w, 2), id="Tensor.cross"),
    pytest.param(lambda x, w: torch.linalg.vecdot(x, w), id="vecdot"),
    pytest.param(lambda x, w: torch.linalg.vecdot(x, x * 2, dim=1), id="vecdot-dynamic-dim"),
    pytest.param(lambda x, w: torch.linalg.matmul(x, w[0].T), id="linalg.matmul"),
])
def test_cross_vecdot_and_linalg_matmul_match_loop(case, layout, dtype):
    dims, shapes = VECTORS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    w = _weight(1, 1, 3, dtype=dtype)
    check(lambda x: case(x, w), examples, batch, params=[w])


@given(example_lists(dims=(True, False), min_length=0))
def test_vecdot_of_hypothesis_shapes_matches_loop(case):
    examples, batch = case
    check(lambda x: torch.linalg.vecdot(x, x.sin(), dim=1), examples, batch)
    check(lambda x: torch.linalg.vecdot(x, x.sin()), examples, batch)


def test_cross_and_vecdot_refuse_what_the_loop_refuses_naming_the_op():
    _, vectors = batch_of([(3, 3), (1, 3)], (True, False))
    _, transposed = batch_of([(3, 3), (3, 1)], (False, True))
    plain = torch.ones(1, 1, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"^torch\.cross: pass dim: without it torch takes "
                                         r"each example's first dimension of size 3"):
        torch.cross(vectors, plain)
    with pytest.raises(RuntimeError, match=r"^torch\.linalg\.cross: inputs must have the same "
                                           r"number of dimensions, got 3 and 1"):
        torch.linalg.cross(vectors, plain[0, 0])
    with pytest.raises(ValueError, match=r"^torch\.linalg\.cross: dimension -1 of input must "
                                         r"be static \(of size 3\)"):
        torch.linalg.cross(transposed, plain)
    with pytest.raises(ValueError, match=r"^Tensor\.cross: dimension 0 of input must be static"):
        vectors.cross(plain, 0)
    _, static = batch_of([(2, 3), (2, 3)], (False, False))
    with pytest.raises(RuntimeError, match=r"^torch\.linalg\.cross: inputs dimension 1 must "
                                           r"have length 3, got 2 in input"):
        torch.linalg.cross(static, plain, dim=1)
    with pytest.raises(ValueError, match=r"^torch\.linalg\.cross: dimension 1 of input must "
                                         r"be static"):
        torch.linalg.cross(vectors, plain, dim=1)
    with pytest.raises(RuntimeError, match=r"^torch\.linalg\.cross: expected both inputs to "
                                           r"have the same dtype"):
        torch.linalg.cross(vectors, plain.float())
    with pytest.raises(RuntimeError, match=r"^torch\.linalg\.vecdot: expected x and y to have "
                                           r"the same dtype"):
        torch.linalg.vecdot(vectors, plain.float())
    with pytest.raises(NotImplementedError, match=r"^torch\.linalg\.vecdot: out= is not "
                                                  r"supported"):
        torch.linalg.vecdot(vectors, plain, out=torch.empty(0))
