"""``torch._is_all_true`` (torch.distributions' argument validation) of a batch: an answer
only where every running example would answer the same, padding not looked at;
``Tensor.ndimension`` is ``dim()``.  The distributions themselves: matchbox-nn's
``test_nn_distributions.py``."""

from __future__ import annotations

import pytest
import torch

from matchbox import MaskedBatch

pytestmark = pytest.mark.skipif(not hasattr(torch, "_is_all_true"),
                                reason="this torch has no torch._is_all_true")


def test_is_all_true_answers_only_where_every_example_agrees():
    flags = MaskedBatch.fromlist([torch.ones(1, n, dtype=torch.bool) for n in (2, 0, 3)],
                                 (True,), padding_value=False)
    assert torch._is_all_true(flags).item() is True  # padding (False) is not looked at
    none = MaskedBatch.fromlist([torch.zeros(1, n, dtype=torch.bool) for n in (2, 1)], (True,))
    assert torch._is_all_true(none).item() is False
    mixed = MaskedBatch.fromlist([torch.ones(1, 2, dtype=torch.bool),
                                  torch.tensor([[True, False]])], (False,))
    with pytest.raises(ValueError, match=r"^torch\._is_all_true: example 1 has a false value "
                                         r"and another example has none; each example of the "
                                         r"loop would take its own branch"):
        torch._is_all_true(mixed)
    x = MaskedBatch.fromlist([torch.randn(1, 3), torch.randn(1, 2)], (True,))
    assert x.ndimension() == 2
    with pytest.raises(RuntimeError, match=r"^torch\._is_all_true: expects a bool tensor, "
                                           r"got torch\.float32"):
        torch._is_all_true(x)
