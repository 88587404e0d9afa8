"""Vocab: deterministic ids, cut-offs, unknown tokens, save/load."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from matchbox.data import Vocab

tokens = st.lists(st.sampled_from("a b c d e f g".split()), max_size=30)


def test_specials_first_then_by_frequency_then_text():
    vocab = Vocab(Counter({"b": 2, "a": 2, "c": 5, "d": 1}))
    assert vocab.itos == ["<unk>", "<pad>", "c", "a", "b", "d"]
    assert vocab.stoi == {t: i for i, t in enumerate(vocab.itos)}
    assert len(vocab) == 6


def test_min_freq_and_max_size_cut_ordinary_tokens_only():
    vocab = Vocab(Counter({"a": 3, "b": 2, "c": 1}), min_freq=2, max_size=1)
    assert vocab.itos == ["<unk>", "<pad>", "a"]
    assert vocab.freqs["c"] == 1  # counts are kept even for cut tokens


def test_unknown_token_maps_to_unk():
    vocab = Vocab.from_iterator([["a", "b"]])
    assert vocab["zzz"] == vocab.stoi["<unk>"] == vocab.unk_index == 0
    assert vocab.lookup_indices(["a", "zzz"]) == [vocab.stoi["a"], 0]
    assert "a" in vocab and "zzz" not in vocab


def test_without_unk_an_unknown_token_raises_key_error_naming_it():
    vocab = Vocab.from_iterator([["a"]], specials=(), unk_token=None)
    assert vocab.itos == ["a"] and vocab.unk_index is None
    with pytest.raises(KeyError, match="zzz"):
        vocab.lookup_indices(["a", "zzz"])
    with pytest.raises(KeyError, match="zzz"):
        vocab["zzz"]
    with pytest.raises(KeyError, match="zzz"):
        vocab.lookup_indices(iter(["a", "zzz"]))


def test_unk_token_is_added_to_the_specials_when_missing():
    vocab = Vocab(Counter({"a": 1}), specials=["<pad>"], unk_token="<oov>")
    assert vocab.itos == ["<oov>", "<pad>", "a"]


def test_lookup_tokens_rejects_ids_outside_the_vocabulary():
    vocab = Vocab.from_iterator([["a"]])
    assert vocab.lookup_tokens([2, 0]) == ["a", "<unk>"]
    with pytest.raises(IndexError, match=r"token id 3 is outside the vocabulary \[0, 3\)"):
        vocab.lookup_tokens([3])
    with pytest.raises(IndexError, match=r"token id -1 is outside"):
        vocab.lookup_tokens([-1])


@given(data=st.lists(tokens, max_size=5), min_freq=st.integers(1, 3),
       max_size=st.none() | st.integers(0, 5))
def test_built_vocab_holds_exactly_the_frequent_tokens(data, min_freq, max_size):
    vocab = Vocab.from_iterator(data, min_freq=min_freq, max_size=max_size)
    counts = Counter(t for line in data for t in line)
    ordinary = vocab.itos[2:]
    assert all(counts[t] >= min_freq for t in ordinary)
    assert [counts[t] for t in ordinary] == sorted((counts[t] for t in ordinary), reverse=True)
    frequent = [t for t in counts if counts[t] >= min_freq]
    assert len(ordinary) == (len(frequent) if max_size is None else min(max_size, len(frequent)))
    # the same data gives the same vocabulary
    assert Vocab.from_iterator(data, min_freq=min_freq, max_size=max_size) == vocab


def test_save_and_load_round_trip(tmp_path):
    vocab = Vocab.from_iterator([["é", "b", "b"]], specials=("<unk>", "<pad>", "<s>"))
    path = tmp_path / "vocab.json"
    vocab.save(path)
    loaded = Vocab.load(path)
    assert loaded == vocab
    assert loaded.stoi == vocab.stoi and loaded.unk_index == vocab.unk_index
    assert loaded.freqs == vocab.freqs


def test_save_refuses_non_string_tokens(tmp_path):
    vocab = Vocab(Counter({1: 1}), specials=(), unk_token=None)
    with pytest.raises(TypeError, match=r"only string tokens can be saved, got 1 \(int\)"):
        vocab.save(tmp_path / "v.json")


def test_load_refuses_other_files(tmp_path):
    path = tmp_path / "other.json"
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="is not a saved matchbox-data Vocab"):
        Vocab.load(path)


def test_bad_arguments():
    with pytest.raises(ValueError, match="min_freq must be at least 1, got 0"):
        Vocab(min_freq=0)
    with pytest.raises(ValueError, match="max_size must be at least 0, got -1"):
        Vocab(max_size=-1)
    with pytest.raises(ValueError, match=r"unk_token '<unk>' is not in itos"):
        Vocab.from_itos(["a"])
    with pytest.raises(ValueError, match=r"tokens appear more than once: \['a'\]"):
        Vocab.from_itos(["a", "a"], unk_token=None)
