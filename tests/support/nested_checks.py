"""What every batch type's conversion from jagged ``torch.nested`` tensors must do, checked
for MaskedBatch (matchbox-core's tests) and PackedBatch (matchbox-packed's): ``from_nested``
is passed in, so this file imports no matchbox distribution."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import torch


def assert_examples(batch: Any, examples: list[torch.Tensor]) -> None:
    """The batch holds exactly ``examples``: the same number, shapes, dtypes and values."""
    got = list(batch.examples())
    assert len(got) == len(examples)
    for g, x in zip(got, examples):
        assert g.shape == x.shape and g.dtype == x.dtype
        assert torch.equal(g, x)


def check_from_nested_with_holes(from_nested: Callable[[torch.Tensor], Any]) -> Any:
    """A narrowed nested tensor (rows between its examples' rows, an empty example) gives
    each example its own rows only; returns the batch for the caller's further checks."""
    values = torch.randn(3, 6, 2)
    nested = torch.nested.narrow(values, 1, torch.tensor([0, 2, 1]), torch.tensor([3, 0, 5]),
                                 layout=torch.jagged)
    batch = from_nested(nested)
    assert_examples(batch, [values[0:1, 0:3], values[1:2, 2:2], values[2:3, 1:6]])
    return batch


def check_from_nested_refusals(from_nested: Callable[[torch.Tensor], Any]) -> None:
    """``from_nested`` refuses a plain tensor, a strided nested tensor and one ragged in
    another dimension than 1, each with a message that starts with its name."""
    op = re.escape(from_nested.__qualname__)  # MaskedBatch.from_nested, ...
    with pytest.raises(TypeError, match=rf"{op}: expected a nested tensor with "
                                        r"layout=torch\.jagged, got a 2-D torch\.float32 tensor"):
        from_nested(torch.zeros(2, 3))
    strided = torch.nested.nested_tensor([torch.zeros(2, 3), torch.zeros(1, 3)])
    with pytest.raises(TypeError, match=r"layout=torch\.jagged, got a nested 3-D"):
        from_nested(strided)
    nested = torch.nested.nested_tensor([torch.zeros(2, 3), torch.zeros(1, 3)],
                                        layout=torch.jagged)
    with pytest.raises(ValueError, match=rf"{op}: the nested tensor is ragged in dimension 2.*"
                                         r"transpose it first"):
        from_nested(nested.transpose(1, 2))
