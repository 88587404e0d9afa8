"""nn.MultiheadAttention on batches equals the module called on each example alone.

Values, input gradients and every parameter's gradient (in_proj / q_proj / k_proj /
v_proj, out_proj, bias_k, bias_v) are compared by ``mb_assert``; padding is NaN.

A module built with ``batch_first=True`` is called on ``(1, L, E)`` examples and on
the batch unchanged.  One built with ``batch_first=False`` is called by the
per-example code on ``x.transpose(0, 1)`` for a tensor and ``time_major(x)`` for a
batch (the same view).

What PyTorch gives for one example whose query row sees no key (a key_padding_mask
hiding every key): zeros with ``need_weights=False`` (torch >= 2.5), NaN with
``need_weights=True`` (its explicit softmax).  Matchbox gives zeros in both cases
(weights and attention, then ``out_proj``): ``test_hidden_row_with_weights_*``.
PyTorch cannot run one example with no keys and a key_padding_mask (a reshape of an
empty mask fails), so the mask tests use at least one key.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch_features import ATTENTION_ROW_WITHOUT_KEYS_GIVES_ZEROS, needs

from matchbox import MaskedBatch, _registry
from matchbox.functional import maxsize
from matchbox.nn import TimeMajorBatch, batch_major, time_major
from matchbox.testing import mb_assert

needs_safe_softmax = needs(
    ATTENTION_ROW_WITHOUT_KEYS_GIVES_ZEROS, "gives zeros, not NaN, for a query row that "
    "sees no key (Matchbox gives zeros on every torch: test_hidden_row_with_weights_gives_zeros)")
NAN = float("nan")
E = 8


def make(heads=2, dtype=torch.float64, train=False, **kwargs):
    module = torch.nn.MultiheadAttention(E, heads, **kwargs).to(dtype)
    return module.train(train)


def seqs(lengths, width=E, dtype=torch.float64):
    return [torch.randn(1, n, width, dtype=dtype) for n in lengths]


def batch(xs, padding_value=NAN):
    return MaskedBatch.fromlist(xs, (True,) * (xs[0].dim() - 2) + (False,),
                                padding_value=padding_value)


def call(module, q, k, v, **kwargs):
    """The module as per-example code calls it: (1, L, E) in and out."""
    if module.batch_first:
        return module(q, k, v, **kwargs)
    views = {}

    def view(x):  # one view per input object, so that `query is key` survives
        if id(x) not in views:
            views[id(x)] = time_major(x) if isinstance(x, MaskedBatch) else x.transpose(0, 1)
        return views[id(x)]

    out, weights = module(view(q), view(k), view(v), **kwargs)
    return batch_major(out) if isinstance(out, TimeMajorBatch) else out.transpose(0, 1), weights


def self_attention(module, **kwargs):
    return lambda x: call(module, x, x, x, **kwargs)


def cross_attention(module, **kwargs):
    return lambda x, m: call(module, x, m, m, **kwargs)


def separate_attention(module, **kwargs):
    return lambda x, k, v: call(module, x, k, v, **kwargs)


def test_every_registered_multihead_op_is_tested_here():
    registered = {(e.batch_type, e.name) for batch_type in ("MaskedBatch", "TimeMajorBatch")
                  for e in _registry.entries(batch_type) if e.family == "multihead_attention"}
    assert registered == {("TimeMajorBatch", "torch.nn.functional.multi_head_attention_forward")}


lengths = st.lists(st.integers(0, 5), min_size=1, max_size=4)


@given(q_lengths=lengths, data=st.data(), kind=st.sampled_from(["self", "cross", "separate"]),
       batch_first=st.booleans(), heads=st.sampled_from([1, 2]), bias=st.booleans(),
       bias_kv=st.booleans(), zero_attn=st.booleans(), need_weights=st.booleans(),
       average=st.booleans(), train=st.booleans(), double=st.booleans())
def test_module_equals_loop(q_lengths, data, kind, batch_first, heads, bias, bias_kv,
                            zero_attn, need_weights, average, train, double):
    # Training with dropout 0 and eval mode both equal the loop.
    dtype = torch.float64 if double else torch.float32
    # Weights (1, Lq, Lk) empty in one dynamic dim only (no queries, or no keys) included.
    kdim = vdim = None
    if kind != "self" and data.draw(st.booleans(), label="kdim/vdim"):
        kdim, vdim = 5, 3
    module = make(heads, dtype, train, batch_first=batch_first, bias=bias, add_bias_kv=bias_kv,
                  add_zero_attn=zero_attn, kdim=kdim, vdim=vdim)
    kwargs = dict(need_weights=need_weights, average_attn_weights=average)
    n = len(q_lengths)
    xs = seqs(q_lengths, dtype=dtype)
    if kind == "self":
        mb_assert(self_attention(module, **kwargs), [xs], [batch(xs)], n)
        return
    k_lengths = data.draw(st.lists(st.integers(0, 6), min_size=n,
                                   max_size=n), label="key lengths")
    ks = seqs(k_lengths, kdim or E, dtype)
    if kind == "cross" and kdim is None:
        mb_assert(cross_attention(module, **kwargs), [xs, ks], [batch(xs), batch(ks)], n)
        return
    vs = seqs(k_lengths, vdim or E, dtype)
    mb_assert(separate_attention(module, **kwargs), [xs, ks, vs],
              [batch(xs), batch(ks), batch(vs)], n)


def test_batch_size_one_and_unpadded_batches(dtype):
    module = make(dtype=dtype, batch_first=True)
    for q_lengths in ([3], [0], [2, 2]):
        xs = seqs(q_lengths, dtype=dtype)
        mb_assert(self_attention(module), [xs], [batch(xs)], len(xs))


def test_shared_memory_tensor():
    # A plain (1, S, E) memory is the same for every example.
    module = make(batch_first=True)
    xs = seqs([2, 0, 4])
    memory = torch.randn(1, 3, E, dtype=torch.float64)
    mb_assert(cross_attention(module, need_weights=False), [xs, [memory] * 3],
              [batch(xs), memory], 3)


@needs_safe_softmax
@given(q_lengths=lengths, data=st.data(), as_bool=st.booleans(), batch_first=st.booleans())
def test_key_padding_mask_combines_with_the_batchs_own(q_lengths, data, as_bool, batch_first):
    n = len(q_lengths)
    k_lengths = data.draw(st.lists(st.integers(1, 6), min_size=n, max_size=n))
    module = make(batch_first=batch_first)
    xs, ks = seqs(q_lengths), seqs(k_lengths)
    hide = [torch.rand(1, s) < 0.4 for s in k_lengths]
    masks = hide if as_bool else [torch.zeros(1, s, dtype=torch.float64).masked_fill(h, -math.inf)
                                  for s, h in zip(k_lengths, hide)]
    mb = MaskedBatch.fromlist(masks, (True,), padding_value=True if as_bool else NAN)
    mb_assert(lambda x, m, kpm: call(module, x, m, m, key_padding_mask=kpm, need_weights=False),
              [xs, ks, masks], [batch(xs), batch(ks), mb], n)


@given(q_lengths=st.lists(st.integers(1, 5), min_size=1, max_size=4), data=st.data(),
       average=st.booleans())
def test_key_padding_mask_with_weights(q_lengths, data, average):
    # Every query sees a key (the first is never hidden): PyTorch's weights are finite.
    n = len(q_lengths)
    k_lengths = data.draw(st.lists(st.integers(1, 6), min_size=n, max_size=n))
    module = make(batch_first=True)
    xs, ks = seqs(q_lengths), seqs(k_lengths)
    masks = [torch.rand(1, s) < 0.4 for s in k_lengths]
    for m in masks:
        m[0, 0] = False
    mb = MaskedBatch.fromlist(masks, (True,), padding_value=True)
    mb_assert(lambda x, m, kpm: call(module, x, m, m, key_padding_mask=kpm,
                                     average_attn_weights=average),
              [xs, ks, masks], [batch(xs), batch(ks), mb], n)


@needs_safe_softmax
@given(q_lengths=lengths, as_bool=st.booleans(), per_head=st.booleans(),
       with_padding_mask=st.booleans(), batch_first=st.booleans())
def test_attn_mask_of_padded_sizes_equals_loop_slicing_it(q_lengths, as_bool, per_head,
                                                          with_padding_mask, batch_first):
    if per_head or with_padding_mask:
        # PyTorch cannot run one example of length 0 with a per-head attn_mask or a
        # key_padding_mask (a reshape of an empty mask fails): the loop is undefined.
        q_lengths = [max(n, 1) for n in q_lengths]
    module = make(batch_first=batch_first)
    xs = seqs(q_lengths)
    size = max(q_lengths)
    shape = (2, size, size) if per_head else (size, size)
    hide = torch.rand(shape) < 0.3
    full = hide if as_bool else torch.zeros(shape, dtype=torch.float64).masked_fill(hide,
                                                                                   -math.inf)

    def f(x, *kpm):
        n = maxsize(x, 1)
        return call(module, x, x, x, attn_mask=full[..., :n, :n], need_weights=False,
                    key_padding_mask=kpm[0] if kpm else None)

    if not with_padding_mask:
        mb_assert(f, [xs], [batch(xs)], len(xs))
        return
    hide = [torch.rand(1, n) < 0.3 for n in q_lengths]
    pads = hide if as_bool else [torch.zeros(1, h.size(1), dtype=torch.float64).masked_fill(
        h, -math.inf) for h in hide]
    mb_assert(f, [xs, pads], [batch(xs), MaskedBatch.fromlist(pads, (True,))], len(xs))


def test_padding_mask_with_an_example_without_keys():
    # PyTorch cannot run one example with no keys and a key_padding_mask (a reshape of
    # the empty mask fails); the batch can.  The masks hide nothing, so each example
    # equals the module without a mask, which PyTorch does run.
    module = make(batch_first=True)
    xs, ks = seqs([2, 3, 1]), seqs([0, 2, 4])
    masks = [torch.zeros(1, k.size(1), dtype=torch.bool) for k in ks]
    out, _ = module(batch(xs), batch(ks), batch(ks), need_weights=False,
                    key_padding_mask=MaskedBatch.fromlist(masks, (True,)))
    for got, x, k in zip(out.examples(), xs, ks):
        torch.testing.assert_close(got, module(x, k, k, need_weights=False)[0])


def test_causal_hint_with_a_causal_mask(dtype):
    module = make(dtype=dtype, batch_first=True)
    xs = seqs([3, 1, 0, 5], dtype=dtype)
    causal = torch.nn.Transformer.generate_square_subsequent_mask(5, dtype=dtype)

    def f(x):
        n = maxsize(x, 1)
        return call(module, x, x, x, attn_mask=causal[:n, :n], is_causal=True,
                    need_weights=False)

    mb_assert(f, [xs], [batch(xs)], 4)


HIDE = [torch.tensor([[True, True, True]]), torch.tensor([[False, True]])]  # example 0: all


def hidden_row_case():
    module = make(batch_first=True)
    module.out_proj.bias.data.normal_()  # a row of zero attention gives exactly this bias
    xs, ks = seqs([2, 3]), seqs([3, 2])
    xb, kb = batch(xs), batch(ks)
    out, weights = module(xb, kb, kb, key_padding_mask=MaskedBatch.fromlist(HIDE, (True,)))
    return module, xs, ks, list(out.examples()), list(weights.examples())


def test_hidden_row_with_weights_gives_zeros():
    # PyTorch's need_weights=True path gives NaN for a row that sees no key; the batch
    # gives zero weights and zero attention, then out_proj (its bias), on every torch.
    module, xs, ks, outs, weights = hidden_row_case()
    zero_attention = module.out_proj(xs[0].new_zeros(xs[0].shape))
    torch.testing.assert_close(outs[0], zero_attention)
    assert torch.equal(weights[0], torch.zeros_like(weights[0]))
    assert module(xs[0], ks[0], ks[0], key_padding_mask=HIDE[0])[1].isnan().all()
    loop_out, loop_weights = module(xs[1], ks[1], ks[1], key_padding_mask=HIDE[1])
    torch.testing.assert_close(outs[1], loop_out)
    torch.testing.assert_close(weights[1], loop_weights)


@needs_safe_softmax
def test_hidden_row_gives_what_torch_gives_without_weights():
    # Where PyTorch's need_weights=False path gives zeros for such a row, the batch
    # equals it (the loop) for every example.
    module, xs, ks, outs, _ = hidden_row_case()
    for x, k, h, got in zip(xs, ks, HIDE, outs):
        torch.testing.assert_close(
            got, module(x, k, k, key_padding_mask=h, need_weights=False)[0])


@pytest.mark.parametrize("need_weights", [True, False])
def test_full_dropout_in_training_equals_loop(need_weights):
    # dropout=1 drops every attention weight: deterministic, so the loop can check it.
    module = make(batch_first=True, train=True, dropout=1.0)
    xs = seqs([2, 4, 1])
    mb_assert(self_attention(module, need_weights=need_weights), [xs], [batch(xs)], 3)


def test_dropout_keeps_padding_out():
    module = make(batch_first=True, train=True, dropout=0.5)
    xb = batch(seqs([2, 5, 0])).requires_grad_()
    out, _ = module(xb, xb, xb, need_weights=False)
    assert all(torch.isfinite(y).all() for y in out.examples())
    sum(y.sum() for y in out.examples()).backward()
    assert torch.isfinite(xb.data.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in module.parameters())


def test_one_attention_call_for_the_batch():
    module = make(batch_first=True)
    xb = batch(seqs([2, 5, 0, 3]))
    with torch.profiler.profile() as prof:
        module(xb, xb, xb, need_weights=False)
    calls = [e for e in prof.events() if e.name == "aten::scaled_dot_product_attention"]
    assert len(calls) == 1


def test_transpose_of_dims_0_and_1_is_a_time_major_view():
    xb = batch(seqs([2, 3]))
    view = xb.transpose(0, 1)
    assert isinstance(view, TimeMajorBatch) and view.batch is xb
    assert view.transpose(1, 0) is xb and torch.transpose(view, 0, 1) is xb
    assert xb.swapaxes(1, 0).batch is xb


# ------------------------------------------------------------------ errors


def test_time_major_view_errors():
    rank4 = MaskedBatch.fromlist([torch.randn(1, n, 2, 3) for n in (1, 2)],
                                 (True, False, False))
    with pytest.raises(ValueError, match=r"Tensor.transpose: dimension 0 is the batch "
                                         r"dimension of each example; moving it to position 1 "
                                         r"gives a time-major view only for results of rank 3 "
                                         r".* would have rank 4"):
        rank4.transpose(0, 1)
    view = time_major(batch(seqs([2, 3])))
    # (Swaps that keep the batch dimension first or second work: packages/matchbox-nn/tests/test_rnn_modules.py.)
    with pytest.raises(ValueError, match=r"Tensor.transpose\(1, 2\): each example's batch "
                                         r"dimension would move to position 2; a time-major "
                                         r"view \(A, batch, F\) keeps"):
        view.transpose(1, 2)


def test_a_batch_major_batch_in_the_functional_is_not_implemented():
    # The functional reads (L, N, E); nn.MultiheadAttention(batch_first=True) hands it a
    # time-major view.  A MaskedBatch of (1, L, E) examples given directly would mean a
    # batch of L one-step sequences per example, which is not implemented.
    module = make()
    xb = batch(seqs([2, 3]))
    with pytest.raises(NotImplementedError, match=r"multi_head_attention_forward is not "
                                                  r"implemented for MaskedBatch"):
        module(xb, xb, xb)


def test_refuses_static_keys():
    module = make()
    view = time_major(batch(seqs([2, 3])))
    with pytest.raises(NotImplementedError, match="static_k / static_v are not supported"):
        F.multi_head_attention_forward(
            view, view, view, E, 2, module.in_proj_weight, module.in_proj_bias, None, None,
            False, 0.0, module.out_proj.weight, module.out_proj.bias,
            static_k=torch.zeros(2, 3, 4, dtype=torch.float64))


def test_weights_empty_in_one_dynamic_dimension_equal_the_loop():
    # Example 1 has no queries and 3 keys: weights (1, 0, 3); example 0 has queries and no
    # keys: weights (1, 2, 0), and outputs of zeros (PyTorch's own result for it).
    module = make(batch_first=True, dtype=torch.float64)
    xs, ks = seqs([2, 0]), seqs([0, 3])
    weights = module(batch(xs), batch(ks), batch(ks))[1]
    assert [tuple(w.shape) for w in weights.examples()] == [(1, 2, 0), (1, 0, 3)]
    mb_assert(lambda x, k: module(x, k, k)[1], [xs, ks], [batch(xs), batch(ks)], 2)


def test_refuses_an_attn_mask_of_other_sizes():
    module = make(batch_first=True)
    xb = batch(seqs([2, 4]))
    with pytest.raises(ValueError, match=r"attn_mask has shape \(2, 2\); for this batch it "
                                         r"must be \(4, 4\) or \(2, 4, 4\)"):
        module(xb, xb, xb, attn_mask=torch.zeros(2, 2, dtype=torch.bool))


def test_refuses_a_batch_as_attn_mask_in_the_functional():
    module = make()
    view = time_major(batch(seqs([2, 3])))
    mask = MaskedBatch.fromlist([torch.zeros(1, 3, 3, dtype=torch.bool)] * 2, (False, False))
    with pytest.raises(TypeError, match=r"attn_mask must be a plain tensor of the padded sizes "
                                        r"\(3, 3\) .*per-example masks go in key_padding_mask"):
        F.multi_head_attention_forward(
            view, view, view, E, 2, module.in_proj_weight, module.in_proj_bias, None, None,
            False, 0.0, module.out_proj.weight, module.out_proj.bias, attn_mask=mask)


@pytest.mark.parametrize("as_bool", [True, False])
def test_refuses_a_batch_as_attn_mask_in_the_module(as_bool):
    # torch's module itself refuses anything but a tensor there (F._none_or_dtype) before
    # a batch's rule runs: the refusal is Matchbox's, naming the argument.
    module = make(batch_first=True)
    xb = batch(seqs([2, 3]))
    mask = MaskedBatch.fromlist([torch.zeros(1, n, n, dtype=torch.bool) for n in (2, 3)],
                                (True, True))
    with pytest.raises(TypeError, match=r"^nn\.MultiheadAttention: attn_mask must be a plain "
                                        r"tensor of the padded sizes \(L, S\) or \(num_heads, "
                                        r"L, S\), shared by every example .* a MaskedBatch of "
                                        r"per-example masks is not supported. Hide each "
                                        r"example's own keys with key_padding_mask"):
        module(xb, xb, xb, attn_mask=mask if as_bool else mask.float())
    # A batch as key_padding_mask beside a plain attn_mask is asked the same question, and
    # is not refused.
    kpm = MaskedBatch.fromlist([torch.zeros(1, n, dtype=torch.bool) for n in (2, 3)], (True,))
    module(xb, xb, xb, key_padding_mask=kpm, attn_mask=torch.zeros(3, 3))


def test_refuses_a_causal_hint_without_a_mask():
    # PyTorch's own message for one example.
    module = make(batch_first=True)
    xb = batch(seqs([2, 3]))
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
        module(xb, xb, xb, is_causal=True)


def test_refuses_mismatched_padding_masks_and_lengths():
    module = make(batch_first=True)
    xb, kb = batch(seqs([2, 3])), batch(seqs([2, 4]))
    kpm = MaskedBatch.fromlist([torch.zeros(1, 2, dtype=torch.bool)] * 2, (True,))
    with pytest.raises(ValueError, match=r"example 1 has size 2 in one argument and 4 in "
                                         r"another along dynamic dimension 1"):
        module(xb, kb, kb, key_padding_mask=kpm, need_weights=False)
    values = batch(seqs([2, 1]))
    with pytest.raises(ValueError, match=r"example 1 has size 3 in one argument and 1 in "
                                         r"another"):
        module(xb, xb, values, need_weights=False)


def test_refuses_different_batch_sizes():
    module = make(batch_first=True)
    xb, kb = batch(seqs([2, 3])), batch(seqs([2, 4, 1]))
    with pytest.raises(ValueError, match=r"query, key and value have different batch sizes "
                                         r"\(2 and 3\)"):
        module(xb, kb, kb)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("need_weights", [True, False])
def test_on_cuda(need_weights):
    module = make(batch_first=True).cuda()
    xs = [x.cuda() for x in seqs([3, 1, 5, 2])]
    ks = [x.cuda() for x in seqs([2, 4, 1, 3])]
    mb_assert(cross_attention(module, need_weights=need_weights), [xs, ks],
              [batch(xs), batch(ks)], 4)
    mb_assert(self_attention(module, need_weights=need_weights), [xs], [batch(xs)], 4)


def functional(module, query, key, value, **kwargs):
    """F.multi_head_attention_forward with the module's parameters (time-major inputs)."""
    args = dict(embed_dim_to_check=E, num_heads=module.num_heads,
                in_proj_weight=module.in_proj_weight, in_proj_bias=module.in_proj_bias,
                bias_k=None, bias_v=None, add_zero_attn=False, dropout_p=0.0,
                out_proj_weight=module.out_proj.weight, out_proj_bias=module.out_proj.bias)
    args.update(kwargs)
    return F.multi_head_attention_forward(query, key, value, **args)


def test_refuses_bad_inputs_in_the_functional():
    module = make()
    view = time_major(batch(seqs([2, 3])))
    with pytest.raises(ValueError, match=r"key must be a time-major batch .* or a plain "
                                         r"\(L, 1, E\) tensor shared by every example \(.*\); "
                                         r"got \(3, 2, 8\)"):
        functional(module, view, torch.zeros(3, 2, E), torch.zeros(3, 2, E))
    with pytest.raises(AssertionError, match=r"was expecting embedding dimension of 16, but got "
                                             r"8"):
        functional(module, view, view, view, embed_dim_to_check=16)
    with pytest.raises(AssertionError, match=r"embed_dim 8 not divisible by num_heads 3"):
        functional(module, view, view, view, num_heads=3)
    with pytest.raises(AssertionError, match=r"bias_k and bias_v must be given together"):
        functional(module, view, view, view, bias_k=torch.zeros(1, 1, E, dtype=torch.float64))
    dynamic_features = time_major(MaskedBatch.fromlist(
        [torch.randn(1, 2, n, dtype=torch.float64) for n in (8, 7)], (True, True)))
    with pytest.raises(ValueError, match=r"the feature dimension \(2\) of query is dynamic"):
        functional(module, dynamic_features, view, view)


def test_refuses_bad_key_padding_masks():
    module = make(batch_first=True)
    xb = batch(seqs([2, 3]))
    deep = MaskedBatch.fromlist([torch.zeros(1, 1, n, dtype=torch.bool) for n in (2, 3)],
                                (False, True))
    with pytest.raises(ValueError, match=r"key_padding_mask must have examples of shape \(1, "
                                         r"key length\); got examples of rank 3"):
        module(xb, xb, xb, key_padding_mask=deep, need_weights=False)
    static = MaskedBatch.fromlist(seqs([3, 3]), (False, False))
    dynamic = MaskedBatch.fromlist([torch.zeros(1, n, dtype=torch.bool) for n in (2, 3)],
                                   (True,))
    with pytest.raises(ValueError, match=r"key_padding_mask is dynamic in dimension 1 but the "
                                         r"key length is the same for every example"):
        module(xb, static, static, key_padding_mask=dynamic, need_weights=False)
    with pytest.raises(ValueError, match=r"key_padding_mask is a plain tensor of shape \(2, 3\); "
                                         r"shared by every example it must be \(1, 3\)"):
        module(xb, xb, xb, key_padding_mask=torch.zeros(2, 3, dtype=torch.bool),
               need_weights=False)
    with pytest.raises(ValueError, match=r"key_padding_mask has 5 key positions; the batch's "
                                         r"keys have padded length 3"):
        module(xb, xb, xb, key_padding_mask=torch.zeros(1, 5, dtype=torch.bool),
               need_weights=False)
    view = time_major(xb)
    with pytest.raises(TypeError, match=r"key_padding_mask must be a tensor or a batch, got "
                                        r"list"):
        functional(make(), view, view, view, key_padding_mask=[[False] * 3] * 2)
