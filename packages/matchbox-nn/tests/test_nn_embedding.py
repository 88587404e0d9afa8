"""embedding / nn.Embedding, embedding_bag / nn.EmbeddingBag and one_hot on batches equal
the loop.

The ids' padding holds garbage (out-of-range and negative ids) that must
neither fail the lookup nor reach a value or the weight's gradient.
"""

from __future__ import annotations

import copy
import random

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch_features import NUMBER_ARGUMENTS_REACH_TORCH_FUNCTION

from matchbox import MaskedBatch
from matchbox.testing import mb_assert

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

VOCAB, SIZE = 7, 3


def ids_batch(lengths, *, vocab=VOCAB, trailing=(), padding=10**6, dtype=torch.long, seed=0):
    g = torch.Generator().manual_seed(seed)
    examples = [torch.randint(0, vocab, (1, n, *trailing), generator=g, dtype=dtype)
                for n in lengths]
    dims = (True,) + (False,) * len(trailing)
    return examples, MaskedBatch.fromlist(examples, dims, padding_value=padding)


def weight(dtype=torch.float64, rows=VOCAB):
    return torch.randn(rows, SIZE, dtype=dtype)


@pytest.mark.parametrize("padding", [10**6, -5, 0])
def test_functional_matches_loop(padding, dtype):
    for lengths in ([0, 1, 4, 2], [3]):
        xs, xb = ids_batch(lengths, padding=padding)
        w = weight(dtype)
        mb_assert(lambda x, w: F.embedding(x, w), [xs, [w] * len(xs)], [xb, w], len(xs))


@pytest.mark.parametrize("padding_idx", [0, 2, -1])
def test_module_with_padding_idx_matches_loop(padding_idx, dtype):
    xs, xb = ids_batch([0, 1, 5, 3], padding=-3)
    module = torch.nn.Embedding(VOCAB, SIZE, padding_idx=padding_idx).to(dtype)
    mb_assert(module, [xs], [xb], 4)


def test_static_trailing_dims_and_int32_ids(dtype):
    xs, xb = ids_batch([2, 0, 3], trailing=(2,), dtype=torch.int32)
    mb_assert(torch.nn.Embedding(VOCAB, SIZE).to(dtype), [xs], [xb], 3)


def test_scale_grad_by_freq_counts_ids_per_example(dtype):
    # A vocabulary of 3 over long examples repeats ids within and across
    # examples; the loop counts within each example.
    xs, xb = ids_batch([6, 0, 9, 4], vocab=3)
    module = torch.nn.Embedding(3, SIZE, scale_grad_by_freq=True).to(dtype)
    mb_assert(module, [xs], [xb], 4)
    padded = torch.nn.Embedding(3, SIZE, scale_grad_by_freq=True, padding_idx=1).to(dtype)
    mb_assert(padded, [xs], [xb], 4)


def test_max_norm_renormalises_the_loops_rows(dtype):
    # The loop and the batch each get their own copy of the weight, since
    # max_norm changes it in place; afterwards both copies must agree, and so
    # must the lookups.
    xs, xb = ids_batch([3, 0, 4, 2], padding=VOCAB - 1, vocab=VOCAB - 1)  # last row unused
    module = torch.nn.Embedding(VOCAB, SIZE, max_norm=1.0).to(dtype)
    with torch.no_grad():
        module.weight.mul_(5)
    loop_module, batch_module = copy.deepcopy(module), copy.deepcopy(module)
    loop = [loop_module(x) for x in xs]
    batch = batch_module(xb)
    torch.testing.assert_close(batch_module.weight, loop_module.weight)
    torch.testing.assert_close(batch_module.weight[VOCAB - 1], module.weight[VOCAB - 1])
    for expected, got in zip(loop, batch.examples()):
        torch.testing.assert_close(got, expected)


def test_sparse_gradient_equals_the_loops():
    xs, xb = ids_batch([3, 0, 5])
    module = torch.nn.Embedding(VOCAB, SIZE, sparse=True).double()
    weights = [torch.randn(1, n, SIZE, dtype=torch.float64) for n in (3, 0, 5)]
    sum(((module(x) * g).sum() for x, g in zip(xs, weights)), torch.zeros(())).backward()
    loop_grad = module.weight.grad.to_dense()
    module.weight.grad = None
    out = module(xb)
    sum(((y * g).sum() for y, g in zip(out.examples(), weights)), torch.zeros(())).backward()
    assert module.weight.grad.is_sparse
    torch.testing.assert_close(module.weight.grad.to_dense(), loop_grad)


@given(batch=st.integers(1, 5), max_len=st.integers(0, 6), seed=st.integers(0, 10_000),
       padding=st.sampled_from([-1, 0, 10**9]),
       dtype=st.sampled_from([torch.float32, torch.float64]))
def test_hypothesis_shapes(batch, max_len, seed, padding, dtype):
    rng = random.Random(seed)
    xs, xb = ids_batch([rng.randint(0, max_len) for _ in range(batch)], padding=padding,
                       seed=seed)
    mb_assert(torch.nn.Embedding(VOCAB, SIZE, padding_idx=1).to(dtype), [xs], [xb], batch)


def test_float_ids_are_refused():
    xb = MaskedBatch.fromlist([torch.rand(1, 2), torch.rand(1, 3)], (True,))
    with pytest.raises(TypeError, match=r"torch.nn.functional.embedding: the ids \(input\) must "
                                        r"be an integer batch, got torch.float32"):
        F.embedding(xb, weight())


def test_a_batched_weight_is_refused():
    xs, xb = ids_batch([1, 2])
    wb = MaskedBatch.fromlist([weight()[None], weight()[None]], (False, False))
    with pytest.raises(NotImplementedError, match=r"torch.nn.functional.embedding: weight must "
                                                  r"be a plain tensor shared by every example"):
        F.embedding(xb, wb)


# ------------------------------------------------------------------ embedding_bag


def bag(mode, **kwargs):
    """The per-example oracle: PyTorch's 1-D form of one bag (offsets [0]).

    It equals PyTorch's 2-D form ``(1, T)`` wherever that works and also takes
    ``T == 0`` (an empty bag), which the 2-D form cannot.
    """
    def f(x, w, psw=None):
        if isinstance(x, MaskedBatch):
            return F.embedding_bag(x, w, mode=mode, per_sample_weights=psw, **kwargs)
        flat = None if psw is None else psw.reshape(-1)
        return F.embedding_bag(x.reshape(-1), w, x.new_zeros(1), mode=mode,
                               per_sample_weights=flat, **kwargs)
    return f


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 2])
def test_embedding_bag_matches_loop(mode, padding_idx, dtype):
    for lengths in ([0, 1, 4, 2], [3], [0]):
        xs, xb = ids_batch(lengths, padding=-9)
        w = weight(dtype)
        mb_assert(bag(mode, padding_idx=padding_idx), [xs, [w] * len(xs)], [xb, w],
                  len(xs))


def test_embedding_bag_2d_form_of_the_loop(dtype):
    # Non-empty examples: the loop may use PyTorch's own 2-D form.
    xs, xb = ids_batch([1, 4, 2], padding=-9)
    module = torch.nn.EmbeddingBag(VOCAB, SIZE, mode="mean").to(dtype)
    mb_assert(module, [xs], [xb], 3)


def test_embedding_bag_per_sample_weights(dtype):
    xs, xb = ids_batch([0, 3, 5, 1], padding=-9)
    ws = [torch.rand(1, x.size(1), dtype=dtype) for x in xs]
    wb = MaskedBatch.fromlist(ws, (True,), padding_value=float("nan"))
    w = weight(dtype)
    mb_assert(bag("sum"), [xs, [w] * 4, ws], [xb, w, wb], 4)


def test_embedding_bag_max_norm_matches_loop():
    xs, xb = ids_batch([3, 0, 4], padding=-9)
    module = torch.nn.EmbeddingBag(VOCAB, SIZE, max_norm=1.0, mode="sum").double()
    with torch.no_grad():
        module.weight.mul_(5)
    loop_module, batch_module = copy.deepcopy(module), copy.deepcopy(module)
    loop = [bag("sum", max_norm=1.0)(x, loop_module.weight) for x in xs]
    batch = batch_module(xb)
    torch.testing.assert_close(batch_module.weight, loop_module.weight)
    for expected, got in zip(loop, batch.examples()):
        torch.testing.assert_close(got, expected)


def test_embedding_bag_errors():
    xs, xb = ids_batch([1, 2])
    with pytest.raises(NotImplementedError, match=r"torch.nn.functional.embedding_bag: "
                                                  r"scale_grad_by_freq=True is not supported"):
        F.embedding_bag(xb, weight(), scale_grad_by_freq=True)
    with pytest.raises(ValueError, match=r"torch.nn.functional.embedding_bag: offsets must be "
                                         r"None for a batch"):
        F.embedding_bag(xb, weight(), torch.tensor([0]))
    xs3, xb3 = ids_batch([1, 2], trailing=(2,))
    with pytest.raises(ValueError, match=r"torch.nn.functional.embedding_bag: each example's ids "
                                         r"must be \(1, length\)"):
        F.embedding_bag(xb3, weight())
    other = MaskedBatch.fromlist([torch.rand(1, 2), torch.rand(1, 1)], (True,))
    with pytest.raises(ValueError, match=r"torch.nn.functional.embedding_bag: example 0 has size "
                                         r"1 in one argument and 2 in another"):
        F.embedding_bag(xb, weight(), mode="sum", per_sample_weights=other)


def test_embedding_bag_per_sample_weights_errors():
    xs, xb = ids_batch([1, 2])
    with pytest.raises(TypeError, match=r"torch.nn.functional.embedding_bag: per_sample_weights "
                                        r"must be a MaskedBatch with the ids' layout"):
        F.embedding_bag(xb, weight(), mode="sum", per_sample_weights=torch.ones(2, 2))
    static = MaskedBatch.fromlist([torch.rand(1, 2), torch.rand(1, 2)], (False,))
    with pytest.raises(ValueError, match=r"torch.nn.functional.embedding_bag: per_sample_weights "
                                         r"must have the ids' layout \(\(2, 2\), dims \(True,\)\)"):
        F.embedding_bag(xb, weight(), mode="sum", per_sample_weights=static)


# ---------------------------------------------------------------- one_hot


@pytest.mark.parametrize("padding", [10**6, -5, 0])
@pytest.mark.parametrize("lengths, trailing", [([3, 0, 1, 5], ()), ([2, 4], (2,)), ([3], ()),
                                               ([2, 2], ())])
def test_one_hot_matches_loop(padding, lengths, trailing):
    # Values only: one_hot has no gradient.  A float use of it (one_hot(ids).float() @ W)
    # gets its gradients from the product, which the linalg tests cover.
    xs, xb = ids_batch(lengths, trailing=trailing, padding=padding)
    mb_assert(lambda x: F.one_hot(x, VOCAB), [xs], [xb], len(xs))
    mb_assert(lambda x: F.one_hot(x, num_classes=VOCAB + 2).sum(-1), [xs], [xb], len(xs))


def test_one_hot_times_a_weight_matches_loop(dtype):
    xs, xb = ids_batch([3, 0, 4, 1])
    w = torch.randn(VOCAB, SIZE, dtype=dtype)
    mb_assert(lambda x, w: F.one_hot(x, VOCAB).to(w.dtype) @ w, [xs, [w] * 4], [xb, w], 4)


@given(lengths=st.lists(st.integers(0, 6), min_size=1, max_size=5), seed=st.integers(0, 99))
def test_one_hot_hypothesis_lengths(lengths, seed):
    xs, xb = ids_batch(lengths, seed=seed, padding=-1)
    mb_assert(lambda x: F.one_hot(x, VOCAB), [xs], [xb], len(xs))


def test_one_hot_refuses_a_dynamic_number_of_classes():
    xs, xb = ids_batch([3, 1])
    with pytest.raises(ValueError, match=r"^torch\.nn\.functional\.one_hot: num_classes=-1 infers "
                                         r"the number of classes from each example's largest "
                                         r"index, which differs between examples"):
        F.one_hot(xb)
    counts = MaskedBatch(torch.tensor([3, 5]), None, ())
    if NUMBER_ARGUMENTS_REACH_TORCH_FUNCTION:
        refused = pytest.raises(ValueError, match=r"^torch\.nn\.functional\.one_hot: "
                                                  r"num_classes must be one int for every "
                                                  r"example; a dynamic number of classes")
    else:  # torch 2.3 refuses a batch as num_classes itself, before Matchbox sees the call
        refused = pytest.raises(TypeError, match=r"one_hot\(\): argument 'num_classes' "
                                                 r"\(position 2\) must be int, not MaskedBatch")
    with refused:
        F.one_hot(xb, counts)
    with pytest.raises(RuntimeError, match=r"^torch\.nn\.functional\.one_hot: class values must "
                                           r"be in \[0, num_classes=2\): example 0 has"):
        F.one_hot(MaskedBatch.fromlist([torch.tensor([[1, 3]]), torch.tensor([[0]])], (True,)),
                  2)
    with pytest.raises(TypeError, match=r"^torch\.nn\.functional\.one_hot: the ids \(input\) "
                                        r"must be an integer batch"):
        F.one_hot(MaskedBatch.fromlist([torch.zeros(1, 2)], (True,)), 2)


@needs_cuda
def test_on_cuda():
    xs, xb = ids_batch([0, 1, 5, 3], padding=10**6)
    xs, xb = [x.cuda() for x in xs], xb.cuda()
    mb_assert(torch.nn.Embedding(VOCAB, SIZE, padding_idx=1).double().cuda(), [xs], [xb], 4)
    mb_assert(torch.nn.EmbeddingBag(VOCAB, SIZE).double().cuda(), [xs[1:]],
              [MaskedBatch.fromlist(xs[1:], (True,), padding_value=-3)], 3)
