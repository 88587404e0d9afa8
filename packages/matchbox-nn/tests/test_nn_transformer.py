"""nn.TransformerEncoderLayer / DecoderLayer and the stacks on batches equal the loop.

The layers run on a batch unchanged: post- and pre-norm, relu and gelu, in eval
mode and in training with dropout 0 (other dropout rates draw other random numbers
than the loop).  A ``batch_first=False`` layer is called by per-example code on
``x.transpose(0, 1)``, which for a batch is ``time_major(x)`` (the same view).  Values, input gradients and every
parameter gradient are compared with the same layer on each example alone.

The stacks (``nn.TransformerEncoder`` / ``nn.TransformerDecoder``) ask their input
for its sequence length before running, which a batch cannot answer; per-example
code runs them through ``matchbox.nn.run_encoder`` / ``run_decoder``, which call the
module itself on a tensor.

PyTorch cannot run one example of length 0 with a key padding mask (a reshape of an
empty mask fails in ``F.multi_head_attention_forward``), so the mask tests use
examples of length 1 or more.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from matchbox import MaskedBatch, _registry
from matchbox.functional import maxsize
from matchbox.nn import TimeMajorBatch, batch_major, run_decoder, run_encoder, time_major
from matchbox.nn.ops.time_major_views import pointwise_on_view, rowwise_on_view
from matchbox.nn.ops.time_major_views import transpose as time_major_transpose
from matchbox.testing import mb_assert

NAN = float("nan")
D, HEADS, FF = 8, 2, 16


def seqs(lengths, dtype=torch.float64):
    return [torch.randn(1, n, D, dtype=dtype) for n in lengths]


def batch(xs):
    return MaskedBatch.fromlist(xs, (True, False), padding_value=NAN)


def layer_of(kind, norm_first=False, activation="relu", train=False, dtype=torch.float64,
             dropout=0.0, batch_first=True):
    """A ``kind`` (nn.TransformerEncoderLayer or nn.TransformerDecoderLayer) of the sizes
    D, HEADS and FF."""
    layer = kind(D, HEADS, FF, dropout=dropout, activation=activation, norm_first=norm_first,
                 batch_first=batch_first)
    return layer.to(dtype).train(train)


def encoder_layer(*args, **kwargs):
    return layer_of(torch.nn.TransformerEncoderLayer, *args, **kwargs)


def decoder_layer(*args, **kwargs):
    return layer_of(torch.nn.TransformerDecoderLayer, *args, **kwargs)


def to_time_major(x):
    """What per-example code writes for a batch_first=False module."""
    return time_major(x) if isinstance(x, MaskedBatch) else x.transpose(0, 1)


def to_batch_major(x):
    return batch_major(x) if isinstance(x, TimeMajorBatch) else x.transpose(0, 1)


def causal(size, dtype=torch.float64):
    return torch.nn.Transformer.generate_square_subsequent_mask(size, dtype=dtype)


def hidden_keys(lengths, as_bool, dtype=torch.float64):
    """Per-example key padding masks that hide some keys (never the first)."""
    masks = []
    for n in lengths:
        hide = torch.rand(1, n) < 0.3
        hide[0, :1] = False
        masks.append(hide if as_bool else torch.zeros(1, n, dtype=dtype).masked_fill(
            hide, -math.inf))
    return masks


lengths = st.lists(st.integers(0, 6), min_size=1, max_size=4)
configs = dict(norm_first=st.booleans(), activation=st.sampled_from(["relu", "gelu"]),
               train=st.booleans(), double=st.booleans())


@given(lengths=lengths, causal_mask=st.booleans(), **configs)
def test_encoder_layer_equals_loop(lengths, causal_mask, norm_first, activation, train, double):
    dtype = torch.float64 if double else torch.float32
    layer = encoder_layer(norm_first, activation, train, dtype)
    xs = seqs(lengths, dtype)
    if not causal_mask:
        mb_assert(layer, [xs], [batch(xs)], len(xs))
        return
    full = causal(max(lengths), dtype)

    def f(x):
        n = maxsize(x, 1)
        return layer(x, src_mask=full[:n, :n], is_causal=True)

    mb_assert(f, [xs], [batch(xs)], len(xs))


@given(lengths=st.lists(st.integers(1, 6), min_size=1, max_size=4), as_bool=st.booleans(),
       **configs)
def test_encoder_layer_with_key_padding_mask_equals_loop(lengths, as_bool, norm_first,
                                                         activation, train, double):
    dtype = torch.float64 if double else torch.float32
    layer = encoder_layer(norm_first, activation, train, dtype)
    xs, masks = seqs(lengths, dtype), hidden_keys(lengths, as_bool, dtype)
    mb_assert(lambda x, m: layer(x, src_key_padding_mask=m), [xs, masks],
              [batch(xs), MaskedBatch.fromlist(masks, (True,))], len(xs))


@given(tgt_lengths=lengths, data=st.data(), with_masks=st.booleans(), **configs)
def test_decoder_layer_equals_loop(tgt_lengths, data, with_masks, norm_first, activation,
                                   train, double):
    # Memory of length 0 included: a query that sees no key gives zeros in both.
    dtype = torch.float64 if double else torch.float32
    n = len(tgt_lengths)
    low = 1 if with_masks else 0
    tgt_lengths = [max(t, low) for t in tgt_lengths]
    mem_lengths = data.draw(st.lists(st.integers(low, 5), min_size=n, max_size=n))
    layer = decoder_layer(norm_first, activation, train, dtype)
    xs, ms = seqs(tgt_lengths, dtype), seqs(mem_lengths, dtype)
    if not with_masks:
        mb_assert(layer, [xs, ms], [batch(xs), batch(ms)], n)
        return
    full = causal(max(tgt_lengths), dtype)
    # Float padding masks, like the float causal mask (PyTorch warns about mixed types).
    tgt_pads = hidden_keys(tgt_lengths, False, dtype)
    mem_pads = hidden_keys(mem_lengths, False, dtype)

    def f(x, m, tp, mp):
        size = maxsize(x, 1)
        return layer(x, m, tgt_mask=full[:size, :size], tgt_is_causal=True,
                     tgt_key_padding_mask=tp, memory_key_padding_mask=mp)

    mb_assert(f, [xs, ms, tgt_pads, mem_pads],
              [batch(xs), batch(ms), MaskedBatch.fromlist(tgt_pads, (True,)),
               MaskedBatch.fromlist(mem_pads, (True,))], n)


@given(lengths=lengths, data=st.data(), **configs)
def test_time_major_layers_equal_loop(lengths, data, norm_first, activation, train, double):
    # batch_first=False layers: per example (L, 1, E) in and out.
    dtype = torch.float64 if double else torch.float32
    n = len(lengths)
    xs = seqs(lengths, dtype)
    encoder = encoder_layer(norm_first, activation, train, dtype, batch_first=False)
    mb_assert(lambda x: to_batch_major(encoder(to_time_major(x))), [xs], [batch(xs)], n)
    ms = seqs(data.draw(st.lists(st.integers(0, 5), min_size=n, max_size=n)), dtype)
    decoder = decoder_layer(norm_first, activation, train, dtype, batch_first=False)
    mb_assert(lambda x, m: to_batch_major(decoder(to_time_major(x), to_time_major(m))),
              [xs, ms], [batch(xs), batch(ms)], n)


def test_every_time_major_op_delegates_to_a_batch_handler():
    # The view runs position-wise ops (pointwise, linear, layer_norm, dropout) on its
    # batch, whose handlers core and matchbox-nn test op by op; each registered op
    # must have one.  transpose(0, 1) is the view's own op.
    for entry in _registry.entries("TimeMajorBatch"):
        if entry.family != "time_major" or entry.handler is time_major_transpose:
            continue
        assert entry.handler in (pointwise_on_view, rowwise_on_view)
        assert _registry.lookup(entry.func, "MaskedBatch") is not None, entry.name


POSITION_WISE = {
    "add two views": lambda x, y: x + y,
    "in-place": lambda x, y: x.mul(2).add_(y),
    "a time-major plain tensor": lambda x, y: x * torch.arange(1.0, 5.0,
                                                                dtype=x.dtype).reshape(4, 1, 1),
    "a feature vector": lambda x, y: torch.where(y > 0, x, torch.ones(D, dtype=x.dtype)),
    "activations": lambda x, y: torch.nn.functional.gelu(x).tanh() - y.relu(),
    "linear": lambda x, y: torch.nn.functional.linear(x, torch.ones(3, D, dtype=x.dtype)),
    "layer_norm": lambda x, y: torch.nn.functional.layer_norm(x, (D,)),
    "dropout in eval": lambda x, y: torch.nn.functional.dropout(x, 0.5, training=False),
}


@pytest.mark.parametrize("name", list(POSITION_WISE))
def test_position_wise_ops_on_the_view_equal_loop(name, dtype):
    f = POSITION_WISE[name]
    xs, ys = seqs([4, 0, 2, 3], dtype), seqs([4, 0, 2, 3], dtype)
    if name == "a time-major plain tensor":
        xs = ys = seqs([4, 4], dtype)  # spans the padded length, as positions line up
    mb_assert(lambda x, y: to_batch_major(f(to_time_major(x), to_time_major(y))), [xs, ys],
              [batch(xs), batch(ys)], len(xs))


def test_view_refuses_other_ops_and_mixed_layouts():
    xb = batch(seqs([2, 3]))
    view = time_major(xb)
    with pytest.raises(NotImplementedError, match=r"torch.nn.functional.softmax is not "
                                                  r"implemented for TimeMajorBatch \(a "
                                                  r"time-major view, for batch_first=False "
                                                  r"modules and the states of recurrent "
                                                  r"modules\); convert back with "
                                                  r"matchbox.nn.batch_major"):
        torch.nn.functional.softmax(view, -1)
    with pytest.raises(TypeError, match=r"Tensor.__add__: cannot combine a time-major view "
                                        r"with a batch-major MaskedBatch"):
        view + xb
    with pytest.raises(ValueError, match=r"Tensor.__mul__: a plain tensor of shape \(3, 8\) "
                                         r"would broadcast its first dimension"):
        view * torch.ones(3, D)


def test_batch_size_one(dtype):
    xs = seqs([3], dtype)
    mb_assert(encoder_layer(dtype=dtype), [xs], [batch(xs)], 1)
    mb_assert(decoder_layer(dtype=dtype), [xs, seqs([2], dtype)],
              [batch(xs), batch(seqs([2], dtype))], 1)


def test_eval_without_gradients_equals_the_loops_fast_path():
    # Without gradients an eval-mode layer takes PyTorch's fused fast path on each
    # example (torch._transformer_encoder_layer_fwd); the batch takes the slow path
    # (the batch has __torch_function__) and must give the same values.
    for norm_first in (False, True):
        layer = encoder_layer(norm_first=norm_first).float()
        xs = seqs([3, 1, 5, 2], torch.float32)
        with torch.no_grad():
            mb_assert(layer, [xs], [batch(xs)], 4, check_grad=False)


@pytest.mark.parametrize("make", [encoder_layer, decoder_layer])
def test_full_dropout_in_training_equals_loop(make):
    # dropout=1 zeroes attention, feed-forward and residual branches alike: the one
    # dropout rate whose result does not depend on the random numbers.
    layer = make(train=True, dropout=1.0)
    xs = seqs([2, 4, 1])
    args = [xs] if make is encoder_layer else [xs, seqs([3, 1, 2])]
    mb_assert(layer, args, [batch(a) for a in args], 3)


def test_dropout_keeps_padding_out():
    layer = encoder_layer(train=True, dropout=0.3)
    xb = batch(seqs([2, 5, 0])).requires_grad_()
    out = layer(xb)
    assert all(torch.isfinite(y).all() for y in out.examples())
    sum(y.sum() for y in out.examples()).backward()
    assert torch.isfinite(xb.data.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in layer.parameters())


# ------------------------------------------------------------------ stacks


def encoder_stack(dtype=torch.float64, norm=True):
    layer = encoder_layer(dtype=dtype)
    final = torch.nn.LayerNorm(D).to(dtype) if norm else None
    return torch.nn.TransformerEncoder(layer, 2, norm=final, enable_nested_tensor=False)


@given(lengths=lengths, norm=st.booleans(), causal_mask=st.booleans(), double=st.booleans())
def test_run_encoder_equals_the_stack_on_each_example(lengths, norm, causal_mask, double):
    dtype = torch.float64 if double else torch.float32
    encoder = encoder_stack(dtype, norm).train(False)
    xs = seqs(lengths, dtype)
    full = causal(max(lengths), dtype)

    def f(x):
        n = maxsize(x, 1)
        # is_causal left to the stack to detect, as it does for one example
        return run_encoder(encoder, x, mask=full[:n, :n] if causal_mask else None)

    mb_assert(f, [xs], [batch(xs)], len(xs))


def test_run_encoder_with_key_padding_mask(dtype):
    encoder = encoder_stack(dtype)
    xs, masks = seqs([3, 1, 4], dtype), hidden_keys([3, 1, 4], True)
    mb_assert(lambda x, m: run_encoder(encoder, x, src_key_padding_mask=m), [xs, masks],
              [batch(xs), MaskedBatch.fromlist(masks, (True,))], 3)


def test_run_encoder_with_time_major_layers(dtype):
    layer = encoder_layer(dtype=dtype, batch_first=False)
    encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    xs = seqs([3, 0, 4], dtype)
    mb_assert(lambda x: to_batch_major(run_encoder(encoder, to_time_major(x))), [xs],
              [batch(xs)], 3)


def test_run_encoder_on_a_tensor_is_the_module():
    encoder = encoder_stack().train(False)
    x = torch.randn(1, 4, D, dtype=torch.float64)
    assert torch.equal(run_encoder(encoder, x), encoder(x))


def test_run_decoder_equals_the_stack_on_each_example(dtype):
    layer = decoder_layer(dtype=dtype)
    decoder = torch.nn.TransformerDecoder(layer, 2, norm=torch.nn.LayerNorm(D).to(dtype))
    xs, ms = seqs([2, 4, 1], dtype), seqs([3, 0, 2], dtype)
    full = causal(4, dtype)

    def f(x, m):
        n = maxsize(x, 1)
        return run_decoder(decoder, x, m, tgt_mask=full[:n, :n])

    mb_assert(f, [xs, ms], [batch(xs), batch(ms)], 3)


def test_the_stack_itself_refuses_a_batch():
    # nn.TransformerEncoder asks src.size() for the sequence length: a batch cannot say.
    encoder = encoder_stack()
    xb = batch(seqs([2, 3]))
    with pytest.raises(ValueError, match=r"size\(\): dimensions \[1\] are dynamic"):
        encoder(xb)
    kpm = MaskedBatch.fromlist([torch.zeros(1, n, dtype=torch.bool) for n in (2, 3)], (True,))
    with torch.no_grad(), pytest.raises(NotImplementedError,
                                        match="_nested_tensor_from_mask_left_aligned is not "
                                              "implemented for MaskedBatch"):
        torch.nn.TransformerEncoder(encoder_layer(), 2).eval()(xb, src_key_padding_mask=kpm)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("norm_first", [False, True])
def test_on_cuda(norm_first):
    encoder = encoder_layer(norm_first=norm_first, train=True).cuda()
    decoder = decoder_layer(norm_first=norm_first, train=True).cuda()
    xs, ms = [x.cuda() for x in seqs([3, 0, 5, 2])], [x.cuda() for x in seqs([2, 4, 1, 3])]
    mb_assert(encoder, [xs], [batch(xs)], 4)
    mb_assert(decoder, [xs, ms], [batch(xs), batch(ms)], 4)
