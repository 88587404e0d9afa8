"""The batches the user-model tests (matchbox-nn's and the examples' trial) build: each
example as a researcher would hold it alone, ``(1, ...)``, and their batch, with NaN in
the float padding and an id no table has in the integer padding, so that a padded value
reaching a result shows."""

from __future__ import annotations

import pytest
import torch

from matchbox import MaskedBatch

NAN = float("nan")
PAD_ID = 10**6  # never a real id: the padding of an id batch must never be looked up


def lengths_params(table):
    return pytest.mark.parametrize("lengths", list(table.values()), ids=list(table))


def floats(lengths, size, dtype):
    """``(1, n, size)`` examples and their batch (positions dynamic)."""
    xs = [torch.randn(1, n, size, dtype=dtype) for n in lengths]
    return xs, MaskedBatch.fromlist(xs, (True, False), padding_value=NAN)


def ids(lengths, vocab, low=0):
    """``(1, n)`` id examples and their batch."""
    xs = [torch.randint(low, vocab, (1, n)) for n in lengths]
    return xs, MaskedBatch.fromlist(xs, (True,), padding_value=PAD_ID)


def labels(count, classes):
    """One class label ``(1,)`` per example and their batch (a per-example scalar)."""
    ys = [torch.randint(0, classes, (1,)) for _ in range(count)]
    return ys, MaskedBatch.fromlist(ys, ())
