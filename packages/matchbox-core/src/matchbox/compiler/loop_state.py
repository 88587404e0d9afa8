"""The state of a loop captured as a ``scan``: its batches and tensors as flat tensors.

``scan`` carries flat tensors from step to step; a loop's state is made of tensors,
batches (data, mask, lengths, the examples that have an item), views of batches (a
recurrent module's state views) and tuples of them.
:func:`flatten` gives the structure and appends the tensors; :func:`unflatten` rebuilds
the value from them.  Anything else raises :class:`NotStructured` (the loop is then
unrolled).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from matchbox import _copies, _lengths
from matchbox._batch_views import BATCH_VIEWS


class NotStructured(Exception):
    """A loop that cannot be captured as a ``scan`` (it is unrolled instead)."""


def _batch_type() -> type:
    from matchbox.masked_batch import MaskedBatch

    return MaskedBatch


def flatten(value: Any, leaves: list[torch.Tensor]) -> Any:
    """The structure of ``value`` (tensors, batches and tuples of them); its tensors are
    appended to ``leaves``.  Raises :class:`NotStructured` for anything else."""
    mb = _batch_type()
    if type(value) is mb:
        if getattr(value, "_guards", None) is not None:
            raise NotStructured("a batch that stands for another (a region's guard)")
        parts = [value.data, value._mask, _lengths.carried(value._mask), value._present]
        present = tuple(p is not None for p in parts)
        leaves.extend(p for p in parts if p is not None)
        return ("batch", value.dims, present, bool(getattr(value, "_not_a_view", False)),
                tuple(meta(p) for p in parts if p is not None), value._scalar)
    if isinstance(value, torch.Tensor):
        if type(value) is not torch.Tensor and not is_fake(value):
            raise NotStructured(f"a tensor subclass {type(value).__name__}")
        leaves.append(value)
        return ("tensor", meta(value))
    if type(value) is tuple:
        return ("tuple", tuple(flatten(v, leaves) for v in value))
    if type(value) in BATCH_VIEWS:
        return ("view", type(value), flatten(value.batch, leaves))
    raise NotStructured(f"loop state of type {type(value).__name__}")


def unflatten(structure: Any, leaves: Iterator[torch.Tensor]) -> Any:
    kind = structure[0]
    if kind == "tensor":
        return next(leaves)
    if kind == "tuple":
        return tuple(unflatten(s, leaves) for s in structure[1])
    if kind == "view":
        return structure[1](unflatten(structure[2], leaves))
    _, dims, present, not_a_view, _, scalar = structure
    data, mask, lengths, real = (next(leaves) if p else None for p in present)
    if lengths is not None:
        mask = _lengths.carry(mask, lengths)
    batch = _batch_type()._make(data, mask, dims)
    batch._present = real
    batch._scalar = scalar
    if not_a_view:
        _copies.mark(batch)
    return batch


def meta(t: torch.Tensor) -> tuple[Any, ...]:
    return (tuple(t.shape), t.dtype, t.device, t.requires_grad)


def is_fake(t: Any) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, FakeTensor)


def metas(structure: Any) -> Iterator[tuple[Any, ...]]:
    kind = structure[0]
    if kind == "tensor":
        yield structure[1]
    elif kind == "tuple":
        for s in structure[1]:
            yield from metas(s)
    elif kind == "view":
        yield from metas(structure[2])
    else:
        yield from structure[4]


#: Integer carries travel as floating-point tensors of the same width, bit for bit.
_SAME_WIDTH = {torch.int64: torch.float64, torch.int32: torch.float32}

#: The dtype masks, flags and other carries of bools and small integers travel as: fixed,
#: never torch's default dtype (``torch.set_default_dtype(torch.float64)`` made the flags'
#: first values float64 and the body's float32, and scan refused the carries).
FLAG_DTYPE = torch.float32


def encode(t: torch.Tensor) -> torch.Tensor:
    """A carry of scan as a floating-point tensor: torch 2.13's backward of ``scan``
    fails on a carry of bools or ints (AOTAutograd's tangents miscounted).  Masks and
    flags travel as 0/1 floats; 64- and 32-bit integers as floats of the same width
    holding their bits (a conversion would lose integers past 2**53)."""
    if t.is_floating_point() or t.is_complex():
        return t
    if t.dtype in _SAME_WIDTH:
        return t.view(_SAME_WIDTH[t.dtype])
    return t.to(FLAG_DTYPE)


def flag(device: torch.device) -> torch.Tensor:
    """A flag's first value (no failure) as a carry: what :func:`encode` makes of ``False``."""
    return torch.zeros((), dtype=FLAG_DTYPE, device=device)


def decode(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t``, encoded by :func:`encode`, as a tensor of ``dtype`` again."""
    if t.dtype == dtype:
        return t
    if dtype in _SAME_WIDTH:
        return t.view(dtype)
    return t > 0 if dtype == torch.bool else t.to(dtype)


def sample(t: torch.Tensor) -> torch.Tensor:
    copy = t.detach().clone()
    if t.requires_grad:
        copy.requires_grad_(True)
    return copy


def device(leaves: list[torch.Tensor]) -> torch.device:
    return leaves[0].device if leaves else torch.device("cpu")
