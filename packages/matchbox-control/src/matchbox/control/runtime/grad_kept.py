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

Not in inference mode (its tensors cannot join a graph), nor while Matchbox runs its own
ops with gradients off in a compiled loop (``matchbox.compiler.grad_mode.own_no_grad``:
the user did not turn them off).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch


def wanted() -> bool:
    """Whether a merge run now, with gradients off, must turn them on (see the module)."""
    if torch.is_inference_mode_enabled():
        return False
    grad_mode = sys.modules.get("matchbox.compiler.grad_mode")  # (imported by a capture)
    return grad_mode is None or not grad_mode.in_own_no_grad()


def run(merge: Callable[..., Any], *args: Any) -> Any:
    """``merge(*args)`` with gradients on."""
    with torch.enable_grad():
        return merge(*args)
