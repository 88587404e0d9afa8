"""``self.layers[k](h)``: a module of a ``ModuleList`` (a list or tuple of modules, an
``nn.Sequential``) chosen by a per-example int ``k``.

In the loop each example calls its own ``layers[k]``.  Under ``@batch`` the index is a
batch of one int per example, and ``layers[k]`` is a :class:`ChosenModule`: calling it runs
each module on the examples that chose it, as the chain ``if k == 0: y = layers[0](h)``
``elif k == 1: ...`` would (each module under the execution mask of its examples, the
results merged per example: values and gradients as the loop's, parameters included).
Modules no running example chose do not run.  A running example whose ``k`` is out of
range raises ``IndexError`` as the loop does; a chosen module can only be called (its
attributes differ between examples).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from matchbox.control.runtime.masks import _MASK, branch, guard, masked
from matchbox.control.runtime.select import Undefined, merge, user_line
from matchbox.extending import fails
from matchbox.masked_batch import MaskedBatch


def is_module_list(obj: Any) -> bool:
    """A container of modules that an int indexes: ``ModuleList``, ``Sequential``, or a list
    or tuple whose items are all modules."""
    if isinstance(obj, (nn.ModuleList, nn.Sequential)):
        return True
    return (type(obj) in (list, tuple) and len(obj) > 0
            and all(isinstance(m, nn.Module) for m in obj))


def choose(modules: Any, index: MaskedBatch) -> ChosenModule:
    """``modules[index]`` for a batch ``index`` of one int per example."""
    if index.dims or index.data.numel() != index.data.size(0) or (
            index.dtype.is_floating_point or index.dtype.is_complex or index.dtype == torch.bool):
        raise TypeError(
            f"@batch: {type(modules).__name__} indices must be integers, one per example; got "
            f"a batch of {index.dtype} with dims {index.dims} ({user_line()})")
    modules = list(modules)
    n = len(modules)
    k = index.data.reshape(-1)
    running = _MASK.get()
    outside = (k >= n) | (k < -n)
    if index._mask is not None:
        outside = outside & index._mask.reshape(-1)
    if running is not None:
        outside = outside & running
    line = user_line()  # now: a deferred check makes the error later, elsewhere

    def error() -> IndexError:
        j = int(outside.nonzero()[0])
        return IndexError(f"index {int(k[j])} is out of range for example {j}: the list of "
                          f"modules has {n} ({line})")

    if fails(outside, error):
        raise error()
    real = None if index._mask is None else index._mask.reshape(-1)
    return ChosenModule(modules, torch.where(k < 0, k + n, k), real, line)


class ChosenModule:
    """Each example's own module of ``modules`` (its index in ``k``): see the module."""

    __slots__ = ("_modules", "_k", "_real", "_line")

    def __init__(self, modules: list[Any], k: torch.Tensor, real: torch.Tensor | None,
                 line: str):
        self._modules, self._k, self._real, self._line = modules, k, real, line

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from matchbox.control.runtime.calls import call  # (it imports this module)

        outer = _MASK.get()
        result: Any = Undefined("result")
        for j, module in enumerate(self._modules):
            then, _ = branch(outer, MaskedBatch._make(self._k == j, self._real, ()))
            if then is False:
                continue  # no running example chose it
            inputs = [guard(then, outer, a) for a in args]
            named = {name: guard(then, outer, v) for name, v in kwargs.items()}
            with masked(then, outer):
                value = call(module, *inputs, **named)
            result = merge(then, outer, value, result, f"layers[k]({type(module).__name__})")
        return result

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"@batch: '{name}' of a module chosen by a per-example index ({self._line}): each "
            f"example has its own module, so it can only be called (layers[k](h)); read "
            f"attributes of each module (layers[0].{name}) instead")
