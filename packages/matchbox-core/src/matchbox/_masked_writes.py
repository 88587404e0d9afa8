"""In-place writes into a batch under an execution mask: only the running examples change.

Under a per-example condition (``@batch``'s ``if``, a loop whose examples stop at
different steps) every op runs on every example, and what the examples that do not
run the code compute is discarded (``matchbox._execution``).  An op that writes into
its first argument in place (``relu_``, ``F.relu(h, inplace=True)``, ``h += v``,
``h[i] = v``) cannot be discarded afterwards: in the loop over examples the others'
values never change.  So the dispatch runs such an op on a copy of the batch
(:func:`in_place_copy`) and writes the copy's values back for the running examples
only (:func:`write_running`), wherever the op is called from: a ``@batch`` function,
a plain helper it calls, a module (``nn.ReLU(inplace=True)``).

The write-back is itself in place, ``data.copy_(where(running, new, data))``: every
alias of the batch and every view of its data (another batch made by ``x[:, 0]`` or
``x.view(...)``) sees it, and autograd records it, as PyTorch records the op in the
loop (the running examples' gradient flows through the op, the others' around it).
Inside a region a batch may be a gradient guard of the one its name held before
(``_guards``, set by matchbox-control): the write reaches that batch too, and the one
it guards in turn, as Python writes into the object itself.  A batch that is a copy
standing for a view (``matchbox._copies``: ``x[:, j]``, a view in the loop) is refused,
or, for one position per example, written back into the batch it was read from
(``ops/one_position_writes``).
"""

from __future__ import annotations

from typing import Any

import torch

from matchbox import _lengths
from matchbox._copies import WRITE_BACK, is_copy, refuse_in_place
from matchbox._execution import EXECUTION_MASK, mask_and, mask_view_for, same_mask

#: ``[None]``, or ``[watch]``: ``watch(target, mask, name)`` is called before every in-place
#: write into a batch, masked (:func:`write_running`, ``mask`` the running examples) or
#: not (the dispatch, ``mask`` None), with the batch written (before those it guards) and
#: the op's name.  matchbox-control sets it (``runtime.copies``) to refuse a write that
#: would not reach a copy the loop over examples holds as that very tensor; once set it
#: stays, and answers at once where its context has nothing recorded.
WRITE_WATCH: list[Any] = [None]


def watch_writes(watch: Any) -> None:
    """Make ``watch`` the watcher of in-place writes into batches (:data:`WRITE_WATCH`)."""
    WRITE_WATCH[0] = watch


def in_place_copy(target: Any) -> Any:
    """A batch with a copy of ``target``'s data (same mask and dims) for an in-place op to
    write into; it keeps ``target``'s refusal of in-place ops (``_not_a_view``)."""
    copy = type(target)._make(target.data.clone(), target._mask, target.dims)
    copy._not_a_view = is_copy(target)
    return copy


def write_running(target: Any, new: Any, mask: torch.Tensor | None = None,
                  name: str = "the batch") -> Any:
    """Write ``new`` into the batch ``target`` for the running examples, in place.

    ``mask``: the running examples, ``(batch,)`` bool (default: the execution mask,
    ``matchbox.extending.EXECUTION_MASK``; ``None`` there: every example).  ``new`` has
    ``target``'s dims and padded shape (an in-place op's result, or the same op out of
    place).  The write reaches every alias and view of ``target``'s data, and the
    batches ``target`` stands for inside a ``@batch`` region (see the module
    docstring).  Returns ``target``.
    """
    if mask is None:
        mask = EXECUTION_MASK.get()
    if WRITE_WATCH[0] is not None:
        WRITE_WATCH[0](target, mask, name)
    through = _written_through(target, name)
    # ``new`` is read as any batch is (``MaskedBatch.data`` applies a region's deferred
    # gradient guard); the batches written are written as they are: a deferred guard of
    # theirs stays deferred, and applies to the written data when they are read.
    written = target
    done: list[torch.Tensor] = []
    while written is not None:
        write_into(written, new, mask, name, done)
        written = getattr(written, "_guards", None)
    for batch, source in through:
        WRITE_BACK[2](batch, source)
    return target


def _written_through(target: Any, name: str) -> list[tuple[Any, Any]]:
    """The batches of ``target``'s chain that are copies standing for views: refused
    (``matchbox._copies``), unless one position per example was read (``x[:, j]``, a
    record of where), which the write then reaches too (``ops/one_position_writes``):
    ``(batch, the batch it was read from)``, one per batch read."""
    found: list[tuple[Any, Any]] = []
    written = target
    while written is not None:
        mark = getattr(written, "_not_a_view", None)
        if type(mark) is tuple:
            if not any(mark[0]() is source for _, source in found):
                found.append((written, WRITE_BACK[1](written, name)))
        elif mark or is_copy(written):
            refuse_in_place(name, written)
        written = getattr(written, "_guards", None)
    return found


def write_into(target: Any, new: Any, mask: torch.Tensor | None, name: str,
               done: list[torch.Tensor] | None = None) -> None:
    """``target`` (one batch, not those it guards) takes ``new``'s values for the examples
    in ``mask``; ``done``: data tensors written already (a guard that still shares its
    data with the batch it guards is written once)."""
    data = target._data  # as it is: a region's deferred guard stays deferred (above)
    if new.dims != target.dims or new.data.shape != data.shape:
        raise ValueError(
            f"an in-place update of {name} under a per-example condition would change its "
            f"shape from {_shape(target)} to {_shape(new)}; examples that do not run the "
            "code keep their shape, and a batch holds one per dimension: write it out of "
            "place (y = ...) so that each example keeps its own value")
    rows = None
    if isinstance(mask, torch.Tensor):
        rows = mask_view_for(mask, data.size(0), data.dim())
        if rows is None:
            raise ValueError(
                f"{name} holds {data.size(0)} examples but the code runs on a batch of "
                f"{mask.size(0)}")
    if rows is None:
        chosen, merged_mask = None, new._mask
    else:
        chosen, merged_mask = _chosen(rows, mask, new, target)
    if done is None or not any(data is d for d in done):  # a guard sharing it: written
        _write_data(target, new.data, chosen)
        if done is not None:
            done.append(data)
    target._mask = merged_mask


def _write_data(target: Any, source: torch.Tensor, chosen: torch.Tensor | None) -> None:
    """``target.data`` takes ``source`` where ``chosen`` (everywhere for ``None``), in place:
    aliases and views see it, autograd records it."""
    data = target._data
    if source.dtype != data.dtype and not torch.can_cast(source.dtype, data.dtype):
        raise RuntimeError(f"result type {_type_name(source)} can't be cast to the desired "
                           f"output type {_type_name(data)}")  # PyTorch's in-place error
    if not _writable(data):  # expanded data (one row for every example): a new tensor
        merged = source if chosen is None else torch.where(chosen, source, data)
        target.data = merged.to(data.dtype)
    elif chosen is None:
        data.copy_(source)
    elif torch.is_grad_enabled() and (data.requires_grad or source.requires_grad):
        data.copy_(torch.where(chosen, source, data))
    else:
        torch.where(chosen, source, data, out=data)  # nothing to record: one kernel


def _type_name(tensor: torch.Tensor) -> str:
    """PyTorch's name of a dtype in its errors (``Float``, ``Long``)."""
    return torch.empty(0, dtype=tensor.dtype).type().removeprefix("torch.").removesuffix(
        "Tensor")


def _chosen(rows: torch.Tensor, mask: torch.Tensor, new: Any, old: Any
            ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Where the result takes ``new``'s values, and its mask: ``new``'s for the running
    examples (``rows``), ``old``'s for the others.  With static dims only (one mask entry
    per example) an example whose new value is padding keeps its old one, as a merge in
    ``@batch`` does (``matchbox.functional.update``'s rule), without a where on masks."""
    real = new._mask
    if real is old._mask:
        return rows, real
    if not any(old.dims):
        chosen = rows if real is None or same_mask(rows, real) else mask_and(rows, real)
        return chosen, None if old._mask is None else chosen | old._mask
    merged = torch.where(rows, new.mask, old.mask)
    if _lengths.any_carried((new, old)):
        merged = _lengths.selected(merged, rows.reshape(-1), new, old)
    return rows, merged


def _writable(data: torch.Tensor) -> bool:
    """Whether ``data`` can be written in place: no position shares memory with another
    (an expanded tensor's do)."""
    return all(stride or size < 2 for stride, size in zip(data.stride(), data.shape))


def _shape(batch: Any) -> str:
    sizes = ["*" if d else str(n) for d, n in zip(batch.dims, batch._data.shape[1:])]
    return f"(1, {', '.join(sizes)})" if sizes else "(1,)"
