"""Whole recurrent modules (``nn.RNN``, ``nn.LSTM``, ``nn.GRU``) on batches, packed.

How a module call reaches this file: ``nn.LSTM.forward`` (likewise ``nn.RNN``
and ``nn.GRU``) asks the input for ``dim()``, ``size(0)`` (the batch size, with
``batch_first=True``), ``size(-1)``, ``dtype`` and ``device``, builds zero
initial states of that batch size when none are given, checks the states'
sizes, then calls ``torch.lstm`` / ``torch.gru`` / ``torch.rnn_tanh`` /
``torch.rnn_relu`` (the ``_VF`` functions) with the input, the states and its
own flat weights.  A ``MaskedBatch`` answers those questions honestly (the
batch size, the static feature size), and the ``_VF`` call reaches
``MaskedBatch.__torch_function__``, which dispatches here.  Nothing in torch
is changed.

Semantics (the oracle is the loop calling the same module on each example):

| argument / result | per example                      | on the batch                                   |
|-------------------|----------------------------------|------------------------------------------------|
| input             | ``(1, T, F)``, ``T`` may differ  | ``MaskedBatch``, dims ``(True, False)``         |
| initial states    | ``(L*D, 1, H)``                  | a state view (below), a plain ``(L*D, 1, H)`` tensor (every example's own, broadcast), or a plain ``(L*D, B, H)`` tensor in the batch's order |
| output            | ``(1, T, D*H)``                  | ``MaskedBatch`` with the input's mask           |
| final states      | ``(L*D, 1, H)``                  | state views: ``TimeMajorBatch`` of a ``MaskedBatch`` of ``(1, L*D, H)`` examples |
| ``T == 0``        | PyTorch refuses                  | output ``(1, 0, D*H)``; final = initial         |

A state of one example has its batch dimension in position 1, which a
``MaskedBatch`` (batch in dimension 0) cannot hold, so the batch's states are
a ``MaskedBatch`` of ``(1, L*D, H)`` examples (static, no mask) seen through
the time-major view (``matchbox.nn.time_major``) as ``(L*D, B, H)``.
Per-example code on states runs unchanged: ``h[-1]`` is a ``MaskedBatch`` of
``(1, H)`` examples, ``torch.cat([h[-2], h[-1]], 1)``, ``h.squeeze(0)``,
``h.transpose(0, 1)`` (the ``MaskedBatch``), ``h.size(1)`` (the batch size
the modules check), pointwise ops, ``detach()``, and passing states back in
(``lstm(x2, (h, c))``).  Initial states are taken as such views (the final
states of a module, or ``h0.transpose(0, 1)`` / ``h0.unsqueeze(0)`` of a
batch of per-example states), or as plain ``(L*D, B, H)`` tensors in the
batch's order (what a ``PackedSequence`` input takes).  A view's example that
is not real (its batch's mask, of size one in these static dimensions, says
so) starts from zeros and its final states are not real either.

Only real rows are computed: the real rows are gathered into PyTorch's
packed layout (``matchbox.nn.packing``: one ``index_select`` for the batch),
the module's own flat weights run through the packed variant of the op
(cuDNN on CUDA), and the result is scattered back into the input's padded
layout.  Padding is never read, so NaN there reaches neither outputs nor
gradients.  PyTorch cannot pack an empty sequence, so zero-length examples
are sorted last and left out of the packed call; their output is empty and
their final state is their initial state (the natural continuation: no step
was taken).  ``run_on_rows`` is that packed call; matchbox-packed's
``PackedBatch``, whose data is already in the packed layout, calls it directly.

``batch_first``: a ``MaskedBatch`` is always batch-major, so it goes to a
module built with ``batch_first=True``.  A ``batch_first=False`` module reads
dimension 1 of its input as the batch; for such a module, per-example code
passes ``matchbox.nn.time_major(x)`` (``x.transpose(0, 1)`` on a tensor, a
time-major view of a batch, see ``time_major.py``).

Dropout between layers (``dropout > 0`` in training) draws an independent mask
for every packed row, so examples get independent masks, but the random
numbers differ from the loop's; in eval mode it is off and the loop is exact.
"""

from __future__ import annotations

from typing import Any

import torch

from matchbox.extending import (
    MaskedBatch,
    capturing,
    combine_masks,
    fill_padding,
    guard_gradient,
    implements,
    op_name,
    weight_input_data,
)
from matchbox.nn import packing
from matchbox.nn.ops import recurrent_loop
from matchbox.nn.time_major import TimeMajorBatch

RECURRENT_MODULE_OPS = (torch.rnn_tanh, torch.rnn_relu, torch.lstm, torch.gru)


@implements(*RECURRENT_MODULE_OPS, family="recurrent_modules")
def recurrent_module(func, input, hx, params, has_biases, num_layers, dropout, train,
                     bidirectional, batch_first):
    op = op_name(func)
    check_batch_first(op, batch_first, input)
    return run_packed(op, func, input, hx, (params, has_biases, num_layers, dropout, train,
                                            bidirectional))


@implements(*RECURRENT_MODULE_OPS, family="recurrent_modules",
            batch_type="TimeMajorBatch")
def recurrent_module_time_major(func, input, hx, params, has_biases, num_layers, dropout,
                                train, bidirectional, batch_first):
    op = op_name(func)
    if not isinstance(input, TimeMajorBatch):
        # A batch-major input with state views reaches the views' dispatch first only
        # if it is not a batch (a plain tensor): the states hold examples, it does not.
        raise TypeError(f"{op}: the initial states are per-example state views but the input "
                        f"is a {type(input).__name__}; pass the batch of inputs")
    if batch_first:
        unbatched = ("" if input.batch.dims[0] or input.batch.size(1) != 1 else
                     "; examples of shape (1, features) are unbatched one-step sequences to "
                     "the module, which unsqueezes dimension 0 (the batch dimension): give "
                     "them as (1, 1, features), x.unsqueeze(1)")
        raise ValueError(
            f"{op}: the module has batch_first=True but its input is a time-major view; "
            f"pass the batch itself (time_major(x) is for batch_first=False modules){unbatched}"
        )
    # The view's batch runs as a batch_first module would run it (its own batch
    # type's handler: MaskedBatch here, PackedBatch in matchbox-packed).
    output, *states = func(input.batch, hx, params, has_biases, num_layers, dropout, train,
                           bidirectional, True)
    return (TimeMajorBatch(output), *states)


def check_batch_first(op: str, batch_first: bool, input: Any) -> None:
    """A batch (not a time-major view) goes to a ``batch_first=True`` module only."""
    if not batch_first:
        raise ValueError(
            f"{op}: the module has batch_first=False, so it reads dimension 1 of its "
            f"input as the batch, but a {type(input).__name__} is batch-major (examples of "
            "shape (1, length, features)); build the module with batch_first=True, or call "
            "it on matchbox.nn.time_major(x)"
        )


def run_packed(op: str, func: Any, input: Any, hx: Any, settings: tuple) -> tuple:
    """``func`` on the real rows of ``input``: ``(output batch, *final state views)``.

    ``settings`` are the op's arguments after the states, up to ``bidirectional``.
    """
    _check_input(op, input)
    if capturing() is not None:
        # A captured graph cannot read the lengths packing needs: a masked loop instead.
        states, real = initial_states(op, hx, input.data.size(0))
        out, final = recurrent_loop.run_masked(op, input, states, settings)
        return (_output(out, input), *final_states(final, real))
    data = weight_input_data(input)
    if input._mask is None and data.size(1) > 0:
        # Every example has the padded length: there is no padding to skip, so the
        # dense op is the packed op.
        states, real = initial_states(op, hx, data.size(0))
        result = func(data, _as_hx(hx, states), *settings, True)
        return (_output(result[0], input), *final_states(result[1:], real))
    refuse_under_functorch(op)
    # A static length (dims (False, False)) may still carry a mask, of size one there
    # (from a reduction, or marking examples that are not real): expand it first.
    lengths = input.mask.expand(data.size(0), data.size(1), 1).reshape(
        data.size(0), data.size(1)).sum(1)
    layout = packing.Layout.from_lengths(lengths.cpu(), data.device)
    rows = packing.gather_padded(data, layout)
    out_rows, final = run_on_rows(op, func, rows, layout, hx, settings)
    out = packing.scatter_padded(out_rows, layout, data.size(1))
    return (_output(out, input), *final)


def _output(out: torch.Tensor, input: MaskedBatch) -> MaskedBatch:
    """The module's padded output ``(B, T, D*H)`` as a batch with the input's mask; under
    ``@batch``, no gradient at the examples not running."""
    return MaskedBatch._make(guard_gradient(out, None), input._mask, input.dims)


def refuse_under_functorch(op: str, batch: str = "a MaskedBatch of examples of different "
                           "lengths", convert: str = "") -> None:
    """PyTorch's packed-sequence kernel has no ``torch.func`` support: say so, and what works."""
    if torch._C._functorch.peek_interpreter_stack() is None:
        return
    module = {"lstm": "LSTM", "gru": "GRU"}.get(op.rsplit(".", 1)[-1], "RNN")
    raise NotImplementedError(
        f"{op} (nn.{module}) on {batch} under a "
        "torch.func transform (grad, vjp, vmap, ...): it runs PyTorch's packed-sequence "
        "kernel (as pack_padded_sequence does), which PyTorch cannot run under torch.func "
        "('Cannot access data pointer of Tensor that doesn't have storage', without "
        "Matchbox too). Take gradients with torch.autograd.grad or loss.backward() "
        f"instead, or {convert}step an nn.{module}Cell over the sequence in a loop under "
        "@matchbox.batch, which works under torch.func.grad")


def run_on_rows(op: str, func: Any, rows: torch.Tensor, layout: packing.Layout, hx: Any,
                settings: tuple) -> tuple[torch.Tensor, list[TimeMajorBatch]]:
    """The packed variant of ``func`` on rows in the packed layout (one call, cuDNN on CUDA).

    ``hx`` holds the initial states (state views, or plain ``(L*D, B, H)``
    tensors in the caller's order); returns the output rows (same layout) and
    the final states as views, in the caller's order.  Examples of length zero
    take the last slots and no row: they are left out of the call and keep
    their initial states (no step was taken).
    """
    states, real = initial_states(op, hx, layout.batch_size)
    running = layout.n_running
    if running == 0:
        return _no_rows(rows, settings), final_states(states, real)
    sorted_states = [s.index_select(1, layout.sorted_indices) for s in states]
    # cuDNN refuses a strided hx ("rnn: hx is not contiguous"): leaving out the empty
    # examples slices dimension 1, so the running part is made contiguous.
    running_states = [s[:, :running].contiguous() for s in sorted_states]
    result = func(rows, layout.batch_sizes, _as_hx(hx, running_states), *settings)
    final = list(result[1:])
    if running < layout.batch_size:
        final = [torch.cat([s, s0[:, running:]], 1) for s, s0 in zip(final, sorted_states)]
    return result[0], final_states([s.index_select(1, layout.unsorted_indices) for s in final],
                                   real)


def _no_rows(rows: torch.Tensor, settings: tuple) -> torch.Tensor:
    # No example takes a step: no output rows.
    params, bidirectional = settings[0], settings[-1]
    # Every layer's first hidden-to-hidden weight is (gates * H, H_out), with
    # H_out the projection size when there is one: the output's width per direction.
    width = (2 if bidirectional else 1) * params[1].size(1)
    return rows.new_zeros(0, width)


def _as_hx(hx: Any, states: list[torch.Tensor]) -> Any:
    return tuple(states) if isinstance(hx, (tuple, list)) else states[0]


# ---------------------------------------------------------------------------- states


def final_states(states: Any, real: torch.Tensor | None) -> list[TimeMajorBatch]:
    """PyTorch's ``(L*D, B, H)`` states as views whose examples are the loop's ``(L*D, 1, H)``.

    ``real``: the mask of examples whose initial states were real (``None``: all).
    """
    # Under @batch, the states of examples not running the region get no gradient.
    return [TimeMajorBatch(MaskedBatch._make(guard_gradient(s.transpose(0, 1), None),
                                             real, (False, False)))
            for s in states]


def initial_states(op: str, hx: Any, batch_size: int) -> tuple[list[torch.Tensor],
                                                                 torch.Tensor | None]:
    """``hx`` as PyTorch's plain ``(L*D, B, H)`` states, and which examples' states are real.

    A state view gives its batch's data transposed (no copy); an example that
    is not real there starts from zeros, never from its padding.
    """
    states, masks = [], []
    for s in (list(hx) if isinstance(hx, (tuple, list)) else [hx]):
        if isinstance(s, torch.Tensor):
            # A plain (L*D, 1, H) state is every example's own (a learned start state):
            # broadcast, its gradient the sum of the examples' (the module let it through
            # its size check: see matchbox._sizes.BatchSize).
            shared = s.dim() == 3 and s.size(1) == 1 and batch_size != 1
            # (contiguous: cuDNN refuses a strided hx)
            states.append(s.expand(-1, batch_size, -1).contiguous() if shared else s)
            continue
        batch = _state_batch(op, s, batch_size)
        states.append(fill_padding(batch, running=True).transpose(0, 1))
        masks.append(batch._mask)
    return states, combine_masks(masks)


def _state_batch(op: str, state: Any, batch_size: int) -> MaskedBatch:
    if isinstance(state, MaskedBatch):
        raise TypeError(
            f"{op}: an initial state is a MaskedBatch of examples {_example(state)}; a state of "
            "one example is (layers * directions, 1, hidden), with its batch dimension in "
            "position 1: pass h0.transpose(0, 1) (or h0.unsqueeze(0) for examples (1, hidden)), "
            "as per-example code does, or a plain (layers * directions, batch, hidden) tensor "
            "in the batch's order"
        )
    batch = state.batch if isinstance(state, TimeMajorBatch) else None
    if not isinstance(batch, MaskedBatch) or any(batch.dims):
        raise TypeError(
            f"{op}: initial states must be state views (the final states of a recurrent "
            "module, or a MaskedBatch of (1, layers * directions, hidden) examples transposed "
            "with .transpose(0, 1)) or plain (layers * directions, batch, hidden) tensors; got "
            f"{state!r}"
        )
    if batch.size(0) != batch_size:
        raise ValueError(f"{op}: the initial states hold {batch.size(0)} examples but the "
                         f"input holds {batch_size}")
    return batch


def _example(batch: MaskedBatch) -> str:
    sizes = ["*" if d else str(batch.data.size(i)) for i, d in enumerate(batch.dims, 1)]
    return f"({', '.join(['1', *sizes])})"


def _check_input(op: str, input: Any) -> None:
    if not isinstance(input, MaskedBatch):
        raise TypeError(
            f"{op}: the input must be the MaskedBatch (or a PackedBatch); got "
            f"{type(input).__name__}"
        )
    if input.dims not in ((True, False), (False, False)):
        raise ValueError(
            f"{op}: each example must be (1, length, features) with a static feature "
            f"dimension (dims (True, False)); got dims {input.dims}"
        )
