"""Constructors: ``new_zeros``/``new_ones``/``new_empty``/``new_full`` and ``*_like``.

Semantics: on a batch, ``new_*`` builds one new tensor per example, with the
sizes given per example: the first size is each example's batch dimension (1,
or the batch size as ``x.size(0)`` gives it), an int is a static size, and a
batch of per-example sizes (``x.size_as_tensor(d)``) makes that dimension
dynamic.  ``*_like`` keeps the argument's mask and dims.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch

from matchbox import _lengths, _registry
from matchbox.masked_batch import MaskedBatch, mask_from_lengths


def new_batch(
    op: str,
    x: MaskedBatch,
    sizes: Sequence[Any],
    make: Callable[[list[int]], torch.Tensor],
) -> MaskedBatch:
    """A batch of new examples of the given per-example sizes."""
    sizes = list(sizes[0]) if len(sizes) == 1 and isinstance(sizes[0], (list, tuple, torch.Size)) \
        else list(sizes)
    batch = x.data.size(0)
    if not sizes or sizes[0] not in (1, batch):
        raise ValueError(
            f"{op}: the first size is each example's batch dimension and must be 1 "
            f"(or the batch size {batch}); got {sizes[:1]}"
        )
    padded, dims, lengths = [batch], [], []
    for i, size in enumerate(sizes[1:], start=1):
        if isinstance(size, MaskedBatch):
            if size.dims:
                raise ValueError(f"{op}: size {i} must be a batch of per-example scalars")
            if size.data.size(0) != batch:
                raise ValueError(
                    f"{op}: size {i} gives sizes for {size.data.size(0)} examples, but the "
                    f"batch has {batch}"
                )
            per_example = size.data.to(device=x.device, dtype=torch.long)
            padded.append(int(per_example.max()) if per_example.numel() else 0)
            dims.append(True)
            lengths.append(per_example)
        else:
            # An int, or a 0-d integer tensor as torch accepts; a float is a
            # TypeError, as in torch.
            padded.append(operator.index(size))
            dims.append(False)
    data = make(padded)
    if lengths:
        lengths_t = torch.stack(lengths, 1)
        # Sizes given per example may leave one empty in one dynamic dimension only.
        mask = _lengths.settle(mask_from_lengths(lengths_t, padded, tuple(dims)), lengths_t)
    else:
        mask = None  # no padding: every position is real
    return MaskedBatch._make(data, mask, tuple(dims))


def _factory_kwargs(x: MaskedBatch, kwargs: dict[str, Any]) -> dict[str, Any]:
    kwargs.setdefault("dtype", x.dtype)
    kwargs.setdefault("device", x.device)
    return kwargs


@_lengths.aware
@_registry.implements(torch.Tensor.new_zeros, torch.Tensor.new_ones, torch.Tensor.new_empty,
                      family="constructor")
def new_filled(func, input, *sizes, **kwargs):
    if "size" in kwargs:  # x.new_zeros(size=(1, n)), as torch allows
        sizes = (kwargs.pop("size"),)
    factory = {"new_zeros": torch.zeros, "new_ones": torch.ones,
               "new_empty": torch.empty}[func.__name__]
    requires_grad = kwargs.pop("requires_grad", False)
    kwargs = _factory_kwargs(input, kwargs)
    batch = new_batch(_registry.op_name(func), input, sizes,
                      lambda shape: factory(shape, **kwargs))
    return batch.requires_grad_(requires_grad) if requires_grad else batch


@_lengths.aware
@_registry.implements(torch.Tensor.new, family="constructor")
def new(func, input, *args, **kwargs):
    """``x.new(1, n)``, the legacy constructor the original Matchbox README used:
    sizes give an uninitialised batch (as ``new_empty``); data (a list, a tensor)
    gives a plain tensor, the same for every example, as in the loop."""
    sizes = args[0] if len(args) == 1 and isinstance(args[0], torch.Size) else args
    if sizes and all(isinstance(n, (int, MaskedBatch)) for n in sizes):
        kwargs = _factory_kwargs(input, kwargs)
        return new_batch(_registry.op_name(func), input, sizes,
                         lambda shape: torch.empty(shape, **kwargs))
    return input.data.new(*args, **kwargs)


@_lengths.aware
@_registry.implements(torch.Tensor.new_full, family="constructor")
def new_full(func, input, size, fill_value, **kwargs):
    kwargs = _factory_kwargs(input, kwargs)
    return new_batch(_registry.op_name(func), input, [size],
                     lambda shape: torch.full(shape, fill_value, **kwargs))


@_lengths.aware
@_registry.implements(torch.zeros_like, torch.ones_like, torch.empty_like, torch.rand_like,
                      torch.randn_like, family="constructor")
def like(func, input, **kwargs):
    return MaskedBatch._make(func(input.data, **kwargs), input.mask, input.dims)


@_lengths.aware
@_registry.implements(torch.full_like, family="constructor")
def full_like(func, input, fill_value, **kwargs):
    return MaskedBatch._make(func(input.data, fill_value, **kwargs), input.mask, input.dims)
