"""examples/transformer_mb18.py: the original Matchbox's transformer equals the loop.

The first ten tests are the original's examples/test_transformer.py, in its own
spec forms (``mb_test(module, (4, (True, 3), (False, 2)), 0, 0)``, ``mb_assert`` on
id batches); the batched output, the loss and every gradient (inputs and
parameters) must equal the per-example loop, with NaN padding.  Each also runs in
float32 and float64, on a batch of one, and on examples of length one.

No example is empty: the original's positional encodings reshape with
``view(..., -1)``, which PyTorch refuses for an empty sequence in the loop itself,
and attention scores ``(T, T)`` have two dynamic dimensions, which cannot hold an
empty example.
"""

from __future__ import annotations

import argparse
import random
from collections import namedtuple

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import matchbox
from examples import transformer_mb18 as tr
from matchbox import MaskedBatch
from matchbox.data import MaskedBatchField
from matchbox.testing import mb_assert, mb_test

pytestmark = [
    # The original's calls that PyTorch 2 warns about: out=x.new(D) resized to the D / 2
    # values of torch.arange(0, D, 2), and cross_entropy's legacy reduce=.
    pytest.mark.filterwarnings("ignore:The number of elements in the out tensor"),
    pytest.mark.filterwarnings("ignore:size_average and reduce args will be deprecated"),
]

PAD_ID = 10**6  # an id no vocabulary holds: the padding of an id batch is never looked up
# The batch sizes each test runs with: the original's 4, and a batch of one.
SIZES = [4, 1]


def hyper(**sizes):
    args = argparse.Namespace()
    args.__dict__.update(sizes)
    return args


def ids(batch_size, low, high, vocab):
    xs = [torch.randint(vocab, (1, random.randint(low, high))) for _ in range(batch_size)]
    return xs, MaskedBatch.fromlist(xs, (True,), padding_value=PAD_ID)


# ---------------------------------------------------------------------------- the original's 10


@pytest.mark.parametrize("batch_size", SIZES)
def test_LayerNorm(batch_size, dtype):
    mb_test(tr.LayerNorm(2).to(dtype), (batch_size, (True, 3), (False, 2)))


@pytest.mark.parametrize("batch_size", SIZES)
def test_FeedForward(batch_size, dtype):
    mb_test(tr.FeedForward(2, 3, 0).to(dtype), (batch_size, (True, 3), (False, 2)))


@pytest.mark.parametrize("batch_size", SIZES)
def test_ResidualBlock(batch_size, dtype):
    mb_test(tr.ResidualBlock(tr.FeedForward(2, 3, 0), 2, 0).to(dtype),
            (batch_size, (True, 3), (False, 2)))


@pytest.mark.parametrize("batch_size", SIZES)
def test_Attention(batch_size, dtype):
    spec = (batch_size, (True, 3), (False, 2))
    mb_test(tr.Attention(2, 0, False), spec, 0, 0, dtype=dtype)
    mb_test(tr.Attention(2, 0, False), spec, spec, 1, dtype=dtype)
    mb_test(tr.Attention(2, 0, True), spec, 0, 0, dtype=dtype)


@pytest.mark.parametrize("batch_size", SIZES)
def test_MultiHead(batch_size, dtype):
    spec = (batch_size, (True, 3), (False, 6))
    mb_test(tr.MultiHead(tr.Attention(6, 0, False), 6, 6, 3).to(dtype), spec, spec, 1)
    mb_test(tr.MultiHead(tr.Attention(6, 0, True), 6, 6, 3).to(dtype), spec, 0, 0)


@pytest.mark.parametrize("batch_size", SIZES)
def test_EncoderLayer(batch_size, dtype):
    args = hyper(d_model=6, d_hidden=6, n_heads=3, drop_ratio=0)
    mb_test(tr.EncoderLayer(args).to(dtype), (batch_size, (True, 3), (False, 6)))


@pytest.mark.parametrize("batch_size", SIZES)
def test_DecoderLayer(batch_size, dtype):
    args = hyper(d_model=6, d_hidden=6, n_heads=3, drop_ratio=0)
    mb_test(tr.DecoderLayer(args).to(dtype), (batch_size, (True, 3), (False, 6)),
            (batch_size, (True, 3), (False, 6)))


@pytest.mark.parametrize("batch_size", SIZES)
def test_posenc(batch_size, dtype):
    mb_test(lambda x: x + tr.positional_encodings_like(x),
            (batch_size, (True, 3), (False, 6)), dtype=dtype)


@pytest.mark.parametrize("batch_size", SIZES)
def test_Encoder(batch_size, dtype):
    args = hyper(d_model=6, d_hidden=6, n_heads=3, drop_ratio=0, n_layers=2)
    field = MaskedBatchField()
    field.out = torch.nn.Linear(args.d_model, 5)
    xs, xb = ids(batch_size, 1, 3, 5)
    mb_assert(tr.Encoder(field, args).to(dtype), (xs,), (xb,), batch_size)


@pytest.mark.parametrize("batch_size", SIZES)
def test_Transformer(batch_size, dtype):
    B, T, C, V = batch_size, 3, 6, 5
    args = hyper(d_model=C, d_hidden=C, n_heads=3, drop_ratio=0, n_layers=2,
                 length_ratio=1.5)
    field = MaskedBatchField()
    field.vocab = list(range(V))
    xs, xb = ids(B, 1, T, V)
    ys, yb = ids(B, 2, T, V)
    model = tr.Transformer(field, field, args).to(dtype)
    mb_assert(model, (xs, ys), (xb, yb), B)

    def loss(x, y):
        b = namedtuple("_batch", ("src", "trg"))(x, y)
        return model.loss(b, reduce=False)

    mb_assert(loss, (xs, ys), (xb, yb), B, params=list(model.parameters()))


# ---------------------------------------------------------------------------- beyond the original


def transformer(dtype, vocab=7, heads=2, layers=1):
    torch.manual_seed(0)
    field_src, field_trg = MaskedBatchField(), MaskedBatchField()
    field_src.vocab, field_trg.vocab = list(range(vocab)), list(range(vocab + 2))
    args = hyper(d_model=4 * heads, d_hidden=8, n_heads=heads, drop_ratio=0,
                 n_layers=layers, length_ratio=1.5)
    return tr.Transformer(field_src, field_trg, args).to(dtype), vocab


@pytest.mark.parametrize("lengths", [([1, 1, 1], [2, 2, 2]), ([4, 1, 2], [2, 5, 3]), ([3], [2])],
                         ids=["length one", "ragged", "one example"])
def test_loss_per_example_and_per_position_equals_the_loop(lengths, dtype):
    model, vocab = transformer(dtype)
    xs = [torch.randint(vocab, (1, n)) for n in lengths[0]]
    ys = [torch.randint(vocab + 2, (1, n)) for n in lengths[1]]
    xb, yb = (MaskedBatch.fromlist(v, (True,), padding_value=PAD_ID) for v in (xs, ys))
    for reduce in (True, False):
        mb_assert(lambda x, y, r=reduce: model.loss(tr.Batch(x, y), reduce=r), (xs, ys),
                  (xb, yb), len(xs), params=list(model.parameters()))


def test_the_originals_loop_over_examples_equals_the_batch(dtype):
    # loss(..., unbatch=True) is the original's own loop: the sum of the examples' losses.
    model, vocab = transformer(dtype, heads=3, layers=2)
    _, xb = ids(4, 1, 4, vocab)
    _, yb = ids(4, 2, 5, vocab + 2)
    batch = tr.Batch(xb, yb)
    looped = model.loss(batch, unbatch=True)
    batched = matchbox.batch_sum(model.loss(batch))
    torch.testing.assert_close(looped, batched)
    # (The source field's output bias is never used: its weight is the embedding.)
    params = list(model.parameters())
    looped_grads = torch.autograd.grad(looped, params, allow_unused=True)
    batched_grads = torch.autograd.grad(batched, params, allow_unused=True)
    assert [g is None for g in looped_grads] == [g is None for g in batched_grads]
    for a, b in zip(looped_grads, batched_grads):
        if a is not None:
            torch.testing.assert_close(a, b)


@settings(max_examples=10)
@given(batch_size=st.integers(1, 4), heads=st.sampled_from([1, 2, 3]),
       longest=st.integers(1, 5), causal=st.booleans(), seed=st.integers(0, 2**16))
def test_multi_head_attention_over_drawn_shapes_equals_the_loop(batch_size, heads, longest,
                                                                causal, seed):
    torch.manual_seed(seed)
    rng = random.Random(seed)
    width = 2 * heads
    module = tr.MultiHead(tr.Attention(width, 0, causal), width, width, heads).double()
    qs = [torch.randn(1, rng.randint(1, longest), width, dtype=torch.float64)
          for _ in range(batch_size)]
    ks = [torch.randn(1, rng.randint(1, longest), width, dtype=torch.float64)
          for _ in range(batch_size)]
    qb, kb = (MaskedBatch.fromlist(v, (True, False), padding_value=float("nan"))
              for v in (qs, ks))
    if causal:  # self-attention: causal scores are square
        mb_assert(module, (qs, qs, qs), (qb, qb, qb), batch_size)
    else:
        mb_assert(module, (qs, ks, ks), (qb, kb, kb), batch_size)


def test_main_trains_briefly_batched_and_with_the_originals_loop():
    for extra in ([], ["--unbatch"]):
        result = tr.main(["--steps", "2", "--batch-size", "4", "--max-files", "10",
                          "--d-model", "8", "--d-hidden", "8", "--heads", "2",
                          "--layers", "1", "--log-every", "2", "--device", "cpu", *extra])
        assert len(result["losses"]) == 2
        assert all(torch.isfinite(torch.tensor(result["losses"])))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_loss_equals_the_loop_on_cuda():
    model, vocab = transformer(torch.float64)
    model = model.cuda()
    xs = [torch.randint(vocab, (1, n)).cuda() for n in (3, 1, 4)]
    ys = [torch.randint(vocab + 2, (1, n)).cuda() for n in (2, 4, 3)]
    xb, yb = (MaskedBatch.fromlist(v, (True,), padding_value=PAD_ID) for v in (xs, ys))
    mb_assert(lambda x, y: model.loss(tr.Batch(x, y), reduce=False), (xs, ys), (xb, yb), 3,
              params=list(model.parameters()))


# ---------------------------------------------------------------------------- classes last


def test_the_originals_classes_last_loss_equals_the_loop_on_a_nan_padded_batch(dtype):
    # The original's loss, unchanged: F.cross_entropy(logits, trg[:, 1:]) with logits
    # (1, T, V), classes last.
    model, vocab = transformer(dtype)
    xs = [torch.randint(vocab, (1, n)) for n in (3, 1, 4)]
    ys = [torch.randint(vocab + 2, (1, n)) for n in (2, 5, 3)]
    xb, yb = (MaskedBatch.fromlist(v, (True,), padding_value=PAD_ID) for v in (xs, ys))
    for reduce in (True, False):
        def loss(x, y, reduce=reduce):
            logits = model(x, y[:, :-1])
            return matchbox.functional.cross_entropy(logits, y[:, 1:], reduce=reduce)

        mb_assert(loss, (xs, ys), (xb, yb), len(xs), params=list(model.parameters()))
    # NaN logits in the padding reach neither the loss nor a gradient.
    logits = MaskedBatch.fromlist([torch.randn(1, n, 4, dtype=dtype) for n in (2, 3)],
                                  (True, False), padding_value=float("nan"))
    logits.data.requires_grad_(True)
    target = MaskedBatch.fromlist([torch.randint(4, (1, n)) for n in (2, 3)], (True,))
    total = matchbox.batch_sum(matchbox.functional.cross_entropy(logits, target))
    assert torch.isfinite(total)
    grad, = torch.autograd.grad(total, logits.data)
    assert torch.isfinite(grad).all()


def test_a_classes_last_batch_with_an_example_that_fits_pytorchs_layout_is_refused():
    # (1, 4, 4) against (1, 4): the loop would read that example PyTorch's way.
    logits = MaskedBatch.fromlist([torch.randn(1, n, 4) for n in (2, 4)], (True, False))
    target = MaskedBatch.fromlist([torch.randint(4, (1, n)) for n in (2, 4)], (True,))
    with pytest.raises(ValueError, match=r"cross_entropy: logits \(1, 4, 4\) against targets "
                       r"\(1, 4\) \(example 1\) fit both PyTorch's layout .* "
                       r"F.cross_entropy\(logits.movedim\(-1, 1\), target\)"):
        matchbox.functional.cross_entropy(logits, target)
    # Said the PyTorch way, it is the loop's.
    mb_assert(lambda x, y: matchbox.functional.cross_entropy(x.movedim(-1, 1), y),
              (list(logits.examples()), list(target.examples())), (logits, target), 2)
