"""A slice's copy in a scan's body as a slice that inductor fuses, not an ATen call each
step (:func:`settings`).

Torch derives a scan's backward from its body's joint graph, functionalized with
``remove="mutations_and_views"`` (``torch/_higher_order_ops/partitioner.py``): every view
in the body, forward and backward, becomes its copy.  Inductor's decompositions turn most
of those copies back into a view and a ``clone`` (``permute_copy``, ``t_copy``,
``narrow_copy``, ...), which it fuses into the kernels that read them, but not
``slice_copy``: it has neither a decomposition nor a lowering, so inductor fell back to
ATen for it, at every step of the loop (in the C++ wrapper through the dispatcher,
``aoti_torch_call_dispatcher("aten::slice_copy")``; torch 2.13 warns
"aten.slice_copy.Tensor is missing a c-shim implementation").  A body's slices are
everywhere: the pieces of a ``chunk`` (:mod:`matchbox.compiler.split_views` writes them as
slices), and the backward of every ``cat``.  The TreeLSTM's step made 9 such calls in its
forward and 4 in its backward, each allocating a tensor and copying into it.

Decomposed as ``slice(...).clone()`` (the refs' ``_make_copy_from_view`` form, which
inductor's own table uses for the other view copies), the copy holds the same values and
inductor reads it in the kernel that consumes it.  The decomposition is added to
inductor's table only while a graph holding a scan is called (and so compiled): the table
is torch's, shared by every ``torch.compile`` in the process, and other graphs keep it as
it was.
"""

from __future__ import annotations

from typing import Any

import torch

aten = torch.ops.aten


def slice_copy(x: torch.Tensor, dim: int = 0, start: Any = None, end: Any = None,
               step: Any = 1) -> torch.Tensor:
    """``aten.slice_copy.Tensor`` as the slice's contiguous copy (the values ATen's gives)."""
    return aten.slice.Tensor(x, dim, start, end, step).clone(
        memory_format=torch.contiguous_format)


class _Decomposition:
    """``on``: whether inductor's decomposition tables hold :func:`slice_copy` (set and
    restored by :func:`matchbox.compiler.graph.with_settings`)."""

    @staticmethod
    def _tables() -> list[dict[Any, Any]]:
        from torch._inductor import decomposition

        # select_decomp_table() is one of these two, per inductor's fallback_random setting
        # (a cached dict: the same object at every compile).
        return [decomposition.decompositions, decomposition.fast_random_decomps()]

    @property
    def on(self) -> bool:
        return all(table.get(aten.slice_copy.Tensor) is slice_copy for table in self._tables())

    @on.setter
    def on(self, value: bool) -> None:
        for table in self._tables():
            if value:
                table.setdefault(aten.slice_copy.Tensor, slice_copy)
            elif table.get(aten.slice_copy.Tensor) is slice_copy:
                del table[aten.slice_copy.Tensor]


_DECOMPOSITION = _Decomposition()


def available() -> bool:
    """Whether this torch's inductor keeps its decompositions where they can be added to
    (torch 2.13 does; a torch that lowers ``slice_copy`` itself needs none)."""
    try:
        from torch._inductor import decomposition
        from torch._inductor.lowering import lowerings
    except ImportError:
        return False
    return (aten.slice_copy.Tensor not in lowerings
            and isinstance(getattr(decomposition, "decompositions", None), dict)
            and callable(getattr(decomposition, "fast_random_decomps", None)))


def settings() -> list[tuple[Any, str, Any]]:
    """The ``(object, name, value)`` settings under which a graph holding a scan compiles
    with its slices' copies fused (none where this torch needs or allows none)."""
    return [(_DECOMPOSITION, "on", True)] if available() else []
