"""nn.RNN / nn.LSTM / nn.GRU on a PackedBatch equal the loop over examples.

The per-example oracle (and its semantics for a zero-length example) is shared
with the MaskedBatch tests: see tests/support/rnn_oracle.py.  Final states are the same
state views as for a MaskedBatch input (a ``TimeMajorBatch`` of a ``MaskedBatch``
of ``(1, L*D, H)`` examples): states never differ in size between examples, so
there is nothing to pack.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from packed_strategies import examples_of_lengths
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
    make_module,
    op_call,
    registered_ops,
    source_and_target_lengths,
    torchs_message,
)
from rnn_oracle import check as check_batch

from matchbox import MaskedBatch
from matchbox.nn import TimeMajorBatch, time_major
from matchbox.packed import PackedBatch
from matchbox.testing import mb_assert

pytestmark = pytest.mark.filterwarnings("ignore:LSTM with projections is not supported")


def test_every_registered_recurrent_module_op_is_tested_here():
    assert registered_ops("PackedBatch") == RECURRENT_MODULE_OPS


@pytest.mark.parametrize("kind", KINDS)
@given(case=RANDOM_MODULES)
def test_module_equals_loop(kind, case):
    check_random_module(PackedBatch.fromlist, kind, **case)


@pytest.mark.parametrize("kind", KINDS)
@EDGE_LENGTHS
@pytest.mark.parametrize("states", STATES)
def test_edge_lengths(kind, lengths, states, dtype):
    check_edge_lengths(PackedBatch.fromlist, kind, lengths, states, dtype)


@pytest.mark.parametrize("batch_first", [True, False])
def test_output_keeps_the_input_layout(batch_first):
    pb = PackedBatch.fromlist(examples_of_lengths([3, 0, 5]))
    module = make_module("lstm", bidirectional=True, batch_first=batch_first)
    out, (h, c) = module(pb if batch_first else time_major(pb))
    out = out if batch_first else out.batch
    assert isinstance(out, PackedBatch) and out.layout is pb.layout
    assert out.data.shape == (8, 2 * HIDDEN) and h.shape == c.shape == (2, 3, HIDDEN)
    for state in (h, c):
        assert isinstance(state, TimeMajorBatch) and isinstance(state.batch, MaskedBatch)
        assert state.batch.dims == (False, False) and state.batch._mask is None


def test_dropout_in_eval_equals_loop(dtype):
    module = make_module("lstm", layers=2, dtype=dtype, dropout=0.5).eval()
    check_batch(module, [3, 0, 5, 1], dtype, with_states=True, make_batch=PackedBatch.fromlist)


def test_the_packed_call_gets_the_batchs_rows_as_they_are():
    # One packed call whose input is the batch's N real rows; nothing is packed,
    # padded or gathered on the way (only the small states are permuted).
    pb = PackedBatch.fromlist(examples_of_lengths([5, 1, 0, 3, 2, 4], static=(FEATURES,)))
    module = make_module("lstm", layers=2, bidirectional=True)
    with torch.autograd.profiler.profile(record_shapes=True) as prof:
        module(pb)
    events = prof.function_events
    lstm = [e for e in events if e.name == "aten::lstm"]
    assert len(lstm) == 1 and list(lstm[0].input_shapes[0]) == [15, FEATURES]
    forbidden = {"aten::_pack_padded_sequence", "aten::_pad_packed_sequence",
                 "aten::index_copy", "aten::constant_pad_nd", "aten::index"}
    assert not forbidden & {e.name for e in events}
    # Outside the RNN's own work, no op reads the rows (a copy would).
    touched = [e.name for e in events if not _inside(e, lstm[0]) and e is not lstm[0]
               and e.input_shapes and list(e.input_shapes[0]) == [15, FEATURES]]
    assert not touched


def _inside(event, ancestor):
    parent = event.cpu_parent
    while parent is not None:
        if parent is ancestor:
            return True
        parent = parent.cpu_parent
    return False


def test_output_feeds_the_next_layer_without_conversion():
    xs = examples_of_lengths([3, 1, 5], static=(FEATURES,))  # the loop refuses length 0
    encoder = make_module("gru", layers=1, bidirectional=True)
    head = torch.nn.Linear(2 * HIDDEN, 2).double()

    def model(x):
        out, _ = encoder(x)
        return head(out).tanh()

    mb_assert(model, [xs], [PackedBatch.fromlist(xs)], 3,
              params=list(encoder.parameters()) + list(head.parameters()))


def test_dropout_in_training_runs_on_real_rows_only():
    torch.manual_seed(1)
    module = make_module("gru", layers=2, dropout=0.5).train()
    xs = [x.requires_grad_() for x in examples_of_lengths([3, 0, 5])]
    out, h = module(PackedBatch.fromlist(xs))
    assert h.shape == (2, 3, HIDDEN) and torch.isfinite(out.data).all()
    (out.data.sum() + h.batch.data.sum()).backward()
    assert all(torch.isfinite(x.grad).all() for x in xs)


# ---------------------------------------------------------------------------- user patterns
# The per-example models of rnn_oracle (final states classified, passed to a
# decoder, bridged) on PackedBatch inputs, and mixed with MaskedBatch ones.


def packed_inputs(lengths, dtype=torch.float64):
    xs = examples_of_lengths(lengths, static=(FEATURES,), dtype=dtype)
    return xs, PackedBatch.fromlist(xs)




@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("bidirectional", [False, True], ids=["h[-1]", "cat(h[-2], h[-1])"])
@given(lengths=LENGTHS)
def test_classifier_on_the_final_states_equals_loop(kind, bidirectional, lengths):
    check_classifier(PackedBatch.fromlist, kind, bidirectional, lengths)


@pytest.mark.parametrize("kind", ["lstm", "lstm_proj", "gru"])
@pytest.mark.parametrize("target_type", ["PackedBatch", "MaskedBatch"])
@given(lengths=source_and_target_lengths(), double=st.booleans())
def test_packed_encoder_states_start_a_decoder(kind, target_type, lengths, double):
    # The decoder's input is packed too, or a MaskedBatch (a model mixing both).
    dtype = torch.float64 if double else torch.float32
    target = PackedBatch.fromlist if target_type == "PackedBatch" else (
        lambda ys: MaskedBatch.fromlist(ys, (True, False), padding_value=float("nan")))
    check_model(Seq2Seq(kind).to(dtype), lengths, [PackedBatch.fromlist, target], dtype)


@given(lengths=source_and_target_lengths())
def test_bridge_from_both_directions(lengths):
    check_model(BridgedSeq2Seq(), lengths, [PackedBatch.fromlist, PackedBatch.fromlist])


def test_time_major_packed_input_takes_and_gives_state_views(dtype):
    gru = make_module("gru", layers=2, batch_first=False, dtype=dtype)

    def model(x, y):
        _, h = call(gru, x.transpose(0, 1))
        out, h = call(gru, y.transpose(0, 1), h.tanh())
        return out.transpose(0, 1), h[0], h.transpose(0, 1)

    (xs, xb), (ys, yb) = packed_inputs([3, 0, 1], dtype), packed_inputs([2, 4, 0], dtype)
    mb_assert(model, [xs, ys], [xb, yb], 3, params=list(gru.parameters()))


# ---------------------------------------------------------------------------- errors


def test_batch_first_false_module_on_a_batch_names_the_packed_dimension():
    pb = PackedBatch.fromlist(examples_of_lengths([2, 5]))
    with pytest.raises(ValueError, match=r"size\(1\): dimension 1 is the packed dimension.* "
                                         r"\(asked by an nn.RNN/LSTM/GRU built with "
                                         r"batch_first=False, .* a PackedBatch is batch-major: "
                                         r"build the module with batch_first=True, or call it "
                                         r"on matchbox.nn.time_major\(x\)\)$"):
        make_module("lstm", batch_first=False)(pb)
    with pytest.raises(ValueError, match=r"or lengths\(\)$"):
        pb.size(1)  # asked by the user: no hint about modules
    module = make_module("gru", batch_first=False)
    with pytest.raises(ValueError, match=r"torch.gru: the module has batch_first=False, so it "
                                         r"reads dimension 1 of its input as the batch, but a "
                                         r"PackedBatch is batch-major"):
        op_call(module, pb, torch.zeros(1, 2, HIDDEN))


def test_time_major_view_to_a_batch_first_module_is_refused():
    pb = PackedBatch.fromlist(examples_of_lengths([2, 5]))
    with pytest.raises(ValueError, match=r"TimeMajorBatch.size\(0\): dimension 0 is the time.*"
                                         r" \(asked by an nn.RNN/LSTM/GRU built with "
                                         r"batch_first=True, .* a TimeMajorBatch is time-major: "
                                         r"build the module with batch_first=False, or call it "
                                         r"on the batch itself\)$"):
        make_module("lstm")(time_major(pb))
    with pytest.raises(ValueError, match=r"for the padded length$"):
        time_major(pb).size(0)


def test_examples_without_static_features_are_refused():
    module = make_module("gru")
    tokens = PackedBatch.fromlist([torch.randn(1, 2, dtype=torch.float64)] * 2)
    with pytest.raises(ValueError, match=r"torch.gru: each example must be \(1, length, "
                                         r"features\); got examples of rank 2"):
        op_call(module, tokens, torch.zeros(1, 2, HIDDEN))


def test_masked_batch_initial_state_is_refused():
    pb = PackedBatch.fromlist(examples_of_lengths([2, 5]))
    h0 = MaskedBatch.fromlist([torch.randn(1, 1, HIDDEN, dtype=torch.float64)] * 2,
                              (False, False))
    module = make_module("rnn_tanh")
    # The mixing rule hands a call that holds a MaskedBatch to MaskedBatch's dispatch,
    # whose recurrent handler says how per-example states are passed.
    with pytest.raises(TypeError, match=r"torch.rnn_tanh: an initial state is a MaskedBatch of "
                                        r"examples \(1, 1, 4\); .* pass h0.transpose\(0, 1\)"):
        op_call(module, pb, h0)


def test_torchs_own_checks_run_on_the_batch():
    xs = [torch.randn(1, 2, 3), torch.randn(1, 4, 3)]
    pb = PackedBatch.fromlist(xs)
    lstm = make_module("lstm")  # float64 weights, float32 input
    with pytest.raises(ValueError, match=torchs_message(lstm, xs[0])):
        lstm(pb)
    with pytest.raises(RuntimeError, match=r"Expected hidden size \(1, 2, 4\), got \[1, 3, 4\]"):
        torch.nn.GRU(FEATURES, HIDDEN, batch_first=True)(pb, torch.zeros(1, 3, HIDDEN))


@pytest.mark.parametrize("kind", [torch.nn.RNN, torch.nn.LSTM, torch.nn.GRU])
@given(lengths=st.lists(st.integers(1, 5), min_size=1, max_size=4), layers=st.integers(1, 2),
       bidirectional=st.booleans(), double=st.booleans())
def test_a_plain_start_state_is_every_examples_own(kind, lengths, layers, bidirectional, double):
    dtype = torch.float64 if double else torch.float32
    check_plain_start_state(PackedBatch.fromlist, kind, lengths, layers, bidirectional,
                            batch_first=True, dtype=dtype)


def test_torch_func_grad_over_a_module_on_a_packed_batch_is_refused_saying_why():
    # It raised PyTorch's "Cannot access data pointer of Tensor that doesn't have storage".
    from matchbox.packed import PackedBatch

    lstm = torch.nn.LSTM(4, 5, batch_first=True).double()
    pb = PackedBatch.fromlist(examples_of_lengths([3, 1, 2], static=(4,)))
    params = {k: v.detach() for k, v in lstm.named_parameters()}

    def loss(p):
        out, _ = torch.func.functional_call(lstm, p, (pb,))
        return out.data.sum()

    with pytest.raises(NotImplementedError, match=(
            r"torch\.lstm \(nn\.LSTM\) on a PackedBatch under a torch\.func transform .* "
            r"PyTorch cannot run under torch\.func .* Take gradients with torch\.autograd\.grad "
            r"or loss\.backward\(\) instead, or convert with matchbox\.packed\.as_masked\(x\) "
            r"and step an nn\.LSTMCell")):
        torch.func.grad(loss)(params)
