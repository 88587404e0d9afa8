"""Arguments and results as flat lists of tensors plus a hashable description.

A captured graph takes and returns plain tensors only.  A call's arguments are
taken apart here into those tensors and a *structure* (a nested tuple: what
each position held, batch dims, which batches have a mask, the values of
plain Python arguments), which is part of the key of a specialisation, and
put together again inside the graph and after it.

| value                   | tensors                 | structure                          |
|-------------------------|-------------------------|------------------------------------|
| ``torch.Tensor``        | itself                  | ``("tensor",)``                    |
| ``MaskedBatch``         | ``data`` (and ``mask``, | ``("batch", dims, has_mask,        |
|                         | lengths its mask holds) | has_lengths, _scalar)``            |
| a view of a batch       | those of its batch      | ``("view", class, batch's)``:      |
| (``TimeMajorBatch``)    |                         | rebuilt as ``class(batch)``        |
| tuple, list, dict       | those of its items      | ``(kind, items...)``               |
| ``None``, bool, int,    | none                    | ``("value", value)``: part of the  |
| float, str, dtype, ...  |                         | key (the graph is specialised on it) |

Anything else (a module, a ``PackedBatch``, an object) cannot be taken apart;
``matchbox.compile`` then runs the call eagerly.

Bucketing: the padded size of a batch argument's dynamic dimension is rounded
up (:func:`bucket_size`), padding it further, so that batches whose longest
example differ a little share one graph.
"""

from __future__ import annotations

from typing import Any

import torch

from matchbox import _lengths
from matchbox._batch_views import BATCH_VIEWS
from matchbox.masked_batch import MaskedBatch, constant_pad

Structure = tuple[Any, ...]
#: What a flattened tensor is (:func:`roles`): ("data", dims) of a batch, ("mask", dims),
#: ("lengths", ()), or ("plain", ()).
Role = tuple[str, tuple[bool, ...]]
_PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device,
          torch.layout, torch.memory_format)


class Unsupported(TypeError):
    """An argument or result that a captured graph cannot take or give."""


def bucket_size(size: int, bucket: int | str | None) -> int:
    """``size`` rounded up: to a multiple of ``bucket`` (an int), to a power of two
    (``"pow2"``), or left as it is (``None``)."""
    if bucket is None or size == 0:
        return size
    if bucket == "pow2":
        return 1 << (size - 1).bit_length()
    return -(-size // bucket) * bucket


def check_bucket(bucket: Any) -> None:
    if bucket is None or bucket == "pow2" or (
            isinstance(bucket, int) and not isinstance(bucket, bool) and bucket > 0):
        return
    raise ValueError(f"matchbox.compile: bucket must be a positive int (pad dynamic sizes to a "
                     f"multiple of it), 'pow2' or None (no bucketing), got {bucket!r}")


def flatten(value: Any, tensors: list[torch.Tensor], *, bucket: Any = None,
            what: str = "argument") -> Structure:
    """Append ``value``'s tensors to ``tensors``; return its structure.

    A batch's data or mask padded to the bucket (or a mask made for a batch
    without one) is a new tensor, not the argument's own: see :func:`own_tensors`.
    """
    kind = type(value)
    if kind is MaskedBatch:
        return _flatten_batch(value, tensors, bucket)
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return ("tensor",)
    if kind in BATCH_VIEWS:  # matchbox-nn's time-major view (a recurrent module's states)
        return ("view", kind, flatten(value.batch, tensors, bucket=bucket, what=what))
    if kind in (tuple, list):
        return (kind.__name__, *(flatten(v, tensors, bucket=bucket, what=what) for v in value))
    if kind is dict:
        keys = tuple(value)
        return ("dict", keys, *(flatten(value[k], tensors, bucket=bucket, what=what)
                                for k in keys))
    if isinstance(value, _PLAIN):
        return ("value", value)
    raise Unsupported(f"a{'n' if what[0] in 'aeiou' else ''} {what} of type "
                      f"{type(value).__name__}, which a captured graph cannot "
                      f"{'take' if what == 'argument' else 'give'}")


def _flatten_batch(batch: MaskedBatch, tensors: list[torch.Tensor], bucket: Any) -> Structure:
    data, mask, dims = batch.data, batch._mask, batch.dims
    # Lengths a mask cannot tell (an example empty in one dynamic dimension and not
    # another, see matchbox._lengths) ride on the mask object: a tensor of their own here.
    lengths = _lengths.carried_by(batch)
    if any(dims):
        # A dynamic batch always gets a mask, so that one without padding and one with
        # share a graph; its padded sizes are rounded up to the bucket.
        mask = batch.mask
        pads: list[int] = []
        for i in range(data.dim() - 1, 0, -1):
            extra = bucket_size(data.size(i), bucket) - data.size(i) if dims[i - 1] else 0
            pads += [0, extra]
        if any(pads):  # static dimensions get no padding, in data as in the mask
            data = constant_pad(data, pads)
            mask = constant_pad(mask, pads, False)
    tensors.append(data)
    if mask is not None:
        tensors.append(mask)
    if lengths is not None:
        tensors.append(lengths)
    return ("batch", dims, mask is not None, lengths is not None, batch._scalar)


def unflatten(structure: Structure, tensors: list[torch.Tensor], at: int = 0) -> tuple[Any, int]:
    """The value ``structure`` describes, from ``tensors[at:]``; and the next position."""
    kind = structure[0]
    if kind == "tensor":
        return tensors[at], at + 1
    if kind == "batch":
        _, dims, has_mask, has_lengths, scalar = structure
        data, at = tensors[at], at + 1
        mask = None
        if has_mask:
            mask, at = tensors[at], at + 1
        if has_lengths:
            mask, at = _lengths.carry(mask, tensors[at]), at + 1
        batch = MaskedBatch._make(data, mask, dims)
        batch._scalar = scalar  # what one value per example is in the loop
        return batch, at
    if kind == "value":
        return structure[1], at
    if kind == "view":
        batch, at = unflatten(structure[2], tensors, at)
        return structure[1](batch), at
    if kind == "dict":
        keys, items = structure[1], structure[2:]
        out = {}
        for key, item in zip(keys, items):
            out[key], at = unflatten(item, tensors, at)
        return out, at
    values = []
    for item in structure[1:]:
        value, at = unflatten(item, tensors, at)
        values.append(value)
    return (tuple(values) if kind == "tuple" else values), at


def own_tensors(value: Any) -> set[int]:
    """The ids of the tensors ``value`` holds itself (batches' data and masks, tensors):
    a flattened tensor not among them is a copy made for the graph."""
    found: set[int] = set()
    _own(value, found)
    return found


def _own(value: Any, found: set[int]) -> None:
    if type(value) is MaskedBatch:
        found.add(id(value.data))
        if value._mask is not None:
            found.add(id(value._mask))
    elif isinstance(value, torch.Tensor):
        found.add(id(value))
    elif type(value) in BATCH_VIEWS:
        _own(value.batch, found)
    elif type(value) in (tuple, list):
        for v in value:
            _own(v, found)
    elif type(value) is dict:
        for v in value.values():
            _own(v, found)


def tensor_key(tensors: list[torch.Tensor]) -> tuple[Any, ...]:
    """What a graph is specialised on, of each tensor: shape, dtype, device, requires_grad."""
    return tuple((tuple(t.shape), t.dtype, t.device, t.requires_grad) for t in tensors)


def aliases(tensors: list[torch.Tensor]) -> tuple[tuple[int, int], ...]:
    """Which of a graph's inputs are one tensor, as pairs (position, first position).

    Part of a graph's key: captured with one tensor in two places (``f(x, x)``, a weight
    passed twice), the graph reads one input for both, and run later on two different
    tensors it read the first twice (a silent wrong answer a user trial found)."""
    first: dict[int, int] = {}
    pairs = []
    for i, t in enumerate(tensors):
        j = first.setdefault(id(t), i)
        if j != i:
            pairs.append((i, j))
    return tuple(pairs)


def summarize(structure: Structure, tensors: list[torch.Tensor]) -> str:
    """A short readable summary of a specialisation's arguments (for reports)."""
    parts: list[str] = []
    _summarize(structure, iter(tensors), parts)
    return ", ".join(parts)


def _summarize(structure: Structure, tensors: Any, parts: list[str]) -> None:
    kind = structure[0]
    if kind == "tensor":
        parts.append("tensor" + str(tuple(next(tensors).shape)))
    elif kind == "batch":
        data = next(tensors)
        for _ in range(structure[2] + structure[3]):
            next(tensors)
        shape = ", ".join(["B=" + str(data.size(0))] + [
            f"{'<=' if d else ''}{s}" for d, s in zip(structure[1], data.shape[1:])])
        parts.append(f"batch({shape})")
    elif kind == "value":
        parts.append(repr(structure[1])[:20])
    else:
        for item in _contents(structure):
            _summarize(item, tensors, parts)


def largest_dynamic_size(structure: Structure, tensors: list[torch.Tensor]) -> int:
    """The largest padded size of a dynamic dimension among the batches (0 if none)."""
    return max((s for (role, dims), t in zip(roles(structure), tensors) if role == "data"
                for d, s in zip(dims, t.shape[1:]) if d), default=0)


def roles(structure: Structure) -> list[Role]:
    """What each of the tensors ``structure`` flattens to is, in order."""
    found: list[Role] = []
    _roles(structure, found)
    return found


def _roles(structure: Structure, found: list[Role]) -> None:
    kind = structure[0]
    if kind == "tensor":
        found.append(("plain", ()))
    elif kind == "batch":
        _, dims, has_mask, has_lengths, _ = structure
        found.append(("data", dims))
        if has_mask:
            found.append(("mask", dims))
        if has_lengths:
            found.append(("lengths", ()))
    elif kind != "value":
        for item in _contents(structure):
            _roles(item, found)


def _contents(structure: Structure) -> tuple[Structure, ...]:
    """The structures a container (or a view) holds."""
    return structure[2:] if structure[0] in ("dict", "view") else structure[1:]
