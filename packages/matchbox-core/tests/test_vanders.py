"""torch.vander and torch.linalg.vander on batches against the per-example loop (values
and gradients; padding holds NaN)."""

from __future__ import annotations

import pytest
import torch
from family_cases import batch_of, check
from hypothesis import given
from hypothesis import strategies as st
from strategies import example_lists

from matchbox import MaskedBatch

# (dims, example shapes): one number per example, rows of a dynamic or static last
# dimension (lengths at least 2: linalg.vander's default N is the length, which torch
# wants above 1), a batch of one
SCALARS = ((), [(), (), ()])
LAST_DYNAMIC = ((False, True), [(2, 3), (2, 2), (2, 5)])
LAST_STATIC = ((True, False), [(3, 2), (0, 2), (1, 2), (4, 2)])
ONE = ((True, False), [(2, 3)])


@pytest.mark.parametrize("layout", [LAST_DYNAMIC, LAST_STATIC, ONE],
                         ids=["last-dynamic", "last-static", "batch-of-one"])
@pytest.mark.parametrize("n", [None, 2, 4])
def test_linalg_vander_matches_loop(layout, n, dtype):
    dims, shapes = layout
    examples, batch = batch_of(shapes, dims, dtype)
    check(lambda x: torch.linalg.vander(x, N=n), examples, batch)
    check(lambda x: torch.linalg.vander(x * 2, N=n).sum(-1), examples, batch)


def test_linalg_vander_of_one_number_per_example_matches_loop(dtype):
    examples, batch = batch_of(*reversed(SCALARS), dtype=dtype)
    check(lambda x: torch.linalg.vander(x, N=3), examples, batch)


@pytest.mark.parametrize("n, increasing", [(None, False), (3, False), (4, True), (0, False)])
def test_vander_of_one_number_per_example_matches_loop(n, increasing, dtype):
    # values only: torch.vander's own backward fails (it writes a tensor it saved), in the
    # loop as in the batch
    for shapes in (SCALARS[1], [()]):
        examples, batch = batch_of(shapes, (), dtype)
        check(lambda x: torch.vander(x, n, increasing), examples, batch, check_grad=False)


@given(example_lists(dims=(False, True), min_length=2, max_size=5), st.integers(2, 4))
def test_linalg_vander_of_hypothesis_shapes_matches_loop(case, n):
    examples, batch = case
    check(lambda x: torch.linalg.vander(x), examples, batch)
    check(lambda x: torch.linalg.vander(x, N=n), examples, batch)


def test_vanders_refuse_what_the_loop_refuses_naming_the_op():
    _, rows = batch_of([(3,), (1,)], (True,))
    _, scalars = batch_of([(), ()], ())
    with pytest.raises(RuntimeError, match=r"^torch\.linalg\.vander: N must be greater than 1: "
                                           r"example 1 has size 1 in its last dimension, the "
                                           r"default N"):
        torch.linalg.vander(rows)
    with pytest.raises(RuntimeError, match=r"^torch\.linalg\.vander: N must be greater than 1, "
                                           r"got 1"):
        torch.linalg.vander(rows, N=1)
    with pytest.raises(RuntimeError, match=r"^torch\.linalg\.vander: N must be greater than 1 "
                                           r"\(each example's x has size 1"):
        torch.linalg.vander(scalars)
    with pytest.raises(RuntimeError, match=r"^torch\.vander: x must be a one-dimensional "
                                           r"tensor: each example has 2 dimensions"):
        torch.vander(rows)
    with pytest.raises(TypeError, match=r"^torch\.vander: the N must be the same number for "
                                       r"every example"):
        torch.vander(scalars, N=rows.size(0))


def test_linalg_vander_of_a_batch_empty_in_one_of_two_dynamic_dims_is_refused():
    batch = MaskedBatch.fromlist([torch.randn(1, 0, 3), torch.randn(1, 2, 2)], (True, True))
    with pytest.raises(NotImplementedError, match=r"torch\.linalg\.vander"):
        torch.linalg.vander(batch)
