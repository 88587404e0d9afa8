"""A merge keeps the gradient history of what it merges, under the user's ``no_grad``.

In the loop over examples an assignment is Python's: after ``with torch.no_grad(): if c:
y = h`` (or a ``return h`` in the block, or a loop's ``h`` that an example leaves
unchanged) the name refers to the tensor itself, with its history, and the gradient
reaches what ``h`` was computed from.  Under ``@batch`` the merge at the end of the region
is an op (``where(mask, new, old)``): run with gradients off it cut that history, and the
gradient was zero for every example, silently (a user trial).  So ``select.merge`` and
``select.select`` run with gradients on where the user turned them off: a value computed
under ``no_grad`` requires no grad and adds nothing to the graph; one computed outside keeps
its history for the examples that hold it, as in the loop.  For the same reason a
region under ``no_grad`` guards the gradients of what it reads (``masks.guard``): the
region may turn gradients on again (``with torch.enable_grad(): h = h.sqrt()``), and the
examples that do not run it sent NaN into the gradient of ``h``.

Not in inference mode (its tensors cannot join a graph): there a merge of a value with
history (``with torch.inference_mode(): if c: y = h``, ``h`` computed outside the block
with gradients) is refused, naming the variable, since the batch's ``y`` would have none
where the loop's is ``h`` itself (its gradient was lost, silently where ``y`` then met
``h`` in an op that saves neither, ``matchbox.functional.stack``).  Nor while Matchbox runs
its own ops with gradients off in a compiled loop (``matchbox.compiler.grad_mode.own_no_grad``:
the user did not turn them off).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch

from matchbox.masked_batch import MaskedBatch


def wanted(*merged: Any) -> bool:
    """Whether a merge run now, with gradients off, must turn them on (see the module);
    ``merged`` (with the variable's name last): refused in inference mode where one of
    them has gradient history."""
    if torch.is_inference_mode_enabled():
        if merged and any(_has_history(v) for v in merged[:-1]):
            raise NotImplementedError(
                f"@batch: '{merged[-1]}' is merged in torch.inference_mode() with a value "
                "that has gradient history (computed outside the block): in the loop over "
                "examples the name refers to that tensor, with its history, but a merge run "
                "in inference mode makes a tensor without any (its gradient would be lost); "
                "use torch.no_grad() for the block, whose merges keep the history, or merge "
                "a detached value (h.detach())")
        return False
    grad_mode = sys.modules.get("matchbox.compiler.grad_mode")  # (imported by a capture)
    return grad_mode is None or not grad_mode.in_own_no_grad()


def run(merge: Callable[..., Any], *args: Any) -> Any:
    """``merge(*args)`` with gradients on."""
    with torch.enable_grad():
        return merge(*args)


def _has_history(value: Any) -> bool:
    """Whether ``value`` (a batch, a tensor, a tuple/list/dict of them) was computed with
    gradients (has a ``grad_fn``: a parameter itself, chosen in evaluation code, is not
    refused); by its type only (an unassigned variable's marker answers nothing else)."""
    kind = type(value)
    if kind is MaskedBatch:
        return value._data.grad_fn is not None
    if issubclass(kind, torch.Tensor):
        return value.grad_fn is not None
    if kind is tuple or kind is list:
        return any(_has_history(v) for v in value)
    if kind is dict:
        return any(_has_history(v) for v in value.values())
    return False
