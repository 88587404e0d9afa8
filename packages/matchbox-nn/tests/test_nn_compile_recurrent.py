"""``nn.LSTM``/``nn.GRU``/``nn.RNN`` on a ``MaskedBatch`` under ``matchbox.compile``: captured
as a masked loop over time with the module's own weights (one ``scan`` per layer and
direction where torch has it), not run eagerly for want of the lengths packing reads.

Compared with the loop over examples (the module on each example alone) and with eager
Matchbox (packed), values and gradients, with NaN padding.  Graphs run with
``backend="aot_eager"`` (PyTorch's kernels, the backward pass derived as inductor's is).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import matchbox
from matchbox import MaskedBatch
from matchbox.compiler import loops
from matchbox.testing import mb_assert

# matchbox.compile over loops: not run by tox's `oldest` (tox.ini, marker compiled_loops).
pytestmark = pytest.mark.compiled_loops

BACKEND = "aot_eager"
NAN = float("nan")

MODULES = {
    "lstm": lambda: nn.LSTM(3, 4, batch_first=True),
    "gru, 2 layers, bidirectional": lambda: nn.GRU(3, 4, num_layers=2, bidirectional=True,
                                                   batch_first=True),
    "rnn relu, no bias": lambda: nn.RNN(3, 4, nonlinearity="relu", bias=False,
                                        batch_first=True),
    "lstm, projected, 2 layers, bidirectional": lambda: nn.LSTM(
        3, 4, num_layers=2, proj_size=2, bidirectional=True, batch_first=True),
}


class Outputs(nn.Module):
    """The module's output and final states (state views on a batch)."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module

    def forward(self, x, h0=None):
        if h0 is None:
            return self.module(x)
        return self.module(x, h0.transpose(0, 1))


def make(name, dtype=torch.float64):
    torch.manual_seed(0)
    return Outputs(MODULES[name]().to(dtype))


def examples(lengths, size=3, dtype=torch.float64):
    torch.manual_seed(1)
    return [torch.randn(1, n, size, dtype=dtype) for n in lengths]


def loops_in(module: nn.Module) -> int:
    """How many scans the graph holds: one per layer and direction, where torch has scan."""
    if not loops.available():
        return 0
    return module.num_layers * (2 if module.bidirectional else 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", list(MODULES))
def test_a_recurrent_module_compiles_as_a_masked_loop_equal_to_the_loop(name, dtype):
    model = make(name, dtype)
    compiled = matchbox.compile(model, backend=BACKEND, fallback="raise")
    xs = examples((3, 1, 5), dtype=dtype)
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=NAN)

    def run(x):
        return (compiled if isinstance(x, MaskedBatch) else model)(x)

    mb_assert(run, [xs], [xb], 3, params=list(model.parameters()))
    [spec] = compiled.specializations
    assert spec.eager_reason is None
    assert spec.scans == loops_in(model.module)


@pytest.mark.parametrize("name", list(MODULES))
@pytest.mark.parametrize("lengths", [(2, 0, 4), (4,), (0, 0)])
def test_empty_examples_and_batch_size_one_equal_eager_matchbox(name, lengths):
    # The loop cannot run a module on an empty sequence (PyTorch refuses it): eager
    # Matchbox is the oracle here, an empty example's final state its initial state.
    model = make(name)
    compiled = matchbox.compile(model, backend=BACKEND, fallback="raise")
    xs = examples(lengths)
    results = []
    for run in (model, compiled):
        model.zero_grad()
        xb = MaskedBatch.fromlist(xs, (True, False), padding_value=NAN)
        xb.data.requires_grad_(True)
        out, states = run(xb)
        states = states if isinstance(states, tuple) else (states,)
        loss = sum(s.batch.data.pow(2).sum() for s in states)
        if out.data.numel():
            loss = loss + torch.where(out.mask, out.data, 0).pow(2).sum()
        if loss.requires_grad:  # not when every example is empty: no step, no weight
            loss.backward()
        # (the compiled output's padded length is the bucket's: compare the examples)
        results.append((list(out.examples()) + [s.batch.data for s in states],
                         [xb.data.grad] + [p.grad for p in model.parameters()]))
    (eager_values, eager_grads), (values, grads) = results
    torch.testing.assert_close(values, eager_values)
    torch.testing.assert_close(grads, eager_grads)
    assert all(g is None or torch.isfinite(g).all() for g in grads)
    assert compiled.specializations[0].eager_reason is None


def test_a_batch_without_padding_and_given_initial_states_equal_the_loop():
    model = make("lstm, projected, 2 layers, bidirectional")
    lstm = model.module
    compiled = matchbox.compile(Initial(lstm), backend=BACKEND, fallback="raise")
    xs = examples((4, 4))  # one length: a batch with no mask
    torch.manual_seed(2)
    h0 = [torch.randn(1, 4, 2, dtype=torch.float64) for _ in xs]  # (1, layers * 2, proj)
    c0 = [torch.randn(1, 4, 4, dtype=torch.float64) for _ in xs]
    batches = [MaskedBatch.fromlist(v, (False, False)) for v in (h0, c0)]

    def run(x, h, c):
        return (compiled if isinstance(x, MaskedBatch) else Initial(lstm))(x, h, c)

    mb_assert(run, [xs, h0, c0], [MaskedBatch.fromlist(xs, (True, False))] + batches, 2,
              params=list(lstm.parameters()))
    assert compiled.specializations[0].eager_reason is None


class Initial(nn.Module):
    """An LSTM from per-example initial states ``(1, layers * directions, size)``."""

    def __init__(self, lstm: nn.LSTM):
        super().__init__()
        self.lstm = lstm

    def forward(self, x, h0, c0):
        out, (h, c) = self.lstm(x, (h0.transpose(0, 1), c0.transpose(0, 1)))
        return out, h, c


def test_unrolled_on_request_the_same_loop(monkeypatch):
    monkeypatch.setenv("MATCHBOX_COMPILE_LOOPS", "unroll")
    model = make("gru, 2 layers, bidirectional")
    compiled = matchbox.compile(model, backend=BACKEND, fallback="raise")
    xs = examples((3, 1, 5))

    def run(x):
        return (compiled if isinstance(x, MaskedBatch) else model)(x)

    mb_assert(run, [xs], [MaskedBatch.fromlist(xs, (True, False))], 3,
              params=list(model.parameters()))
    assert compiled.specializations[0].scans == 0


class LastLayer(nn.Module):
    """A classifier on the last layer's final state, ``fc(h[-1])``."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module
        self.fc = nn.Linear(getattr(module, "proj_size", 0) or module.hidden_size, 2)

    def forward(self, x):
        _, h = self.module(x)
        h = h[0] if isinstance(h, tuple) else h
        return self.fc(h[-1] + h[0])


@pytest.mark.parametrize("name", list(MODULES))
@pytest.mark.parametrize("lengths", [(5,), (3,), (4, 2)])
def test_one_layers_final_state_keeps_every_loop_a_scan_at_batch_size_one(name, lengths):
    # A slice of the stack of final states sent the scan's backward a gradient whose
    # size-one batch dimension had the stack's stride, and scan refused its carries: the
    # graph fell back to unrolling every loop (matchbox.compiler.loops._dense_gradient).
    torch.manual_seed(0)
    model = LastLayer(MODULES[name]()).double()
    compiled = matchbox.compile(model, backend=BACKEND, fallback="raise")
    xs = examples(lengths)

    def run(x):
        return (compiled if isinstance(x, MaskedBatch) else model)(x)

    mb_assert(run, [xs], [MaskedBatch.fromlist(xs, (True, False), padding_value=NAN)],
              len(xs), params=list(model.parameters()))
    [spec] = compiled.specializations
    assert (spec.scans, spec.unrolled) == (loops_in(model.module), [])


@pytest.mark.parametrize("name", ["lstm", "gru, 2 layers, bidirectional"])
def test_one_graph_serves_every_padded_length(name):
    # The loop's steps are slices of the positions, not a list of them, so their number
    # stays a symbol (compiler/loop_steps.py): lengths 5 to 17, one graph.  Backwards, the
    # steps read the positions flipped.  Without scan (torch 2.3) each length unrolls.
    model = make(name)
    compiled = matchbox.compile(model, backend=BACKEND, bucket=None, fallback="raise")

    def run(x):
        return (compiled if isinstance(x, MaskedBatch) else model)(x)

    for lengths in ((5, 1, 3), (9, 9, 2, 4), (17, 6)):
        xs = examples(lengths)
        xb = MaskedBatch.fromlist(xs, (True, False), padding_value=NAN)
        mb_assert(run, [xs], [xb], len(lengths), params=list(model.parameters()))
    specs = compiled.specializations
    if loops.available():
        assert [(s.calls, s.scans, s.summary) for s in specs] == [
            (3, loops_in(model.module), "batch(B=*, <=*, 3)")]
    else:
        assert len(specs) == 3


def test_a_time_major_module_serves_every_batch_size():
    # TimeMajorBatch.size(1) took int() of the batch size, which fixed it in the graph:
    # each batch size compiled again (a user trial).
    from matchbox.nn import time_major

    class TimeMajor(nn.Module):
        def __init__(self):
            super().__init__()
            self.gru = nn.GRU(3, 4)  # batch_first=False: size(1) is the batch size

        def forward(self, x):
            return self.gru(time_major(x))[0]

    torch.manual_seed(0)
    model = TimeMajor().double()
    gru = model.gru
    compiled = matchbox.compile(model, backend=BACKEND, bucket=None, fallback="raise")
    for lengths in ((5, 2), (5, 1, 4), (5, 5, 3, 2, 1)):
        xs = examples(lengths)
        xb = MaskedBatch.fromlist(xs, (True, False), padding_value=NAN)
        out = compiled(xb)
        for got, x in zip(out.batch.examples(), xs):
            torch.testing.assert_close(got, gru(x.transpose(0, 1))[0].transpose(0, 1))
    [spec] = compiled.specializations
    assert spec.summary.startswith("batch(B=*") and spec.fixed_sizes_because is None
