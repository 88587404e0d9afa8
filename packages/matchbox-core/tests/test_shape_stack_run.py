"""``matchbox.ops.shape.stack_run``: a dynamic stack of items, the last of which come
stacked along a new first dimension (a scan's per-step outputs), equals the dynamic stack
of every item one by one (``stack_batches``), data where real and mask."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from matchbox import MaskedBatch
from matchbox.ops.shape import stack_batches, stack_run


def item(batch: int, shape: tuple[int, ...], masked: bool, dtype: torch.dtype) -> MaskedBatch:
    """A step's output: static in every dimension, real for some examples (NaN elsewhere)."""
    data = torch.randn(batch, *shape, dtype=dtype)
    if not masked:
        return MaskedBatch._make(data, None, (False,) * len(shape))
    mask = torch.rand(batch, *[1] * len(shape)) < 0.6
    data = data.masked_fill(~mask, float("nan"))
    return MaskedBatch._make(data, mask, (False,) * len(shape))


def assert_same_batch(result: MaskedBatch, expected: MaskedBatch) -> None:
    assert result.dims == expected.dims
    assert result.data.shape == expected.data.shape
    assert torch.equal(result.mask, expected.mask)
    real = expected.mask.expand_as(expected.data)
    assert torch.equal(result.data[real], expected.data[real])


@given(batch=st.integers(1, 4), head=st.integers(0, 3), run=st.integers(1, 5),
       shape=st.sampled_from([(3,), (2, 3)]), dim=st.sampled_from([1, 2, -1]),
       masked_run=st.booleans(), dtype=st.sampled_from([torch.float32, torch.float64]))
def test_a_run_stacked_whole_equals_its_items_stacked_one_by_one(batch, head, run, shape, dim,
                                                                 masked_run, dtype):
    heads = [item(batch, shape, True, dtype) for _ in range(head)]
    steps = [item(batch, shape, masked_run, dtype) for _ in range(run)]
    data = torch.stack([s.data for s in steps])
    mask = torch.stack([s._mask for s in steps]) if masked_run else None
    expected = stack_batches("stack", heads + steps, dim, dynamic=True)
    assert_same_batch(stack_run("stack", heads, data, mask, dim), expected)


def test_a_run_keeps_the_gradient_of_each_step():
    steps = [item(2, (3,), True, torch.float64) for _ in range(3)]
    leaf = torch.randn(3, 2, 3, dtype=torch.float64, requires_grad=True)
    data = leaf * 2
    mask = torch.stack([s._mask for s in steps])
    result = stack_run("stack", [], data, mask, 1)
    result.data.masked_fill(~result.mask, 0).sum().backward()
    # Each example's real steps come first; each real value's gradient is 2, padding's 0.
    assert torch.equal(leaf.grad, 2.0 * mask.expand_as(leaf))


def test_parts_with_a_dynamic_dimension_are_not_joined_whole():
    dynamic = MaskedBatch.fromlist([torch.randn(1, 2), torch.randn(1, 3)], (True,))
    assert stack_run("stack", [dynamic], torch.randn(2, 2, 3), None, 1) is None


def test_parts_of_another_size_are_refused_naming_the_op():
    head = [item(2, (4,), True, torch.float64)]
    with pytest.raises(ValueError, match=r"matchbox.functional.stack: tensor 1 of the list "
                                         r"has size 3 in dimension 1 and tensor 0 has 4"):
        stack_run("matchbox.functional.stack", head, torch.randn(2, 2, 3), None, 1)
