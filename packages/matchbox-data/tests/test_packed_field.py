"""PackedBatchField: the same fields, batches from matchbox-packed (imported lazily)."""

from __future__ import annotations

import sys

import pytest
import torch

from matchbox.data import PackedBatchField


def test_without_matchbox_packed_the_error_names_the_distribution(monkeypatch):
    field = PackedBatchField(name="text")
    field.build_vocab(["a b"])
    monkeypatch.setitem(sys.modules, "matchbox.packed", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"PackedBatchField needs the matchbox-packed "
                                          r"distribution, which is not installed: pip install "
                                          r"matchbox-packed"):
        field.process(["a"])


def test_a_packed_field_must_be_sequential():
    with pytest.raises(ValueError, match=r"PackedBatchField: a PackedBatch packs one dynamic "
                                         r"dimension, so the field must be sequential"):
        PackedBatchField(sequential=False)


def test_packed_batch_equals_per_example_tensors():
    packed = pytest.importorskip("matchbox.packed", reason="needs matchbox-packed installed")
    field = PackedBatchField(init_token="<s>", eos_token="</s>", name="text")
    texts = ["a b c", "b", "c a", "a a a a"]
    field.build_vocab(texts)
    batch = field.process(texts)
    assert isinstance(batch, packed.PackedBatch)
    got = list(batch.examples())
    assert len(got) == len(texts)
    for g, text in zip(got, texts):
        torch.testing.assert_close(g, field.numericalize(text), rtol=0, atol=0)
    assert field.reverse(batch) == [t.split() for t in texts]


def test_packed_numeric_sequences_with_features(dtype):
    packed = pytest.importorskip("matchbox.packed", reason="needs matchbox-packed installed")
    field = PackedBatchField(use_vocab=False, dtype=dtype)
    raw = [torch.randn(n, 3, dtype=torch.float64) for n in (2, 5, 1)]
    batch = field.process(raw)
    assert isinstance(batch, packed.PackedBatch)
    for g, x in zip(batch.examples(), raw):
        torch.testing.assert_close(g, x.to(dtype).unsqueeze(0), rtol=0, atol=0)
