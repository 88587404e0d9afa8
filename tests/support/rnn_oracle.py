"""The per-example oracle of whole recurrent modules, shared by every batch type's tests.

The loop calls the same module on each example ``(1, T, F)``.  PyTorch refuses
``T == 0``; Matchbox's documented semantics for such an example (empty output,
final state = initial state) are written out in ``per_example``.

States: one example's state is ``(L*D, 1, H)``; a batch's final states are
views whose examples are exactly those (``TimeMajorBatch``), and ``mb_assert``
compares a view's ``examples()`` with the loop's states, values and gradients.
Initial states are drawn per example as ``(1, L*D, H)`` tensors (a batch
holds them as a ``MaskedBatch``) and handed to the module with the
per-example code ``h0.transpose(0, 1)``: on a batch, that is the state view.
``plain_states=True`` hands the batch PyTorch's plain ``(L*D, B, H)`` tensor
instead (the documented alternative, in the batch's order).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from hypothesis import strategies as st
from torch import nn

from matchbox import MaskedBatch, _registry
from matchbox.nn import TimeMajorBatch, batch_major, time_major
from matchbox.testing import mb_assert

FEATURES, HIDDEN, PROJ = 3, 4, 2
KINDS = ["rnn_tanh", "rnn_relu", "lstm", "lstm_proj", "gru"]


def torchs_message(call: Callable[[Any], Any], example: torch.Tensor) -> str:
    """What PyTorch raises for ``call`` on one example, as a pattern (releases word the
    same check differently: the batch must raise what the installed one says)."""
    with pytest.raises((RuntimeError, ValueError)) as raised:
        call(example)
    return re.escape(str(raised.value))


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


def op_call(module, x, hx):
    """The module's op (``torch.gru``, ``torch.rnn_tanh``, ...) called directly with its
    weights and options, not training: past the checks of the module's ``forward``."""
    op = getattr(torch, module.mode.lower())
    return op(x, hx, module._flat_weights, module.bias, module.num_layers, module.dropout,
              False, module.bidirectional, module.batch_first)


def state_sizes(module):
    """(rows, size of h, size of c or None): rows = layers * directions."""
    rows = module.num_layers * (2 if module.bidirectional else 1)
    h = module.proj_size or module.hidden_size
    c = module.hidden_size if isinstance(module, torch.nn.LSTM) else None
    return rows, h, c


def as_plain(state):
    """A state view as PyTorch's plain (L*D, B, H) tensor (a tensor stays as it is)."""
    return state.batch.data.transpose(0, 1) if isinstance(state, TimeMajorBatch) else state


def module_states(states, plain=False):
    """Per-example initial states (1, L*D, H) -> what the module takes: ``h0.transpose(0, 1)``."""
    if not states:
        return None
    hx = [s.transpose(0, 1) for s in states]
    if plain:
        hx = [as_plain(s) for s in hx]
    return hx[0] if len(hx) == 1 else tuple(hx)


def per_example(module, x, states):
    """One example through the module: the loop's side of the oracle."""
    rows, h, c = state_sizes(module)
    if x.size(1) == 0:
        # PyTorch refuses an empty sequence; Matchbox's semantics: no step taken.
        width = (2 if module.bidirectional else 1) * h
        if not states:
            states = [x.new_zeros(1, rows, h)] + ([x.new_zeros(1, rows, c)] if c else [])
        final = [s.transpose(0, 1) for s in states]
        return x.new_zeros(1, 0, width), final[0] if len(final) == 1 else tuple(final)
    return module_call(module, x, states)


def call(module, x, hx=None):
    """``module(x, hx)``, as user code writes it; in the loop an empty example gets
    Matchbox's semantics (PyTorch refuses it), so user models can take length 0."""
    if isinstance(x, torch.Tensor) and x.size(1 if module.batch_first else 0) == 0:
        states = None if hx is None else [
            s.transpose(0, 1) for s in (hx if isinstance(hx, tuple) else (hx,))]
        out, final = per_example(module, x if module.batch_first else x.transpose(0, 1),
                                 states)
        return (out if module.batch_first else out.transpose(0, 1)), final
    return module(x, hx)


def module_call(module, x, states, plain=False):
    """The module on ``x`` as per-example code calls it: (output (1, T, D*H), final states)."""
    hx = module_states(states, plain)
    if module.batch_first:
        return module(x, hx)
    out, final = module(time_major(x), hx)
    return batch_major(out), final


def run(module, x, *states, plain=False):
    if isinstance(x, torch.Tensor):
        return per_example(module, x, list(states))
    out, final = module_call(module, x, list(states), plain)
    assert type(out) is type(x)
    finals = final if isinstance(final, tuple) else (final,)
    assert all(isinstance(s, TimeMajorBatch) for s in finals)
    return out, final


def examples_of_lengths(lengths, dtype, width=FEATURES):
    return [torch.randn(1, n, width, dtype=dtype) for n in lengths]


def state_examples(module, batch_size, dtype):
    """Per-example initial states, (1, L*D, H) each (batch first, so a batch can hold them)."""
    rows, h, c = state_sizes(module)
    sizes = [h] + ([c] if c else [])
    return [[torch.randn(1, rows, size, dtype=dtype) for _ in range(batch_size)]
            for size in sizes]


def check(module: Any, lengths: list[int], dtype: torch.dtype, with_states: bool,
          make_batch: Callable[[list[torch.Tensor]], Any], plain_states: bool = False) -> None:
    """The module on the batch ``make_batch`` builds equals the loop, values and gradients.

    Compared: the output, every final state (a view's examples against the
    loop's ``(L*D, 1, H)``), and the gradients of the inputs, of the initial
    states and of the module's parameters.
    """
    xs = examples_of_lengths(lengths, dtype)
    xs_args, xb_args = [xs], [make_batch(xs)]
    if with_states:
        for examples in state_examples(module, len(lengths), dtype):
            xs_args.append(examples)
            xb_args.append(MaskedBatch.fromlist(examples, (False, False)))
    mb_assert(lambda x, *s: run(module, x, *s, plain=plain_states), xs_args, xb_args,
              len(lengths), params=list(module.parameters()))


# ---------------------------------------------------------------------------- every batch type
# The cases each batch type's tests run on its own batches, built by ``make_batch``
# (a list of examples -> the batch).

# The ops of the recurrent_modules family that KINDS reaches (nn.RNN's two nonlinearities,
# LSTM, GRU): an op newly registered in the family must be added to KINDS.
RECURRENT_MODULE_OPS = {"torch.rnn_tanh", "torch.rnn_relu", "torch.lstm", "torch.gru"}


def registered_ops(batch_type: str) -> set[str]:
    return {e.name for e in _registry.entries(batch_type) if e.family == "recurrent_modules"}


# Initial states: none, state views of per-example states, or PyTorch's plain tensor.
STATES = ["zero", "views", "plain"]


def check_states(module: Any, lengths: list[int], dtype: torch.dtype, states: str,
                 make_batch: Callable[[list[torch.Tensor]], Any]) -> None:
    """``check`` with the initial states ``states`` names (one of STATES)."""
    check(module, lengths, dtype, states != "zero", make_batch, plain_states=states == "plain")


# A random module (layers, directions, layout, dtype, seed of its weights) on random
# lengths, with random initial states: the keyword arguments of ``check_random_module``.
RANDOM_MODULES = st.fixed_dictionaries(dict(
    lengths=st.lists(st.integers(0, 6), min_size=1, max_size=5), layers=st.integers(1, 2),
    bidirectional=st.booleans(), batch_first=st.booleans(), states=st.sampled_from(STATES),
    double=st.booleans(), seed=st.integers(0, 2**16)))


def check_random_module(make_batch, kind, lengths, layers, bidirectional, batch_first, states,
                        double, seed):
    torch.manual_seed(seed)
    dtype = torch.float64 if double else torch.float32
    module = make_module(kind, layers, bidirectional, batch_first, dtype)
    check_states(module, lengths, dtype, states, make_batch)


# Lengths at the edges, for a two-layer bidirectional module of each kind.
EDGE_LENGTHS = pytest.mark.parametrize(
    "lengths", [[0], [0, 0, 0], [1], [5], [3, 3, 3], [0, 4, 0, 1]],
    ids=["one-empty", "all-empty", "one-step", "batch-of-one", "no-padding", "empties-between"])


def check_edge_lengths(make_batch, kind, lengths, states, dtype):
    module = make_module(kind, layers=2, bidirectional=True, dtype=dtype)
    check_states(module, lengths, dtype, states, make_batch)


def check_plain_start_state(make_batch, kind, lengths, layers, bidirectional, batch_first,
                            dtype):
    """A learned ``(layers * directions, 1, hidden)`` h0 (and c0) beside a batch: every
    example starts from it, and its gradient is the sum of the examples', as in the loop.

    ``kind`` is nn.RNN, nn.LSTM or nn.GRU.  PyTorch refuses an empty sequence, the batch
    does not (see the edge lengths): the other examples are compared with the loop.
    """
    module = kind(FEATURES, HIDDEN, num_layers=layers, bidirectional=bidirectional,
                  batch_first=batch_first).to(dtype)
    n = layers * (2 if bidirectional else 1)
    h0, c0 = torch.randn(n, 1, HIDDEN, dtype=dtype), torch.randn(n, 1, HIDDEN, dtype=dtype)
    xs = [torch.randn(1, length, FEATURES, dtype=dtype) for length in lengths]
    xs = [x for x in xs if x.size(1)]
    if not xs:
        return

    def run(x, h, c):
        x = x if batch_first else time_major(x)
        out, state = module(x, (h, c) if kind is nn.LSTM else h)
        return (out if batch_first else batch_major(out)), state

    mb_assert(run, [xs, [h0] * len(xs), [c0] * len(xs)], [make_batch(xs), h0, c0], len(xs))


# Lengths of a source and a target per example (0 and 1 included).
LENGTHS = st.lists(st.integers(0, 5), min_size=1, max_size=5)


@st.composite
def source_and_target_lengths(draw):
    source = draw(LENGTHS)
    return source, draw(st.lists(st.integers(0, 5), min_size=len(source),
                                 max_size=len(source)))


def check_model(model, lengths, make_batches, dtype=torch.float64):
    """``model(*inputs)`` on batches equals the loop; input ``i`` has examples of
    ``lengths[i]`` batched by ``make_batches[i]``."""
    xs_args = [examples_of_lengths(ls, dtype) for ls in lengths]
    mb_assert(model, xs_args, [make(xs) for make, xs in zip(make_batches, xs_args)],
              len(lengths[0]))


# ---------------------------------------------------------------------------- user models
# Per-example models that use the final states, for one example (1, T, F).


class Classifier(nn.Module):
    """The most common pattern: classify from the last layer's final state, h[-1]."""

    def __init__(self, kind="lstm", layers=2, bidirectional=False, classes=3):
        super().__init__()
        self.rnn = make_module(kind, layers, bidirectional)
        width = (2 if bidirectional else 1) * (self.rnn.proj_size or HIDDEN)
        self.fc = nn.Linear(width, classes).double()

    def forward(self, x, label):
        _, h = call(self.rnn, x)
        h = h[0] if isinstance(h, tuple) else h               # (L*D, 1, H)
        if self.rnn.bidirectional:
            feature = torch.cat([h[-2], h[-1]], 1)            # both directions, (1, 2H)
        else:
            feature = h[-1]                                    # (1, H)
        return F.cross_entropy(self.fc(feature), label, reduction="sum")


class Seq2Seq(nn.Module):
    """Encoder final states -> decoder initial states (as seq2seq models pass them)."""

    def __init__(self, kind="lstm", layers=2):
        super().__init__()
        self.encoder = make_module(kind, layers)
        self.decoder = make_module(kind, layers)
        self.decoder.load_state_dict({k: v + 0.1 for k, v in self.encoder.state_dict().items()})
        self.out = nn.Linear(self.decoder.proj_size or HIDDEN, 2).double()

    def forward(self, source, target):
        _, state = call(self.encoder, source)
        out, final = call(self.decoder, target, state)
        return self.out(out), final


class BridgedSeq2Seq(nn.Module):
    """A bidirectional GRU encoder; its two last states, through a layer, start a decoder."""

    def __init__(self):
        super().__init__()
        self.encoder = make_module("gru", layers=2, bidirectional=True)
        self.bridge = nn.Linear(2 * HIDDEN, HIDDEN).double()
        self.decoder = make_module("gru")

    def forward(self, source, target):
        _, h = call(self.encoder, source)                               # (4, 1, H)
        h0 = torch.tanh(self.bridge(torch.cat([h[-2], h[-1]], 1))).unsqueeze(0)  # (1, 1, H)
        out, h = call(self.decoder, target, h0)
        return out, h.squeeze(0)                                         # (1, H)


def labels_for(n):
    ys = [torch.randint(0, 3, (1,)) for _ in range(n)]
    return ys, MaskedBatch.fromlist(ys, ())


def check_classifier(make_batch, kind, bidirectional, lengths):
    """``Classifier`` on a batch of examples of ``lengths`` equals the loop."""
    xs = examples_of_lengths(lengths, torch.float64)
    ys, yb = labels_for(len(lengths))
    mb_assert(Classifier(kind, bidirectional=bidirectional), [xs, ys], [make_batch(xs), yb],
              len(lengths))
