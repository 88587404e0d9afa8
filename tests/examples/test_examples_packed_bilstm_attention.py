"""examples/packed_bilstm_attention.py: packed BiLSTM + masked attention equals the loop."""

from __future__ import annotations

import pytest
import torch

from examples import packed_bilstm_attention as example
from matchbox import MaskedBatch
from matchbox.packed import PackedBatch
from matchbox.testing import mb_assert

VOCAB, CLASSES = 25, 4


def model(dtype, device="cpu"):
    torch.manual_seed(0)
    return example.BiLSTMAttention(VOCAB, CLASSES, d_embed=6, d_hidden=5).to(device, dtype).eval()


def ids_and_labels(lengths, device="cpu"):
    ids = [torch.randint(0, VOCAB, (1, n), device=device) for n in lengths]
    labels = [torch.randint(0, CLASSES, (1,), device=device) for _ in lengths]
    return ids, labels


LENGTHS = {"ragged": [3, 1, 7, 2, 5], "one-example": [4], "equal": [3, 3], "length-one": [1, 1]}


@pytest.mark.parametrize("lengths", list(LENGTHS.values()), ids=list(LENGTHS))
def test_loss_on_a_packed_batch_equals_the_loop(lengths, dtype):
    m = model(dtype)
    ids, labels = ids_and_labels(lengths)
    mb_assert(m.loss, [ids, labels], [PackedBatch.fromlist(ids), MaskedBatch.fromlist(labels, ())],
              len(ids), params=list(m.parameters()))


@pytest.mark.parametrize("batch", ["packed", "masked-with-nan-padding"])
def test_from_vectors_equals_the_loop_with_input_gradients(batch, dtype):
    # The model below the embedding takes float sequences: the same code on a PackedBatch
    # (no padding) and on a MaskedBatch whose padding is NaN (nn.LSTM packs its real rows).
    m = model(dtype)
    xs = [torch.randn(1, n, 6, dtype=dtype) for n in [4, 1, 6, 2]]
    xb = (PackedBatch.fromlist(xs) if batch == "packed"
          else MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan")))
    mb_assert(m.logits_from_vectors, [xs], [xb], len(xs), params=list(m.parameters()))


def test_plain_tensors_pass_through_as_masked():
    m = model(torch.float32)
    x = torch.randint(0, VOCAB, (1, 5))
    assert m(x).shape == (1, CLASSES)


def test_make_batch_gives_a_packed_text_batch_and_per_example_labels():
    text, label = example.make_fields(max_len=4)
    examples = [{"docstring": "Return the first item of a list.", "label": "get"},
                {"docstring": "Set it.", "label": "set"}]
    text.build_vocab(e["docstring"] for e in examples)
    label.build_vocab(e["label"] for e in examples)
    ids, labels = example.make_batch(examples, text, label)
    assert isinstance(ids, PackedBatch) and ids.lengths().reshape(-1).tolist() == [4, 3]
    assert labels.dims == () and text.reverse(ids)[1] == ["set", "it", "."]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (cuDNN's packed LSTM)")
def test_cudnn_loss_equals_the_loop_on_cuda():
    # cuDNN differentiates its RNN only in training mode: train, with dropout off.
    m = model(torch.float64, "cuda").train()
    m.dropout.p = 0.0
    ids, labels = ids_and_labels([3, 1, 7, 2, 5], "cuda")
    mb_assert(m.loss, [ids, labels], [PackedBatch.fromlist(ids), MaskedBatch.fromlist(labels, ())],
              len(ids), params=list(m.parameters()))


def test_main_trains_briefly():
    result = example.main(["--steps", "2", "--batch-size", "8", "--max-files", "20",
                           "--classes", "3", "--d-embed", "8", "--d-hidden", "8",
                           "--log-every", "2", "--device", "cpu"])
    assert len(result["losses"]) == 2
    assert all(torch.isfinite(torch.tensor(result["losses"])))


def test_embedding_and_lstm_stay_packed():
    # The encoder never sees padding: the embedding and the LSTM take and give PackedBatch.
    m = model(torch.float32)
    ids, _ = ids_and_labels([3, 1, 7])
    vectors = m.embed(PackedBatch.fromlist(ids))
    states, _ = m.encoder(vectors)
    assert isinstance(vectors, PackedBatch) and isinstance(states, PackedBatch)
    assert isinstance(m.encode(vectors), MaskedBatch)
