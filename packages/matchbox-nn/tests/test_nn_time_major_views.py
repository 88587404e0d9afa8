"""Ops on time-major views (``TimeMajorBatch``) equal the loop over examples.

A view holds per-example tensors whose batch dimension (size one) is in
position 1: the final states ``(L*D, 1, H)`` of a recurrent module, or a
time-major sequence ``(T, 1, F)``.  Each test writes per-example code for such
a tensor ``v`` and runs it on every example's ``x.transpose(0, 1)`` (a tensor
``(A, 1, F)``) and on the batch's (the view); ``mb_assert`` compares values and
gradients, a view's ``examples()`` included.  Every op registered for the view
in the families below has calls in ``CALLS`` (a newly registered op fails
``test_every_view_op_has_calls`` until it is tested); position-wise ops
(family ``time_major``) are tested in test_nn_transformer.py, the recurrent
modules in test_rnn_modules.py.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from matchbox import MaskedBatch, _registry
from matchbox.nn import TimeMajorBatch, batch_major, time_major
from matchbox.testing import mb_assert

A, D = 4, 3  # the view's dimension 0 (static: layers * directions) and its features
FAMILIES = ("time_major_shape", "time_major_reduction", "time_major_conversion")
NAN = float("nan")


def reductions(name, tuple_dims=True, full=True, method=False):
    """Calls of ``torch.<name>`` (or of the method ``v.<name>``) over dims 0, 2 and all."""
    def func(v, *args):
        return getattr(v, name)(*args) if method else getattr(torch, name)(v, *args)

    calls = [lambda v: func(v, 0), lambda v: func(v, -1, True), lambda v: func(v, 0, True)]
    if full:
        calls.append(lambda v: func(v))
    if tuple_dims:
        calls.append(lambda v: func(v, (0, 2)))
    return calls


def on_bools(name, method=False):
    return [lambda v, f=f: f(v > 0) for f in reductions(name, method=method)]


def both(name, **options):
    """The calls of ``torch.<name>`` and of ``Tensor.<name>``."""
    return {f"torch.{name}": reductions(name, **options),
            f"Tensor.{name}": reductions(name, method=True, **options)}


PLAIN = torch.linspace(-1, 1, A * D, dtype=torch.float64).reshape(A, 1, D)

# op name -> per-example calls on v (A, 1, F).  Per example, v[i] is (1, F).
CALLS = {
    "Tensor.__getitem__": [
        lambda v: v[-1], lambda v: v[0], lambda v: v[2], lambda v: v[-2:], lambda v: v[0::2],
        lambda v: v[-1, :, 1:], lambda v: v[..., :2], lambda v: v[1, ...], lambda v: v[-1, :],
        lambda v: torch.cat([v[-2], v[-1]], 1), lambda v: v[1:3, :, ::2],
    ],
    "torch.cat": [
        lambda v: torch.cat([v[:1], v[2:]], 0), lambda v: torch.cat([v, PLAIN.to(v.dtype)], 2),
        lambda v: torch.cat([v[0::2], v[1::2]], 2), lambda v: torch.cat([v, v.tanh()], -1),
    ],
    "torch.concat": [lambda v: torch.concat([v, v], 0)],
    "torch.concatenate": [lambda v: torch.concatenate([v, 2 * v], axis=2)],
    "torch.permute": [lambda v: torch.permute(v, (1, 0, 2)), lambda v: torch.permute(v, (2, 1, 0))],
    "Tensor.permute": [lambda v: v.permute(1, 0, 2), lambda v: v.permute(1, 2, 0),
                       lambda v: v.permute(2, 1, 0), lambda v: v.permute(0, 1, 2) * 2],
    "torch.unbind": [lambda v: torch.unbind(v)],
    "Tensor.unbind": [lambda v: v.unbind(0), lambda v: list(v), lambda v: v.unbind(-3)],
    "torch.squeeze": [lambda v: torch.squeeze(v[-1:], 0)],
    "Tensor.squeeze": [lambda v: v[2:3].squeeze(0), lambda v: v.squeeze(0),
                       lambda v: v[:1].squeeze((0, 2)), lambda v: v[1:2].squeeze(-3)],
    "torch.reshape": [lambda v: torch.reshape(v, (-1, 1, D))],
    "Tensor.reshape": [lambda v: v.reshape(2, 1, 2 * D), lambda v: v.reshape(A * D, 1, 1),
                       lambda v: v.reshape(v.size(0), v.size(1), -1)],
    "Tensor.view": [lambda v: v.view(2, 1, -1), lambda v: v.view(A, -1, D),
                    lambda v: v.view(v.size())],
    "Tensor.expand": [lambda v: v[-1:].expand(3, -1, -1), lambda v: v[:1].expand(2, 1, D)],
    **both("sum"), **both("nansum"), **both("mean"), **both("amax"), **both("amin"),
    **both("prod", tuple_dims=False), **both("logsumexp", full=False),
    **both("argmax", tuple_dims=False), **both("argmin", tuple_dims=False),
    "torch.any": on_bools("any"), "Tensor.any": on_bools("any", method=True),
    "torch.all": on_bools("all"), "Tensor.all": on_bools("all", method=True),
    # Conversions keep the view; the gradient through detach() stops as in the loop.
    "Tensor.detach": [lambda v: v.detach() * v],
    "torch.detach": [lambda v: torch.detach(v) + v],
    "Tensor.detach_": [lambda v: (2 * v).detach_() * v],
    "Tensor.requires_grad_": [lambda v: v.detach().requires_grad_() * 2],
    "Tensor.to": [lambda v: v.to(torch.float64), lambda v: v.to("cpu") * 3],
    "Tensor.cpu": [lambda v: v.cpu()],
    "Tensor.cuda": [],  # tested below when CUDA is available
    "Tensor.contiguous": [lambda v: v.permute(2, 1, 0).contiguous()],
    "Tensor.float": [lambda v: v.float()], "Tensor.double": [lambda v: v.double()],
    "Tensor.half": [lambda v: v.half().double()],
    "Tensor.bfloat16": [lambda v: v.bfloat16().double()],
    "Tensor.long": [lambda v: (10 * v).long()], "Tensor.int": [lambda v: (10 * v).int()],
    "Tensor.bool": [lambda v: v.bool()],
    "Tensor.type_as": [lambda v: v.type_as(v[:1].double()), lambda v: v.type_as(PLAIN)],
    "torch.zeros_like": [lambda v: torch.zeros_like(v) + v],
    "torch.ones_like": [lambda v: torch.ones_like(v) * v],
    "torch.full_like": [lambda v: torch.full_like(v, 2.0) * v],
    "torch.empty_like": [lambda v: torch.empty_like(v).zero_() + v],
    "torch.rand_like": [lambda v: torch.rand_like(v) * 0 + v],
    "torch.randn_like": [lambda v: torch.randn_like(v).clamp(0, 0) + v],
}


def view_ops():
    return sorted(e.name for e in _registry.entries("TimeMajorBatch") if e.family in FAMILIES)


def test_every_view_op_has_calls():
    assert set(view_ops()) == set(CALLS)


def on_view(f):
    """Per-example code on ``v = x.transpose(0, 1)``: a tensor, or the batch's view."""
    return lambda x: f(x.transpose(0, 1))


def static_examples(batch_size, dtype):
    xs = [torch.randn(1, A, D, dtype=dtype) for _ in range(batch_size)]
    return xs, MaskedBatch.fromlist(xs, (False, False))


@pytest.mark.parametrize("name", [n for n in view_ops() if CALLS.get(n)])
def test_view_op_equals_loop(name, dtype):
    for f in CALLS[name]:
        for batch_size in (3, 1):
            xs, xb = static_examples(batch_size, dtype)
            assert isinstance(xb.transpose(0, 1), TimeMajorBatch)
            mb_assert(on_view(f), [xs], [xb], batch_size)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_view_moves_to_cuda_and_back(dtype):
    xs, xb = static_examples(3, dtype)
    mb_assert(on_view(lambda v: v.cuda()[-1].cpu()), [xs], [xb], 3)
    view = xb.transpose(0, 1).cuda()
    assert isinstance(view, TimeMajorBatch) and view.is_cuda and view.device.type == "cuda"


# ---------------------------------------------------------------------------- dynamic dim 0

# Time-major sequences (T, 1, F): dimension 0 differs between examples (0 included).
DYNAMIC = {
    "slice from 1": lambda v: v[1:],
    "sum over time": lambda v: v.sum(0),
    "max over features, kept": lambda v: v.amax(2, keepdim=True),
    "cat along time": lambda v: torch.cat([v, v.tanh()], 0),
    "cat along features": lambda v: torch.cat([v, v], 2),
    "transpose(0, 2)": lambda v: v.transpose(0, 2).sin(),
    "permute to batch-major": lambda v: v.permute(1, 2, 0),
    "sum of everything": lambda v: v.sum(),
    "detach": lambda v: v.detach() * v,
    "reshape, the time kept": lambda v: v.reshape(-1, 1, D),
}


@pytest.mark.parametrize("name", list(DYNAMIC))
@given(lengths=st.lists(st.integers(0, 5), min_size=1, max_size=5), double=st.booleans())
def test_op_on_a_time_major_sequence_equals_loop(name, lengths, double):
    dtype = torch.float64 if double else torch.float32
    xs = [torch.randn(1, n, D, dtype=dtype) for n in lengths]
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=NAN)
    mb_assert(on_view(DYNAMIC[name]), [xs], [xb], len(lengths))


@given(lengths=st.lists(st.integers(1, 5), min_size=1, max_size=5))
def test_last_step_of_a_time_major_sequence_is_each_examples_own(lengths):
    xs = [torch.randn(1, n, D, dtype=torch.float64) for n in lengths]
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=NAN)
    mb_assert(on_view(lambda v: (v[-1], v[0], v.mean(0))), [xs], [xb], len(lengths))


# ---------------------------------------------------------------------------- new views


@given(batch_size=st.integers(1, 4), double=st.booleans())
def test_unsqueeze_0_and_stack_of_rows_give_views(batch_size, double):
    # Per example (1, H) -> (1, 1, H) / (N, 1, H): what initial states made per
    # example look like (h0 = f(x).unsqueeze(0)).
    dtype = torch.float64 if double else torch.float32
    rows = [torch.randn(1, D, dtype=dtype) for _ in range(batch_size)]
    others = [torch.randn(1, D, dtype=dtype) for _ in range(batch_size)]
    rb, ob = MaskedBatch.fromlist(rows, (False,)), MaskedBatch.fromlist(others, (False,))
    assert isinstance(rb.unsqueeze(0), TimeMajorBatch)
    assert isinstance(torch.stack([rb, ob]), TimeMajorBatch)
    mb_assert(lambda r, o: (r.unsqueeze(0), torch.unsqueeze(o, -3).tanh(),
                            torch.stack([r, o]), torch.stack([r, o, r], dim=-3)[1:]),
              [rows, others], [rb, ob], batch_size)


def test_view_answers_sizes_and_converts_back():
    xs, xb = static_examples(3, torch.float64)
    v = xb.transpose(0, 1)
    assert v.size() == v.shape == torch.Size([A, 3, D]) and len(v) == A
    assert v.size(1) == 3 and v.size(-1) == D and v.dim() == v.ndim == 3
    assert v.transpose(0, 1) is xb and batch_major(v) is xb and v.permute(0, 1, 2) is v
    assert all(torch.equal(e, x.transpose(0, 1)) for e, x in zip(v.examples(), xs))
    xb.requires_grad_()
    v.sum().backward()
    assert isinstance(v.grad, TimeMajorBatch) and torch.equal(v.grad.batch.data,
                                                              torch.ones(3, A, D, dtype=xb.dtype))
    dynamic = time_major(MaskedBatch.fromlist([torch.randn(1, n, D) for n in (2, 5)],
                                              (True, False)))
    assert dynamic.shape[1] == 2 and dynamic.shape[-1] == D and len(dynamic.shape) == 3
    assert "TimeMajorShape(*, 2, 3)" in repr(dynamic.shape)


def test_view_shape_compares_each_examples_own_as_the_loop():
    # Each example's (T, 1, D): == is one bool per example, as the loop's (it compared the
    # objects, False).
    xs = [torch.randn(1, n, D) for n in (2, 0, 5)]
    ys = [torch.randn(1, n, D) for n in (2, 1, 5)]
    v, w = (time_major(MaskedBatch.fromlist(e, (True, False))) for e in (xs, ys))
    loop = [x.transpose(0, 1).shape == y.transpose(0, 1).shape for x, y in zip(xs, ys)]
    assert (v.shape == w.shape).data.tolist() == loop == [True, False, True]
    assert (v.shape != w.shape).data.tolist() == [not e for e in loop]
    assert (v.shape == (2, 1, D)).data.tolist() == [x.transpose(0, 1).shape == (2, 1, D)
                                                    for x in xs]
    assert (v.shape == (2, 1, D + 1)) is False and (v.shape == (2, D)) is False
    # (T, 1, D) against the batch's own (1, T, D): equal where T is 1.
    assert (v.shape == w.batch.shape).data.tolist() == [False, False, False]
    assert (w.shape == w.batch.shape).data.tolist() == [False, True, False]


# ---------------------------------------------------------------------------- errors


def test_ops_that_would_move_the_batch_dimension_are_refused():
    _, xb = static_examples(2, torch.float64)
    v = xb.transpose(0, 1)
    refused = {
        r"Tensor.view: the new shape \(2, 2, 1, 3\) does not keep each example's batch "
        r"dimension in position 1 of a result of rank 3": lambda: v.view(2, 2, 1, D),
        r"Tensor.reshape: the new shape \(4, 3\) does not keep": lambda: v.reshape(A, D),
        r"Tensor.view: the new shape \(2, -1, 3\) would infer dimension 1": lambda: v.view(
            2, -1, D),
        r"Tensor.transpose\(1, 2\): each example's batch dimension would move to position 2":
            lambda: v.transpose(1, 2),
        r"Tensor.permute\(0, 2, 1\): each example's batch dimension would move to "
        r"position 2": lambda: v.permute(0, 2, 1),
        r"Tensor.squeeze: squeeze\(\) without a dimension would remove dimension 1": v.squeeze,
        r"Tensor.squeeze: dim=1 is dimension 1, the batch dimension": lambda: v.squeeze(1),
        r"Tensor.squeeze: squeezing dimension 2 would leave": lambda: v[..., :1].squeeze(2),
        r"Tensor.__getitem__: index slice\(None, 1, None\) in dimension 1, the batch "
        r"dimension": lambda: v[:, :1],
        r"Tensor.__getitem__: None \(a new dimension\)": lambda: v[None],
        r"Tensor.__getitem__: index \(slice\(None, None, None\), slice\(None, None, None\), "
        r"0\) would leave": lambda: v[:, :, 0],
        r"torch.cat: dim=1 is dimension 1, the batch dimension": lambda: torch.cat([v, v], 1),
        r"Tensor.sum: reducing dimension 2 alone would leave .* pass keepdim=True":
            lambda: v.sum(2),
        r"Tensor.mean: dim=-2 is dimension 1, the batch dimension": lambda: v.mean(-2),
        r"Tensor.unbind: unbind\(2\) would leave": lambda: v.unbind(2),
        r"Tensor.expand: the sizes \(2, 2, 4, 3\) do not keep": lambda: v.expand(2, 2, A, D),
    }
    for message, f in refused.items():
        with pytest.raises(ValueError, match=message + ".*convert with "
                                                       r"matchbox.nn.batch_major\(x\)"):
            f()


def test_other_view_errors():
    _, xb = static_examples(2, torch.float64)
    v = xb.transpose(0, 1)
    with pytest.raises(IndexError, match=r"Tensor.__getitem__: too many indices for a view"):
        v[0, :, 0, 0]
    with pytest.raises(IndexError, match=r"Tensor.__getitem__: an index can only have a single"):
        v[..., ...]
    with pytest.raises(ValueError, match=r"the truth value of a TimeMajorBatch is ambiguous"):
        bool(v)
    with pytest.raises(NotImplementedError, match=r"Tensor.view\(dtype\) is not supported"):
        v.view(torch.int64)
    dynamic = time_major(MaskedBatch.fromlist([torch.randn(1, n, D) for n in (2, 5)],
                                              (True, False)))
    with pytest.raises(ValueError, match=r"TimeMajorBatch.size\(0\): dimension 0 is the time"):
        dynamic.unbind(0)
    with pytest.raises(ValueError, match=r"Tensor.squeeze: dimension 0 of the view is dynamic"):
        dynamic.squeeze(0)
    with pytest.raises(TypeError, match=r"torch.cat: cannot combine a time-major view with a "
                                        r"batch-major MaskedBatch"):
        torch.cat([v, xb], 0)
    for f in (lambda: v.unsqueeze(0), lambda: v.__setitem__(0, 1.0), lambda: v.flip(0)):
        with pytest.raises(NotImplementedError, match=r"Tensor.(unsqueeze|__setitem__|flip) is "
                                                      r"not implemented for TimeMajorBatch .* "
                                                      r"convert back with matchbox.nn."
                                                      r"batch_major\(x\) first"):
            f()
    with pytest.raises(AttributeError, match=r"'TimeMajorBatch' object has no attribute 'mask'"):
        _ = v.mask
    with pytest.raises(ValueError, match=r"Tensor.unsqueeze: dimension 0 is the batch dimension "
                                         r"of each example; moving it to position 1 gives a "
                                         r"time-major view only for results of rank 3 .* rank 4"):
        xb.unsqueeze(0)


def test_moving_dimension_0_of_other_ranks_says_what_to_write():
    # A user trial: transposing each example's (1, D) vector read as a message about
    # time-major views; it now says what a batch can hold and what to write instead.
    z = MaskedBatch.fromlist([torch.randn(1, 4) for _ in range(3)], (False,))
    for f in (lambda: z.transpose(0, 1), lambda: z.mT,
              lambda: torch.stack([z.unsqueeze(1), z.unsqueeze(1)], 0)):
        with pytest.raises(ValueError, match=r"Any other example layout cannot be held: a batch "
                                             r"keeps each example's size-one dimension 0 first\. "
                                             r"Keep it there and move the other dimensions "
                                             r"\(x\.transpose\(1, 2\), x\.unsqueeze\(-1\) for a "
                                             r"column\), or stack along dimension 1 "
                                             r"\(torch\.stack\(xs, 1\)\)$"):
            f()


@pytest.mark.parametrize("name", ["permute", "reshape", "view", "expand"])
def test_keyword_spellings_of_view_ops_equal_the_positional_ones(name):
    # These raised a raw TypeError from the view's handlers (dims=, shape=, size=).
    xs = [torch.randn(1, n, 4) for n in (3, 1, 2)]
    xb = MaskedBatch.fromlist(xs, (True, False))
    v = time_major(xb)
    one = time_major(MaskedBatch.fromlist([torch.randn(1, 1, 4) for _ in xs], (False, False)))
    calls = {
        "permute": (lambda: v.permute(1, 0, 2), lambda: v.permute(dims=(1, 0, 2))),
        "reshape": (lambda: v.reshape(-1, 1, 2, 2), lambda: v.reshape(shape=(-1, 1, 2, 2))),
        "view": (lambda: v.view(-1, 1, 2, 2), lambda: v.view(size=(-1, 1, 2, 2))),
        "expand": (lambda: one.expand(3, -1, -1),
                   lambda: one.expand(size=(3, -1, -1), implicit=False)),
    }
    positional, keyword = calls[name]
    if name in ("reshape", "view"):  # (A, 1, F) -> (A, 1, 2, 2) has rank 4: refused alike
        for call in (positional, keyword):
            with pytest.raises(ValueError, match=rf"Tensor.{name}: the new shape"):
                call()
        return
    expected, got = positional(), keyword()
    assert type(got) is type(expected)
    assert all(torch.equal(a, b) for a, b in zip(got.examples(), expected.examples()))
