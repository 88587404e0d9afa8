"""torch.cov and torch.corrcoef on batches against the per-example loop (values and
gradients).  Each example, ``(1, n)``, is one variable of ``n`` observations: one number
per example.  Padding holds NaN: an observation of padding would show as a mismatch."""

from __future__ import annotations

import warnings

import pytest
import torch
from family_cases import batch_of, check
from hypothesis import given
from hypothesis import strategies as st
from strategies import example_lists

from matchbox import MaskedBatch

CASES = {
    "cov": lambda x: torch.cov(x),
    "Tensor.cov": lambda x: x.cov(correction=0),
    "cov-correction-2": lambda x: torch.cov(x * 3, correction=2),
    "corrcoef": lambda x: torch.corrcoef(x),
    "Tensor.corrcoef": lambda x: (x + 1).corrcoef(),
}
# (dims, shapes): at least three observations (gradients of a finite result)
LAYOUTS = {
    "dynamic": ((True,), [(3,), (4,), (6,)]),
    "static": ((False,), [(4,), (4,)]),
    "batch-of-one": ((True,), [(5,)]),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_cov_and_corrcoef_match_loop(name, layout, dtype):
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    check(CASES[name], examples, batch)


@pytest.mark.parametrize("name", list(CASES))
def test_cov_and_corrcoef_of_short_examples_match_loop(name, dtype):
    # Zero, one and two observations: NaN or inf where the degrees of freedom run out, as
    # in the loop (values only: the loop's gradients there are NaN too); one number per
    # example: a single observation.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's "degrees of freedom is <= 0"
        for dims, shapes in (((True,), [(0,), (1,), (2,), (3,)]), ((), [(), ()])):
            examples, batch = batch_of(shapes, dims, dtype)
            check(CASES[name], examples, batch, check_grad=False)


def test_cov_of_integers_matches_loop():
    examples = [torch.tensor([[1, 2, 4]]), torch.tensor([[3, 3]])]
    batch = MaskedBatch.fromlist(examples, (True,))
    check(lambda x: torch.cov(x), examples, batch)
    check(lambda x: torch.corrcoef(x), examples, batch)


@given(example_lists(dims=(True,), min_length=2, max_size=8), st.integers(0, 1))
def test_cov_of_hypothesis_shapes_matches_loop(case, correction):
    examples, batch = case
    check(lambda x: torch.cov(x, correction=correction), examples, batch)


def test_cov_refusals_name_the_op():
    _, rows = batch_of([(3,), (2,)], (True,))
    _, sequences = batch_of([(3, 2), (2, 2)], (True, False))
    with pytest.raises(RuntimeError, match=r"^torch\.cov: expected input to have two or fewer "
                                           r"dimensions but each example has 3 dimensions"):
        torch.cov(sequences)
    with pytest.raises(RuntimeError, match=r"^Tensor\.corrcoef: expected input to have two or "
                                           r"fewer dimensions"):
        sequences.corrcoef()
    with pytest.raises(NotImplementedError, match=r"^torch\.cov: fweights= is not supported "
                                                  r"for batches"):
        torch.cov(rows, fweights=torch.ones(3, dtype=torch.long))
    with pytest.raises(NotImplementedError, match=r"^torch\.cov: aweights= is not supported"):
        torch.cov(rows, aweights=torch.ones(3))
    with pytest.raises(TypeError, match=r"^torch\.cov: the correction must be the same number "
                                        r"for every example"):
        torch.cov(rows, correction=rows.size(0))
