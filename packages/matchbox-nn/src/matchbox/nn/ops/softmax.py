"""``softmax``, ``log_softmax``, ``softmin`` and ``gumbel_softmax`` over one dimension.

Semantics (per example, the loop's):

- over a static dimension the positions of a row share one mask value (a mask
  has size one there), so each row is all real or all padding: the op runs
  on the data as is and padding only reaches padding;
- over a dynamic dimension only real positions count: padding is filled with
  ``-inf`` (it gets probability 0), and the result's padding is set to 0, so
  a row with no real position (an empty example, or a row of padding) is 0
  rather than ``0/0 = NaN``, forward and backward (the gradients that the NaN
  of such a row would send back land on padding only and are dropped by the
  fill);
- dimension 0 is each example's own batch dimension: a softmax over it would
  mix examples and is refused, naming the op and ``dim``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from matchbox.extending import MaskedBatch, example_dim, implements, only_input_batched, op_name

SOFTMAX_OPS = (F.softmax, torch.softmax, torch.Tensor.softmax, torch.special.softmax)
LOG_SOFTMAX_OPS = (F.log_softmax, torch.log_softmax, torch.Tensor.log_softmax,
                   torch.special.log_softmax)


def masked_softmax(op: str, x: MaskedBatch, dim: Any, dtype: Any = None, *,
                   log: bool = False, negate: bool = False) -> MaskedBatch:
    """(Log-)softmax of ``x`` (of ``-x`` with ``negate``) over real positions of ``dim``.

    The one implementation of the family; other families (losses, attention)
    call it for a softmax over a dynamic dimension.
    """
    d = example_dim(op, dim, x.dim())
    data = x.data if dtype is None else x.data.to(dtype)
    if negate:
        data = -data
    function = torch.log_softmax if log else torch.softmax
    mask = x._mask
    if mask is None or not x.dims[d - 1]:
        return MaskedBatch._make(function(data, d), mask, x.dims)
    filled = torch.where(mask, data, torch.full((), -math.inf, dtype=data.dtype,
                                                 device=data.device))
    out = torch.where(mask, function(filled, d), torch.zeros((), dtype=data.dtype,
                                                             device=data.device))
    return MaskedBatch._make(out, mask, x.dims)


@implements(*SOFTMAX_OPS, family="softmax")
def softmax(func, input, dim=None, dtype=None, *, _stacklevel=3):
    op = op_name(func)
    only_input_batched(op, input)
    return masked_softmax(op, input, dim, dtype)


@implements(*LOG_SOFTMAX_OPS, family="softmax")
def log_softmax(func, input, dim=None, dtype=None, *, _stacklevel=3):
    op = op_name(func)
    only_input_batched(op, input)
    return masked_softmax(op, input, dim, dtype, log=True)


@implements(F.softmin, family="softmax")
def softmin(func, input, dim=None, dtype=None, *, _stacklevel=3):
    op = op_name(func)
    only_input_batched(op, input)
    return masked_softmax(op, input, dim, dtype, negate=True)


@implements(F.gumbel_softmax, family="softmax")
def gumbel_softmax(func, logits, tau=1, hard=False, eps=1e-10, dim=-1):
    """Gumbel noise drawn for every position at once (independent per example).

    The random numbers differ from the loop's (one draw for the batch instead
    of one per example); the distribution is the same.  With ``hard`` the
    one-hot position is a real one (padding has probability 0).
    """
    op = op_name(func)
    only_input_batched(op, logits, tau=tau, hard=hard, eps=eps)
    d = example_dim(op, dim, logits.dim())
    gumbels = -torch.empty_like(logits.data).exponential_().log()
    noisy = MaskedBatch._make((logits.data + gumbels) / tau, logits._mask, logits.dims)
    soft = masked_softmax(op, noisy, d)
    if not hard:
        return soft
    index = soft.data.argmax(d, keepdim=True)
    one_hot = torch.zeros_like(soft.data).scatter_(d, index, 1.0)
    data = one_hot - soft.data.detach() + soft.data
    if soft._mask is not None and logits.dims[d - 1]:
        # A row without a real position put its one on padding: keep it 0.
        data = torch.where(soft._mask, data, torch.zeros((), dtype=data.dtype,
                                                         device=data.device))
    return MaskedBatch._make(data, soft._mask, soft.dims)
