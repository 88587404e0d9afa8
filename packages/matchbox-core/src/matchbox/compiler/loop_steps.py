"""A loop's steps as :func:`matchbox.compiler.loops.scan_steps` takes them.

A scan needs each step's input twice: one step at a time for the steps it runs
unrolled (peeled), and the remaining steps stacked along a new first dimension, for
``scan`` to slice.  Two kinds of steps give both:

- :class:`ListedSteps`, a Python list (``x.unbind(1)``, the steps of a ``range``): its
  length is a number, so a graph captured over it holds only for that many steps;
- :class:`SlicedSteps`, the slices of tensors along one dimension, not taken apart:
  step ``k`` is made with ``select(d, k)``, the steps from ``k`` on with one
  ``narrow``.  The number of steps is the dimension's size, which stays a symbol
  while :mod:`matchbox.compiler.symbolic` captures a graph: one graph then serves
  every length (``matchbox-control``'s ``for xt in x.unbind(1)``, ``matchbox-nn``'s
  recurrent modules).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from matchbox.compiler import loop_state
from matchbox.compiler.loop_state import NotStructured

#: ``take(tensor, dim)``: the part of ``tensor`` along ``dim`` that a step (or a stack
#: of steps, along a new first dimension) reads.
Take = Callable[[torch.Tensor, int], torch.Tensor]


class ListedSteps:
    """The steps of a list: ``items[k]``, each one structure of tensors and batches."""

    def __init__(self, items: list[Any]):
        self.items = list(items)
        self.length = len(self.items)

    def __getitem__(self, k: int) -> Any:
        return self.items[k]

    def listed(self, start: int) -> list[Any]:
        """The steps from ``start`` on, one by one (to run unrolled)."""
        return self.items[start:]

    def stacked(self, start: int) -> tuple[Any, list[torch.Tensor]]:
        """The structure of one step, and each of its tensors for the steps from ``start``
        on, stacked along a new first dimension (contiguous: given a strided view of
        ``x`` whose steps lie along dimension 1, inductor's loop (torch 2.13, CPU) copied
        all of it at every step, quadratic in the length)."""
        structure, per_step = _leaves_of(self.items[start:])
        return structure, [stacked([leaves[i] for leaves in per_step]).contiguous()
                           for i in range(len(per_step[0]))]


class SlicedSteps:
    """The steps of slices along one dimension: ``make(take)`` builds a step's input
    from the parts ``take`` cuts out of the tensors it reads (each along its own
    dimension).  ``length``: the number of steps (an int, or a symbolic size);
    ``backwards``: step ``k`` is the slice at ``length - 1 - k``."""

    def __init__(self, length: Any, make: Callable[[Take], Any], backwards: bool = False):
        self.length = length
        self.make = make
        self.backwards = backwards

    def __getitem__(self, k: int) -> Any:
        at = self.length - 1 - k if self.backwards else k
        return self.make(lambda t, d: t.select(d, at))

    def listed(self, start: int) -> list[Any]:
        # (A symbolic length becomes a number here: the graph then holds for this one.)
        return [self[k] for k in range(start, self.length)]

    def stacked(self, start: int) -> tuple[Any, list[torch.Tensor]]:
        count = self.length - start
        leaves: list[torch.Tensor] = []
        if self.backwards:
            def take(t: torch.Tensor, d: int) -> torch.Tensor:
                return t.narrow(d, 0, count).flip(d).movedim(d, 0)
        else:
            def take(t: torch.Tensor, d: int) -> torch.Tensor:
                return t.movedim(d, 0).narrow(0, start, count)
        structure = loop_state.flatten(self.make(take), leaves)
        return structure, [t.contiguous() for t in leaves]


Steps = ListedSteps | SlicedSteps


def as_steps(steps: Any) -> Steps:
    return steps if isinstance(steps, (ListedSteps, SlicedSteps)) else ListedSteps(steps)


def length_inputs(length: Any, device: torch.device) -> list[torch.Tensor]:
    """An empty tensor whose shape holds the symbolic size a scan's length is computed
    from (``T`` for ``T - 2`` steps), as one more input of the scan, which its body does
    not read.  Inductor's lowering of a scan (``decompose_scan_to_while_loop``, torch
    2.13) rebuilds the shapes of its per-step outputs from the symbols among the scan's
    inputs (TorchDynamo lifts those of its tensor inputs' shapes), and failed
    (``KeyError``) on a length that is an expression of a symbol no input holds."""
    if not isinstance(length, torch.SymInt):
        return []
    return [torch.empty(0, length, device=device)]


def _leaves_of(items: list[Any]) -> tuple[Any, list[list[torch.Tensor]]]:
    """The structure of the steps' inputs (one for all) and each step's tensors."""
    per_step: list[list[torch.Tensor]] = []
    structure = None
    for item in items:
        leaves: list[torch.Tensor] = []
        s = loop_state.flatten(item, leaves)
        if structure is None:
            structure = s
        elif s != structure:
            raise NotStructured("the loop's steps differ in structure")
        per_step.append(leaves)
    return structure, per_step


def stacked(parts: list[torch.Tensor]) -> torch.Tensor:
    """``torch.stack(parts)``; as one view of their base when they are its consecutive
    slices along one dimension (the steps of ``x.unbind(1)``, rows of a mask), so that the
    graph does not grow with the steps.  Plain views (``movedim``, ``narrow``), whose
    backward passes are those of every other view."""
    first, base = parts[0], parts[0]._base
    if len(parts) > 1 and base is not None:
        step = parts[1].storage_offset() - first.storage_offset()
        for j in range(base.dim()):
            if (base.stride(j) != step or step <= 0
                    or base.shape[:j] + base.shape[j + 1:] != first.shape
                    or base.stride()[:j] + base.stride()[j + 1:] != first.stride()):
                continue
            offset = first.storage_offset() - base.storage_offset()
            start, rest = offset // step, offset % step  # (divmod refuses symbolic sizes)
            if rest or start + len(parts) > base.size(j) or not all(
                    p._base is base and p.shape == first.shape and p.stride() == first.stride()
                    and p.storage_offset() == first.storage_offset() + k * step
                    for k, p in enumerate(parts)):
                break
            return base.movedim(j, 0).narrow(0, start, len(parts))
    return torch.stack(parts)
