"""Whole nn.RNN / nn.LSTM / nn.GRU modules on a MaskedBatch equal the loop over examples.

The per-example oracle (and its semantics for a zero-length example) is shared
with the other batch types' tests: see tests/support/rnn_oracle.py.  Final states are
state views (``TimeMajorBatch``) whose examples are the loop's ``(L*D, 1, H)``
states; the user-pattern tests below run per-example code on them unchanged
(the ops on the view itself: packages/matchbox-nn/tests/test_nn_time_major_views.py).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from rnn_oracle import (
    EDGE_LENGTHS,
    FEATURES,
    HIDDEN,
    KINDS,
    LENGTHS,
    RANDOM_MODULES,
    RECURRENT_MODULE_OPS,
    STATES,
    BridgedSeq2Seq,
    Seq2Seq,
    call,
    check_classifier,
    check_edge_lengths,
    check_model,
    check_plain_start_state,
    check_random_module,
    examples_of_lengths,
    make_module,
    op_call,
    registered_ops,
    run,
    source_and_target_lengths,
    torchs_message,
)
from rnn_oracle import check as check_batch
from torch import nn

from matchbox import MaskedBatch
from matchbox.nn import TimeMajorBatch, batch_major, time_major
from matchbox.testing import mb_assert

# PyTorch warns that oneDNN has no projection LSTM (it falls back to its own).
pytestmark = pytest.mark.filterwarnings("ignore:LSTM with projections is not supported")


def masked(xs):
    return MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))


@pytest.mark.parametrize("batch_type", ["MaskedBatch", "TimeMajorBatch"])
def test_every_registered_recurrent_module_op_is_tested_here(batch_type):
    assert registered_ops(batch_type) == RECURRENT_MODULE_OPS


@pytest.mark.parametrize("kind", KINDS)
@given(case=RANDOM_MODULES)
def test_module_equals_loop(kind, case):
    check_random_module(masked, kind, **case)


@pytest.mark.parametrize("kind", KINDS)
@EDGE_LENGTHS
@pytest.mark.parametrize("states", STATES)
def test_edge_lengths(kind, lengths, states, dtype):
    check_edge_lengths(masked, kind, lengths, states, dtype)


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
    # The states are views (L*D, B, H) of a MaskedBatch of (1, L*D, H) examples, no mask.
    for state in (h, c):
        assert isinstance(state, TimeMajorBatch) and state.shape == (2, 3, HIDDEN)
        assert state.size(1) == 3 and state.batch.dims == (False, False)
        assert state.batch._mask is None and state.batch.data.shape == (3, 2, HIDDEN)


def test_dropout_in_eval_equals_loop(dtype):
    module = make_module("lstm", layers=2, dtype=dtype, dropout=0.5).eval()
    check_batch(module, [3, 0, 5, 1], dtype, with_states=True, make_batch=masked)


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
    assert torch.isfinite(out.data).all() and torch.isfinite(h.batch.data).all()
    (out.data.sum() + h.batch.data.sum()).backward()
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


# ---------------------------------------------------------------------------- user patterns
#
# Per-example models that use the final states (rnn_oracle: Classifier, Seq2Seq,
# BridgedSeq2Seq), written for one example (1, T, F) and run unchanged on the batch
# (NaN padding); the loop gives an empty example Matchbox's semantics through
# rnn_oracle.call (PyTorch refuses it).


def inputs(lengths, dtype=torch.float64):
    xs = examples_of_lengths(lengths, dtype)
    return xs, masked(xs)




@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("bidirectional", [False, True], ids=["h[-1]", "cat(h[-2], h[-1])"])
@given(lengths=LENGTHS)
def test_classifier_on_the_final_states_equals_loop(kind, bidirectional, lengths):
    check_classifier(masked, kind, bidirectional, lengths)


@pytest.mark.parametrize("kind", ["lstm", "lstm_proj", "gru", "rnn_tanh"])
@given(lengths=source_and_target_lengths(), double=st.booleans())
def test_encoder_states_start_the_decoder(kind, lengths, double):
    dtype = torch.float64 if double else torch.float32
    check_model(Seq2Seq(kind).to(dtype), lengths, [masked, masked], dtype)


@given(lengths=source_and_target_lengths())
def test_bridge_from_both_directions_with_unsqueeze_and_squeeze(lengths):
    check_model(BridgedSeq2Seq(), lengths, [masked, masked])


def test_gru_state_squeezed_to_features(dtype):
    gru, fc = make_module("gru", dtype=dtype), nn.Linear(HIDDEN, 2).to(dtype)

    def model(x):
        _, h = call(gru, x)
        return fc(h.squeeze(0)).tanh()                      # (1, H) -> (1, 2)

    xs, xb = inputs([3, 0, 1, 5], dtype)
    mb_assert(model, [xs], [xb], 4, params=[*gru.parameters(), *fc.parameters()])


@pytest.mark.parametrize("lengths", [[4, 1, 0, 2], [3]], ids=["ragged", "batch-of-one"])
def test_time_major_module_states(lengths, dtype):
    # batch_first=False: the input is time-major (T, 1, F) per example; the states
    # are (L*D, 1, H) either way.
    lstm = make_module("lstm", layers=2, bidirectional=True, batch_first=False, dtype=dtype)

    def model(x):
        out, (h, c) = call(lstm, x.transpose(0, 1))
        out2, (h2, _) = call(lstm, out[:, :, :FEATURES], (h, c))   # states back in
        return out2.transpose(0, 1), torch.cat([h2[-2], h2[-1]], 1), c.transpose(0, 1)

    xs, xb = inputs(lengths, dtype)
    mb_assert(model, [xs], [xb], len(lengths), params=list(lstm.parameters()))


def test_detached_states_carry_into_the_next_chunk(dtype):
    # Truncated backpropagation through time: the next chunk starts from the
    # detached final states; no gradient reaches the first chunk through them.
    lstm = make_module("lstm", dtype=dtype)

    def model(first, second):
        _, (h, c) = call(lstm, first)
        out, (h, c) = call(lstm, second, (h.detach(), c.detach()))
        return out, h * c

    (xs, xb), (ys, yb) = inputs([3, 1, 4], dtype), inputs([2, 2, 0], dtype)
    mb_assert(model, [xs, ys], [xb, yb], 3, params=list(lstm.parameters()))


def test_reductions_and_pointwise_ops_of_states_are_per_example(dtype):
    gru = make_module("gru", layers=2, bidirectional=True, dtype=dtype)

    def model(x):
        _, h = call(gru, x)
        return h.sum(), h.mean(0), (h * h).amax(-1, keepdim=True).transpose(0, 1), h.tanh()

    xs, xb = inputs([2, 0, 5], dtype)
    mb_assert(model, [xs], [xb], 3, params=list(gru.parameters()))


def test_states_answer_the_sizes_per_example_code_asks():
    lstm = make_module("lstm", layers=2, bidirectional=True)
    _, (h, c) = lstm(masked(examples_of_lengths([3, 1, 0], torch.float64)))
    assert h.size() == h.shape == (4, 3, HIDDEN) and h.size(1) == 3 and h.size(-1) == HIDDEN
    assert h.dim() == h.ndim == 3 and len(h) == 4 and h.dtype == torch.float64
    loop = [lstm(x)[1][0] for x in examples_of_lengths([3, 1], torch.float64)]
    assert [e.shape for e in h.examples()] == [loop[0].shape] * 3 == [(4, 1, HIDDEN)] * 3
    assert isinstance(h.transpose(0, 1), MaskedBatch) and batch_major(h) is h.transpose(0, 1)


def test_an_initial_state_that_is_not_real_starts_from_zeros_and_stays_not_real():
    # The first step of each example as its initial state: the empty example has none
    # (the loop would raise for it), so its state is padding (NaN here). It must not
    # reach anything, and its final state is not real either; the others are the loop's.
    gru = nn.GRU(HIDDEN, HIDDEN, batch_first=True).double()
    xs = [torch.randn(1, n, HIDDEN, dtype=torch.float64, requires_grad=True)
          for n in (2, 0, 3)]
    xb = masked(xs)
    first = xb.unbind(1)[0]                                   # (1, H) per example
    assert first._mask is not None and not first.mask[1].any()
    out, h = gru(xb, first.unsqueeze(0))
    assert torch.equal(h.batch.mask.flatten(), torch.tensor([True, False, True]))
    assert torch.isfinite(h.batch.data).all() and torch.isfinite(out.data[out.mask.expand_as(
        out.data)]).all()
    # Example 1 has no value: examples() refuses it (matchbox/_absent.py); the others are
    # read from the data, each its own row.
    with pytest.raises(ValueError, match="example 1 has no value here"):
        list(h.examples())
    for e in (0, 2):
        _, h_loop = gru(xs[e], xs[e][:, :1].transpose(0, 1))
        torch.testing.assert_close(h.batch.data[e:e + 1].transpose(0, 1), h_loop,
                                   rtol=1e-7, atol=1e-7)
    (out.data[out.mask.expand_as(out.data)].sum() + h.batch.data[[0, 2]].sum()).backward()
    assert all(torch.isfinite(x.grad).all() for x in (xs[0], xs[2]))
    assert all(torch.isfinite(p.grad).all() for p in gru.parameters())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_states_through_cudnn_equal_loop():
    # float64: the loop's and the batch's cuDNN calls then agree to the default tolerance.
    model = Seq2Seq("lstm").cuda()
    xs, ys = ([x.cuda() for x in examples_of_lengths(ls, torch.float64)]
              for ls in ([3, 0, 5, 1], [2, 4, 0, 1]))
    mb_assert(model, [xs, ys], [masked(xs), masked(ys)], 4)


def test_the_states_need_no_extra_packed_call():
    # States back into a module: still one packed call per module call.
    lstm = make_module("lstm", layers=2, bidirectional=True)
    xb = masked(examples_of_lengths([5, 1, 0, 3], torch.float64))
    _, states = lstm(xb)
    calls = _aten_calls(lambda: lstm(xb, states), ["aten::lstm"])
    assert calls["aten::lstm"] == 1


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


def test_a_batch_major_initial_state_says_to_transpose_it():
    # Per-example states (1, L*D, H) must be transposed, as the per-example code does;
    # when the sizes do not happen to match, torch's own size check speaks first.
    module = make_module("rnn_tanh", layers=2)
    xb = MaskedBatch.fromlist(examples_of_lengths([2, 5], torch.float64), (True, False))
    h0 = MaskedBatch.fromlist([torch.randn(1, 2, HIDDEN, dtype=torch.float64)] * 2,
                              (False, False))
    with pytest.raises(TypeError, match=r"torch\.rnn_tanh: an initial state is a MaskedBatch "
                                        r"of examples \(1, 2, 4\); a state of one example is "
                                        r"\(layers \* directions, 1, hidden\).* pass "
                                        r"h0.transpose\(0, 1\)"):
        module(xb, h0)
    with pytest.raises(RuntimeError, match=r"Expected hidden size \(2, 2, 4\), got \[2, 3, 4\]"):
        module(xb, MaskedBatch.fromlist([torch.randn(1, 3, HIDDEN, dtype=torch.float64)] * 2,
                                        (False, False)))


def test_initial_state_views_must_hold_static_masked_examples_of_the_batch():
    module = make_module("gru")
    xb = MaskedBatch.fromlist(examples_of_lengths([2, 5], torch.float64), (True, False))
    three = time_major(MaskedBatch.fromlist([torch.randn(1, 1, HIDDEN, dtype=torch.float64)] * 3,
                                            (False, False)))
    with pytest.raises(RuntimeError, match=r"Expected hidden size \(1, 2, 4\), got \[1, 3, 4\]"):
        module(xb, three)  # torch's check reads size(1) of the view: the batch size
    with pytest.raises(ValueError, match=r"torch\.gru: the initial states hold 3 examples but "
                                         r"the input holds 2"):
        op_call(module, xb, three)
    ragged = time_major(MaskedBatch.fromlist(
        [torch.randn(1, n, HIDDEN, dtype=torch.float64) for n in (1, 2)], (True, False)))
    with pytest.raises(TypeError, match=r"torch\.gru: initial states must be state views .* or "
                                        r"plain \(layers \* directions, batch, hidden\) "
                                        r"tensors; got TimeMajorBatch"):
        op_call(module, xb, ragged)


def test_plain_input_with_state_views_is_refused():
    module = make_module("lstm")
    states = module(MaskedBatch.fromlist(examples_of_lengths([2], torch.float64),
                                         (True, False)))[1]
    with pytest.raises(TypeError, match=r"torch\.lstm: the initial states are per-example state "
                                        r"views but the input is a Tensor; pass the batch"):
        module(torch.randn(1, 3, FEATURES, dtype=torch.float64), states)


def test_dynamic_feature_dimension_is_refused():
    module = make_module("gru")
    xb = MaskedBatch.fromlist([torch.randn(1, 2, 3), torch.randn(1, 4, 2)], (True, True))
    with pytest.raises(ValueError, match=r"size\(-1\): dimension 2 is dynamic"):
        module.float()(xb)
    with pytest.raises(ValueError, match=r"torch\.gru: each example must be \(1, length, "
                                         r"features\) with a static feature dimension"):
        op_call(module, xb, torch.zeros(1, 2, HIDDEN))


def test_other_ops_on_a_time_major_view_say_to_convert_back():
    view = time_major(MaskedBatch.fromlist(examples_of_lengths([2, 1], torch.float64),
                                           (True, False)))
    # (Position-wise ops such as torch.tanh run on the view: test_nn_transformer.py.)
    with pytest.raises(NotImplementedError, match=r"torch\.cumsum is not implemented for "
                                                  r"TimeMajorBatch.*batch_major"):
        torch.cumsum(view, 0)
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
    # module, which unsqueezes dimension 0 (giving a time-major view) and would
    # return states without a batch dimension, which a batch cannot hold.
    xb = MaskedBatch.fromlist([torch.randn(1, 3), torch.randn(1, 3)], (False,))
    with pytest.raises(ValueError, match=r"torch\.lstm: the module has batch_first=True but its "
                                         r"input is a time-major view; .* examples of shape "
                                         r"\(1, features\) are unbatched one-step sequences .* "
                                         r"x.unsqueeze\(1\)"):
        torch.nn.LSTM(FEATURES, HIDDEN, batch_first=True)(xb)


@pytest.mark.parametrize("kind", [nn.RNN, nn.LSTM, nn.GRU])
@given(lengths=st.lists(st.integers(0, 5), min_size=1, max_size=4),
       layers=st.integers(1, 2), bidirectional=st.booleans(), batch_first=st.booleans(),
       double=st.booleans())
def test_a_plain_start_state_is_every_examples_own(kind, lengths, layers, bidirectional,
                                                   batch_first, double):
    dtype = torch.float64 if double else torch.float32
    check_plain_start_state(masked, kind, lengths, layers, bidirectional, batch_first, dtype)


def test_a_plain_zero_start_state_equals_none(dtype):
    module = nn.GRU(3, 4, batch_first=True).to(dtype)
    xs = [torch.randn(1, n, 3, dtype=dtype) for n in (2, 5, 1)]
    mb_assert(lambda x: module(x, torch.zeros(1, 1, 4, dtype=dtype)), [xs], [masked(xs)], 3)


# ---------------------------------------------------------------------------- torch.func


@pytest.mark.parametrize("module", [nn.LSTM, nn.GRU, nn.RNN])
def test_torch_func_grad_over_a_module_on_examples_of_different_lengths_is_refused(module):
    # PyTorch's packed kernel has no torch.func support (it fails without Matchbox too).
    rnn = module(4, 5, batch_first=True)
    xb = MaskedBatch.fromlist([torch.randn(1, n, 4) for n in (3, 1, 2)], (True, False),
                              padding_value=float("nan"))
    params = {k: v.detach() for k, v in rnn.named_parameters()}

    def loss(p):
        out, _ = torch.func.functional_call(rnn, p, (xb,))
        return out.sum().data.sum()

    name = module.__name__
    with pytest.raises(NotImplementedError, match=(
            rf"\(nn.{name}\) on a MaskedBatch of examples of different lengths under a "
            r"torch.func transform .* PyTorch cannot run under torch.func .* Take gradients "
            rf"with torch.autograd.grad or loss.backward\(\) instead, or step an nn.{name}Cell")):
        torch.func.grad(loss)(params)
    # What it says works: torch.autograd.grad equals the loop.
    mb_assert(rnn, (list(xb.examples()),), (xb,), 3, params=list(rnn.parameters()))


def test_torch_func_grad_over_a_module_on_examples_of_one_length_equals_autograd():
    # No padding: the dense kernel runs, which torch.func supports.
    torch.manual_seed(0)
    rnn = nn.LSTM(4, 5, batch_first=True).double()
    xb = MaskedBatch.fromlist([torch.randn(1, 3, 4, dtype=torch.float64) for _ in range(2)],
                              (True, False))
    params = {k: v.detach() for k, v in rnn.named_parameters()}

    def loss(p):
        out, _ = torch.func.functional_call(rnn, p, (xb,))
        return out.sum().data.sum()

    got = torch.func.grad(loss)(params)
    want = torch.autograd.grad(loss(dict(rnn.named_parameters())), list(rnn.parameters()))
    for name, w in zip(params, want):
        torch.testing.assert_close(got[name], w)
