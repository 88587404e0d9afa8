"""A batch handed to a custom ``torch.autograd.Function`` (reentrant checkpointing).

``torch.utils.checkpoint.checkpoint(f, x, use_reentrant=True)`` runs ``f``
inside the ``forward`` of an ``autograd.Function``, which autograd connects to
the graph through its *tensor* arguments only, with gradients disabled.  A
batch is not a tensor: ``f``'s ops on it would run without gradients, and the
result would carry none back to the batch or to the parameters ``f`` uses,
while the loop over examples (plain tensors) trains them.  Added to a path
that does carry gradients (``checkpoint(block, x) + x``), that is a silently
wrong gradient.

PyTorch offers no hook at the call (``autograd.Function.apply`` does not look
at ``__torch_function__``, and changing torch's functions is not an option), so
the first batch op inside such a ``forward`` refuses: while gradients are
disabled and a batch argument requires grad, :func:`refuse_untracked` looks up
the stack for the ``forward`` of an ``autograd.Function`` and names it.
``use_reentrant=False`` runs ``f`` with gradients enabled and works on batches.

The ops call :func:`refuse_untracked` only when ``grad_enabled()`` is false: one
C call on the hot path, the scan and the stack walk only without gradients.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from matchbox._op_table import kind_of_class, op_name

#: ``torch.is_grad_enabled``, for the ops' hot paths.
grad_enabled = torch.is_grad_enabled

# How many frames up from an op a Function's forward is looked for: every nn.Module
# level adds about three (__call__, _call_impl, forward), and the first op on an
# argument is seldom deeper than a few levels into the Function's function.
_DEPTH = 64


def refuse_untracked(op: Any, values: Any) -> None:
    """Raise if a batch among ``values`` that requires grad meets an op inside the
    ``forward`` of an ``autograd.Function`` (call only while gradients are disabled).

    ``values`` is the op's arguments (lists and tuples one level deep are looked
    into, as ``torch.cat`` takes them); ``op`` names the op in the error.
    """
    if not any(_requires_grad(v) for v in values):
        return
    function = _enclosing_function(sys._getframe(1))
    if function is None:
        return
    name = op if isinstance(op, str) else op_name(op)
    if _is_reentrant_checkpoint(function):
        raise RuntimeError(
            f"{name}: torch.utils.checkpoint with use_reentrant=True was given a batch; its "
            "autograd.Function tracks only tensor arguments, so the checkpointed function would "
            "run without gradients and its result would carry none back to the batch or to the "
            "parameters it uses (the loop over examples trains them); pass "
            "use_reentrant=False, which works on batches"
        )
    raise RuntimeError(
        f"{name}: the torch.autograd.Function {function.__qualname__} was given a batch that "
        "requires grad; an autograd.Function tracks only tensor arguments, so its result "
        "would carry no gradient back to the batch; give it the batch's tensors (x.data, "
        "x.mask) and rebuild the batch from its result, or run the batch ops outside it"
    )


def _requires_grad(value: Any) -> bool:
    # A batch is an instance of a registered batch type (or of a view of one): the
    # table below the base class says so, without importing it (it imports this module).
    if kind_of_class(type(value)) is not None:
        return bool(value.requires_grad)
    if type(value) is list or type(value) is tuple:
        return any(kind_of_class(type(v)) is not None and v.requires_grad for v in value)
    return False


def _enclosing_function(frame: Any) -> type | None:
    """The ``autograd.Function`` whose ``forward`` is on the stack above ``frame``."""
    for _ in range(_DEPTH):
        if frame is None:
            return None
        code = frame.f_code
        if code.co_name == "forward" and code.co_argcount:
            ctx = frame.f_locals.get(code.co_varnames[0])
            if isinstance(ctx, torch.autograd.function.FunctionCtx):
                return getattr(type(ctx), "_forward_cls", type(ctx))
        frame = frame.f_back
    return None


def _is_reentrant_checkpoint(function: type) -> bool:
    checkpoint = sys.modules.get("torch.utils.checkpoint")
    return checkpoint is not None and function is getattr(checkpoint, "CheckpointFunction", None)
