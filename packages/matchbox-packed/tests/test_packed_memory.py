"""Bytes of a PackedBatch beside a MaskedBatch of the same examples."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from packed_strategies import examples_of_lengths, packed_examples

from matchbox import MaskedBatch
from matchbox.packed import PackedBatch, memory_report, nbytes


@given(packed_examples())
def test_report_equals_the_bytes_of_the_converted_batch(pair):
    _, pb = pair
    report = memory_report(pb)
    assert report.masked_bytes == nbytes(pb.to_masked())
    assert report.packed_bytes == nbytes(pb)
    assert report.real_rows == pb.data.size(0)


def test_packed_data_holds_exactly_the_real_rows():
    xs = examples_of_lengths([2, 10, 1, 0], static=(8,), dtype=torch.float32)
    pb = PackedBatch.fromlist(xs)
    mb = MaskedBatch.fromlist(xs, (True, False))
    assert pb.data.numel() == 13 * 8
    layout_bytes = 8 * (10 + 2 * 4)  # batch_sizes, sorted and unsorted indices (int64)
    assert nbytes(pb) == 13 * 8 * 4 + layout_bytes
    assert nbytes(mb) == 4 * 10 * 8 * 4 + 4 * 10  # padded data and a one-byte mask
    report = memory_report(pb)
    assert (report.real_rows, report.padded_rows) == (13, 40)
    assert report.ratio == pytest.approx(nbytes(mb) / nbytes(pb))
    assert str(report).startswith("PackedBatch: 13 rows, ")


def test_nbytes_of_a_tensor_and_errors():
    assert nbytes(torch.zeros(3, dtype=torch.float64)) == 24
    with pytest.raises(TypeError, match="nbytes: expected a batch or a tensor, got list"):
        nbytes([1])
    with pytest.raises(TypeError, match="memory_report: expected a PackedBatch, got Tensor"):
        memory_report(torch.zeros(1))
