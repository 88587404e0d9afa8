"""``batch @ W`` on the packed rows, against the loop."""

from __future__ import annotations

import pytest
import torch
from packed_strategies import examples_of_lengths

from matchbox import _registry
from matchbox.packed import PackedBatch
from matchbox.testing import mb_assert

CALLS = {
    "torch.matmul": lambda x, w: torch.matmul(x, w),
    "Tensor.matmul": lambda x, w: x.matmul(w),
    "Tensor.__matmul__": lambda x, w: x @ w,
}


def test_every_registered_op_is_tested_here():
    # Tensor.__rmatmul__ (plain @ batch) contracts the packed dimension: its error is tested.
    registered = {e.name for e in _registry.entries("PackedBatch") if e.family == "linalg"}
    assert registered == set(CALLS) | {"Tensor.__rmatmul__"}


@pytest.mark.parametrize("name", sorted(CALLS))
@pytest.mark.parametrize("shape", [(3, 4), (3,)], ids=["matrix", "vector"])
def test_batch_times_a_shared_matrix_equals_loop(name, shape, dtype):
    xs = examples_of_lengths([3, 0, 5, 1], dtype=dtype)
    w = torch.randn(*shape, dtype=dtype)
    mb_assert(CALLS[name], [xs, [w] * 4], [PackedBatch.fromlist(xs), w], 4)


def test_other_products_say_how_to_convert():
    pb = PackedBatch.fromlist(examples_of_lengths([2, 3]))
    with pytest.raises(NotImplementedError, match=r"torch.matmul: a PackedBatch multiplies on the "
                                                  r"left of a plain \(F, K\) matrix .*"
                                                  r"as_masked\(x\)"):
        torch.matmul(pb, pb)
    with pytest.raises(NotImplementedError, match=r"Tensor.matmul: a PackedBatch multiplies on the "
                                                  r"left"):
        torch.randn(4, 2) @ pb
    with pytest.raises(NotImplementedError, match=r"Tensor.__rmatmul__: a PackedBatch multiplies "
                                                  r"on the left"):
        pb.__rmatmul__(torch.randn(4, 2))
