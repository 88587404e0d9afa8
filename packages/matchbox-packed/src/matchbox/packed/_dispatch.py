"""How PackedBatch ops are registered and dispatched (the mixing rule's packed side).

Every handler of ``PackedBatch`` is registered through :func:`implements`,
into matchbox-core's one registry under the batch type ``"PackedBatch"``.
The wrapper it installs applies the mixing rule before the handler runs: a
call that also holds a ``MaskedBatch`` is handed to ``MaskedBatch``'s
dispatch, which converts the packed arguments (the conversion is registered
with core by ``matchbox.packed.mixing``).  So ``packed + masked``,
``torch.add(packed, masked)`` and ``packed.add(masked)`` give what
``masked + packed`` gives: a ``MaskedBatch``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from matchbox import _registry
from matchbox._autograd_function import grad_enabled, refuse_untracked
from matchbox.masked_batch import MaskedBatch
from matchbox.nn.packing import gather_padded
from matchbox.ops.pointwise import _writes_first_argument

BATCH_TYPE = "PackedBatch"


def meets_masked(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a ``MaskedBatch`` is among the arguments (one level into lists and tuples)."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, MaskedBatch):
            return True
        if isinstance(value, (list, tuple)) and any(isinstance(v, MaskedBatch) for v in value):
            return True
    return False


def hand_to_masked(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run ``func`` through ``MaskedBatch``'s dispatch; it converts the packed arguments.

    An in-place op on a packed batch (``packed.add_(masked)``) runs on the
    masked copy of it that the conversion made; the batch then holds that
    copy's rows, so that it changes as each example would in the loop.  (Its
    data tensor is replaced, not written: autograd may have saved the old one.)
    """
    # The types say that other batch types are present (PyTorch passes the
    # overloaded argument types), which is what makes MaskedBatch convert them.
    result = MaskedBatch.__torch_function__(func, _registry.batch_types(), args, kwargs)
    target = args[0] if args else kwargs.get("input")
    # (By name: the PackedBatch class imports this module.)
    if type(target).__name__ == BATCH_TYPE and (
            _writes_first_argument(func) or kwargs.get("inplace")):
        target.data = gather_padded(result.data, target.layout)
        return target
    return result


def implements(*funcs: Any, family: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated handler for ``PackedBatch`` under the mixing rule."""

    def decorator(handler: Callable[..., Any]) -> Callable[..., Any]:
        def dispatch(func: Any, *args: Any, **kwargs: Any) -> Any:
            if not grad_enabled():  # an autograd.Function's forward would lose the gradient
                refuse_untracked(func, args)
            if meets_masked(args, kwargs):
                return hand_to_masked(func, args, kwargs)
            return handler(func, *args, **kwargs)

        factory = getattr(handler, "method_factory", None)
        if factory is not None:
            # A faster method per op, falling back to the mixing rule's dispatch.
            dispatch.method_factory = (  # type: ignore[attr-defined]
                lambda func: factory(func, dispatch))
        dispatch.__name__ = handler.__name__
        dispatch.__doc__ = handler.__doc__
        _registry.register(funcs, dispatch, family=family, batch_type=BATCH_TYPE)
        return handler

    return decorator


def unsupported(func: Any) -> NotImplementedError:
    """The error for an op without a ``PackedBatch`` handler: names it and the way out."""
    error = _registry.unsupported(func, BATCH_TYPE)
    return NotImplementedError(
        f"{error.args[0]}; convert the batch with matchbox.packed.as_masked(x) (or "
        "x.to_masked()) to use MaskedBatch's ops"
    )
