"""Hypothesis strategies for batches: sizes, lengths (0 and 1 included), dtypes."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from matchbox import MaskedBatch


@st.composite
def example_lists(draw, dims=(True, False), min_batch=1, max_batch=5, max_size=6,
                  min_length=0, dtypes=(torch.float32, torch.float64)):
    """(examples, batch) with random per-example sizes in the dynamic dims."""
    batch_size = draw(st.integers(min_batch, max_batch))
    dtype = draw(st.sampled_from(dtypes))
    static = [draw(st.integers(1, max_size)) for _ in dims]
    # With several dynamic dimensions, an example may be empty in some of them only.
    examples = []
    for _ in range(batch_size):
        shape = [draw(st.integers(min_length, max_size)) if d else s
                 for d, s in zip(dims, static)]
        seed = draw(st.integers(0, 2**16))
        g = torch.Generator().manual_seed(seed)
        examples.append(torch.randn(1, *shape, generator=g, dtype=dtype))
    batch = MaskedBatch.fromlist(examples, dims, padding_value=float("nan"))
    return examples, batch
