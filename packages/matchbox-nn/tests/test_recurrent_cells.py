"""nn.RNNCell / LSTMCell / GRUCell and nn.Linear on batches equal the loop."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch_features import LINEAR_TAKES_A_WEIGHT_VECTOR_WITH_BIAS, needs

import matchbox.functional as F
from matchbox import MaskedBatch
from matchbox._masking import host_reads
from matchbox.testing import mb_assert, mb_rand


def run_cell(cell, x, hidden):
    """A per-example RNN over dimension 1, as the README writes it."""
    h = x.new_zeros(x.size(0), hidden)
    if isinstance(cell, torch.nn.LSTMCell):
        c = x.new_zeros(x.size(0), hidden)
        for xt in x.unbind(1):
            h_new, c_new = cell(xt, (h, c))
            h, c = F.update(h, h_new), F.update(c, c_new)
        return h, c
    for xt in x.unbind(1):
        h = F.update(h, cell(xt, h))
    return h


CELLS = [torch.nn.RNNCell, torch.nn.LSTMCell, torch.nn.GRUCell]


def cells_and_inputs(kind, batch, max_len, seed):
    """For float32, then float64: a cell of ``kind`` (3 features to 4) and ``batch`` random
    examples ``(1, T, 3)`` of up to ``max_len`` steps, with their batch."""
    torch.manual_seed(seed)
    for dtype in (torch.float32, torch.float64):
        cell = kind(3, 4).to(dtype)
        xs, xb = mb_rand(batch, (True, max_len), (False, 3), dtype=dtype, min_size=0)
        yield dtype, cell, xs, xb


@pytest.mark.parametrize("kind", CELLS)
@given(batch=st.integers(1, 5), max_len=st.integers(0, 6), seed=st.integers(0, 1000))
def test_cell_loop_equals_per_example_loop(kind, batch, max_len, seed):
    for _, cell, xs, xb in cells_and_inputs(kind, batch, max_len, seed):
        mb_assert(lambda x, cell=cell: run_cell(cell, x, 4), [xs], [xb], batch,
                  params=list(cell.parameters()))


def test_relu_rnn_cell(dtype):
    cell = torch.nn.RNNCell(3, 4, nonlinearity="relu").to(dtype)
    xs, xb = mb_rand(4, (True, 5), (False, 3), dtype=dtype, min_size=0)
    mb_assert(lambda x: run_cell(cell, x, 4), [xs], [xb], 4, params=list(cell.parameters()))


@given(batch=st.integers(1, 5), max_len=st.integers(0, 6))
def test_linear_module_equals_loop(batch, max_len):
    layer = torch.nn.Linear(3, 2).double()
    xs, xb = mb_rand(batch, (True, max_len), (False, 3), min_size=0)
    mb_assert(layer, [xs], [xb], batch)


def test_linear_without_bias_on_static_batch(dtype):
    layer = torch.nn.Linear(3, 2, bias=False).to(dtype)
    xs, xb = mb_rand(3, (False, 3), dtype=dtype, min_size=0)
    mb_assert(layer, [xs], [xb], 3)


def test_cell_refuses_dynamic_feature_dimension():
    cell = torch.nn.RNNCell(3, 3)
    xb = MaskedBatch.fromlist([torch.rand(1, n) for n in (2, 3)], (True,))
    with pytest.raises(ValueError, match=r"rnn_tanh_cell: each example's input and state must "
                                         r"be \(1, features\)"):
        cell(xb, xb)


def test_linear_refuses_a_dynamic_feature_dimension():
    xb = MaskedBatch.fromlist([torch.rand(1, n) for n in (2, 3)], (True,))
    with pytest.raises(ValueError, match=r"torch.nn.functional.linear: the feature dimension "
                                         r"\(the last\) covers dimension 1, which is dynamic"):
        torch.nn.functional.linear(xb, torch.rand(2, 3))


def test_linear_with_example_level_masks_keeps_them(dtype):
    # At least one step each: stacking no steps is an error in the loop too.
    xs, xb = mb_rand(4, (True, 5), (False, 3), dtype=dtype, min_size=1)
    layer = torch.nn.Linear(3, 2).to(dtype)

    def steps(x):  # per-step outputs of a loop, stacked back: padding steps stay padding
        return F.stack([layer(xt) for xt in x.unbind(1)], 1)

    mb_assert(steps, [xs], [xb], 4, params=list(layer.parameters()))


def test_linear_computes_real_rows_only():
    # 5 real rows of 9 padded: the product sees 5 rows, padding is never read. (Where
    # masks are read on the host, the CPU's way: on an accelerator the layer runs over
    # every row, masked, rather than sync to find the real ones.)
    xb = MaskedBatch.fromlist([torch.rand(1, n, 3) for n in (2, 0, 3)], (True, False),
                              padding_value=float("nan"))
    layer = torch.nn.Linear(3, 4)
    with host_reads(True), torch.profiler.profile(record_shapes=True) as prof:
        out = layer(xb)
    shapes = [e.input_shapes[1] for e in prof.events() if e.name == "aten::addmm"]
    assert shapes == [[5, 3]]
    assert torch.isfinite(out.data).all()


def test_linear_with_a_weight_vector_drops_the_feature_dimension(dtype):
    # F.linear(x, w) with w of shape (features,): one output per row, the last dim summed away.
    xs, xb = mb_rand(4, (True, 5), (False, 3), dtype=dtype, min_size=0)
    w = torch.randn(3, dtype=dtype)
    mb_assert(lambda x, w: torch.nn.functional.linear(x, w), [xs, [w] * 4], [xb, w], 4)


@needs(LINEAR_TAKES_A_WEIGHT_VECTOR_WITH_BIAS, "takes a weight vector with a bias in F.linear")
def test_linear_with_a_weight_vector_and_a_scalar_bias(dtype):
    xs, xb = mb_rand(4, (True, 5), (False, 3), dtype=dtype, min_size=0)
    w, b = torch.randn(3, dtype=dtype), torch.randn((), dtype=dtype)
    mb_assert(lambda x, w, b: torch.nn.functional.linear(x, w, b), [xs, [w] * 4, [b] * 4],
              [xb, w, b], 4)


def test_lstm_cell_given_one_batch_for_its_state_says_so():
    # nn.LSTMCell iterates its state (h, c) before Matchbox sees the call (newer
    # torch in the module, older in the argument parser of its op); a batch is not
    # iterable (see test_masked_batch.py), which Python or the parser says.
    cell = torch.nn.LSTMCell(3, 4)
    x = MaskedBatch.fromlist([torch.randn(1, 3)] * 2, (False,))
    h = MaskedBatch.fromlist([torch.randn(1, 4)] * 2, (False,))
    with pytest.raises(TypeError, match=r"'MaskedBatch' object is not iterable|"
                                        r"must be tuple of Tensors, not MaskedBatch"):
        cell(x, h)


@pytest.mark.parametrize("kind", CELLS)
@given(batch=st.integers(1, 5), max_len=st.integers(0, 5), seed=st.integers(0, 1000))
def test_a_plain_start_state_is_every_examples_own(kind, batch, max_len, seed):
    # A learned (1, hidden) start state beside a batch: every example starts from it, and
    # its gradient is the sum of the examples' (mb_assert compares it, a shared argument).
    for dtype, cell, xs, xb in cells_and_inputs(kind, batch, max_len, seed):
        h0, c0 = torch.randn(1, 4, dtype=dtype), torch.randn(1, 4, dtype=dtype)

        def run(x, h, c, cell=cell):
            state = (h, c) if kind is torch.nn.LSTMCell else h
            for xt in x.unbind(1):
                new = cell(xt, state)
                state = (tuple(F.update(s, n) for s, n in zip(state, new))
                         if isinstance(new, tuple) else F.update(state, new))
            return state

        mb_assert(run, [xs, [h0] * batch, [c0] * batch], [xb, h0, c0], batch, params=list(
            cell.parameters()))


@pytest.mark.parametrize("kind", CELLS)
def test_one_step_from_a_plain_zero_state(kind, dtype):
    cell = kind(3, 4).to(dtype)
    xs, xb = mb_rand(4, (False, 3), dtype=dtype)
    zero = torch.zeros(1, 4, dtype=dtype)
    state = (zero, zero) if kind is torch.nn.LSTMCell else zero
    mb_assert(lambda x: cell(x, state), [xs], [xb], 4)


def test_a_plain_state_of_another_shape_is_refused():
    cell = torch.nn.GRUCell(3, 4)
    xs, xb = mb_rand(3, (False, 3), dtype=torch.float32)
    with pytest.raises(ValueError, match=r"a plain tensor beside a batch is every example's "
                                         r"own, so its shape must be one example's, "
                                         r"\(1, features\); got \(2, 4\)"):
        cell(xb, torch.zeros(2, 4))
