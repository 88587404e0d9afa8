"""The per-example oracle of whole recurrent modules, shared by every batch type's tests.

The loop calls the same module on each example ``(1, T, F)``.  PyTorch refuses
``T == 0``; Matchbox's documented semantics for such an example (empty output,
final state = initial state) are written out in ``per_example``.

PyTorch's batched states are ``(L*D, B, H)``; the loop's are ``(L*D, 1, H)`` per
example.  The tests hand the loop's states around as ``(1, L*D, H)`` examples
(batch first) and the batch's as a MaskedBatch of them, and transpose at the
module boundary, so mb_assert compares "the batch's states" with "torch.cat of
the loop's states along dimension 1", values and gradients.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import torch

from matchbox import MaskedBatch
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


def state_sizes(module):
    """(rows, size of h, size of c or None): rows = layers * directions."""
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
    assert type(out) is type(xb)
    return out, from_module_states(final, batched=True)


def run(module, x, *states):
    states = list(states) or None
    if isinstance(x, torch.Tensor):
        return per_example(module, x, states)
    return on_batch(module, x, states)


def examples_of_lengths(lengths, dtype, width=FEATURES):
    return [torch.randn(1, n, width, dtype=dtype) for n in lengths]


def state_examples(module, batch_size, dtype):
    rows, h, c = state_sizes(module)
    sizes = [h] + ([c] if c else [])
    return [[torch.randn(1, rows, size, dtype=dtype) for _ in range(batch_size)]
            for size in sizes]


def check(module: Any, lengths: list[int], dtype: torch.dtype, with_states: bool,
          make_batch: Callable[[list[torch.Tensor]], Any]) -> None:
    """The module on the batch ``make_batch`` builds equals the loop, values and gradients."""
    xs = examples_of_lengths(lengths, dtype)
    xs_args, xb_args = [xs], [make_batch(xs)]
    if with_states:
        for examples in state_examples(module, len(lengths), dtype):
            xs_args.append(examples)
            xb_args.append(MaskedBatch.fromlist(examples, (False, False)))
    mb_assert(lambda x, *s: run(module, x, *s), xs_args, xb_args, len(lengths),
              params=list(module.parameters()))
