"""Ops run with gradients off (``torch.no_grad()``, ``torch.set_grad_enabled(False)``)
inside a captured call.

``make_fx`` records ops below autograd: the graph holds an op run under ``no_grad`` like
any other, and AOTAutograd, deriving the graph's backward from its ops, sent gradients
through it (a target computed under ``no_grad`` from the input gave the input twice its
gradient; a weight's copy made under ``no_grad`` passed gradient to the weight).  While
capturing, :class:`NoGradDetaches` sees each op at dispatch, where the grad mode the
user set is still visible: an op run with gradients off reads its arguments that
require grad through a ``detach`` recorded in the graph, which is what eager autograd
did (it recorded nothing to differentiate).

Not inside the ``forward`` of an ``autograd.Function`` (matchbox-core's own, for
``amax`` and ``var``: autograd runs it with gradients off, and the graph differentiates
its ops, as before), nor for an in-place op (it must write its argument itself).

A user's own ``autograd.Function`` given a tensor that requires grad (a straight-through
``round``, a gradient reversal) cannot be captured: the graph holds its forward's ops,
not its ``backward``, so the gradient would be the forward's derivative (zero through a
``round``).  Its first op refuses the capture, and the call runs eagerly (or raises,
``fallback="raise"``).  Reentrant checkpointing's Function (whose backward is its
forward's derivative) is captured as before."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map_only

from matchbox._autograd_function import _enclosing_function, _is_reentrant_checkpoint
from matchbox._capture import NotCapturable


def _detached(t: torch.Tensor) -> torch.Tensor:
    return t.detach() if t.requires_grad else t


def _requires_grad(t: torch.Tensor) -> bool:
    return t.requires_grad


class _Own(threading.local):
    """Whether this thread runs Matchbox's own ops with gradients off (:func:`own_no_grad`)."""

    on = False


_OWN = _Own()


@contextlib.contextmanager
def own_no_grad() -> Iterator[None]:
    """``torch.no_grad()`` for Matchbox's own ops in a capture (a loop's scan is run with
    gradients off, below autograd, its first carries made there): the user did not turn
    gradients off, so :class:`NoGradDetaches` leaves those ops as they are (detached,
    a recurrent module's state views carried into a scan lost their gradient)."""
    before, _OWN.on = _OWN.on, True
    try:
        with torch.no_grad():
            yield
    finally:
        _OWN.on = before


def in_own_no_grad() -> bool:
    """Whether gradients are off now because Matchbox turned them off
    (:func:`own_no_grad`), not the user."""
    return _OWN.on


class NoGradDetaches(TorchDispatchMode):
    """While capturing with gradients on: an op run with them off reads detached copies
    of its arguments that require grad (see the module's docstring)."""

    # A higher-order op (a loop captured as a scan) passes through unchanged.
    supports_higher_order_operators = True

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if (not torch.is_grad_enabled() and not _OWN.on
                and isinstance(func, torch._ops.OpOverload)
                and not func._schema.is_mutable
                and any(_requires_grad(t) for t in _tensors((args, kwargs)))):
            function = _enclosing_function(sys._getframe(1))
            if function is None:
                args, kwargs = tree_map_only(torch.Tensor, _detached, (args, kwargs))
            elif not (function.__module__.startswith("matchbox.")
                      or _is_reentrant_checkpoint(function)):
                raise NotCapturable(
                    f"the torch.autograd.Function {function.__qualname__} is given a tensor "
                    "that requires grad: a graph holds its forward's ops, not its backward, "
                    "so its gradient would be the forward's derivative, not its own")
        return func(*args, **kwargs)


def _tensors(tree: Any) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    tree_map_only(torch.Tensor, found.append, tree)
    return found


def capture_grad_mode() -> Any:
    """:class:`NoGradDetaches` where the capture runs with gradients on (else there is
    nothing to detach: every op runs with them off, as the graph's runs will)."""
    return NoGradDetaches() if torch.is_grad_enabled() else contextlib.nullcontext()
