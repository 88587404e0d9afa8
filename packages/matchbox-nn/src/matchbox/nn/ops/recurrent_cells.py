"""Recurrent cells (``nn.RNNCell``, ``nn.LSTMCell``, ``nn.GRUCell``) on batches.

Semantics: one step of every example at once; the new state is real where
both the input step and the state are real (an example whose sequence has
ended gets padding, which ``matchbox.functional.update`` or ``@batch``
then ignores).  The cell mixes rows into the weight gradients, so padding rows
are zeroed first and their gradients dropped (core's mixing rule).  A plain
``(1, hidden)`` state beside a batch (a learned start state,
``torch.zeros(1, hidden)``) is every example's own state, as a plain tensor is
in a pointwise op: it is broadcast to every example (``expand``), and its
gradient is the sum of the examples', as in the loop.
"""

from __future__ import annotations

from typing import Any

import torch

from matchbox.extending import (
    MaskedBatch,
    combine_masks,
    fill_padding,
    guard_gradient,
    implements,
    op_name,
)


def _rows(x: Any, batch: int) -> Any:
    """The rows a cell reads: a batch's with padding zeroed, a plain state's for every
    example (a view: the gradients of the examples add up in it)."""
    if isinstance(x, MaskedBatch):
        return fill_padding(x, 0, running=True)
    return x.expand(batch, -1) if x.size(0) != batch else x


def _step_layout(op: str, inputs: list[Any]) -> tuple[torch.Tensor | None, tuple[bool, ...], int]:
    """The result's mask and dims, and the batch size."""
    masks, batch = [], None
    for x in inputs:
        if isinstance(x, MaskedBatch):
            if x.dims != (False,):
                raise ValueError(
                    f"{op}: each example's input and state must be (1, features) with a "
                    f"static feature dimension; got dims {x.dims}"
                )
            masks.append(x._mask)
            batch = x.data.size(0)
    for x in inputs:
        if isinstance(x, torch.Tensor) and (x.dim() != 2 or x.size(0) != 1) and x.size(0) != batch:
            raise ValueError(
                f"{op}: a plain tensor beside a batch is every example's own, so its shape "
                f"must be one example's, (1, features); got {tuple(x.shape)}")
    # A state real for every example (no mask) leaves the input's mask as it is.
    return combine_masks(masks), (False,), batch


@implements(torch.rnn_tanh_cell, torch.rnn_relu_cell, family="recurrent")
def rnn_cell(func, input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    op = op_name(func)
    mask, dims, batch = _step_layout(op, [input, hx])
    h = func(_rows(input, batch), _rows(hx, batch), w_ih, w_hh, b_ih, b_hh)
    return MaskedBatch._make(guard_gradient(h, mask), mask, dims)


@implements(torch.gru_cell, family="recurrent")
def gru_cell(func, input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    return rnn_cell(func, input, hx, w_ih, w_hh, b_ih, b_hh)


@implements(torch.lstm_cell, family="recurrent")
def lstm_cell(func, input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    op = op_name(func)
    h, c = hx
    mask, dims, batch = _step_layout(op, [input, h, c])
    h_new, c_new = func(_rows(input, batch), (_rows(h, batch), _rows(c, batch)), w_ih, w_hh,
                        b_ih, b_hh)
    return (MaskedBatch._make(guard_gradient(h_new, mask), mask, dims),
            MaskedBatch._make(guard_gradient(c_new, mask), mask, dims))
