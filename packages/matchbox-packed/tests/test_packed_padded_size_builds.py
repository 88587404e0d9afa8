"""``p.maxsize(1)`` of a ``PackedBatch`` as a size of an op that builds a batch: each
example's own length, in the order of the examples (not the packed order), as in the loop
(core's ``test_padded_size_builds.py``)."""

from __future__ import annotations

import pytest
import torch

from matchbox import MaskedBatch
from matchbox.packed import PackedBatch


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_batch_built_to_a_packed_batchs_padded_size_has_each_examples_length(dtype):
    lengths = [2, 5, 0, 3, 1]
    examples = [torch.randn(1, n, 3, dtype=dtype) for n in lengths]
    packed = PackedBatch.fromlist(examples)
    masked = MaskedBatch.fromlist(examples, (True, False), padding_value=float("nan"))
    built = masked.new_ones(masked.size(0), packed.maxsize(1), 3)
    assert built.dims == (True, False) and built.lengths()[:, 0].tolist() == lengths
    summed = (masked + built).examples()
    for x, y in zip(examples, summed):
        torch.testing.assert_close(y, x + 1)


def test_a_packed_batchs_padded_size_of_other_examples_is_refused():
    packed = PackedBatch.fromlist([torch.randn(1, n, 3) for n in (2, 4)])
    masked = MaskedBatch.fromlist([torch.randn(1, n, 3) for n in (2, 4, 1)], (True, False))
    with pytest.raises(ValueError, match=r"Tensor\.new_zeros: size 1 is x\.maxsize\(1\) of a "
                                         r"batch of 2 examples, but the batch it builds has 3"):
        masked.new_zeros(masked.size(0), packed.maxsize(1), 3)
