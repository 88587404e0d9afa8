"""MaskedBatchField: a batch's examples() are exactly the per-example numericalised tensors."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from matchbox import MaskedBatch
from matchbox.data import FieldError, MaskedBatchField, Vocab

WORDS = ["the", "cat", "sat", "on", "mat", "The", "CAT"]
token_lists = st.lists(st.lists(st.sampled_from(WORDS), max_size=6), min_size=1, max_size=5)


def expected_ids(field, tokens):
    """The oracle, written out: lower-case, add the specials, look up, unknown -> unk."""
    tokens = [t.lower() for t in tokens] if field.lower else list(tokens)
    tokens = ([field.init_token] if field.init_token else []) + tokens
    tokens += [field.eos_token] if field.eos_token else []
    return [field.vocab.stoi.get(t, field.vocab.stoi.get(field.unk_token)) for t in tokens]


def assert_batch_equals_examples(batch, per_example):
    got = list(batch.examples())
    assert len(got) == len(per_example)
    for g, e in zip(got, per_example):
        assert g.dtype == e.dtype
        torch.testing.assert_close(g, e, rtol=0, atol=0)


@given(train=token_lists, batch=token_lists, lower=st.booleans(),
       init=st.sampled_from([None, "<s>"]), eos=st.sampled_from([None, "</s>"]),
       as_text=st.booleans(), dtype=st.sampled_from([torch.long, torch.int32]))
def test_sequential_batch_equals_per_example_tensors(train, batch, lower, init, eos, as_text,
                                                    dtype):
    field = MaskedBatchField(lower=lower, init_token=init, eos_token=eos, dtype=dtype)
    field.build_vocab([" ".join(t) for t in train])
    raw = [" ".join(t) for t in batch] if as_text else batch
    xb = field.process(raw)
    assert isinstance(xb, MaskedBatch) and xb.dims == (True,) and xb.batch_size == len(batch)
    oracle = [torch.tensor([expected_ids(field, t)], dtype=dtype) for t in batch]
    assert_batch_equals_examples(xb, oracle)
    assert_batch_equals_examples(xb, [field.numericalize(x) for x in raw])
    # padding holds the pad token's id, so an embedding lookup on xb.data is valid
    pad = field.vocab.stoi["<pad>"]
    assert (xb.data.masked_select(~xb.mask) == pad).all()
    # reverse: back to the (lower-cased) tokens, unknown ones as <unk>
    restored = field.reverse(xb)
    for tokens, back in zip(batch, restored):
        tokens = [t.lower() for t in tokens] if lower else tokens
        assert back == [t if t in field.vocab else "<unk>" for t in tokens]


def test_readme_style_field_and_batch():
    text = MaskedBatchField(batch_first=True, name="text")
    text.build_vocab(["a b c", "b c", "c"])
    xb = text.process(["a b", "c", ""])
    assert xb.data.shape == (3, 2)
    assert xb.lengths().flatten().tolist() == [2, 1, 0]
    assert text.reverse(xb) == [["a", "b"], ["c"], []]


def test_equal_lengths_give_a_batch_without_padding():
    text = MaskedBatchField()
    text.build_vocab(["a b"])
    xb = text.process(["a b", "b a"])
    assert xb._mask is None and xb.data.tolist() == [[2, 3], [3, 2]]


def test_device_argument_places_the_batch():
    text = MaskedBatchField()
    text.build_vocab(["a b"])
    xb = text.process(["a", "a b"], device="cpu")
    assert xb.data.device == torch.device("cpu") and xb.mask.device == torch.device("cpu")
    legacy = text.process(["a", "a b"], device=-1)  # torchtext's Field: -1 is the CPU
    assert legacy.data.device == torch.device("cpu")


def test_max_size_min_freq_and_extra_specials():
    text = MaskedBatchField(init_token="<s>")
    vocab = text.build_vocab(["a a a b b c"], ["a"], max_size=1, min_freq=2, specials=["<sep>"])
    assert vocab.itos == ["<unk>", "<pad>", "<s>", "<sep>", "a"]
    assert text.vocab is vocab


def test_preprocessing_and_postprocessing_hooks():
    def reverse_tokens(tokens):
        return tokens[::-1]

    def add_one(batch, vocab):
        assert isinstance(vocab, Vocab)
        return [[i + 1 for i in ids] for ids in batch]

    text = MaskedBatchField(preprocessing=reverse_tokens, postprocessing=add_one)
    text.build_vocab(["a b"])
    xb = text.process(["a b", "b"])
    a, b = text.vocab.stoi["a"], text.vocab.stoi["b"]
    assert_batch_equals_examples(xb, [torch.tensor([[b + 1, a + 1]]), torch.tensor([[b + 1]])])


def test_postprocessing_may_not_change_the_number_of_examples():
    text = MaskedBatchField(postprocessing=lambda batch, vocab: batch[:-1], name="text")
    text.build_vocab(["a"])
    with pytest.raises(FieldError, match=r"MaskedBatchField 'text': postprocessing returned 1 "
                                         r"examples for a batch of 2"):
        text.process(["a", "a"])


def test_named_and_callable_tokenizers():
    chars = MaskedBatchField(tokenize="chars")
    chars.build_vocab(["ab"])
    assert chars.reverse(chars.process(["ba"])) == [["b", "a"]]
    comma = MaskedBatchField(tokenize=lambda s: s.split(","))
    comma.build_vocab(["x,y"])
    assert comma.reverse(comma.process(["y,x"])) == [["y", "x"]]
    # torchtext's Field read tokenize=None as splitting on whitespace.
    default = MaskedBatchField(tokenize=None)
    default.build_vocab(["a b"])
    assert default.reverse(default.process(["b a"])) == [["b", "a"]]


def test_label_field_one_id_per_example():
    label = MaskedBatchField(sequential=False, unk_token=None, pad_token=None, lower=True)
    label.build_vocab(["pos", "neg", "POS"])
    assert label.vocab.itos == ["pos", "neg"]
    xb = label.process(["neg", "Pos", "neg"])
    assert xb.dims == () and xb.data.tolist() == [1, 0, 1]
    assert_batch_equals_examples(xb, [torch.tensor([1]), torch.tensor([0]), torch.tensor([1])])
    assert label.reverse(xb) == ["neg", "pos", "neg"]


@given(lengths=st.lists(st.integers(0, 5), min_size=1, max_size=5), features=st.integers(0, 3),
       dtype=st.sampled_from([torch.float32, torch.float64]))
def test_numeric_sequences(lengths, features, dtype):
    """use_vocab=False: numbers per step, optionally with static feature sizes."""
    field = MaskedBatchField(use_vocab=False, dtype=dtype)
    g = torch.Generator().manual_seed(sum(lengths))
    shape = (features,) if features else ()
    raw = [torch.randn(n, *shape, generator=g, dtype=torch.float64) for n in lengths]
    raw = [x.tolist() if i % 2 else x for i, x in enumerate(raw)]  # lists and tensors both
    xb = field.process(raw)
    assert xb.dims == (True,) + ((False,) if features else ())
    oracle = [torch.as_tensor(x, dtype=dtype).reshape(1, n, *shape)
              for x, n in zip(raw, lengths)]
    assert_batch_equals_examples(xb, oracle)


def test_numeric_static_values_and_vectors(dtype):
    scalars = MaskedBatchField(sequential=False, use_vocab=False, dtype=dtype)
    xb = scalars.process([1.5, 2, -3])
    assert xb.dims == () and xb.data.dtype == dtype
    assert xb.data.tolist() == [1.5, 2.0, -3.0]
    vectors = MaskedBatchField(sequential=False, use_vocab=False, dtype=dtype)
    xb = vectors.process([[1, 2], [3, 4]])
    assert xb.dims == (False,)
    assert_batch_equals_examples(xb, [torch.tensor([[1, 2]], dtype=dtype),
                                      torch.tensor([[3, 4]], dtype=dtype)])


def test_batch_of_one_and_zero_length_example():
    text = MaskedBatchField(eos_token=None)
    text.build_vocab(["a"])
    xb = text.process([""])
    assert xb.data.shape == (1, 0)
    assert [e.shape for e in xb.examples()] == [torch.Size([1, 0])]


# ---------------------------------------------------------------------- errors


def trained(**kwargs):
    field = MaskedBatchField(name="text", **kwargs)
    field.build_vocab(["a b"])
    return field


def test_empty_batch_is_an_error_naming_the_field():
    with pytest.raises(FieldError, match=r"MaskedBatchField 'text': the batch is empty"):
        trained().process([])
    with pytest.raises(FieldError, match=r"^MaskedBatchField: the batch is empty"):
        MaskedBatchField(use_vocab=False).process([])


def test_unknown_token_without_unk_names_field_example_and_token():
    field = trained(unk_token=None)
    with pytest.raises(FieldError, match=r"MaskedBatchField 'text': example 1: token 'zzz' is "
                                         r"not in the vocabulary and the vocabulary has no "
                                         r"unknown token"):
        field.process(["a", "b zzz"])


def test_failing_tokenizer_names_field_and_example():
    code = MaskedBatchField(tokenize="python", name="code")
    with pytest.raises(FieldError, match=r"^MaskedBatchField 'code': the tokenizer failed on "
                                         r"example 1 \('f\(x'\): TokenError: "):
        code.build_vocab(["x = 1", "f(x"])
    code.build_vocab(["x = 1"])
    with pytest.raises(FieldError, match=r"^MaskedBatchField 'code': the tokenizer failed on "
                                         r"example 0 \('  x = 1\\n y = 2'\): "
                                         r"IndentationError: "):
        code.process(["  x = 1\n y = 2"])
    with pytest.raises(FieldError, match=r"the tokenizer failed on an example \('f\(x'\)"):
        code.preprocess("f(x")


def test_unhashable_token_names_field_example_and_position():
    field = trained()
    with pytest.raises(TypeError, match=r"^MaskedBatchField 'text': example 1: token 1 is a "
                                        r"list, which cannot be a token \(tokens must be "
                                        r"hashable\)$"):
        field.process([["a"], ["a", ["b"]]])
    with pytest.raises(TypeError, match=r"^MaskedBatchField 'text': example 0: token 0 is a "
                                        r"dict"):
        field.build_vocab([[{}]])


def test_static_field_whose_examples_disagree_in_size():
    field = MaskedBatchField(sequential=False, use_vocab=False, name="features")
    with pytest.raises(FieldError, match=r"MaskedBatchField 'features': examples must agree in "
                                         r"their shape, but example 2 has \(3,\) and example 0 "
                                         r"has \(2,\)"):
        field.process([[1, 2], [3, 4], [5, 6, 7]])
    steps = MaskedBatchField(use_vocab=False, name="frames")
    with pytest.raises(FieldError, match=r"'frames': examples must agree in their static sizes "
                                         r"after the sequence dimension, but example 1 has "
                                         r"\(3,\) and example 0 has \(2,\)"):
        steps.process([torch.zeros(4, 2), torch.zeros(4, 3)])
    with pytest.raises(FieldError, match=r"'frames': example 1 has 1 dimensions but example 0 "
                                         r"has 2"):
        steps.process([torch.zeros(4, 2), torch.zeros(4)])
    # an empty first example takes its static sizes from the first one that shows them
    with pytest.raises(FieldError, match=r"'frames': examples must agree in their static sizes "
                                         r"after the sequence dimension, but example 2 has "
                                         r"\(4,\) and example 1 has \(3,\)"):
        steps.process([[], torch.zeros(2, 3), torch.zeros(1, 4)])
    assert steps.process([[], torch.zeros(2, 3)]).data.shape == (2, 2, 3)


def test_non_sequential_field_given_sequences():
    label = MaskedBatchField(sequential=False, name="label")
    label.build_vocab(["pos"])
    with pytest.raises(FieldError, match=r"MaskedBatchField 'label': example 1 is a sequence of "
                                         r"2 items, but the field is not sequential"):
        label.process(["pos", ["pos", "neg"]])
    with pytest.raises(FieldError, match=r"'label': example 0 is a sequence of 2 items"):
        label.build_vocab([["a", "b"]])


def test_sequential_numeric_field_given_a_single_value():
    field = MaskedBatchField(use_vocab=False, name="x")
    with pytest.raises(FieldError, match=r"'x': example 1 is a single value, but the field is "
                                         r"sequential"):
        field.process([[1, 2], 3])


def test_token_id_outside_the_vocabulary_in_reverse():
    field = trained()
    bad = MaskedBatch.fromlist([torch.tensor([[2, 3]]), torch.tensor([[2, 99]])], (True,))
    with pytest.raises(FieldError, match=r"MaskedBatchField 'text': example 1: token id 99 is "
                                         r"outside the vocabulary \[0, 4\)"):
        field.reverse(bad)


def test_mixed_types_are_errors():
    field = trained()
    with pytest.raises(TypeError, match=r"MaskedBatchField 'text': example 1 is a int; a "
                                        r"sequential field with a vocabulary takes a string"):
        field.process(["a", 7])
    numbers = MaskedBatchField(use_vocab=False, name="x")
    with pytest.raises(TypeError, match=r"'x': example 0 holds text, but the field has "
                                        r"use_vocab=False"):
        numbers.process([["1", "2"]])
    with pytest.raises(TypeError, match=r"'x': example 0 cannot be made a torch.int64 tensor"):
        numbers.process([[[1, 2], [3]]])
    with pytest.raises(TypeError, match=r"expected a list of examples, got str"):
        field.process("a b")


def test_process_before_build_vocab():
    with pytest.raises(FieldError, match=r"MaskedBatchField: the field has no vocabulary; call "
                                         r"build_vocab first"):
        MaskedBatchField().process(["a"])


def test_bad_field_options():
    with pytest.raises(ValueError, match=r"MaskedBatchField: sequential fields need "
                                         r"batch_first=True"):
        MaskedBatchField(batch_first=False)
    MaskedBatchField(sequential=False, batch_first=False)  # no sequence dimension: allowed
    with pytest.raises(ValueError, match=r"init_token and eos_token need sequential=True"):
        MaskedBatchField(sequential=False, init_token="<s>")
    with pytest.raises(ValueError, match=r"init_token and eos_token need use_vocab=True"):
        MaskedBatchField(use_vocab=False, eos_token=0)
    with pytest.raises(ValueError, match=r"needs an integer dtype, got torch.float32"):
        MaskedBatchField(dtype=torch.float32)
    with pytest.raises(ValueError, match=r"build_vocab needs use_vocab=True"):
        MaskedBatchField(use_vocab=False).build_vocab(["1"])
    with pytest.raises(ValueError, match=r"reverse needs a field with a vocabulary"):
        MaskedBatchField(use_vocab=False).reverse([])
    with pytest.raises(TypeError, match=r"vocab must be a matchbox.data.Vocab or a torchtext "
                                        r"Vocab, got dict"):
        MaskedBatchField(vocab={"a": 0})


def test_a_given_vocab_backs_the_field():
    vocab = Vocab.from_itos(["<unk>", "<pad>", "x"])
    field = MaskedBatchField(vocab=vocab)
    assert field.process(["x y"]).data.tolist() == [[2, 0]]


def test_special_tokens_missing_from_a_given_vocabulary_are_refused_naming_them():
    # A user trial: they read as the unknown token (padding as id 0), silently.
    text = MaskedBatchField(init_token="<S>", eos_token="</S>")
    text.build_vocab(["hello world"])
    borrowing = MaskedBatchField(init_token="<bos>", eos_token="<eos>", vocab=text.vocab,
                                 name="t2")
    with pytest.raises(FieldError, match=r"MaskedBatchField 't2': its init_token '<bos>' is not "
                                         r"in its vocabulary \(given with vocab=, or built by "
                                         r"another field\?\), where it would read as the unknown "
                                         r"token"):
        borrowing.numericalize("hello")
    padding = MaskedBatchField(pad_token="<PAD>", vocab=text.vocab, name="t3")
    with pytest.raises(FieldError, match=r"its pad_token '<PAD>' is not in its vocabulary"):
        padding.process(["hello world", "hello"])
    same = MaskedBatchField(init_token="<S>", eos_token="</S>", vocab=text.vocab)
    assert same.numericalize("hello").tolist() == text.numericalize("hello").tolist()


def test_a_missing_label_is_refused_not_read_as_the_unknown_token():
    labels = MaskedBatchField(sequential=False)
    labels.build_vocab(["x", "y"])
    with pytest.raises(FieldError, match=r"MaskedBatchField: example 1 is None; a field with a "
                                         r"vocabulary takes one token per example"):
        labels.process(["x", None])


def test_reverse_of_a_padded_tensor_of_ids_drops_padding_and_cuts_at_the_end_token():
    # A user trial: the end token and the padding of a plain (batch, length) tensor stayed,
    # and a 1-D tensor was read as one example per id.
    text = MaskedBatchField(init_token="<S>", eos_token="</S>", name="text")
    text.build_vocab(["a b c"])
    ids = text.process(["a b", "c"])
    padded = torch.where(ids.mask, ids.data, text.vocab["<pad>"])
    assert text.reverse(padded) == [["a", "b"], ["c"]]
    assert text.reverse(ids) == [["a", "b"], ["c"]]
    decoded = torch.tensor([[text.vocab[t] for t in ("<S>", "c", "</S>", "a", "b")]])
    assert text.reverse(decoded) == [["c"]]  # decoding ran on past its end token
    assert text.reverse(decoded, strip_specials=False) == [["<S>", "c", "</S>", "a", "b"]]
    with pytest.raises(FieldError, match=r"MaskedBatchField 'text': reverse takes a batch of "
                                         r"this field, a list of per-example id tensors, or a "
                                         r"tensor of ids with one row per example \(batch, "
                                         r"length\); got a tensor of shape \(3,\)"):
        text.reverse(torch.tensor([2, 4, 3]))
    labels = MaskedBatchField(sequential=False)
    labels.build_vocab(["x", "y"])
    assert labels.reverse(torch.tensor([labels.vocab["y"], labels.vocab["x"]])) == ["y", "x"]
