"""Hugging Face data (the ``hf`` extra): ``datasets`` columns and ``tokenizers`` tokenizers
feed Matchbox fields. Everything is built locally (no network): a tiny WordLevel
tokenizer trained on in-memory text, a ``datasets.Dataset.from_dict``."""

from __future__ import annotations

import pytest
import torch

datasets = pytest.importorskip(
    "datasets", reason="needs the hf extra (pip install matchbox-data[hf]): datasets")
tokenizers = pytest.importorskip(
    "tokenizers", reason="needs the hf extra (pip install matchbox-data[hf]): tokenizers")

from tokenizers import Tokenizer  # noqa: E402
from tokenizers.models import WordLevel  # noqa: E402
from tokenizers.pre_tokenizers import Whitespace  # noqa: E402
from tokenizers.trainers import WordLevelTrainer  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from matchbox import MaskedBatch  # noqa: E402
from matchbox.data import BucketBatchSampler, Collate, MaskedBatchField  # noqa: E402
from matchbox.data.huggingface import tokenize_with, vocab_from_tokenizer  # noqa: E402

TEXT = ["the cat sat on the mat", "a dog", "the dog sat", "cats and dogs and mats",
        "on the mat sat a cat", "dog"]
SPECIALS = ["[UNK]", "[PAD]", "<s>", "</s>"]


@pytest.fixture(scope="module")
def tokenizer():
    tok = Tokenizer(WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.train_from_iterator(TEXT, WordLevelTrainer(special_tokens=SPECIALS))
    return tok


def test_token_ids_from_a_datasets_column_batch_with_collate_and_the_bucket_sampler(tokenizer):
    dataset = datasets.Dataset.from_dict({"text": TEXT, "label": list(range(len(TEXT)))})
    dataset = dataset.map(lambda b: {"ids": [e.ids for e in tokenizer.encode_batch(b["text"])]},
                          batched=True)
    pad = tokenizer.token_to_id("[PAD]")
    IDS = MaskedBatchField(use_vocab=False, pad_token=pad)
    LABEL = MaskedBatchField(sequential=False, use_vocab=False)
    lengths = [len(ids) for ids in dataset["ids"]]
    loader = DataLoader(dataset, batch_sampler=BucketBatchSampler(lengths, 4, seed=0),
                        collate_fn=Collate({"ids": IDS, "label": LABEL, "text": None}))
    seen = []
    for batch in loader:
        ids, labels = batch["ids"], batch["label"]
        assert isinstance(ids, MaskedBatch) and ids.dims == (True,)
        for example, label, text in zip(ids.examples(), labels.examples(), batch["text"]):
            assert example.tolist() == [tokenizer.encode(text).ids]
            assert TEXT[int(label)] == text
            seen.append(text)
    assert sorted(seen) == sorted(TEXT)


def test_a_tokenizer_as_a_fields_tokenize_with_its_vocabulary_gives_its_ids(tokenizer):
    vocab = vocab_from_tokenizer(tokenizer)
    assert vocab.itos == [tokenizer.id_to_token(i) for i in range(tokenizer.get_vocab_size())]
    assert vocab.unk_token == "[UNK]"
    FIELD = MaskedBatchField(tokenize=tokenize_with(tokenizer), vocab=vocab,
                             init_token="<s>", eos_token="</s>", unk_token="[UNK]",
                             pad_token="[PAD]")
    texts = TEXT[:3] + ["a zebra sat"]  # "zebra" is unknown
    batch = FIELD.process(texts)
    assert batch.dims == (True,)
    for example, text in zip(batch.examples(), texts):
        want = ([tokenizer.token_to_id("<s>")] + tokenizer.encode(text).ids
                + [tokenizer.token_to_id("</s>")])
        assert example.tolist() == [want]
    assert torch.equal(batch.data[1, 4:], torch.full_like(batch.data[1, 4:],
                                                          tokenizer.token_to_id("[PAD]")))
    assert FIELD.reverse(batch)[3] == ["a", "[UNK]", "sat"]


def test_a_dataset_of_text_through_a_tokenizer_field(tokenizer):
    dataset = datasets.Dataset.from_dict({"text": TEXT})
    FIELD = MaskedBatchField(tokenize=tokenize_with(tokenizer),
                             vocab=vocab_from_tokenizer(tokenizer), unk_token="[UNK]",
                             pad_token="[PAD]")
    loader = DataLoader(dataset, batch_size=3, collate_fn=Collate({"text": FIELD}))
    got = [e.tolist()[0] for b in loader for e in b["text"].examples()]
    assert got == [tokenizer.encode(t).ids for t in TEXT]


def test_what_is_not_a_tokenizer_is_refused():
    with pytest.raises(TypeError, match=r"tokenize_with: expected a tokenizers\.Tokenizer"):
        tokenize_with("split")
    with pytest.raises(TypeError, match=r"vocab_from_tokenizer: expected a tokenizers\.Tokenizer"):
        vocab_from_tokenizer({"a": 0})
