"""F.scaled_dot_product_attention on batches equals the call on each example alone.

The oracle is the per-example loop (values, input gradients, gradients of float
masks).  Queries and keys have their own dynamic lengths, zero included; padding is
NaN (``mb_rand`` and ``MaskedBatch.fromlist(..., padding_value=nan)``) and must reach
neither an output nor a gradient.

What PyTorch gives for one example whose query row sees no key (all keys hidden by
``attn_mask``, or no keys at all): zeros, value and gradient, from torch 2.5 on (NaN
before).  Matchbox gives zeros on every version; the loop comparisons that meet such
rows need torch >= 2.5, and ``test_a_row_that_sees_no_key_gives_zeros`` checks the
zeros themselves.
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
from matchbox.testing import mb_assert

needs_safe_softmax = needs(
    ATTENTION_ROW_WITHOUT_KEYS_GIVES_ZEROS, "gives zeros, not NaN, for a query row that "
    "sees no key (Matchbox gives zeros on every torch: test_a_row_that_sees_no_key_gives_zeros)")
HAS_GQA = "enable_gqa" in (F.scaled_dot_product_attention.__doc__ or "")
NAN = float("nan")
E, EV = 4, 3


def examples(lengths, width, heads=None, dtype=torch.float64):
    lead = (1,) if heads is None else (1, heads)
    return [torch.randn(*lead, n, width, dtype=dtype) for n in lengths]


def batch(xs, heads=None, padding_value=NAN):
    dims = (True, False) if heads is None else (False, True, False)
    return MaskedBatch.fromlist(xs, dims, padding_value=padding_value)


def qkv(q_lengths, k_lengths, heads=None, dtype=torch.float64, k_heads=None):
    qs = examples(q_lengths, E, heads, dtype)
    ks = examples(k_lengths, E, k_heads or heads, dtype)
    vs = examples(k_lengths, EV, k_heads or heads, dtype)
    return [qs, ks, vs], [batch(qs, heads), batch(ks, k_heads or heads),
                          batch(vs, k_heads or heads)]


def attention(**kwargs):
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kwargs)


lengths = st.lists(st.integers(0, 5), min_size=1, max_size=4)


def test_every_registered_attention_op_is_tested_here():
    # A new op registered in the family must get its tests in this module.
    registered = {e.name for e in _registry.entries() if e.family == "attention"}
    assert registered == {"torch.nn.functional.scaled_dot_product_attention"}


@needs_safe_softmax
@given(q_lengths=lengths, data=st.data(), heads=st.sampled_from([None, 2]),
       causal=st.booleans(), scale=st.sampled_from([None, 0.3]), double=st.booleans())
def test_cross_attention_equals_loop(q_lengths, data, heads, causal, scale, double):
    # Zero-length keys included: PyTorch gives zeros for such an example, so does the batch.
    k_lengths = data.draw(st.lists(st.integers(0, 6), min_size=len(q_lengths),
                                   max_size=len(q_lengths)))
    dtype = torch.float64 if double else torch.float32
    xs, xb = qkv(q_lengths, k_lengths, heads, dtype)
    mb_assert(attention(is_causal=causal, scale=scale), xs, xb, len(q_lengths))


@given(q_lengths=lengths, heads=st.sampled_from([None, 2]), causal=st.booleans(),
       double=st.booleans())
def test_self_attention_equals_loop(q_lengths, heads, causal, double):
    dtype = torch.float64 if double else torch.float32
    xs = examples(q_lengths, E, heads, dtype)
    mb_assert(lambda x: F.scaled_dot_product_attention(x, x, x, is_causal=causal), [xs],
              [batch(xs, heads)], len(xs))


def test_causal_mask_is_aligned_at_each_examples_start(dtype):
    # Lq != Lk: query i sees keys 0..i of its own example (top-left), whatever the padding.
    xs, xb = qkv([3, 1, 4], [5, 2, 1], dtype=dtype)
    mb_assert(attention(is_causal=True), xs, xb, 3)


def test_batch_size_one_and_equal_lengths(dtype):
    for q_lengths, k_lengths in (([4], [2]), ([3, 3], [2, 2])):
        xs, xb = qkv(q_lengths, k_lengths, dtype=dtype)
        mb_assert(attention(), xs, xb, len(q_lengths))
        mb_assert(attention(is_causal=True), xs, xb, len(q_lengths))


@needs_safe_softmax
@given(q_lengths=lengths, data=st.data(), as_bool=st.booleans(), row=st.booleans())
def test_shared_mask_of_padded_size_equals_loop_slicing_it(q_lengths, data, as_bool, row):
    # A mask shared by every example spans the padded sizes (or 1); each example reads
    # its top-left corner, which the loop gets by slicing with maxsize.
    k_lengths = data.draw(st.lists(st.integers(0, 6), min_size=len(q_lengths),
                                   max_size=len(q_lengths)))
    xs, xb = qkv(q_lengths, k_lengths)
    shape = (1 if row else xb[0].maxsize(1), xb[1].maxsize(1))
    full = torch.rand(shape) < 0.7 if as_bool else torch.randn(shape, dtype=torch.float64)

    def f(q, k, v):
        mask = full[:1 if row else maxsize(q, 1), :maxsize(k, 1)]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    mb_assert(f, xs, xb, len(q_lengths))


@needs_safe_softmax
@given(q_lengths=st.lists(st.integers(0, 5), min_size=1, max_size=4), data=st.data(),
       as_bool=st.booleans(), heads=st.sampled_from([None, 2]))
def test_per_example_masks_equal_loop(q_lengths, data, as_bool, heads):
    # A batch of masks (1, [1,] Lq, Lk); rows hidden entirely give zeros in both.
    # Empty queries or keys included: masks (1, Lq, 0) or (1, 0, Lk) are empty in part.
    k_lengths = data.draw(st.lists(st.integers(0, 6), min_size=len(q_lengths),
                                   max_size=len(q_lengths)))
    xs, xb = qkv(q_lengths, k_lengths, heads)
    lead = (1,) if heads is None else (1, 1)
    masks = [torch.rand(*lead, q, k) < 0.6 if as_bool else
             torch.randn(*lead, q, k, dtype=torch.float64)
             for q, k in zip(q_lengths, k_lengths)]
    dims = (True, True) if heads is None else (False, True, True)
    mb = MaskedBatch.fromlist(masks, dims, padding_value=False if as_bool else NAN)
    mb_assert(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
              xs + [masks], xb + [mb], len(q_lengths))


@pytest.mark.parametrize("as_bool", [True, False])
def test_a_row_that_sees_no_key_gives_zeros(as_bool):
    # Example 0 hides every key from its query row 1; example 1 has no keys at all.
    xs, xb = qkv([3, 2], [4, 0])
    hide = torch.ones(3, 4, dtype=torch.bool)
    hide[1] = False
    mask = hide if as_bool else torch.zeros(3, 4, dtype=torch.float64).masked_fill(
        ~hide, -math.inf)
    q, k, v = (b.requires_grad_() for b in xb)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    first, second = out.examples()
    assert torch.equal(first[0, 1], torch.zeros(EV, dtype=torch.float64))
    assert torch.equal(second, torch.zeros(1, 2, EV, dtype=torch.float64))
    (first.sum() + second.sum()).backward()
    assert torch.equal(q.data.grad[0, 1], torch.zeros(E, dtype=torch.float64))
    assert torch.equal(q.data.grad[1, :2], torch.zeros(2, E, dtype=torch.float64))
    for b in (q, k, v):
        assert not b.data.grad.isnan().any()


def test_inf_padding_reaches_no_output_or_gradient():
    xs, nan_batches = qkv([3, 1, 0], [2, 4, 1])
    inf_batches = [batch([x.detach() for x in group], padding_value=math.inf) for group in xs]
    for b in inf_batches:
        b.requires_grad_()
    out = F.scaled_dot_product_attention(*inf_batches, is_causal=True)
    reference = F.scaled_dot_product_attention(*nan_batches, is_causal=True)
    for y, r in zip(out.examples(), reference.examples()):
        assert torch.equal(y, r)
    sum(y.sum() for y in out.examples()).backward()
    for b in inf_batches:
        assert torch.isfinite(b.data.grad).all()


def test_shared_key_and_value_tensors():
    # A plain key/value is the same for every example (a memory); queries are a batch.
    qs = examples([2, 0, 3], E)
    k, v = torch.randn(1, 4, E, dtype=torch.float64), torch.randn(1, 4, EV, dtype=torch.float64)
    mb_assert(attention(is_causal=True), [qs, [k] * 3, [v] * 3], [batch(qs), k, v], 3)


@pytest.mark.skipif(not HAS_GQA, reason="enable_gqa appeared in torch 2.5")
def test_grouped_query_attention_equals_loop():
    xs, xb = qkv([3, 0, 2], [1, 4, 2], heads=4, k_heads=2)
    mb_assert(attention(enable_gqa=True), xs, xb, 3)


def test_full_dropout_equals_loop():
    # dropout_p=1 drops every weight: deterministic, so the loop can check it.
    xs, xb = qkv([2, 3], [3, 1])
    mb_assert(attention(dropout_p=1.0), xs, xb, 2)


def test_dropout_keeps_padding_out():
    # Other dropout rates draw other random numbers than the loop: check that they are
    # applied and that padding reaches nothing.
    xs, xb = qkv([2, 5, 0], [3, 1, 4])
    q, k, v = (b.requires_grad_() for b in xb)
    dropped = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    kept = F.scaled_dot_product_attention(q, k, v)
    real = [y for y in dropped.examples() if y.numel()]
    assert all(torch.isfinite(y).all() for y in real)
    assert not all(torch.equal(y, z) for y, z in zip(dropped.examples(), kept.examples()))
    sum(y.sum() for y in real).backward()
    assert all(torch.isfinite(b.data.grad).all() for b in (q, k, v))


def test_one_attention_call_for_the_batch():
    xs, xb = qkv([2, 5, 0, 3], [3, 1, 4, 2])
    with torch.profiler.profile() as prof:
        F.scaled_dot_product_attention(*xb, is_causal=True)
    calls = [e for e in prof.events() if e.name == "aten::scaled_dot_product_attention"]
    assert len(calls) == 1


# ------------------------------------------------------------------ errors


def test_refuses_examples_without_a_sequence_dimension():
    xb = MaskedBatch.fromlist([torch.randn(1, 4), torch.randn(1, 4)], (False,))
    with pytest.raises(ValueError, match=r"scaled_dot_product_attention: query has examples of "
                                         r"rank 2; .* at least 3"):
        F.scaled_dot_product_attention(xb, xb, xb)


def test_refuses_a_dynamic_feature_or_head_dimension():
    xb = MaskedBatch.fromlist([torch.randn(1, 2, n) for n in (3, 4)], (False, True))
    with pytest.raises(ValueError, match=r"dimension 2 of query is dynamic; only the sequence "
                                         r"dimension \(1, the second to last\)"):
        F.scaled_dot_product_attention(xb, xb, xb)
    heads = MaskedBatch.fromlist([torch.randn(1, n, 2, 4) for n in (1, 2)],
                                 (True, False, False))
    with pytest.raises(ValueError, match=r"dimension 1 of key is dynamic"):
        q = MaskedBatch.fromlist([torch.randn(1, 2, 3, 4)] * 2, (False, True, False))
        F.scaled_dot_product_attention(q, heads, heads)


def test_refuses_keys_and_values_of_different_lengths():
    _, (q, k, _) = qkv([2, 3], [2, 3])
    v = batch(examples([2, 1], EV))
    with pytest.raises(ValueError, match=r"scaled_dot_product_attention: example 1 has size 3 "
                                         r"in one argument and 1 in another along dynamic "
                                         r"dimension 1"):
        F.scaled_dot_product_attention(q, k, v)


def test_refuses_a_causal_flag_with_an_explicit_mask():
    # PyTorch refuses this for one example too, with this message.
    _, xb = qkv([2, 3], [2, 3])
    with pytest.raises(RuntimeError, match="Explicit attn_mask should not be set when "
                                           "is_causal=True"):
        F.scaled_dot_product_attention(*xb, attn_mask=torch.ones(3, 3, dtype=torch.bool),
                                       is_causal=True)


def test_refuses_a_shared_mask_of_another_size_along_a_dynamic_dimension():
    _, xb = qkv([2, 3], [2, 4])
    with pytest.raises(ValueError, match=r"attn_mask has size 2 along the key sequence "
                                         r"\(dimension 1\), which is dynamic in the batch: a "
                                         r"mask shared by every example has size 1 there or "
                                         r"the padded size 4"):
        F.scaled_dot_product_attention(*xb, attn_mask=torch.ones(3, 2, dtype=torch.bool))


def test_refuses_per_example_masks_of_other_lengths():
    _, xb = qkv([2, 3], [2, 4])
    masks = MaskedBatch.fromlist([torch.ones(1, 2, 2, dtype=torch.bool),
                                  torch.ones(1, 3, 3, dtype=torch.bool)], (True, True))
    with pytest.raises(ValueError, match=r"example 1 has size 3 in one argument and 4 in "
                                         r"another"):
        F.scaled_dot_product_attention(*xb, attn_mask=masks)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_on_cuda(dtype):
    # The fused CUDA kernels (flash / memory-efficient) take the batch's bool mask.
    xs, xb = qkv([3, 0, 5, 1], [2, 4, 0, 3], heads=2, dtype=dtype)
    xs = [[x.cuda() for x in group] for group in xs]
    xb = [b.cuda() for b in xb]
    mb_assert(attention(is_causal=True), xs, xb, 4)
    mb_assert(attention(), xs, xb, 4)


def test_refuses_mismatched_operands():
    _, (q, k, v) = qkv([2, 3], [2, 3])
    three = batch(examples([1, 2, 3], E))
    with pytest.raises(ValueError, match=r"query, key and value have different batch sizes "
                                         r"\[2, 3\]"):
        F.scaled_dot_product_attention(q, three, three)
    with pytest.raises(ValueError, match=r"key is a plain tensor of shape \(2, 4, 4\); a tensor "
                                         r"shared by every example must have at most rank 3 "
                                         r"and size 1 in dimension 0"):
        F.scaled_dot_product_attention(q, torch.randn(2, 4, E, dtype=torch.float64), v)
    static = MaskedBatch.fromlist(examples([3, 3], EV), (False, False))
    with pytest.raises(ValueError, match=r"the sequence dimension 1 is dynamic in one of key "
                                         r"and value and static in the other"):
        F.scaled_dot_product_attention(q, k, static)
    with pytest.raises(ValueError, match=r"one of key and value is a batch with a dynamic "
                                         r"sequence dimension and the other a plain tensor"):
        F.scaled_dot_product_attention(q, k, torch.randn(1, 3, EV, dtype=torch.float64))


def test_refuses_masks_of_the_wrong_rank_or_layout():
    _, xb = qkv([2, 3], [2, 3])
    with pytest.raises(ValueError, match=r"attn_mask is a plain tensor of shape \(2, 3, 3\); a "
                                         r"mask shared by every example must have at most rank 3"
                                         r" and size 1 in dimension 0"):
        F.scaled_dot_product_attention(*xb, attn_mask=torch.ones(2, 3, 3, dtype=torch.bool))
    deep = MaskedBatch.fromlist([torch.ones(1, 1, n, n, dtype=torch.bool) for n in (2, 3)],
                                (False, True, True))
    with pytest.raises(ValueError, match=r"attn_mask has examples of rank 4, more than the "
                                         r"query's 3"):
        F.scaled_dot_product_attention(*xb, attn_mask=deep)
    static_q = MaskedBatch.fromlist(examples([3, 3], E), (False, False))
    masks = MaskedBatch.fromlist([torch.ones(1, n, 3, dtype=torch.bool) for n in (2, 3)],
                                 (True, True))
    with pytest.raises(ValueError, match=r"attn_mask is dynamic in dimension 1 but the query "
                                         r"sequence is not"):
        F.scaled_dot_product_attention(static_q, xb[1], xb[2], attn_mask=masks)
