"""Whole nn.RNN / nn.LSTM / nn.GRU modules on a MaskedBatch equal the loop over examples.

The per-example oracle calls the same module on each example ``(1, T, F)``.
PyTorch refuses ``T == 0``; Matchbox's documented semantics for such an example
(empty output, final state = initial state) are written out in ``per_example``.

PyTorch's batched states are ``(L*D, B, H)``; the loop's are ``(L*D, 1, H)``
per example.  The tests hand the loop's states around as ``(1, L*D, H)``
examples (batch first) and the batch's as a MaskedBatch of them, and transpose
at the module boundary, so mb_assert compares "the batch's states" with
"torch.cat of the loop's states along dimension 1", values and gradients.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from matchbox import MaskedBatch, _registry
from matchbox.nn import TimeMajorBatch, batch_major, time_major
from matchbox.testing import mb_assert

# PyTorch warns that oneDNN has no projection LSTM (it falls back to its own).
pytestmark = pytest.mark.filterwarnings("ignore:LSTM with projections is not supported")

FEATURES, HIDDEN, PROJ = 3, 4, 2
KINDS = ["rnn_tanh", "rnn_relu", "lstm", "lstm_proj", "gru"]


def make_module(kind, layers=1, bidirectional=False, batch_first=True, dtype=torch.float64,
                dropout=0.0):
    common = dict(num_layers=layers, bidirectional=bidirectional, batch_first=batch_first,
                  dropout=dropout)
    if kind.startswith("rnn"):
        module = torch.nn.RNN(FEATURES, HIDDEN, nonlinearity=kind[4:], **common)
    elif kind == "lstm":
        module = torch.nn.LSTM(FEATURES, HIDDEN, **common)
    elif kind == "lstm_proj":
        module = torch.nn.LSTM(FEATURES, HIDDEN, proj_size=PROJ, **common)
    else:
        module = torch.nn.GRU(FEATURES, HIDDEN, **common)
    return module.to(dtype)


def state_sizes(module):
    """(size of h, size of c or None) per layer and direction."""
    rows = module.num_layers * (2 if module.bidirectional else 1)
    h = module.proj_size or module.hidden_size
    c = module.hidden_size if isinstance(module, torch.nn.LSTM) else None
    return rows, h, c


def to_module_states(states):
    """Batch-first state examples (1, L*D, H) / their batch -> PyTorch's (L*D, B, H)."""
    if states is None:
        return None
    out = [s.data.transpose(0, 1) if isinstance(s, MaskedBatch) else s.transpose(0, 1)
           for s in states]
    return out[0] if len(out) == 1 else tuple(out)


def from_module_states(states, batched):
    """PyTorch's (L*D, B, H) -> a batch of (1, L*D, H) state examples, or one example."""
    states = list(states) if isinstance(states, tuple) else [states]
    if batched:
        return [MaskedBatch._make(s.transpose(0, 1), None, (False, False)) for s in states]
    return [s.transpose(0, 1) for s in states]


def per_example(module, x, states):
    """One example through the module: the loop's side of the oracle."""
    rows, h, c = state_sizes(module)
    if x.size(1) == 0:
        # PyTorch refuses an empty sequence; Matchbox's semantics: no step taken.
        width = (2 if module.bidirectional else 1) * h
        if states is None:
            states = [x.new_zeros(1, rows, h)] + ([x.new_zeros(1, rows, c)] if c else [])
        return x.new_zeros(1, 0, width), list(states)
    hx = to_module_states(states)
    if module.batch_first:
        out, final = module(x, hx)
    else:
        out, final = module(x.transpose(0, 1), hx)
        out = out.transpose(0, 1)
    return out, from_module_states(final, batched=False)


def on_batch(module, xb, states):
    """The batch through the module, as a per-example model would call it."""
    hx = to_module_states(states)
    if module.batch_first:
        out, final = module(xb, hx)
    else:
        out, final = module(time_major(xb), hx)
        assert isinstance(out, TimeMajorBatch)
        out = batch_major(out)
    return out, from_module_states(final, batched=True)


def run(module, x, *states):
    states = list(states) or None
    if isinstance(x, MaskedBatch):
        return on_batch(module, x, states)
    return per_example(module, x, states)


def examples_of_lengths(lengths, dtype, width=FEATURES):
    return [torch.randn(1, n, width, dtype=dtype) for n in lengths]


def state_examples(module, batch_size, dtype):
    rows, h, c = state_sizes(module)
    sizes = [h] + ([c] if c else [])
    return [[torch.randn(1, rows, size, dtype=dtype) for _ in range(batch_size)]
            for size in sizes]


@pytest.mark.parametrize("batch_type", ["MaskedBatch", "TimeMajorBatch"])
def test_every_registered_recurrent_module_op_is_tested_here(batch_type):
    # KINDS reaches each of these ops (nn.RNN's two nonlinearities, LSTM, GRU);
    # an op newly registered in the family must be added to KINDS.
    registered = {e.name for e in _registry.entries(batch_type)
                  if e.family == "recurrent_modules"}
    assert registered == {"torch.rnn_tanh", "torch.rnn_relu", "torch.lstm", "torch.gru"}


def check(module, lengths, dtype, with_states):
    xs = examples_of_lengths(lengths, dtype)
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))
    xs_args, xb_args = [xs], [xb]
    if with_states:
        for examples in state_examples(module, len(lengths), dtype):
            xs_args.append(examples)
            xb_args.append(MaskedBatch.fromlist(examples, (False, False)))
    mb_assert(lambda x, *s: run(module, x, *s), xs_args, xb_args, len(lengths),
              params=list(module.parameters()))


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
    calls = _aten_calls(lambda: module(xb), [op, "aten::_pack_padded_sequence"])
    assert calls == {op: 1, "aten::_pack_padded_sequence": 1}


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
    with pytest.raises(ValueError, match=r"size\(1\): dimension 1 is dynamic"):
        module(xb)


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
    xb = MaskedBatch.fromlist([torch.randn(1, 2, 3), torch.randn(1, 4, 3)], (True, False))
    with pytest.raises(ValueError, match=r"RNN input dtype \(torch\.float32\) does not match "
                                         r"weight dtype \(torch\.float64\)"):
        make_module("lstm")(xb)
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
