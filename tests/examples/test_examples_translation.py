"""examples/translation.py: the per-example transformer and its greedy decoding equal the loop."""

from __future__ import annotations

import pytest
import torch

from examples import translation
from matchbox import MaskedBatch
from matchbox.testing import mb_assert

NAN = float("nan")
PAD_ID = 10**6  # an id no vocabulary holds: the padding of an id batch is never looked up
SRC_VOCAB, TRG_VOCAB, BOS, EOS = 30, 20, 1, 2


def model(dtype, **sizes):
    torch.manual_seed(0)
    return translation.Transformer(SRC_VOCAB, TRG_VOCAB, bos=BOS, eos=EOS, d_model=8,
                                   d_hidden=16, n_heads=2, n_layers=1, **sizes).to(dtype).eval()


def ids(lengths, vocab):
    xs = [torch.randint(3, vocab, (1, n)) for n in lengths]
    return xs, MaskedBatch.fromlist(xs, (True,), padding_value=PAD_ID)


def floats(lengths, size, dtype):
    xs = [torch.randn(1, n, size, dtype=dtype) for n in lengths]
    return xs, MaskedBatch.fromlist(xs, (True, False), padding_value=NAN)


# Targets hold at least <s> and </s>; no example is empty in attention (two dynamic dims).
PAIRS = {"ragged": ([3, 1, 6, 2], [2, 4, 2, 5]), "one-example": ([4], [3]),
         "equal": ([3, 3], [4, 4])}


@pytest.mark.parametrize("lengths", list(PAIRS.values()), ids=list(PAIRS))
def test_loss_equals_the_loop(lengths, dtype):
    m = model(dtype)
    (src, src_b), (trg, trg_b) = ids(lengths[0], SRC_VOCAB), ids(lengths[1], TRG_VOCAB)
    mb_assert(m.loss, [src, trg], [src_b, trg_b], len(src), params=list(m.parameters()))


def test_encoder_and_decoder_layers_on_nan_padded_floats(dtype):
    torch.manual_seed(0)
    encoder = translation.EncoderLayer(8, 16, 2, dropout=0.0).to(dtype)
    decoder = translation.DecoderLayer(8, 16, 2, dropout=0.0).to(dtype)
    xs, xb = floats([3, 1, 5, 2], 8, dtype)
    ys, yb = floats([2, 4, 1, 3], 8, dtype)
    mb_assert(encoder, [xs], [xb], 4)
    mb_assert(decoder, [ys, xs], [yb, xb], 4)


def test_causal_self_attention_sees_no_later_position():
    torch.manual_seed(0)
    attention = translation.SelfAttention(8, 2, dropout=0.0, causal=True)
    x = torch.randn(1, 5, 8)
    changed = x.clone()
    changed[:, 3:] = torch.randn(1, 2, 8)
    assert torch.allclose(attention(x)[:, :3], attention(changed)[:, :3])
    assert not torch.allclose(attention(x)[:, 3:], attention(changed)[:, 3:])


def stop_lengths(m, srcs, max_len):
    return [m.greedy(src, max_len).size(1) for src in srcs]


def test_greedy_decoding_stops_per_example_and_equals_the_loop():
    m = model(torch.float64)
    srcs, src_b = ids([3, 1, 6, 2, 4, 5], SRC_VOCAB)
    # Choose as </s> the id after which the examples stop at the most different steps,
    # so that the batch really has examples that finish before others.
    m.eos = -1
    never = [m.greedy(src, 6)[0].tolist() for src in srcs]
    m.eos = max(range(TRG_VOCAB), key=lambda t: len({seq.index(t) if t in seq else 6
                                                      for seq in never}))
    lengths = stop_lengths(m, srcs, 6)
    assert len(set(lengths)) >= 2, lengths
    mb_assert(lambda src: m.greedy(src, 6), [srcs], [src_b], len(srcs), check_grad=False)
    out = m.greedy(src_b, 6)
    assert [y.size(1) for y in out.examples()] == lengths
    for y, length in zip(out.examples(), lengths):
        assert length == 6 or y[0, -1].item() == m.eos


def test_main_trains_briefly():
    result = translation.main(["--steps", "2", "--batch-size", "8", "--max-files", "20",
                               "--d-model", "16", "--d-hidden", "16", "--heads", "2",
                               "--layers", "1", "--log-every", "2", "--device", "cpu"])
    assert len(result["losses"]) == 2
    assert all(torch.isfinite(torch.tensor(result["losses"])))
    assert len(result["examples"]) == 5


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_loss_and_greedy_equal_the_loop_on_cuda():
    m = model(torch.float64).cuda()
    (src, _), (trg, _) = ids([3, 1, 6, 2], SRC_VOCAB), ids([2, 4, 2, 5], TRG_VOCAB)
    src, trg = [x.cuda() for x in src], [y.cuda() for y in trg]
    src_b, trg_b = (MaskedBatch.fromlist(xs, (True,), padding_value=PAD_ID) for xs in (src, trg))
    mb_assert(m.loss, [src, trg], [src_b, trg_b], len(src), params=list(m.parameters()))
    mb_assert(lambda s: m.greedy(s, 6), [src], [src_b], len(src), check_grad=False)
