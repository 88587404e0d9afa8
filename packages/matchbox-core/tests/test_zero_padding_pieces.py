"""The record that a batch holds zeros outside a mask (``mark_zero_padding``) passes to the
pieces of its ``chunk`` and to a ``cat`` of such pieces along a dimension the mask does not
vary over (``matchbox._layout.zero_padding_along``): ``@batch``'s region guard records the
rows of the examples not running a region as zeros, and a tree cell chunks its guarded
``(h, c)`` and joins the pieces again before its linear layer, which then needs no
``where`` of its own.  Where the zeros are not known everywhere along the dimension, or a
part holds no record, nothing passes on."""

from __future__ import annotations

import torch

from matchbox import MaskedBatch
from matchbox._layout import zero_padding_mask
from matchbox.masked_batch import mark_zero_padding


def guarded(rows, features=4, running=(True, False, True)):
    """A batch without padding whose non-running rows are zeros, recorded as a region's
    guard records them (a ``(batch, 1)`` mask)."""
    torch.manual_seed(0)
    view = torch.tensor(running).view(-1, 1)
    data = torch.where(view, torch.randn(rows, features), 0.0)
    batch = MaskedBatch.fromlist(list(data.unsqueeze(1)), (False,))
    mark_zero_padding(batch, view)
    return batch, view


def test_the_pieces_of_a_chunk_and_their_join_keep_the_record():
    batch, view = guarded(3)
    h, c = batch.chunk(2, -1)
    assert zero_padding_mask(h) is view and zero_padding_mask(c) is view
    joined = torch.cat([c, h], -1)
    assert zero_padding_mask(joined) is view
    torch.testing.assert_close(joined.data, torch.cat([c.data, h.data], -1), rtol=0, atol=0)
    assert not joined.data[1].any()  # (the record is true)


def test_a_join_with_a_part_holding_no_record_or_another_keeps_none():
    batch, view = guarded(3)
    other, _ = guarded(3)  # zeros outside a mask of the same values: another record
    h, _ = batch.chunk(2, -1)
    g, _ = other.chunk(2, -1)
    plain = MaskedBatch.fromlist(list(torch.randn(3, 1, 2)), (False,))
    assert zero_padding_mask(torch.cat([h, plain], -1)) is None
    assert zero_padding_mask(torch.cat([h, g], -1)) is None


def test_a_record_that_varies_along_the_dimension_does_not_pass():
    batch, _ = guarded(3)
    varying = torch.ones(3, 4, dtype=torch.bool)
    varying[1, 2:] = False
    mark_zero_padding(batch, varying)  # zeros known at some features only
    h, c = batch.chunk(2, -1)
    assert zero_padding_mask(h) is None and zero_padding_mask(c) is None


def test_a_write_into_a_piece_drops_its_record():
    batch, _ = guarded(3)
    h, _ = batch.chunk(2, -1)
    h.data.add_(1)  # (the version counter, shared with the batch, moves)
    assert zero_padding_mask(h) is None and zero_padding_mask(batch) is None
