"""Whole nn.RNN / nn.LSTM / nn.GRU modules on a MaskedBatch equal the loop over examples.

The per-example oracle (and its semantics for a zero-length example) is shared
with the other batch types' tests: see tests/rnn_oracle.py.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from rnn_oracle import (
    FEATURES,
    HIDDEN,
    KINDS,
    examples_of_lengths,
    make_module,
    run,
    torchs_message,
)
from rnn_oracle import check as check_batch

from matchbox import MaskedBatch, _registry
from matchbox.nn import batch_major, time_major
from matchbox.testing import mb_assert

# PyTorch warns that oneDNN has no projection LSTM (it falls back to its own).
pytestmark = pytest.mark.filterwarnings("ignore:LSTM with projections is not supported")


def masked(xs):
    return MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))


def check(module, lengths, dtype, with_states):
    check_batch(module, lengths, dtype, with_states, masked)


@pytest.mark.parametrize("batch_type", ["MaskedBatch", "TimeMajorBatch"])
def test_every_registered_recurrent_module_op_is_tested_here(batch_type):
    # KINDS reaches each of these ops (nn.RNN's two nonlinearities, LSTM, GRU);
    # an op newly registered in the family must be added to KINDS.
    registered = {e.name for e in _registry.entries(batch_type)
                  if e.family == "recurrent_modules"}
    assert registered == {"torch.rnn_tanh", "torch.rnn_relu", "torch.lstm", "torch.gru"}


@pytest.mark.parametrize("kind", KINDS)
@given(lengths=st.lists(st.integers(0, 6), min_size=1, max_size=5),
       layers=st.integers(1, 2), bidirectional=st.booleans(), batch_first=st.booleans(),
       with_states=st.booleans(), double=st.booleans(), seed=st.integers(0, 2**16))
def test_module_equals_loop(kind, lengths, layers, bidirectional, batch_first, with_states,
                            double, seed):
    torch.manual_seed(seed)
    dtype = torch.float64 if double else torch.float32
    module = make_module(kind, layers, bidirectional, batch_first, dtype)
    check(module, lengths, dtype, with_states)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("lengths", [[0], [0, 0, 0], [1], [5], [3, 3, 3], [0, 4, 0, 1]],
                         ids=["one-empty", "all-empty", "one-step", "batch-of-one",
                              "no-padding", "empties-between"])
@pytest.mark.parametrize("with_states", [False, True], ids=["zero-state", "given-state"])
def test_edge_lengths(kind, lengths, with_states, dtype):
    module = make_module(kind, layers=2, bidirectional=True, dtype=dtype)
    check(module, lengths, dtype, with_states)


def test_no_padding_batch_has_no_mask_and_stays_unmasked():
    module = make_module("lstm")
    xb = MaskedBatch.fromlist(examples_of_lengths([4, 4], torch.float64), (True, False))
    assert xb._mask is None
    out, _ = module(xb)
    assert out._mask is None and out.dims == (True, False)


def test_static_length_batch_equals_loop(dtype):
    # Every example has the same length and dims say so (no dynamic dimension).
    module = make_module("gru", layers=2, bidirectional=True, dtype=dtype)
    xs = examples_of_lengths([3, 3, 3], dtype)
    xb = MaskedBatch.fromlist(xs, (False, False))
    mb_assert(lambda x: run(module, x), [xs], [xb], 3, params=list(module.parameters()))


@pytest.mark.parametrize("kind", KINDS)
def test_static_length_batch_derived_from_a_dynamic_one_equals_loop(kind, dtype):
    # A reduction over the dynamic dim keeps a mask of size one along the now static
    # length: a two-step sequence (mean, max) per example, which the packing must count.
    module = make_module(kind, layers=2, bidirectional=True, dtype=dtype)
    xs = examples_of_lengths([3, 1, 5], dtype)
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))

    def f(x):
        return run(module, torch.stack([x.mean(1), x.amax(1)], 1))

    assert torch.stack([xb.mean(1), xb.amax(1)], 1)._mask is not None
    mb_assert(f, [xs], [xb], 3, params=list(module.parameters()))


def test_output_keeps_the_input_mask_and_zero_padding():
    module = make_module("lstm", bidirectional=True)
    xb = MaskedBatch.fromlist(examples_of_lengths([2, 0, 5], torch.float64), (True, False),
                              padding_value=float("nan"))
    out, (h, c) = module(xb)
    assert torch.equal(out.mask, xb.mask)
    assert out.data.shape == (3, 5, 2 * HIDDEN)
    assert torch.equal(out.data[~out.mask.expand_as(out.data)],
                       torch.zeros(int((~out.mask.expand_as(out.data)).sum()), dtype=out.dtype))
    assert h.shape == c.shape == (2, 3, HIDDEN)


def test_dropout_in_eval_equals_loop(dtype):
    module = make_module("lstm", layers=2, dtype=dtype, dropout=0.5).eval()
    check(module, [3, 0, 5, 1], dtype, with_states=True)


def test_dropout_in_training_runs_on_real_rows_only():
    # Random masks differ from the loop's, so only the layout and the absence of
    # NaN (padding is NaN) are checked; values are compared in eval mode above.
    torch.manual_seed(1)
    module = make_module("gru", layers=2, dropout=0.5).train()
    xs = examples_of_lengths([3, 0, 5], torch.float64)
    xb = MaskedBatch.fromlist([x.requires_grad_() for x in xs], (True, False),
                              padding_value=float("nan"))
    out, h = module(xb)
    assert torch.equal(out.mask, xb.mask) and h.shape == (2, 3, HIDDEN)
    assert torch.isfinite(out.data).all() and torch.isfinite(h).all()
    (out.data.sum() + h.sum()).backward()
    assert all(torch.isfinite(x.grad).all() for x in xs)
    assert all(torch.isfinite(p.grad).all() for p in module.parameters())


def _aten_calls(fn, names):
    with torch.autograd.profiler.profile() as prof:
        fn()
    return {name: sum(1 for e in prof.function_events if e.name == name) for name in names}


@pytest.mark.parametrize("kind,op", [("lstm", "aten::lstm"), ("gru", "aten::gru"),
                                     ("rnn_tanh", "aten::rnn_tanh")])
def test_one_packed_call_for_the_whole_batch(kind, op):
    module = make_module(kind, layers=2, bidirectional=True)
    xb = MaskedBatch.fromlist(examples_of_lengths([5, 1, 0, 3, 2, 4], torch.float64),
                              (True, False))
    # The real rows are gathered with one index_select into the packed layout
    # (matchbox.nn.packing), not packed step by step.
    calls = _aten_calls(lambda: module(xb), [op, "aten::_pack_padded_sequence"])
    assert calls[op] == 1 and calls["aten::_pack_padded_sequence"] == 0


def test_time_major_view_answers_the_modules_questions():
    xb = MaskedBatch.fromlist(examples_of_lengths([2, 5, 1], torch.float64), (True, False))
    view = time_major(xb)
    assert view.dim() == 3 and view.size(1) == 3 and view.size(-1) == FEATURES
    assert view.dtype == torch.float64 and batch_major(view) is xb
    x = torch.randn(1, 4, FEATURES)
    assert torch.equal(batch_major(time_major(x)), x) and time_major(x).shape == (4, 1, 3)
    assert "TimeMajorBatch(MaskedBatch(" in repr(view)


# ---------------------------------------------------------------------------- errors


def test_batch_first_false_module_on_a_batch_names_the_dynamic_dimension():
    module = make_module("lstm", batch_first=False)
    xb = MaskedBatch.fromlist(examples_of_lengths([2, 5], torch.float64), (True, False))
    with pytest.raises(ValueError, match=r"size\(1\): dimension 1 is dynamic.* \(asked by an "
                                         r"nn.RNN/LSTM/GRU built with batch_first=False, which "
                                         r"reads dimension 1 of its input as the batch; .*"
                                         r"batch_first=True, or call it on "
                                         r"matchbox.nn.time_major\(x\)\)"):
        module(xb)
    with pytest.raises(ValueError, match=r"size_as_tensor\(dim\) for each example's size$"):
        xb.size(1)  # asked by the user: no hint about modules


def test_batch_first_false_module_on_a_static_batch_is_refused():
    # Without a dynamic dimension the module would read each example's length
    # as its batch size: the op refuses rather than compute something else.
    module = make_module("gru", batch_first=False)
    xb = MaskedBatch.fromlist(examples_of_lengths([3, 3], torch.float64), (False, False))
    with pytest.raises(ValueError, match=r"torch\.gru: the module has batch_first=False"):
        module(xb)


def test_time_major_view_to_a_batch_first_module_is_refused():
    module = make_module("lstm", batch_first=True)
    xb = MaskedBatch.fromlist(examples_of_lengths([2, 5], torch.float64), (True, False))
    with pytest.raises(ValueError, match=r"TimeMajorBatch.size\(0\): dimension 0 is the time"):
        module(time_major(xb))
    static = MaskedBatch.fromlist(examples_of_lengths([2, 2], torch.float64), (False, False))
    with pytest.raises(ValueError, match=r"torch\.lstm: the module has batch_first=True but "
                                         r"its input is a time-major view"):
        module(time_major(static))


def test_masked_batch_initial_state_is_refused():
    module = make_module("rnn_tanh", layers=2)
    xb = MaskedBatch.fromlist(examples_of_lengths([2, 5], torch.float64), (True, False))
    h0 = MaskedBatch.fromlist([torch.randn(1, 2, HIDDEN, dtype=torch.float64)] * 2,
                              (False, False))
    with pytest.raises(TypeError, match=r"torch\.rnn_tanh: initial states must be plain "
                                        r"tensors of shape \(layers \* directions, batch"):
        module(xb, h0)


def test_dynamic_feature_dimension_is_refused():
    module = make_module("gru")
    xb = MaskedBatch.fromlist([torch.randn(1, 2, 3), torch.randn(1, 4, 2)], (True, True))
    with pytest.raises(ValueError, match=r"size\(-1\): dimension 2 is dynamic"):
        module.float()(xb)
    with pytest.raises(ValueError, match=r"torch\.gru: each example must be \(1, length, "
                                         r"features\) with a static feature dimension"):
        torch.gru(xb, torch.zeros(1, 2, HIDDEN), module._flat_weights, True, 1, 0.0, False,
                  False, True)


def test_other_ops_on_a_time_major_view_say_to_convert_back():
    view = time_major(MaskedBatch.fromlist(examples_of_lengths([2, 1], torch.float64),
                                           (True, False)))
    # (Position-wise ops such as torch.tanh run on the view: test_nn_transformer.py.)
    with pytest.raises(NotImplementedError, match=r"torch\.sum is not implemented for "
                                                  r"TimeMajorBatch.*batch_major"):
        torch.sum(view)
    with pytest.raises(TypeError, match="time_major: expected a tensor or a MaskedBatch"):
        time_major([1, 2])
    with pytest.raises(TypeError, match="batch_major: expected a tensor or a TimeMajorBatch"):
        batch_major(MaskedBatch.fromlist(examples_of_lengths([1], torch.float64),
                                         (True, False)))


def test_torchs_own_checks_run_on_the_batch():
    # nn.LSTM.forward checks dtype, feature size and state sizes before its
    # _VF call; the batch answers those questions, so torch's messages appear.
    xs = [torch.randn(1, 2, 3), torch.randn(1, 4, 3)]
    xb = MaskedBatch.fromlist(xs, (True, False))
    lstm = make_module("lstm")  # float64 weights, float32 input
    with pytest.raises(ValueError, match=torchs_message(lstm, xs[0])):
        lstm(xb)
    with pytest.raises(RuntimeError, match="input.size\\(-1\\) must be equal to input_size. "
                                           "Expected 5, got 3"):
        torch.nn.GRU(5, HIDDEN, batch_first=True)(xb)
    with pytest.raises(RuntimeError, match=r"Expected hidden size \(1, 2, 4\), got \[1, 3, 4\]"):
        torch.nn.GRU(FEATURES, HIDDEN, batch_first=True)(xb, torch.zeros(1, 3, HIDDEN))


def test_unbatched_examples_are_refused():
    # A (1, features) example would be an unbatched one-step sequence for the
    # module, which unsqueezes dimension 0: a batch cannot move its batch dimension.
    xb = MaskedBatch.fromlist([torch.randn(1, 3), torch.randn(1, 3)], (False,))
    with pytest.raises(ValueError, match=r"Tensor\.unsqueeze: dimension 0 is the batch "
                                         r"dimension"):
        torch.nn.LSTM(FEATURES, HIDDEN, batch_first=True)(xb)
