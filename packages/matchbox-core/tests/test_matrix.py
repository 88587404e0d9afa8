"""tril/triu, diagonal, diag_embed and cdist against the per-example loop, values and gradients.

Parametrised over the registry's ``matrix`` family; padding holds NaN.
"""

from __future__ import annotations

import pytest
import torch
from family_cases import NAN, assert_every_op_has_a_case, batch_of, check, registered
from hypothesis import given
from hypothesis import strategies as st
from strategies import example_lists
from torch_features import NUMBER_ARGUMENTS_REACH_TORCH_FUNCTION, batch_needs, lacks

from matchbox import MaskedBatch
from matchbox.testing import mb_assert

# Examples (1, A, B, C): matrices in the last two dimensions, with the first dynamic or
# static, and rank-two examples (one-row matrices).
LAYOUTS = {
    "square-dynamic": ((False, True, True), [(2, 3, 3), (2, 1, 1), (2, 4, 4)]),
    "rows-dynamic": ((True, True, False), [(2, 3, 4), (1, 1, 4), (3, 2, 4)]),
    "columns-dynamic": ((False, False, True), [(2, 3, 0), (2, 3, 5), (2, 3, 1)]),
    "all-static": ((False, False, False), [(2, 3, 4), (2, 3, 4)]),
    "batch-of-one": ((False, True, True), [(1, 2, 5)]),
    "rank-two": ((True,), [(3,), (0,), (5,)]),
}

CASES = {
    "torch.tril": lambda x: torch.tril(x),
    "Tensor.tril": lambda x: x.tril(-1) + x.tril(diagonal=2),
    "torch.triu": lambda x: torch.triu(x, 1),
    "Tensor.triu": lambda x: x.triu(),
    "Tensor.tril_": lambda x: (x * 1).tril_(1),
    "Tensor.triu_": lambda x: (x + 0).triu_(-2),
    "torch.diagonal": lambda x: torch.diagonal(x, 0, -2, -1),
    "Tensor.diagonal": lambda x: x.diagonal(-1, dim1=-1, dim2=-2) + 0,
    "torch.cdist": lambda x: torch.cdist(x, x * 2),
    "torch.diag_embed": lambda x: torch.diag_embed(x),
    "Tensor.diag_embed": lambda x: x.diag_embed(1, 1, -1),
}
RANK_THREE_ONLY = {"torch.diagonal", "Tensor.diagonal"}

REGISTERED = registered("matrix")


def test_every_registered_matrix_op_has_a_case_here():
    assert_every_op_has_a_case("matrix", REGISTERED, CASES)


@pytest.mark.parametrize("name", REGISTERED)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_matrix_op_matches_loop(name, layout, dtype):
    dims, shapes = LAYOUTS[layout]
    if layout == "rank-two" and name in RANK_THREE_ONLY:
        return  # tested below: refused
    examples, batch = batch_of(shapes, dims, dtype)
    check(CASES[name], examples, batch)


def _partly_empty(shapes, dims, offset, d1, d2):
    """Whether an example's diagonal would be empty while it has a size in another dynamic
    dimension of the result (which a batch cannot hold: refused, see below)."""
    for shape in shapes:
        n1, n2 = shape[d1 - 1], shape[d2 - 1]
        length = max(0, min(n1, n2 - offset) if offset >= 0 else min(n1 + offset, n2))
        kept = [shape[j - 1] for j in range(1, len(shape) + 1)
                if j not in (d1, d2) and dims[j - 1]]
        dynamic = dims[d1 - 1] or dims[d2 - 1]
        if dynamic and kept and (length == 0) != (0 in kept):
            return True
    return False


@pytest.mark.parametrize("offset", [-2, -1, 0, 1, 3])
@pytest.mark.parametrize("layout", ["square-dynamic", "rows-dynamic", "columns-dynamic"])
@pytest.mark.parametrize("pair", [(2, 3), (1, 3), (3, 1)])
def test_diagonal_offsets_match_loop(offset, layout, pair, dtype):
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    f = lambda x: torch.diagonal(x, offset, *pair)  # noqa: E731
    if _partly_empty(shapes, dims, offset, *pair):
        with pytest.raises(ValueError, match="would be empty in some but not all"):
            f(batch)
    else:
        check(f, examples, batch)


@pytest.mark.parametrize("offset", [-2, 0, 1])
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("pair", [(-2, -1), (-1, -2), (1, 2), (2, 1), (1, -1)])
def test_diag_embed_offsets_and_dims_match_loop(offset, layout, pair, dtype):
    # Zero-length examples (columns-dynamic, rank-two) get squares of |offset|.
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    check(lambda x: torch.diag_embed(x, offset, *pair), examples, batch)


def test_diag_embed_of_a_last_dimension_empty_beside_another_is_refused():
    # The loop's (1, 2, 0, 0) is empty in two dynamic dimensions and not in the third.
    _, batch = batch_of([(2, 3), (2, 0)], (True, True))
    with pytest.raises(ValueError, match=r"^torch\.diag_embed: example 1 would be empty in "
                                         r"some but not all"):
        torch.diag_embed(batch)
    examples, batch = batch_of([(2, 3), (2, 0)], (False, True))  # static beside: fine
    check(lambda x: torch.diag_embed(x), examples, batch)


def test_diagonal_is_a_view_of_each_example():
    examples, batch = batch_of([(3, 3), (2, 2)], (True, True))
    batch.diagonal(0, 1, 2).mul_(0)
    assert torch.equal(batch.data[0].diagonal(), torch.zeros(3, dtype=torch.float64))
    assert torch.equal(batch.data[1, :2, :2].diagonal(), torch.zeros(2, dtype=torch.float64))


@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 3.0, float("inf")])
@pytest.mark.parametrize("layout", ["rows-dynamic", "columns-dynamic", "all-static",
                                    "square-dynamic", "rank-two"])
def test_cdist_between_batches_and_with_plain_tensors_matches_loop(p, layout, dtype):
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    others = [torch.randn(x.shape, dtype=dtype) + 0.5 for x in examples]
    ob = MaskedBatch.fromlist(others, dims, padding_value=NAN)
    mb_assert(lambda x, y: torch.cdist(x, y, p=p), [examples, others], [batch, ob],
              len(examples))
    if not dims[-1]:
        plain = torch.randn(4, examples[0].size(-1), dtype=dtype)
        check(lambda x: torch.cdist(x, plain, p), examples, batch)
        check(lambda x: torch.cdist(plain.unsqueeze(0), x, p), examples, batch)


def test_cdist_rows_against_other_examples_rows_of_different_counts(dtype):
    # The key/query pattern: P and R differ per example, features static.
    xs = [torch.randn(1, n, 3, dtype=dtype) for n in (2, 0, 4)]
    ys = [torch.randn(1, r, 3, dtype=dtype) for r in (5, 0, 1)]
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=NAN)
    yb = MaskedBatch.fromlist(ys, (True, False), padding_value=NAN)
    mb_assert(lambda x, y: torch.cdist(x, y).sum(-1), [xs, ys], [xb, yb], 3)
    # An example with rows but nothing to compare them with gives (1, P, 0) in the loop,
    # which a batch with two dynamic dimensions cannot hold (yet): refused.
    yb = MaskedBatch.fromlist([ys[0], ys[1], ys[1]], (True, False), padding_value=NAN)
    with pytest.raises(ValueError, match=r"^torch\.cdist: example 2 would be empty in some but "
                                         r"not all of the result's dynamic dimensions"):
        torch.cdist(xb, yb)


@given(example_lists(dims=(True, False), min_length=0), st.integers(-2, 2))
def test_tril_and_cdist_on_random_batches_match_loop(case, diagonal):
    check(lambda x: torch.tril(x, diagonal) + torch.triu(x, -diagonal), *case)
    check(lambda x: torch.cdist(x, x.flip(1) * 0.5), *case)


def test_matrix_errors_name_the_op():
    _, batch = batch_of([(3, 3), (2, 2)], (True, True))
    with pytest.raises(ValueError, match=r"^torch\.diagonal: dim1=0, dim2=1 include dimension 0"):
        torch.diagonal(batch)
    with pytest.raises(RuntimeError, match=r"^Tensor\.diagonal: diagonal dimensions cannot be "
                                           r"identical 1, 1"):
        batch.diagonal(0, 1, 1)
    scalars = MaskedBatch(torch.randn(3), None, ())
    with pytest.raises(RuntimeError, match=r"^torch\.tril: input tensor must have at least 2 "
                                           r"dimensions"):
        torch.tril(scalars)
    with pytest.raises(NotImplementedError, match=r"^Tensor\.tril_: the batch was indexed"):
        batch[:, -1:].tril_()
    with pytest.raises(ValueError, match=r"^torch\.cdist: each example's result would have "
                                         r"size 4 in dimension 0"):
        torch.cdist(torch.randn(4, 3, dtype=torch.float64), batch_of([(3,), (3,)], (False,))[1])
    _, rows = batch_of([(3, 2), (2, 2)], (True, False))
    _, wide = batch_of([(3, 2), (2, 3)], (True, True))
    with pytest.raises(ValueError, match=r"^torch\.cdist: example 1 has size 3 in one argument "
                                         r"and 2 in another along the feature dimension 2"):
        torch.cdist(wide, rows)
    with pytest.raises(ValueError, match=r"^torch\.diag_embed: dim1=0, dim2=-1 include "
                                         r"dimension 0"):
        torch.diag_embed(batch, 0, 0, -1)
    with pytest.raises(RuntimeError, match=r"^Tensor\.diag_embed: diagonal dimensions cannot "
                                           r"be identical 1, -3"):
        batch.diag_embed(0, 1, -3)
    with pytest.raises(ValueError, match=r"^torch\.diag_embed: the examples are scalars"):
        torch.diag_embed(scalars)
    with pytest.raises(ValueError, match=r"^torch\.diagonal: example 1 would be empty in some "
                                         r"but not all"):
        _, cube = batch_of([(2, 3, 3), (2, 1, 1)], (True, True, True))
        torch.diagonal(cube, 2, 2, 3)


# torch's own functions (not the methods) check an int argument before Matchbox sees it,
# on a torch that does not hand numbers to __torch_function__ (2.3: its TypeError, below).
INT_OF_A_BATCH = batch_needs(NUMBER_ARGUMENTS_REACH_TORCH_FUNCTION,
                             "hands a batch given as an int argument to Matchbox")


@pytest.mark.parametrize("f, what", [
    pytest.param(lambda x, k: torch.triu(x, k), r"torch.triu: the diagonal is a batch",
                 marks=INT_OF_A_BATCH),
    (lambda x, k: x.tril(k), r"Tensor.tril: the diagonal is a batch"),
    pytest.param(lambda x, k: torch.diagonal(x, k, 1, 2),
                 r"torch.diagonal: the offset is a batch", marks=INT_OF_A_BATCH),
    (lambda x, k: x.diag_embed(k), r"Tensor.diag_embed: the offset is a batch"),
])
def test_a_per_example_diagonal_is_refused_naming_the_op(f, what):
    # One offset per example (len of a per-example list, a merged counter) made the op
    # call itself on it until Python's recursion limit (a user trial).
    x = MaskedBatch.fromlist([torch.randn(1, n, n) for n in (3, 1)], (True, True))
    k = x.size_as_tensor(1) // 2
    with pytest.raises(NotImplementedError,
                       match=what + r" \(one value per example\); per-example values are "
                                    r"not implemented here"):
        f(x, k)


@lacks(NUMBER_ARGUMENTS_REACH_TORCH_FUNCTION, "hands a batch given as an int argument to "
       "Matchbox")
def test_a_per_example_diagonal_is_torchs_type_error_where_torch_does_not_hand_it_on():
    x = MaskedBatch.fromlist([torch.randn(1, n, n) for n in (3, 1)], (True, True))
    with pytest.raises(TypeError, match=r"triu\(\): argument 'diagonal' \(position 2\) must "
                                        r"be int, not MaskedBatch"):
        torch.triu(x, x.size_as_tensor(1) // 2)
