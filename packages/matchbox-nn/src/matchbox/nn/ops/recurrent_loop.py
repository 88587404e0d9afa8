"""Whole recurrent modules as a masked loop over time, for a graph ``matchbox.compile`` captures.

Eager Matchbox runs ``nn.LSTM``/``nn.GRU``/``nn.RNN`` on a batch's real rows only, packed
(``recurrent_modules.run_packed``): PyTorch's packed kernel (cuDNN on CUDA) needs the
lengths on the host, which a captured graph cannot read (it must hold for any mask).
While a graph is captured the module runs instead as what a person writes for a padded
batch, with the module's own weights:

- each layer's input is multiplied by its input weights once, for every position;
- a loop over the padded positions (backwards for the reverse direction) steps the cell,
  and an example keeps its state where the position is past its end, so its final state
  is the state at its own last position (at its first, going backwards), and an empty
  example's is its initial state, as in the loop over examples;
- the loop is ``matchbox.compiler.loops.scan_steps``: one ``scan`` node in the graph
  where torch has it (so compiling does not grow with the length), else unrolled.

Padding is zeroed before it meets a weight, so NaN there reaches no output or gradient.
Values equal the packed kernel's up to rounding: the same formulas as PyTorch's cells
(gate order ``i, f, g, o`` for the LSTM, ``r, z, n`` for the GRU, ``proj_size`` as
``h @ w_hr.T``), one step at a time.  Dropout between layers (training) draws its own
numbers, as the packed call does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from matchbox.compiler import loop_steps, loops
from matchbox.extending import MaskedBatch, fill_padding

Step = Callable[..., tuple[torch.Tensor, ...]]


def run_masked(op: str, input: MaskedBatch, states: list[torch.Tensor],
               settings: tuple) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The padded output ``(B, T, D*H)`` and final ``(L*D, B, H)`` states of the module.

    ``states``: the initial states as plain ``(L*D, B, H)`` tensors (``h`` and, for an
    LSTM, ``c``); ``settings``: the op's arguments after them, up to ``bidirectional``.
    """
    params, has_biases, num_layers, dropout, train, bidirectional = settings
    cell = _CELLS[op.rsplit(".", 1)[-1]]
    directions = 2 if bidirectional else 1
    per_direction = len(params) // (num_layers * directions)
    data = fill_padding(input, 0, running=True)
    mask = _position_mask(input)
    finals: list[list[torch.Tensor]] = [[] for _ in states]
    for layer in range(num_layers):
        if layer and dropout and train:
            data = F.dropout(data, dropout, True)
        outputs = []
        for direction in range(directions):
            k = layer * directions + direction
            weights = params[k * per_direction:(k + 1) * per_direction]
            out, final = _run_direction(cell, data, mask, [s[k] for s in states], weights,
                                        has_biases, reverse=direction == 1)
            outputs.append(out)
            for kept, state in zip(finals, final):
                kept.append(state)
        data = torch.cat(outputs, -1) if directions == 2 else outputs[0]
    return data, [torch.stack(kept) for kept in finals]


def _position_mask(input: MaskedBatch) -> torch.Tensor | None:
    """``(B, T, 1)``: the positions each example has (``None``: every position is real)."""
    mask = input._mask
    if mask is None:
        return None
    return mask.expand(input.data.size(0), input.data.size(1), 1)


def _run_direction(cell: Step, data: torch.Tensor, mask: torch.Tensor | None,
                   state: list[torch.Tensor], weights: tuple, has_biases: bool,
                   reverse: bool) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    """One direction of one layer: its outputs ``(B, T, H)`` and final states."""
    w_ih, w_hh, *rest = weights
    b_ih, b_hh = (rest[0], rest[1]) if has_biases else (None, None)
    w_hr = rest[-1] if len(rest) % 2 else None  # an LSTM's projection (proj_size)
    inputs = F.linear(data, w_ih, b_ih)  # every position's input part, at once
    length = data.size(1)
    if length == 0:  # no step: the final states are the initial ones
        return inputs.new_zeros(data.size(0), 0, state[0].size(-1)), tuple(state)

    def step(item: tuple[Any, Any], *values: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x, here = item
        new = cell(x, values[:len(state)], w_hh, b_hh, w_hr)
        if here is not None:  # past its end an example keeps its state
            new = tuple(torch.where(here, n, old) for n, old in zip(new, values))
        return (*new, new[0])  # the state, then the step's output

    if not loops.available():
        # Unrolled (no scan: torch 2.3): a list of the positions, whose length is fixed
        # anyway.  (The slices below, unrolled, made inductor 2.3 fail to fuse the
        # bidirectional module's kernels: an AssertionError in its C++ fusion.)
        steps = list(zip(inputs.unbind(1), mask.unbind(1) if mask is not None
                         else [None] * length))
        final, emitted = loops.scan_steps(step, tuple(state), steps[::-1] if reverse else steps)
        outputs = [e[0] for e in emitted]
        return torch.stack(outputs[::-1] if reverse else outputs, 1), final

    def positions(take: loop_steps.Take) -> tuple[Any, Any]:
        return take(inputs, 1), (None if mask is None else take(mask, 1))

    # Slices of the positions, not a list of them: their number (the padded length) may
    # stay a symbol in a graph captured with symbolic sizes.  Backwards, step k reads
    # position length - 1 - k.
    final, (outputs,) = loops.scan_stacked(
        step, tuple(state), loop_steps.SlicedSteps(length, positions, backwards=reverse))
    outputs = outputs.movedim(0, 1)
    return (outputs.flip(1) if reverse else outputs), final


def _lstm(x: torch.Tensor, state: tuple, w_hh: torch.Tensor, b_hh: Any,
          w_hr: Any) -> tuple[torch.Tensor, ...]:
    h, c = state
    i, f, g, o = (x + F.linear(h, w_hh, b_hh)).chunk(4, -1)
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    h = o.sigmoid() * c.tanh()
    return (h if w_hr is None else F.linear(h, w_hr), c)


def _gru(x: torch.Tensor, state: tuple, w_hh: torch.Tensor, b_hh: Any,
         w_hr: Any) -> tuple[torch.Tensor, ...]:
    (h,) = state
    x_r, x_z, x_n = x.chunk(3, -1)
    h_r, h_z, h_n = F.linear(h, w_hh, b_hh).chunk(3, -1)
    r = (x_r + h_r).sigmoid()
    z = (x_z + h_z).sigmoid()
    n = (x_n + r * h_n).tanh()
    return ((1 - z) * n + z * h,)


def _rnn(activation: Callable[[torch.Tensor], torch.Tensor]) -> Step:
    def step(x: torch.Tensor, state: tuple, w_hh: torch.Tensor, b_hh: Any,
             w_hr: Any) -> tuple[torch.Tensor, ...]:
        (h,) = state
        return (activation(x + F.linear(h, w_hh, b_hh)),)
    return step


_CELLS: dict[str, Step] = {"lstm": _lstm, "gru": _gru, "rnn_tanh": _rnn(torch.tanh),
                           "rnn_relu": _rnn(torch.relu)}
