"""Lightning trains on Matchbox batches and infers their batch size: the number of examples.

Lightning weighs each step's logged value by the batch size it finds in the batch
(``extract_batch_size``: tensors, mappings, iterables, dataclass fields) when
``self.log(..., on_epoch=True)`` is given no ``batch_size``.  A batch is a dataclass
whose fields are tensors with the examples in dimension 0, and is not iterable.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

import matchbox
from matchbox import MaskedBatch
from matchbox.data import BucketBatchSampler
from matchbox.packed import PackedBatch

L = pytest.importorskip(
    "lightning.pytorch",
    reason="Lightning is not installed in this environment (tox installs it in `all` only)")
extract_batch_size = pytest.importorskip("lightning.pytorch.utilities.data").extract_batch_size


def _examples(lengths):
    return [torch.randn(1, n, 3) for n in lengths]


def test_lightnings_batch_size_of_a_masked_batch_is_its_number_of_examples():
    padded = MaskedBatch.fromlist(_examples([2, 4, 3]), (True, False))
    unpadded = MaskedBatch.fromlist(_examples([3, 3, 3]), (True, False))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and found without doubt: no "ambiguous collection"
        for batch in (padded, unpadded, (padded, torch.zeros(3)), {"x": padded, "y": unpadded}):
            assert extract_batch_size(batch) == 3


def test_lightnings_batch_size_of_a_packed_batch_is_its_number_of_examples():
    # Its fields hold the number of examples first, then the rows (one per real
    # position): Lightning finds the number of examples and warns that the
    # collection is ambiguous; self.log(..., batch_size=) silences it.
    packed = PackedBatch.fromlist(_examples([2, 4, 3]))
    with pytest.warns(UserWarning, match="ambiguous collection. The batch size we found is 3"):
        assert extract_batch_size(packed) == 3


class Tagger(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(3, 4, batch_first=True)
        self.out = nn.Linear(4, 2)
        self.losses = []

    def forward(self, x):
        h, _ = self.lstm(x)
        return self.out(h)

    def training_step(self, batch, index):
        x, y = batch
        loss = matchbox.batch_mean(F.cross_entropy(self(x).transpose(1, 2), y))
        self.log("loss", loss, on_step=False, on_epoch=True)  # no batch_size=
        self.losses.append((loss.detach(), x.batch_size))
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)  # the logged losses stay comparable


def test_a_lightning_epoch_weighs_each_logged_loss_by_its_number_of_examples():
    torch.manual_seed(0)
    lengths = [1, 5, 2, 6, 3]
    data = [(x, torch.randint(2, (1, x.size(1)))) for x in _examples(lengths)]

    def collate(pairs):
        xs, ys = zip(*pairs)
        return MaskedBatch.fromlist(xs, (True, False)), MaskedBatch.fromlist(ys, (True,))

    loader = DataLoader(data, batch_sampler=BucketBatchSampler(lengths, 3, seed=0),
                        collate_fn=collate)  # batches of 3 and 2 examples
    model = Tagger()
    trainer = L.Trainer(max_epochs=1, accelerator="cpu", devices=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(model, loader)
    sizes = [size for _, size in model.losses]
    assert sorted(sizes) == [2, 3]
    expected = sum(loss * size for loss, size in model.losses) / sum(sizes)
    torch.testing.assert_close(trainer.callback_metrics["loss"], expected)
