"""The layout of a ``MaskedBatch`` as tensors, below the class: masks made from lengths
(:func:`mask_from_lengths`, :func:`full_mask`), constant padding (:func:`constant_pad`),
the record that padding holds zeros (:func:`mark_zero_padding`), the one row a plain
tensor expanded to the batch size stands for (:func:`expanded_row`), and the checks of a
layout and of a list of examples (:func:`validate_layout`, :func:`check_examples`).

A batch here is anything with ``data`` and ``_mask``; ``matchbox.masked_batch``
re-exports the public names, their documented address.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from matchbox import _lengths

if TYPE_CHECKING:
    from matchbox.masked_batch import MaskedBatch


def mask_from_lengths(
    lengths: torch.Tensor, shape: Sequence[int], dims: tuple[bool, ...]
) -> torch.Tensor:
    """The mask of a batch of the given padded shape and per-example ``lengths``.

    ``lengths`` is ``(batch, n_dynamic)``: one column per dynamic dimension.
    """
    rank = len(shape)
    mask = torch.ones([shape[0]] + [1] * (rank - 1), dtype=torch.bool, device=lengths.device)
    column = 0
    for i, dynamic in enumerate(dims, start=1):
        if dynamic:
            view = [shape[0]] + [1] * (rank - 1)
            view[i] = shape[i]
            positions = torch.arange(shape[i], device=lengths.device)
            along = positions.unsqueeze(0) < lengths[:, column].unsqueeze(1)
            mask = mask & along.reshape(view)
            column += 1
    return mask


def full_mask(data: torch.Tensor, dims: tuple[bool, ...]) -> torch.Tensor:
    """The mask of a batch without padding (every example has the padded size, which
    the mask carries as lengths if it is 0 in one dynamic dimension and not another)."""
    shape = [data.size(0)] + [data.size(i) if d else 1 for i, d in enumerate(dims, start=1)]
    mask = torch.ones(shape, dtype=torch.bool, device=data.device)
    sizes = [n for n, d in zip(shape[1:], dims) if d]
    if 0 in sizes and any(sizes):
        mask = _lengths.carry(mask, torch.tensor([sizes] * shape[0], device=data.device))
    return mask


def constant_pad(tensor: torch.Tensor, pads: Sequence[int], value: Any = 0) -> torch.Tensor:
    """``F.pad(tensor, pads, value=value)`` (constant mode, pads >= 0), also where the
    result is empty in a padded dimension.

    Examples empty in part give such results (``fromlist`` of a ``(1, 0, 0)`` example
    beside a ``(1, 0, 1)`` one), and torch 2.3 refuses to pad into them ("resulted in a
    negative output size"); a result with no elements is the tensor itself reshaped,
    which keeps it in the autograd graph.
    """
    if tensor.numel() == 0:
        shape = list(tensor.shape)
        for i in range(len(pads) // 2):
            shape[-1 - i] += pads[2 * i] + pads[2 * i + 1]
        if 0 in shape:
            return tensor.reshape(shape)
    return torch.nn.functional.pad(tensor, list(pads), value=value)


def mark_zero_padding(batch: MaskedBatch, mask: torch.Tensor | None = None) -> None:
    """Record that every padding position of ``batch.data`` holds zero, as of now.

    ``fill_padding(batch, 0)`` then returns the data as it is (a product with a
    weight needs no ``where`` for a batch built with ``padding_value=0``).  The
    record holds only while the batch keeps this data tensor and this mask and
    nothing has written into the data (its version counter, which views share,
    has not moved).  Writes that bypass the version counter (through
    ``Tensor.data`` or a NumPy view) are not seen: write into ``batch.data``
    itself, or build a new batch.

    ``mask`` (default: the batch's own) names the positions that are not
    zero: ``@batch``'s region guard records that the rows of the examples not
    running the region hold zeros.
    """
    # (The slot when no region guard is deferred, which ``data`` would apply first: ops
    # call this for their results, and the property's frame was most of its cost.)
    data = batch._data if batch._deferred_guard is None else batch.data
    mask = batch._mask if mask is None else mask
    if mask is not None and not data.is_inference():
        batch._zero_padding = (data, mask, data._version)


def has_zero_padding(batch: MaskedBatch, mask: torch.Tensor | None = None) -> bool:
    """Whether ``batch`` is known to hold zeros outside ``mask`` (default: its padding).

    See :func:`mark_zero_padding`.
    """
    held = zero_padding_mask(batch)
    return held is not None and held is (batch._mask if mask is None else mask)


def zero_padding_mask(batch: MaskedBatch) -> torch.Tensor | None:
    """The mask outside which ``batch`` is known to hold zeros (its own, or a region's),
    or ``None``: what an op that keeps zeros passes on to its result.

    See :func:`mark_zero_padding`.
    """
    record = getattr(batch, "_zero_padding", None)  # any batch type: only MaskedBatch has it
    if record is None:
        return None
    # (The slot unless a region guard is deferred, as in mark_zero_padding: the property's
    # frame was most of this check's cost, on every chunk and join of a guarded batch.)
    data = batch._data if batch._deferred_guard is None else batch.data
    return record[1] if record[0] is data and record[2] == data._version else None


def zero_padding_along(batch: MaskedBatch, d: int) -> torch.Tensor | None:
    """The mask outside which ``batch`` is known to hold zeros (:func:`zero_padding_mask`)
    where it is the same at every position along dimension ``d`` (size one there, or
    fewer dimensions): a piece of ``batch`` along ``d``, or a join along ``d`` of batches
    sharing it, holds zeros outside it too.  ``None`` otherwise."""
    held = zero_padding_mask(batch)
    if held is None:
        return None
    at = d - (batch._data.dim() - held.dim())  # (a deferred guard keeps the rank)
    return held if at < 0 or held.size(at) == 1 else None


def dims_argument(op: str, dims: Any) -> tuple[bool, ...]:
    """``dims`` as a tuple of bools; anything but booleans (or 0 and 1) is refused.

    ``bool()`` of each entry would read ``None`` as static and a string as all
    dynamic, silently describing other examples than the user's.
    """
    entries = list(dims) if isinstance(dims, (tuple, list)) else None
    if entries is None or not all(not isinstance(d, str) and d in (0, 1) for d in entries):
        raise TypeError(
            f"{op}: dims must be a tuple of bools, one per dimension after the first (True "
            f"where the examples may differ in size); got {dims!r}"
        )
    return tuple(bool(d) for d in entries)


def check_examples(
    op: str, examples: Sequence[Any], dims: tuple[bool, ...],
    static_hint: str = "mark it dynamic in dims",
) -> list[torch.Size]:
    """Each example's shape, after checking the list (``static_hint``: what to do
    when examples differ along a static dimension)."""
    if isinstance(examples, torch.Tensor) or not isinstance(examples, Sequence):
        raise TypeError(
            f"{op}: examples must be a list of tensors, got "
            f"{type(examples).__name__}"
        )
    if len(examples) == 0:
        raise ValueError(f"{op}: the list of examples is empty")
    first = examples[0]
    for b, example in enumerate(examples):
        if not isinstance(example, torch.Tensor):
            raise TypeError(
                f"{op}: example {b} is a {type(example).__name__}, not a tensor"
            )
        if example.dim() != len(dims) + 1:
            raise ValueError(
                f"{op}: example {b} has rank {example.dim()} but dims "
                f"{dims} describes examples of rank {len(dims) + 1}"
            )
        if example.size(0) != 1:
            raise ValueError(
                f"{op}: example {b} has size {example.size(0)} in "
                "dimension 0; every example needs a leading dimension of size one"
            )
        if example.dtype != first.dtype:
            raise ValueError(
                f"{op}: example {b} has dtype {example.dtype} but example 0 "
                f"has {first.dtype}"
            )
        if example.device != first.device:
            raise ValueError(
                f"{op}: example {b} is on {example.device} but example 0 "
                f"is on {first.device}"
            )
        for i, dynamic in enumerate(dims, start=1):
            if not dynamic and example.size(i) != first.size(i):
                raise ValueError(
                    f"{op}: dimension {i} is static but the examples differ "
                    f"in size there: example 0 has {first.size(i)}, example {b} has "
                    f"{example.size(i)} ({static_hint})"
                )
    return [e.shape for e in examples]


def check_padding_value(value: float, dtype: torch.dtype) -> None:
    if dtype.is_floating_point or dtype.is_complex:
        return
    if value != value or value in (float("inf"), float("-inf")) or (
        dtype != torch.bool and value != int(value)
    ):
        raise ValueError(
            f"MaskedBatch.fromlist: padding_value {value} is not representable in the "
            f"examples' dtype {dtype}"
        )


def some_example_empty_in_part(shapes: list[torch.Size], dims: tuple[bool, ...]) -> bool:
    """Whether an example is empty in one dynamic dimension and not in another (its mask
    would be all false and lose its other sizes)."""
    for shape in shapes:
        sizes = [shape[i] for i, d in enumerate(dims, start=1) if d]
        if 0 in sizes and any(sizes):
            return True
    return False


def validate_layout(data: Any, mask: Any, dims: tuple[bool, ...]) -> None:
    if not isinstance(data, torch.Tensor):
        raise ValueError(f"MaskedBatch: data must be a torch.Tensor, got {type(data).__name__}")
    if not isinstance(mask, torch.Tensor):
        raise ValueError(f"MaskedBatch: mask must be a torch.Tensor, got {type(mask).__name__}")
    if not all(isinstance(d, bool) for d in dims):
        raise ValueError(f"MaskedBatch: dims must be a tuple of bools, got {dims!r}")
    if data.dim() == 0:
        raise ValueError("MaskedBatch: data must have a batch dimension (dimension 0)")
    if data.dim() != len(dims) + 1:
        raise ValueError(
            f"MaskedBatch: dims has {len(dims)} entries but data has {data.dim() - 1} "
            f"non-batch dimensions (data shape {tuple(data.shape)})"
        )
    if mask.dim() != data.dim():
        raise ValueError(
            f"MaskedBatch: mask has rank {mask.dim()} but data has rank {data.dim()}"
        )
    if mask.requires_grad:
        raise ValueError("MaskedBatch: mask must not require grad")
    if mask.device != data.device:
        raise ValueError(
            f"MaskedBatch: mask is on {mask.device} but data is on {data.device}"
        )
    if mask.size(0) != data.size(0):
        raise ValueError(
            f"MaskedBatch: mask has batch size {mask.size(0)} but data has {data.size(0)}"
        )
    for i, dynamic in enumerate(dims, start=1):
        expected = data.size(i) if dynamic else 1
        if mask.size(i) != expected:
            kind = "dynamic" if dynamic else "static"
            raise ValueError(
                f"MaskedBatch: mask has size {mask.size(i)} in dimension {i}, which is "
                f"{kind}, but must have size {expected} there"
            )
    if not mask.dtype == torch.bool and not (mask == 0).logical_or(mask == 1).all():
        raise ValueError("MaskedBatch: a non-bool mask must hold only zeros and ones")
    bool_mask = mask if mask.dtype == torch.bool else mask != 0
    for i, dynamic in enumerate(dims, start=1):
        if dynamic and bool_mask.size(i) > 1:
            rising = bool_mask.narrow(i, 1, bool_mask.size(i) - 1) & ~bool_mask.narrow(
                i, 0, bool_mask.size(i) - 1
            )
            if rising.any():
                raise ValueError(
                    f"MaskedBatch: the mask of dynamic dimension {i} has a real position "
                    "after a padding position; real values must come first"
                )


def validate_lengths(data: torch.Tensor, lengths: Any, dims: tuple[bool, ...]) -> torch.Tensor:
    if not isinstance(lengths, torch.Tensor) or lengths.dtype.is_floating_point or \
            lengths.dtype.is_complex or lengths.dtype == torch.bool:
        raise ValueError("MaskedBatch: lengths must be an integer tensor")
    expected = (data.size(0), sum(dims))
    if tuple(lengths.shape) != expected:
        raise ValueError(
            f"MaskedBatch: lengths must have shape (batch, number of dynamic dimensions) "
            f"= {expected}, got {tuple(lengths.shape)}")
    if lengths.device != data.device:
        raise ValueError(f"MaskedBatch: lengths are on {lengths.device} but data is on "
                         f"{data.device}")
    padded = torch.tensor([data.size(i) for i, d in enumerate(dims, start=1) if d],
                          device=data.device, dtype=torch.long)
    if bool(((lengths < 0) | (lengths > padded)).any()):
        raise ValueError("MaskedBatch: lengths must lie between 0 and the padded size of "
                         "their dimension")
    return lengths.long()


def expanded_row(tensor: torch.Tensor, batch_size: int | None) -> torch.Tensor:
    """A plain tensor expanded from size one to the batch size in dimension 0 (stride 0:
    ``h0.expand(x.size(0), -1)``, ``encodings.unsqueeze(0).expand(x.maxsize())``, where
    the size is 1 for one example and the batch size for a batch) as that one row, the
    same for every example: how a batch op, and a ``@batch`` merge, take it.  Any other
    tensor as it is."""
    if (tensor.dim() and batch_size not in (None, 1) and tensor.size(0) == batch_size
            and tensor.stride(0) == 0):
        return tensor.narrow(0, 0, 1)
    return tensor


def example_shape(batch: MaskedBatch, sizes: Sequence[int]) -> str:
    """One example's shape, written out: ``(1, <sizes along dynamic dims>, <static>)``."""
    it = iter(sizes)
    parts = ["1"] + [str(next(it)) if d else str(batch.data.size(i + 1))
                     for i, d in enumerate(batch.dims)]
    return "(" + ", ".join(parts) + ")"


def distinct_sizes(sizes: Iterable[Any]) -> list[Any]:
    """The different ``sizes`` other than 1 (the arguments' sizes in one dimension, which
    broadcast), in order.  Compared, not hashed: while ``matchbox.compile`` captures with
    symbolic sizes a size is a ``torch.SymInt``, which has no hash (comparing two records
    a guard)."""
    found: list[Any] = []
    for size in sizes:
        if size != 1 and not any(size == other for other in found):
            found.append(size)
    return found
