"""The torchtext adapter (runs in `tox -e oldest`: torch 2.3.1, torchtext 0.18.0)."""

from __future__ import annotations

import pytest
import torch

torchtext = pytest.importorskip(
    "torchtext", reason="the torchtext adapter is tested in `tox -e oldest` (torch 2.3.x)")
torchtext.disable_torchtext_deprecation_warning()  # known: 0.18 is its last release

from torchtext.data.functional import to_map_style_dataset  # noqa: E402
from torchtext.data.utils import get_tokenizer  # noqa: E402
from torchtext.transforms import AddToken  # noqa: E402
from torchtext.vocab import build_vocab_from_iterator  # noqa: E402

from matchbox import MaskedBatch  # noqa: E402
from matchbox.data import Collate, FieldError, MaskedBatchField  # noqa: E402
from matchbox.data.torchtext import TorchtextVocab, build_vocab_from_torchtext  # noqa: E402

TEXTS = ["The cat sat.", "A dog!", "", "the the cat"]


def test_a_torchtext_vocab_backs_a_field():
    tokenize = get_tokenizer("basic_english")
    tt_vocab = build_vocab_from_iterator((tokenize(t) for t in TEXTS), specials=["<unk>", "<pad>"])
    tt_vocab.set_default_index(tt_vocab["<unk>"])
    field = MaskedBatchField(tokenize=tokenize, vocab=tt_vocab)
    assert isinstance(field.vocab, TorchtextVocab)
    batch = field.process(TEXTS + ["unseen words"])
    assert isinstance(batch, MaskedBatch)
    for example, text in zip(batch.examples(), TEXTS + ["unseen words"]):
        expected = torch.tensor([tt_vocab(tokenize(text))], dtype=torch.long)  # its own lookup
        torch.testing.assert_close(example, expected, rtol=0, atol=0)
    assert field.reverse(batch)[-1] == ["<unk>", "<unk>"]


def test_without_a_default_index_unknown_tokens_are_errors():
    tt_vocab = build_vocab_from_iterator([["a"]], specials=["<pad>"])
    field = MaskedBatchField(vocab=tt_vocab, unk_token=None, name="text")
    with pytest.raises(FieldError, match=r"MaskedBatchField 'text': example 1: token 'b' is not "
                                         r"in the vocabulary"):
        field.process(["a", "a b"])


def test_transforms_and_a_dataset_feed_the_fields():
    # A torchtext-style dataset: an iterable of (label, text) tuples, made map-style.
    dataset = to_map_style_dataset(iter([(1, "good film"), (2, "bad film"), (1, "good")]))
    text = MaskedBatchField(tokenize=get_tokenizer("basic_english"),
                            preprocessing=AddToken("<s>", begin=True))
    label = MaskedBatchField(sequential=False, use_vocab=False)
    tt_vocab = build_vocab_from_torchtext(text, (t for _, t in dataset), specials=["<s>"])
    assert tt_vocab.get_itos()[:3] == ["<unk>", "<pad>", "<s>"]
    loader = torch.utils.data.DataLoader(dataset, batch_size=2, collate_fn=Collate((label, text)))
    labels, texts = next(iter(loader))
    assert labels.data.tolist() == [1, 2]
    assert text.reverse(texts) == [["<s>", "good", "film"], ["<s>", "bad", "film"]]
