"""Collate: a DataLoader collate_fn for one field, tuples and dicts of fields."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

from matchbox import MaskedBatch
from matchbox.data import BucketBatchSampler, Collate, FieldError, MaskedBatchField

TEXTS = ["a b c", "b", "", "c c a b", "a"]
LABELS = ["x", "y", "x", "x", "y"]


def fields():
    text = MaskedBatchField(init_token="<s>", eos_token="</s>")
    text.build_vocab(TEXTS)
    label = MaskedBatchField(sequential=False, unk_token=None, pad_token=None)
    label.build_vocab(LABELS)
    return text, label


def test_one_field_in_a_data_loader():
    text, _ = fields()
    loader = DataLoader(TEXTS, batch_size=2, collate_fn=Collate(text))
    batches = list(loader)
    assert all(isinstance(b, MaskedBatch) for b in batches)
    got = [e for b in batches for e in b.examples()]
    for g, raw in zip(got, TEXTS):
        torch.testing.assert_close(g, text.numericalize(raw), rtol=0, atol=0)


def test_tuple_examples_with_a_bucketing_sampler():
    text, label = fields()
    dataset = list(zip(TEXTS, LABELS))
    sampler = BucketBatchSampler([len(t.split()) for t in TEXTS], batch_size=2, seed=3)
    loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=Collate((text, label)))
    seen = []
    for indices, (xb, yb) in zip(sampler, loader):
        assert xb.batch_size == yb.batch_size == len(indices)
        for i, x, y in zip(indices, xb.examples(), yb.examples()):
            torch.testing.assert_close(x, text.numericalize(TEXTS[i]), rtol=0, atol=0)
            torch.testing.assert_close(y, label.numericalize(LABELS[i]), rtol=0, atol=0)
            seen.append(i)
    assert sorted(seen) == list(range(len(TEXTS)))


def test_dict_examples_and_a_plain_column():
    text, label = fields()
    dataset = [{"text": t, "label": l, "id": i} for i, (t, l) in enumerate(zip(TEXTS, LABELS))]
    collate = Collate({"text": text, "label": label, "id": None}, device="cpu")
    batch = collate(dataset[:3])
    assert set(batch) == {"text", "label", "id"}
    assert batch["id"] == [0, 1, 2]
    assert text.reverse(batch["text"]) == [["a", "b", "c"], ["b"], []]
    assert label.reverse(batch["label"]) == ["x", "y", "x"]


def test_errors_name_the_column_and_the_example():
    text, label = fields()
    text.unk_token = None
    text.vocab.unk_index = None
    collate = Collate({"words": text})
    with pytest.raises(FieldError, match=r"MaskedBatchField 'words': example 1: token 'zzz'"):
        collate([{"words": "a"}, {"words": "zzz"}])
    with pytest.raises(FieldError, match=r"MaskedBatchField '#1': example 0 is a sequence"):
        Collate((text, label))([("a", ["x", "y"])])
    label.name = "label"
    with pytest.raises(FieldError, match=r"MaskedBatchField 'label': example 0 is a sequence"):
        Collate((text, label))([("a", ["x", "y"])])


def test_nothing_is_dropped_silently():
    text, label = fields()
    with pytest.raises(ValueError, match=r"Collate: example 1 has keys \['extra'\] without a "
                                         r"field; give them a field, or None"):
        Collate({"text": text})([{"text": "a"}, {"text": "b", "extra": 1}])
    with pytest.raises(ValueError, match=r"Collate: example 0 has no 'label'"):
        Collate({"text": text, "label": label})([{"text": "a"}])
    with pytest.raises(ValueError, match=r"Collate: example 1 has 3 columns but there are 2 "
                                         r"fields"):
        Collate((text, label))([("a", "x"), ("a", "x", "z")])
    with pytest.raises(TypeError, match=r"Collate: example 0 is a str, but the fields are a dict"):
        Collate({"text": text})(["a"])
    with pytest.raises(TypeError, match=r"Collate: example 0 is a str, but the fields are a tuple"):
        Collate((text, label))(["a"])


def test_empty_batches_and_bad_fields():
    text, label = fields()
    with pytest.raises(ValueError, match=r"Collate: the batch is empty"):
        Collate((text, label))([])
    with pytest.raises(FieldError, match=r"MaskedBatchField: the batch is empty"):
        Collate(text)([])
    with pytest.raises(TypeError, match=r"Collate: fields must be a field, a tuple or list of "
                                        r"fields, or a dict of fields, got str"):
        Collate("text")


def test_fields_and_collate_pickle_for_worker_processes():
    import pickle

    text, label = fields()
    collate = pickle.loads(pickle.dumps(Collate((text, label))))
    xb, yb = collate([("a b", "x"), ("c", "y")])
    assert text.reverse(xb) == [["a", "b"], ["c"]] and label.reverse(yb) == ["x", "y"]
