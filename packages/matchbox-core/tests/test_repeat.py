"""repeat, tile and repeat_interleave against the per-example loop, values and gradients.

Parametrised over the registry's ``repeat`` family.  Along a dynamic dimension each
example repeats its own real values (NaN padding must never show up in the result).
"""

from __future__ import annotations

import re

import pytest
import torch
from family_cases import (
    LAYOUTS,
    NAN,
    assert_every_op_has_a_case,
    batch_of,
    check,
    registered,
)
from hypothesis import given
from hypothesis import strategies as st
from strategies import example_lists

from matchbox import MaskedBatch
from matchbox.testing import mb_assert

CASES = {
    "Tensor.repeat": [lambda x: x.repeat(1, 2, 3), lambda x: x.repeat((1, 1, 2)),
                      lambda x: x.repeat(1, 3, 1, 2), lambda x: x.repeat(1, 1, 1)],
    "torch.tile": [lambda x: torch.tile(x, (2,)), lambda x: torch.tile(x, (3, 1)),
                   lambda x: torch.tile(x, (1, 2, 2, 1))],
    "Tensor.tile": [lambda x: x.tile((2, 1)), lambda x: x.tile(2)],
    "torch.repeat_interleave": [lambda x: torch.repeat_interleave(x, 2, 1),
                                lambda x: torch.repeat_interleave(x, 3, dim=-1),
                                lambda x: torch.repeat_interleave(x, torch.tensor(2), 2),
                                lambda x: torch.repeat_interleave(x, 1, 0)],
    "Tensor.repeat_interleave": [lambda x: x.repeat_interleave(2, dim=1),
                                 lambda x: x.repeat_interleave(1, 2)],
}

REGISTERED = registered("repeat")


def test_every_registered_repeat_op_has_a_case_here():
    assert_every_op_has_a_case("repeat", REGISTERED, CASES)


@pytest.mark.parametrize("name", REGISTERED)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_repeat_op_matches_loop(name, layout, dtype):
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    for f in CASES[name]:
        check(f, examples, batch)


# repeat and repeat_interleave are not written for examples empty in one of two dynamic
# dimensions and not the other (see the refusal test below): sizes start at one here.
@given(example_lists(dims=(True, True), max_size=4, min_length=1), st.integers(0, 3),
       st.integers(1, 3), st.integers(1, 2))
def test_repeat_on_random_two_dynamic_batches_matches_loop(case, a, b, c):
    check(lambda x: x.repeat(1, a or 1, b) * c, *case)
    check(lambda x: x.repeat_interleave(b, 1).repeat_interleave(c, -1), *case)


def test_an_example_empty_in_one_of_two_dynamic_dims_is_refused_by_repeat():
    examples = [torch.randn(1, 2, 3), torch.randn(1, 0, 2)]
    batch = MaskedBatch.fromlist(examples, (True, True))
    with pytest.raises(NotImplementedError, match=r"Tensor.repeat_interleave does not support a "
                                                  r"batch holding an example that is empty in one "
                                                  r"dynamic dimension and not in another \(example "
                                                  r"1 has sizes \(0, 2\)"):
        batch.repeat_interleave(2, 1)


@given(example_lists(dims=(True, False), min_length=0), st.integers(0, 3), st.integers(0, 3))
def test_repeat_on_random_batches_matches_loop(case, a, b):
    check(lambda x: x.repeat(1, a, b), *case)
    check(lambda x: x.repeat_interleave(a, 1), *case)


@pytest.mark.parametrize("layout", ["dynamic-static", "static-dynamic", "all-static"])
def test_repeat_zero_times_matches_loop(layout, dtype):
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    check(lambda x: x.repeat(1, 1, 0, 2), examples, batch)
    check(lambda x: x.repeat(1, 0, 1), examples, batch)
    check(lambda x: x.repeat_interleave(0, 2), examples, batch)


def test_repeat_zero_times_along_one_of_two_dynamic_dims_is_refused():
    # Every example would be empty in one dynamic dimension and not the other.
    _, batch = batch_of([(2, 3), (1, 1)], (True, True))
    with pytest.raises(ValueError, match=r"^Tensor\.repeat: example 0 would be empty in some "
                                         r"but not all of the result's dynamic dimensions"):
        batch.repeat(1, 1, 0)
    with pytest.raises(ValueError, match=r"^Tensor\.repeat_interleave: example 0 would be empty"):
        batch.repeat_interleave(0, 1)


def test_repeat_interleave_with_counts_per_element_matches_loop(dtype):
    # Along a static dim: counts per element, as torch takes them.
    examples, batch = batch_of([(3, 2), (1, 2), (0, 2)], (True, False), dtype)
    counts = torch.tensor([2, 0])
    check(lambda x: x.repeat_interleave(counts, 2), examples, batch)
    # Along a dynamic dim: every example must have one count per element.
    examples, batch = batch_of([(3, 2), (3, 2)], (True, False), dtype)
    batch = MaskedBatch.fromlist(examples + [torch.randn(1, 1, 2, dtype=dtype)], (True, False))
    token = torch.tensor([1, 0, 3])
    with pytest.raises(ValueError, match=re.escape(
            "Tensor.repeat_interleave: example 2 has size 1 in one argument and 3 in another "
            "along dimension 1 (the number of repeats)")):
        batch.repeat_interleave(token, 1)
    examples = [torch.randn(1, 3, 2, dtype=dtype) for _ in range(2)]
    batch = MaskedBatch.fromlist(examples, (True, False), padding_value=NAN)
    check(lambda x: x.repeat_interleave(token, 1), examples, batch)


@pytest.mark.parametrize("dim", [1, 2])
def test_repeat_interleave_with_one_count_per_example_matches_loop(dim, dtype):
    examples, batch = batch_of([(3, 2), (1, 2), (2, 2), (4, 2)], (True, False), dtype)
    counts = [torch.tensor(2), torch.tensor(0), torch.tensor(1), torch.tensor(3)]
    if dim == 2:
        counts[1] = torch.tensor(1)  # (an empty example dim 2 would leave dim 1 without size)
    cb = MaskedBatch.fromlist([c.view(1) for c in counts], ())
    mb_assert(lambda x, r: x.repeat_interleave(r, dim), [examples, counts], [batch, cb], 4)


def test_repeat_errors_name_the_op_and_the_reason():
    _, batch = batch_of([(3, 2), (1, 2)], (True, False))
    with pytest.raises(ValueError, match=r"^Tensor\.repeat: the first factor \(2\) repeats "
                                         r"dimension 0 of the result"):
        batch.repeat(2, 1, 1)
    with pytest.raises(ValueError, match=r"^torch\.tile: the first factor \(3\)"):
        torch.tile(batch, (3, 1, 1, 1))
    with pytest.raises(RuntimeError, match=r"^Tensor\.repeat: number of dimensions of repeat "
                                           r"dims \(2\) can not be smaller"):
        batch.repeat(1, 2)
    with pytest.raises(RuntimeError, match=r"^Tensor\.repeat: repeats can not be negative"):
        batch.repeat(1, -1, 1)
    with pytest.raises(ValueError, match=r"^Tensor\.repeat_interleave: dim=None flattens each "
                                         r"example"):
        batch.repeat_interleave(2)
    with pytest.raises(ValueError, match=r"^torch\.repeat_interleave\(repeats\) gives the "
                                         r"indices"):
        torch.repeat_interleave(batch)
    with pytest.raises(ValueError, match=r"^Tensor\.repeat_interleave: repeating dimension 0"):
        batch.repeat_interleave(2, 0)
    with pytest.raises(RuntimeError, match=r"^Tensor\.repeat_interleave: repeats can not be "
                                           r"negative, got -1"):
        batch.repeat_interleave(-1, 1)
    negative = MaskedBatch(torch.tensor([1, -2]), None, ())
    with pytest.raises(RuntimeError, match=r"^Tensor\.repeat_interleave: repeats can not be "
                                           r"negative: example 1 has -2"):
        batch.repeat_interleave(negative, 1)
    two = MaskedBatch.fromlist([torch.randn(1, 2, 3), torch.randn(1, 0, 3)], (True, False))
    counts = MaskedBatch(torch.tensor([1, 2]), None, ())
    with pytest.raises(ValueError, match=r"^Tensor\.repeat_interleave: example 1 would be empty "
                                         r"in some but not all"):
        two.repeat_interleave(counts, 2)


def test_repeat_interleave_with_the_right_output_size_matches_loop(dtype):
    examples, batch = batch_of([(3, 2), (3, 2)], (True, False), dtype)
    check(lambda x: x.repeat_interleave(2, 1, output_size=6), examples, batch)
    check(lambda x: x.repeat_interleave(3, 2, output_size=6), examples, batch)
    check(lambda x: x.repeat_interleave(torch.tensor([1, 2]), 2, output_size=3), examples,
          batch)
    counts = [torch.tensor(2), torch.tensor(2)]
    cb = MaskedBatch.fromlist([c.view(1) for c in counts], ())
    mb_assert(lambda x, r: x.repeat_interleave(r, 1, output_size=6), [examples, counts],
              [batch, cb], 2)


def test_repeat_interleave_refuses_a_wrong_output_size_as_torch_does():
    # torch raises for an output_size other than the result's size; ignoring it would
    # answer where the loop raises.
    _, batch = batch_of([(3, 2), (1, 2)], (True, False))
    with pytest.raises(RuntimeError, match=r"^Tensor\.repeat_interleave: invalid output_size, "
                                           r"expected 4 but got 5"):
        batch.repeat_interleave(2, 2, output_size=5)
    with pytest.raises(RuntimeError, match=r"^Tensor\.repeat_interleave: invalid output_size, "
                                           r"expected 1 but got 2"):
        batch.repeat_interleave(1, 0, output_size=2)
    with pytest.raises(RuntimeError, match=r"^Tensor\.repeat_interleave: invalid output_size: "
                                           r"example 1's result has size 2 along dimension 1, "
                                           r"not 6"):
        batch.repeat_interleave(2, 1, output_size=6)
    with pytest.raises(RuntimeError, match=r"^torch\.repeat_interleave: invalid output_size: "
                                           r"the repeats sum to 3, not 4"):
        torch.repeat_interleave(batch, torch.tensor([1, 2]), 2, output_size=4)
    counts = MaskedBatch(torch.tensor([1, 2]), None, ())
    with pytest.raises(RuntimeError, match=r"^Tensor\.repeat_interleave: invalid output_size: "
                                           r"example 0's result has size 3 along dimension 1, "
                                           r"not 2"):
        batch.repeat_interleave(counts, 1, output_size=2)
