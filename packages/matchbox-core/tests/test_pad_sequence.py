"""``torch.nn.utils.rnn.pad_sequence`` of batches against the per-example loop: each
example's sequences are ``(1, ...)``, padded along nothing and stacked
(``batch_first=False``), values and gradients; ``batch_first=True`` and plain tensors
among the sequences are refused.

Padding holds NaN; zero- and one-length examples, a batch of one, float32 and float64.
"""

from __future__ import annotations

import pytest
import torch
from torch.nn.utils.rnn import pad_sequence

from matchbox import MaskedBatch
from matchbox.testing import mb_assert

NAN = float("nan")


@pytest.mark.parametrize("lengths", [[2, 0, 3, 1], [1]])
def test_pad_sequence_of_batches_matches_loop(lengths, dtype):
    xs = [torch.randn(1, n, 3, dtype=dtype) for n in lengths]
    ys = [torch.randn(1, n, 3, dtype=dtype) for n in lengths]
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=NAN)
    yb = MaskedBatch.fromlist(ys, (True, False), padding_value=NAN)
    size = len(lengths)
    mb_assert(lambda a, b: pad_sequence([a, b]), [xs, ys], [xb, yb], size)
    mb_assert(lambda a, b: pad_sequence((a, b, a * 2), False, 3.0).sum(2), [xs, ys], [xb, yb],
              size)
    mb_assert(lambda a, b: pad_sequence([a[:, :1], b[:, :1]]), [xs, ys], [xb, yb], size)


def test_pad_sequence_refusals_name_the_op():
    xb = MaskedBatch.fromlist([torch.randn(1, n, 3) for n in (2, 3)], (True, False))
    with pytest.raises(ValueError, match=r"^torch\.nn\.utils\.rnn\.pad_sequence: batch_first=True "
                                         r"would put the sequences first and each example's "
                                         r"dimension 0 \(size one\) second.*write "
                                         r"torch\.stack\(sequences, 1\)"):
        pad_sequence([xb, xb], batch_first=True)
    with pytest.raises(NotImplementedError, match=r"^torch\.nn\.utils\.rnn\.pad_sequence: every "
                                                  r"sequence must be a batch"):
        pad_sequence([xb, torch.randn(1, 3)])
    with pytest.raises(ValueError, match=r"example 0 has size 2 in one argument and 1"):
        pad_sequence([xb, xb[:, :1]])
