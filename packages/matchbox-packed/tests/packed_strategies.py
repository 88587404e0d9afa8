"""Examples and their PackedBatch for the packed tests: lengths (0 and 1 included), dtypes."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from matchbox.packed import PackedBatch


def examples_of_lengths(lengths, static=(3,), dtype=torch.float64, device=None):
    return [torch.randn(1, n, *static, dtype=dtype, device=device) for n in lengths]


@st.composite
def packed_examples(draw, static=None, min_batch=1, max_batch=5, max_length=6, min_length=0,
                    dtypes=(torch.float32, torch.float64)):
    """(examples, PackedBatch) with random lengths, static sizes and dtype."""
    batch_size = draw(st.integers(min_batch, max_batch))
    dtype = draw(st.sampled_from(dtypes))
    if static is None:
        static = tuple(draw(st.lists(st.integers(1, 4), min_size=0, max_size=2)))
    lengths = draw(st.lists(st.integers(min_length, max_length), min_size=batch_size,
                            max_size=batch_size))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    examples = [torch.randn(1, n, *static, generator=g, dtype=dtype) for n in lengths]
    return examples, PackedBatch.fromlist(examples)
