"""softmax / log_softmax / softmin (every registered form) on batches equal the loop.

Parametrised over the registry's ``softmax`` family, so a newly registered form
is tested by default.  Padding holds NaN (mb_rand's default): any leak into a
real value or gradient is a mismatch.  ``gumbel_softmax`` is random and has its
own statistical tests at the end.
"""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import matchbox.functional as MF
from matchbox import MaskedBatch, _registry
from matchbox.testing import mb_assert, mb_rand

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

RANDOM = {F.gumbel_softmax}
DETERMINISTIC = [e.func for e in _registry.entries() if e.family == "softmax"
                 and e.func not in RANDOM]


def call(func, x, dim, **kwargs):
    """``func`` called the way user code calls it: ``x.softmax(dim)`` for a Tensor method."""
    method = _registry.tensor_method_name(func)
    if method is not None and getattr(torch.Tensor, method) is func:
        return getattr(x, method)(dim, **kwargs)
    return func(x, dim, **kwargs)


def ids(func):
    return _registry.op_name(func)


# (dims, sizes) of random batches and the dims to take the softmax over.
LAYOUTS = [
    ("dynamic-static", ((True, 5), (False, 3)), [1, 2, -1, -2]),
    ("static-dynamic", ((False, 3), (True, 5)), [1, 2, -1]),
    ("two-dynamic", ((True, 4), (True, 5)), [1, 2]),
    ("all-static", ((False, 3), (False, 4)), [1, 2]),
    ("one-dim", ((True, 6),), [1, -1]),
]


@pytest.mark.parametrize("func", DETERMINISTIC, ids=ids)
@pytest.mark.parametrize("name, spec, dims", LAYOUTS, ids=[layout[0] for layout in LAYOUTS])
def test_matches_loop(func, name, spec, dims, dtype):
    # Empty examples included; with two dynamic dims, ones empty in one of them only.
    for batch_size in (1, 4):
        xs, xb = mb_rand(batch_size, *spec, dtype=dtype, min_size=0,
                         generator=random.Random(batch_size))
        for dim in dims:
            mb_assert(lambda x, dim=dim: call(func, x, dim), [xs], [xb], batch_size)


@pytest.mark.parametrize("func", DETERMINISTIC, ids=ids)
@given(batch=st.integers(1, 5), max_len=st.integers(0, 6), features=st.integers(1, 4),
       seed=st.integers(0, 10_000), dim=st.sampled_from([1, 2, -1]),
       dtype=st.sampled_from([torch.float32, torch.float64]))
def test_hypothesis_shapes(func, batch, max_len, features, seed, dim, dtype):
    xs, xb = mb_rand(batch, (True, max_len), (False, features), dtype=dtype,
                     generator=random.Random(seed), min_size=0)
    mb_assert(lambda x: call(func, x, dim), [xs], [xb], batch)


@pytest.mark.parametrize("func", DETERMINISTIC, ids=ids)
def test_zero_and_one_length_examples(func, dtype):
    examples = [torch.randn(1, n, 3, dtype=dtype) for n in (0, 1, 4, 0)]
    xb = MaskedBatch.fromlist(examples, (True, False), padding_value=float("nan"))
    mb_assert(lambda x: call(func, x, 1), [examples], [xb], 4)


@pytest.mark.parametrize("func", DETERMINISTIC, ids=ids)
def test_dtype_argument(func):
    xs, xb = mb_rand(3, (True, 5), (False, 2), dtype=torch.float32, min_size=0)
    mb_assert(lambda x: call(func, x, 1, dtype=torch.float64), [xs], [xb], 3)


@pytest.mark.parametrize("func", DETERMINISTIC, ids=ids)
def test_steps_of_a_loop_keep_example_masks(func, dtype):
    # Per-step rows of finished examples are padding as a whole (a mask over a
    # static dim): the softmax over the static dim keeps them padding.
    xs, xb = mb_rand(4, (True, 5), (False, 3), dtype=dtype, min_size=1)
    mb_assert(lambda x: MF.stack([call(func, xt, -1) for xt in x.unbind(1)], 1), [xs], [xb], 4)


@pytest.mark.parametrize("func", DETERMINISTIC, ids=ids)
def test_rows_without_a_real_position_are_zero_not_nan(func, dtype):
    # Empty examples (one dynamic dim) and padding rows of a two-dynamic batch:
    # forward zeros at padding, and no NaN in any gradient.
    for examples, dims, dim in (
        ([torch.randn(1, n, dtype=dtype) for n in (0, 3, 0)], (True,), 1),
        ([torch.randn(1, t, s, dtype=dtype) for t, s in ((1, 2), (3, 4))], (True, True), 2),
    ):
        batch = MaskedBatch.fromlist(examples, dims, padding_value=float("nan"))
        leaf = batch.data.detach().requires_grad_()
        out = call(func, MaskedBatch(leaf, batch.mask, dims), dim)
        assert not out.data.isnan().any()
        assert (out.data[~out.mask.expand_as(out.data)] == 0).all()
        (out.data * torch.randn_like(out.data)).sum().backward()
        assert leaf.grad.isfinite().all()


def test_softmax_over_a_dynamic_dim_sums_to_one_over_real_positions():
    xs, xb = mb_rand(5, (True, 6), (False, 2), min_size=1)
    total = F.softmax(xb, dim=1).sum(1)
    for row in total.examples():
        torch.testing.assert_close(row, torch.ones_like(row))


def test_module_forms():
    xs, xb = mb_rand(4, (True, 5), (False, 3), min_size=0)
    for module in (torch.nn.Softmax(dim=1), torch.nn.LogSoftmax(dim=1), torch.nn.Softmin(dim=1),
                   torch.nn.Softmax(dim=-1)):
        mb_assert(module, [xs], [xb], 4)


@pytest.mark.parametrize("func", DETERMINISTIC, ids=ids)
@pytest.mark.parametrize("dim", [0, -3])
def test_dim_zero_is_refused(func, dim):
    xs, xb = mb_rand(2, (True, 3), (False, 2), min_size=0)
    with pytest.raises(ValueError, match=rf"{ids(func)}: dimension 0 is the batch dimension of "
                                         rf"each example \(size one; dim={dim}\)"):
        call(func, xb, dim)


def test_implicit_dim_is_refused():
    xs, xb = mb_rand(2, (True, 3), (False, 2), min_size=0)
    with pytest.raises(ValueError, match=r"torch.nn.functional.softmax: dim=None \(PyTorch's "
                                         r"implicit, deprecated choice"):
        F.softmax(xb)


@pytest.mark.parametrize("entry", [e for e in _registry.entries() if e.family == "softmax"],
                         ids=lambda e: e.name)
def test_a_plain_input_reaching_the_handler_is_refused(entry):
    # Only reachable when a batch is passed as another argument (e.g. dtype=).
    with pytest.raises(TypeError, match=rf"{entry.name}: the input must be the batch; got "
                                        r"Tensor"):
        entry.handler(entry.func, torch.ones(2, 2), 1)


def test_out_of_range_dim_names_the_op():
    xs, xb = mb_rand(2, (True, 3), (False, 2), min_size=0)
    with pytest.raises(IndexError, match=r"torch.softmax: dimension 3 is out of range"):
        torch.softmax(xb, 3)


# ------------------------------------------------------------------ gumbel_softmax


@pytest.mark.parametrize("hard", [False, True])
def test_gumbel_softmax_puts_all_mass_on_real_positions(hard):
    examples = [torch.randn(1, n, dtype=torch.float64) for n in (0, 1, 4, 7)]
    xb = MaskedBatch.fromlist(examples, (True,), padding_value=float("nan"))
    leaf = xb.data.detach().requires_grad_()
    out = F.gumbel_softmax(MaskedBatch(leaf, xb.mask, xb.dims), tau=0.5, hard=hard, dim=1)
    assert not out.data.isnan().any()
    assert (out.data[~out.mask] == 0).all()
    sums = [float(e.detach().sum()) for e in out.examples()]
    assert sums == pytest.approx([0.0, 1.0, 1.0, 1.0])
    if hard:
        assert set(out.data[out.mask].tolist()) <= {0.0, 1.0}
    (out.data * torch.randn_like(out.data)).sum().backward()
    assert leaf.grad.isfinite().all()


def test_gumbel_softmax_samples_follow_the_softmax_per_example():
    # Hard samples are categorical draws from softmax(logits) over each
    # example's real positions; two identical examples draw independently, so
    # they agree with probability sum(p ** 2), not always. One call on 4000 copies of
    # the three examples draws them as 4000 calls on the three would.
    torch.manual_seed(0)
    logits = torch.tensor([[2.0, 0.0, -1.0]], dtype=torch.float64)
    xb = MaskedBatch.fromlist([logits, logits, logits[:, :2]] * 4000, (True,))
    draws = F.gumbel_softmax(xb, hard=True, dim=1).data.reshape(4000, 3, 3)
    frequency = draws.mean(0)
    p3, p2 = torch.softmax(logits[0], 0), torch.softmax(logits[0, :2], 0)
    torch.testing.assert_close(frequency[0], p3, atol=0.03, rtol=0)
    torch.testing.assert_close(frequency[1], p3, atol=0.03, rtol=0)
    torch.testing.assert_close(frequency[2, :2], p2, atol=0.03, rtol=0)
    assert frequency[2, 2] == 0
    agree = (draws[:, 0].argmax(-1) == draws[:, 1].argmax(-1)).double().mean()
    assert abs(float(agree) - float((p3 ** 2).sum())) < 0.03


@needs_cuda
@pytest.mark.parametrize("func", DETERMINISTIC, ids=ids)
def test_on_cuda(func):
    for spec, dim in ((((True, 5), (False, 3)), 1), (((True, 4), (True, 5)), 2)):
        min_size = 1 if dim == 2 else 0
        xs, xb = mb_rand(4, *spec, device="cuda", min_size=min_size)
        mb_assert(lambda x, dim=dim: call(func, x, dim), [xs], [xb], 4)


@pytest.mark.parametrize("log", [False, True])
def test_attention_onto_an_empty_source_equals_the_loop(log, dtype):
    # Example 1 has queries and no keys: its scores (1, 2, 0) have rows with no real
    # position, whose (log-)softmax is empty (never NaN), and attention gives zeros
    # (1, 2, 5); the gradients of q, k and v are the loop's, free of NaN.
    qs = [torch.randn(1, n, 4, dtype=dtype) for n in (3, 2, 0)]
    ks = [torch.randn(1, n, 4, dtype=dtype) for n in (2, 0, 1)]
    vs = [torch.randn(1, n, 5, dtype=dtype) for n in (2, 0, 1)]
    q, k, v = (MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))
               for xs in (qs, ks, vs))
    softmax = torch.log_softmax if log else torch.softmax

    def attend(q, k, v):
        weights = softmax(q @ k.transpose(1, 2) / 2.0, -1)
        return weights, (weights.exp() if log else weights) @ v

    weights, out = attend(q, k, v)
    assert [tuple(w.shape) for w in weights.examples()] == [(1, 3, 2), (1, 2, 0), (1, 0, 1)]
    assert not out.data.isnan().any()
    mb_assert(attend, [qs, ks, vs], [q, k, v], 3)


def test_an_op_not_written_for_examples_empty_in_part_refuses_them():
    # F.bilinear builds its result's mask from its arguments' without their lengths:
    # refused (naming the op and the example) rather than losing example 0's size 3.
    xs = [torch.randn(1, n, m, 2) for n, m in ((3, 0), (1, 2))]
    xb, yb = (MaskedBatch.fromlist(xs, (True, True, False)) for _ in range(2))  # two masks
    with pytest.raises(NotImplementedError, match=r"torch.bilinear does not support a batch "
                                                  r"holding an example that is empty in one "
                                                  r"dynamic dimension and not in another "
                                                  r"\(example 0 has sizes \(3, 0\)"):
        torch.nn.functional.bilinear(xb, yb, torch.randn(3, 2, 2))
