"""Row ops (a linear layer, a norm: ``rows()`` / ``from_rows()``) and the record that
padding holds zeros (issue 22: the ops of a transformer encoder layer).

- ``from_rows`` records that its result holds zeros at padding (on every path:
  indices of the real rows, a ``RowMask``, under ``@batch``), and so does a
  pointwise op that keeps zeros (relu, tanh, ... of such a batch; a sum, a
  difference, a product of two with one mask).  ``rows()`` then does not zero
  that padding again: values and gradients still equal the loop's, NaN padding
  going in, and the gradient at zero padding is exactly zero.
- Where zeros are not certain (exp, a sum with a NaN-padded batch, a write after
  the record), the ``where`` is still emitted.
- A ``RowMask`` builds the column view of its mask once.

Counted as on an accelerator (``host_reads(False)``: every row runs, padding rows
zeroed by a ``where``), where the record spares ops; the loop tests run both ways.
Linear layers and norms are written here on the rows protocol (matchbox-nn's
handlers are these lines), so the tests need core only.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as nnf
from op_counts import CountOps

from matchbox import MaskedBatch
from matchbox._masking import EXECUTION_MASK, RowMask, host_reads, real_rows
from matchbox._real_rows import zero_rows
from matchbox.masked_batch import has_zero_padding, mark_zero_padding
from matchbox.testing import mb_assert

D, H = 4, 6
LENGTHS = (3, 1, 0, 5)
NAN = float("nan")
READS = pytest.mark.parametrize("reads", [False, True], ids=["accelerator", "cpu"])


def linear(x, w, b):
    if isinstance(x, MaskedBatch):
        return x.from_rows(nnf.linear(x.rows(), w, b))
    return nnf.linear(x, w, b)


def layer_norm(x, w, b):
    if isinstance(x, MaskedBatch):
        return x.from_rows(nnf.layer_norm(x.rows(), w.shape, w, b))
    return nnf.layer_norm(x, w.shape, w, b)


def _examples(dtype=torch.float64):
    return [torch.randn(1, n, D, dtype=dtype) for n in LENGTHS]


def _nan_padded(xs):
    return MaskedBatch.fromlist(xs, (True, False), padding_value=NAN)


def _params(dtype=torch.float64):
    """Two linear layers (D -> H -> D) and a norm's weight and bias."""
    shapes = [(H, D), (H,), (D, H), (D,), (D,), (D,)]
    return [torch.randn(s, dtype=dtype, requires_grad=True) for s in shapes]


def _write_nan_into_padding(x):
    if isinstance(x, MaskedBatch):
        x.data.masked_fill_(~x.mask, NAN)
    return x


ACTIVATIONS = {
    "relu": torch.relu, "nn.ReLU": torch.nn.ReLU(), "tanh": torch.tanh, "gelu": nnf.gelu,
    "silu": nnf.silu, "neg": lambda x: -x, "abs": abs,
}


# ------------------------------------------------------------------ the view of a RowMask


def test_a_row_mask_builds_the_view_of_its_mask_once():
    xb = _nan_padded(_examples())
    with host_reads(False):
        rows = real_rows(xb)
        assert type(rows) is RowMask
        flat = xb.data.reshape(-1, D)
        with CountOps() as counted:
            zero_rows(flat, rows)
            zero_rows(flat, rows)
        assert real_rows(xb) is rows  # the next op of the layer asks again: the same one
    # One view (it was one a call), two wheres.
    assert counted.ops == {"view": 1, "where": 2}, counted.ops


# ------------------------------------------------------------------ from_rows' record


@READS
@pytest.mark.parametrize("region", [False, True], ids=["eager", "under @batch"])
@pytest.mark.parametrize("tail", [(3,), (2, 3)], ids=["same rank", "new dims"])
def test_from_rows_records_zeros_at_padding_on_every_path(reads, region, tail):
    # Index path (reads) or RowMask; under @batch with gradients unpack_guarded zeroes
    # with the mask and the running examples (one where, same rank) or guards the
    # gradient after unpack_rows (new dims): zeros at padding every time.
    xb = _nan_padded(_examples())
    w = torch.randn(D, tail[-1] * len(tail), dtype=torch.float64, requires_grad=True)
    token = EXECUTION_MASK.set(torch.tensor([True, False, True, True])) if region else None
    try:
        with host_reads(reads):
            out = xb.from_rows((xb.rows() @ w).reshape(-1, *tail))
    finally:
        if token is not None:
            EXECUTION_MASK.reset(token)
    assert has_zero_padding(out)
    assert (out.data[~out.mask.expand_as(out.data)] == 0).all()


def test_from_rows_of_a_batch_without_padding_records_nothing():
    xb = MaskedBatch.fromlist([torch.randn(1, 3, D)] * 2, (True, False))
    assert xb._mask is None
    assert not has_zero_padding(linear(xb, *_params(torch.float32)[:2]))


def _assert_equals_the_loop(f, params, reads, dtype):  # noqa: ANN001, ANN202
    """``f`` on NaN-padded batches of ``_examples(dtype)`` against the loop, values and
    gradients (with respect to ``params`` too)."""
    xs = _examples(dtype)
    with host_reads(reads):
        mb_assert(f, [xs], [_nan_padded(xs)], len(xs), params=params)


# ------------------------------------------------------------------ linear -> act -> linear


@READS
@pytest.mark.parametrize("act", ACTIVATIONS)
def test_linear_activation_linear_equals_the_loop(act, reads, dtype):
    w1, b1, w2, b2, _, _ = params = _params(dtype)
    f = ACTIVATIONS[act]
    _assert_equals_the_loop(lambda x: linear(f(linear(x, w1, b1)), w2, b2), params[:4],
                            reads, dtype)


@pytest.mark.parametrize("act", ACTIVATIONS)
def test_a_linear_after_an_activation_of_a_linear_does_not_zero_its_input(act):
    w1, b1, w2, b2, _, _ = _params()
    xb = _nan_padded(_examples())
    with host_reads(False):
        h = ACTIVATIONS[act](linear(xb, w1, b1))
        assert has_zero_padding(h)
        with CountOps() as counted:
            linear(h, w2, b2)
    # The rows' reshape, t, addmm, the output's where and reshape: its input's where is
    # gone (2 wheres before).
    assert counted.ops["where"] == 1, counted.ops
    assert counted.total == 5, counted.ops


# ------------------------------------------------------------------ residual -> norm


RESIDUALS = {
    "y + z": lambda y, z: y + z, "y - z": lambda y, z: y - z, "y * z": lambda y, z: y * z,
    "torch.add(y, z)": torch.add,
}


def _feed_forward(x, params):
    w1, b1, w2, b2, _, _ = params
    return linear(torch.relu(linear(x, w1, b1)), w2, b2)


def _residual(params, combine):
    def f(x):
        y = _feed_forward(x, params)  # zeros at padding, x's mask
        return layer_norm(combine(y, _feed_forward(y, params)), *params[4:])

    return f


@READS
@pytest.mark.parametrize("combine", RESIDUALS)
def test_residual_sum_then_norm_equals_the_loop(combine, reads, dtype):
    params = _params(dtype)
    _assert_equals_the_loop(_residual(params, RESIDUALS[combine]), params, reads, dtype)


@pytest.mark.parametrize("combine", RESIDUALS)
def test_a_norm_after_a_residual_sum_of_two_row_ops_does_not_zero_its_input(combine):
    params = _params()
    xb = _nan_padded(_examples())
    with host_reads(False):
        y = _feed_forward(xb, params)
        s = RESIDUALS[combine](y, _feed_forward(y, params))
        assert has_zero_padding(s)
        with CountOps() as counted:
            layer_norm(s, *params[4:])
    assert counted.ops["where"] == 1, counted.ops  # the output's (2 before)


@READS
def test_the_gradient_at_zero_padding_is_exactly_zero(reads, dtype):
    # A leaf with zeros at padding, recorded: no row op zeroes it (the first linear
    # neither), so the gradient that reaches its padding is what the ops send back
    # there, which must be exactly zero; real positions and parameters equal the loop.
    params = _params(dtype)
    xs = _examples(dtype)
    f = _residual(params, RESIDUALS["y + z"])
    loop = [f(x.requires_grad_()) for x in xs]
    weights = [torch.randn_like(y) for y in loop]
    loop_grads = torch.autograd.grad(sum((y * r).sum() for y, r in zip(loop, weights)),
                                     xs + params)
    padded = MaskedBatch.fromlist([x.detach() for x in xs], (True, False))
    data = padded.data.clone().requires_grad_()
    xb = MaskedBatch(data, padded.mask, (True, False))
    mark_zero_padding(xb)
    with host_reads(reads):
        out = f(xb)
    loss = sum((y * r).sum() for y, r in zip(out.examples(), weights))
    grads = torch.autograd.grad(loss, [data] + params)
    padding = ~xb.mask.expand_as(data)
    assert torch.equal(grads[0][padding], torch.zeros_like(grads[0][padding]))
    for j, x in enumerate(xs):
        torch.testing.assert_close(grads[0][j: j + 1, : x.size(1)], loop_grads[j])
    for got, expected in zip(grads[1:], loop_grads[len(xs):]):
        torch.testing.assert_close(got, expected)


# ------------------------------------------------------------------ where zeros are not certain


NOT_ZEROS = {
    # x: the NaN-padded input; y: a feed-forward block's result, zeros at padding
    # recorded, x's mask.
    "a sum with a NaN-padded batch": lambda x, y: y + x,
    "exp (exp(0) == 1)": lambda x, y: y.exp(),
    "a relu of a NaN-padded batch": lambda x, y: torch.relu(x),
    "NaN written into its padding": lambda x, y: _write_nan_into_padding(y),
    "an in-place op on the batch": lambda x, y: y.add_(1),
}


def _not_zeros(params, case):
    def f(x):
        return layer_norm(NOT_ZEROS[case](x, _feed_forward(x, params)), *params[4:])

    return f


@pytest.mark.parametrize("case", NOT_ZEROS)
def test_without_certain_zeros_the_norm_still_zeroes_its_input(case):
    params = _params()
    xb = _nan_padded(_examples())
    with host_reads(False):
        y = _feed_forward(xb, params)
        assert has_zero_padding(y)
        s = NOT_ZEROS[case](xb, y)
        assert not has_zero_padding(s)
        with CountOps() as counted:
            out = layer_norm(s, *params[4:])
    assert counted.ops["where"] == 2, counted.ops  # going in and coming out
    assert torch.isfinite(out.data).all()


@READS
@pytest.mark.parametrize("case", NOT_ZEROS)
def test_without_certain_zeros_values_and_gradients_equal_the_loop(case, reads, dtype):
    params = _params(dtype)
    _assert_equals_the_loop(_not_zeros(params, case), params, reads, dtype)
