"""A variable assigned a tensor of another dtype on one path (``y = y.long()`` under a
per-example ``if``): in the loop each example keeps its own dtype, which a batch cannot
hold; its ``where`` promoted both values to one, silently (an ``int64`` variable became
``float64``, for every example, even where all of them took the branch).  Refused at the
merge (``runtime.merge_dtypes``)."""

from __future__ import annotations

import pytest
import torch
from control_cases import assert_batch_equals_loop, sequences

import matchbox

MIXED = (r"@batch: 'y' is a torch\.(int64|float{bits}) tensor for the examples that ran this "
         r"code and a torch\.(int64|float{bits}) tensor for the others \(.*"
         r"test_control_merge_dtypes.py, line \d+\); a batch holds one dtype.*"
         r"y = y.to\(torch.float64\)")


@matchbox.batch
def counts_where_positive(x):
    y = x.sum(1)  # a state static in every dimension (each example's (1, 3))
    if y.sum() > -1000:  # every example takes the branch: int64 in the loop, for all
        y = (y > 0).long()
    return y


@matchbox.batch
def counts_some_steps(x):
    y = x  # a dynamic dimension: the general selection
    if x.sum() > 0:
        y = (x > 0).long()
    return y


@matchbox.batch
def counts_in_a_loop(x):
    y = x.sum(1)
    while y.sum() < 3:
        y = (y + 1).long()
    return y


@matchbox.batch
def writes_a_wider_value_into_a_stack(x):
    y = x.new_zeros(x.size(0), 4, 3).long()
    for xt in x.unbind(1):
        if xt.sum() > 0:  # torch.where(at, float, int64) is float: int64 for the others
            at = torch.arange(4).view(1, 4, 1) == 0
            y = torch.where(at, xt.unsqueeze(1), y)
    return y


@pytest.mark.parametrize("dtype, bits", [(torch.float32, 32), (torch.float64, 64)])
@pytest.mark.parametrize("f", [counts_where_positive, counts_some_steps, counts_in_a_loop,
                               writes_a_wider_value_into_a_stack])
@pytest.mark.parametrize("lengths", [(2, 0, 3), (0, 1)])
def test_a_variable_of_two_dtypes_is_refused(f, lengths, dtype, bits):
    xs, xb = sequences(lengths, dtype=dtype)
    for x in xs:
        x.copy_(x.abs() + 0.1)  # every example with elements takes the branches
    xb = matchbox.MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))
    with pytest.raises(TypeError, match=MIXED.format(bits=bits)):
        f(xb)


@matchbox.batch
def counts_on_both_paths(x):
    y = x.sum(1).long()
    if x.sum() > 0:
        y = (x > 0).long().sum(1)
    return y


@pytest.mark.parametrize("lengths", [(2, 0, 3), (1,), (0,)])
def test_one_dtype_on_both_paths_equals_the_loop(lengths):
    xs, xb = sequences(lengths)
    assert_batch_equals_loop(counts_on_both_paths, (xs, xb))
