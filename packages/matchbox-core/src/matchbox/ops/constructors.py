"""Constructors: ``new_zeros``/``new_ones``/``new_empty``/``new_full`` and ``*_like``.

Semantics: on a batch, ``new_*`` builds one new tensor per example, with the
sizes given per example: the first size is each example's batch dimension (1,
or the batch size as ``x.size(0)`` gives it), an int is a static size, and a
batch of per-example sizes (``x.size_as_tensor(d)``) or a padded size
(``x.maxsize(d)``: each example's own size there, as in the loop) makes that
dimension dynamic.  ``*_like`` keeps the argument's mask and dims.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch

from matchbox import _capture, _lengths, _registry
from matchbox._padded_sizes import is_padded, own_sizes
from matchbox._sizes import (
    BATCH_SIZES,
    BatchShape,
    plain_size,
    refuse_batch_size_number,
    refuse_later_batch_size,
)
from matchbox.masked_batch import MaskedBatch, mask_from_lengths


def new_batch(
    op: str,
    x: MaskedBatch,
    sizes: Sequence[Any],
    make: Callable[[list[int]], torch.Tensor],
) -> MaskedBatch:
    """A batch of new examples of the given per-example sizes (``x.new_zeros(y.shape)``:
    each of ``y``'s examples' own)."""
    if len(sizes) == 1 and isinstance(sizes[0], BatchShape):
        sizes = _per_example_sizes(sizes[0])
    sizes = list(sizes[0]) if len(sizes) == 1 and isinstance(sizes[0], (list, tuple, torch.Size)) \
        else list(sizes)
    batch = x.data.size(0)
    refuse_later_batch_size(op, sizes)
    if sizes and is_padded(sizes[0]):
        raise ValueError(
            f"{op}: the first size is each example's batch dimension (1, or the batch size "
            f"x.size(0)); got x.maxsize({sizes[0].dim}), the padded size of a dynamic "
            "dimension, which in the loop over examples is each example's own size")
    if not sizes or sizes[0] not in (1, batch):
        raise ValueError(
            f"{op}: the first size is each example's batch dimension and must be 1 "
            f"(or the batch size {batch}); got {sizes[:1]}"
        )
    _refuse_padded_shape(op, x, sizes)
    source = _same_layout(sizes, batch)
    if source is not None:  # x.new_zeros(x.size(0), T, H): x's own layout, its mask
        return MaskedBatch._make(make([batch] + [plain_size(s) for s in sizes[1:]]),
                                 source._mask, source.dims)
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
            padded.append(_padded_size(op, i, size.data, per_example))
            dims.append(True)
            lengths.append(per_example)
        elif is_padded(size):
            # x.maxsize(d): in the loop each example's own size there (its source's).
            own = own_sizes(op, f"size {i}", size, batch)
            padded.append(plain_size(size))
            dims.append(True)
            lengths.append(own.to(device=x.device, dtype=torch.long))
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


def _refuse_padded_shape(op: str, x: MaskedBatch, sizes: list[Any]) -> None:
    """``x.new_zeros(x.maxsize())`` (or ``*x.maxsize()``): plain ints that are exactly the
    padded sizes of ``x``, whose examples are shorter in a dynamic dimension, are refused:
    in the loop ``x.maxsize()`` is each example's own shape, and the batch would build every
    example at the longest's (silently, unless it then met ``x``)."""
    batch = x.data.size(0)
    if (batch < 2 or not any(x.dims) or x._mask is None or len(sizes) != x.dim()
            or any(type(s) is not int for s in sizes) or list(sizes) != list(x.data.shape)):
        return
    shown = ", ".join(map(str, sizes))
    raise ValueError(
        f"{op}: sizes ({shown}) are the batch's padded sizes (x.maxsize()), but dimensions "
        f"{[i for i, d in enumerate(x.dims, 1) if d]} are dynamic: in the loop over examples "
        "x.maxsize() is each example's own shape, while these plain ints would build every "
        "example at the longest example's; write x.new_zeros(x.shape) for each example's own "
        "shape, or give the sizes one by one (x.size(0), x.maxsize(1), H), int(x.maxsize(1)) "
        "for the padded size itself")


def _same_layout(sizes: list[Any], batch: int) -> MaskedBatch | None:
    """The batch whose mask a batch of ``sizes`` takes as it is: where its dynamic
    dimensions are exactly those of the batch that padded sizes ``T`` were read from, each
    the ``T`` of its own dimension there (a mask has size one in static dimensions, which
    may differ)."""
    source = None
    for i, size in enumerate(sizes[1:], start=1):
        if is_padded(size):
            source = size.source if source is None else source
            if (size.source is not source or not isinstance(source, MaskedBatch)
                    or size.dim % source.dim() != i):
                return None
    if (source is None or source.data.size(0) != batch or source.dim() != len(sizes)
            or any(is_padded(s) != d for s, d in zip(sizes[1:], source.dims))):
        return None
    return source


def _per_example_sizes(shape: BatchShape) -> list[Any]:
    """A batch's ``shape`` as sizes per example: the batch size, then each dimension's size,
    or each example's own (``size_as_tensor``) where it is dynamic."""
    batch = shape._batch
    return [batch.size(0)] + [batch.size_as_tensor(i) if batch.dims[i - 1] else batch.size(i)
                              for i in range(1, batch.dim())]


def _padded_size(op: str, i: int, given: torch.Tensor, per_example: torch.Tensor) -> int:
    """The padded size of a dimension given per example: the largest size; while
    capturing (no values), the padded size of the dimension the sizes were read from."""
    if _capture.capturing() is not None:
        bound = _capture.size_bound(given)
        if bound is None:
            raise _capture.NotCapturable(
                f"{op}: size {i} is a per-example size computed from values, so the padded "
                "size of the result depends on them and the call runs eagerly; to capture it, "
                "give sizes read from a batch directly, n = x.size_as_tensor(d), whose padded "
                "size in d bounds them (for n + 1 rows: torch.cat([x.new_zeros(1, n, H), "
                "x.new_zeros(1, 1, H)], 1))")
        return bound
    return int(per_example.max()) if per_example.numel() else 0


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
    """``x.new(...)``, the legacy constructor the original Matchbox used.

    Sizes that name each example's batch dimension first (``x.new(x.size(0), H)``,
    the README's state; or that hold a per-example size) give an uninitialised
    batch, as ``new_empty``.  Anything else gives a plain tensor, the same for
    every example, as the original Matchbox's ``x.new`` always did and as the
    loop sees it: a single size (``torch.arange(0, T, out=x.new(T))``), sizes
    that start elsewhere, or data (a list, a tensor).
    """
    sizes = args[0] if len(args) == 1 and isinstance(args[0], torch.Size) else args
    if _names_a_batch(sizes, input.data.size(0)):
        kwargs = _factory_kwargs(input, kwargs)
        return new_batch(_registry.op_name(func), input, sizes,
                         lambda shape: torch.empty(shape, **kwargs))
    return input.data.new(*args, **kwargs)


def _names_a_batch(sizes: Sequence[Any], batch: int) -> bool:
    """Whether ``x.new(*sizes)`` asks for one tensor per example (see :func:`new`)."""
    if not sizes or not all(isinstance(n, (int, MaskedBatch)) for n in sizes):
        return False
    if any(isinstance(n, MaskedBatch) for n in sizes):
        return True
    if is_padded(sizes[0]):  # x.new(T, H): (T, H) in the loop, the same for every example
        return False
    return len(sizes) > 1 and sizes[0] in (1, batch)


@_lengths.aware
@_registry.implements(torch.Tensor.new_full, family="constructor")
def new_full(func, input, size, fill_value, **kwargs):
    """``x.new_full(size, v)``: ``v`` a number, or a batch of per-example scalars
    (``x.size_as_tensor(1)``, a per-example ``item()``) that fills each example's
    tensor with its own value, as the loop does."""
    op = _registry.op_name(func)
    requires_grad = kwargs.pop("requires_grad", False)
    reference = input if isinstance(input, MaskedBatch) else fill_value
    kwargs.setdefault("dtype", input.dtype)
    kwargs.setdefault("device", input.device)
    batch = new_batch(op, reference, [size], _filler(op, reference, fill_value, kwargs))
    return batch.requires_grad_(requires_grad) if requires_grad else batch


@_registry.implements(torch.full, family="constructor")
def full(func, size, fill_value, **kwargs):
    """``torch.full(size, v)`` with a per-example ``v`` (see :func:`new_full`); the first
    size is each example's batch dimension."""
    op = _registry.op_name(func)
    _registry.refuse_out(op, kwargs.pop("out", None))
    requires_grad = kwargs.pop("requires_grad", False)
    if not isinstance(fill_value, MaskedBatch):
        raise TypeError(f"{op}: a batch may only be the fill_value (one value per example), "
                        f"got size={size!r}")
    kwargs.setdefault("device", fill_value.device)
    if kwargs.get("dtype") is None:
        kwargs["dtype"] = _full_dtype(fill_value.dtype)
    batch = new_batch(op, fill_value, [size], _filler(op, fill_value, fill_value, kwargs))
    return batch.requires_grad_(requires_grad) if requires_grad else batch


def _full_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype ``torch.full`` infers from a fill value of ``dtype`` (read as a number)."""
    if dtype == torch.bool or dtype.is_complex:
        return dtype
    return torch.get_default_dtype() if dtype.is_floating_point else torch.long


def _filler(op: str, reference: MaskedBatch, fill_value: Any,
            kwargs: dict[str, Any]) -> Callable[[list[int]], torch.Tensor]:
    """How to make the data of a filled batch: a number fills everything; a batch of
    per-example scalars fills each example's row with its own value."""
    if not isinstance(fill_value, MaskedBatch):
        if type(fill_value) in BATCH_SIZES:  # x.size(0): 1 in each example, B here
            refuse_batch_size_number(fill_value)
        return lambda shape: torch.full(shape, fill_value, **kwargs)
    if fill_value.dims:
        raise ValueError(
            f"{op}: a per-example fill_value must be a batch of per-example scalars (dims "
            f"()), got one with dims {fill_value.dims}"
        )
    batch = reference.data.size(0)
    if fill_value.data.size(0) != batch:
        raise ValueError(
            f"{op}: fill_value has values for {fill_value.data.size(0)} examples, but the "
            f"batch has {batch}"
        )
    if fill_value.requires_grad and torch.is_grad_enabled():
        # As torch refuses a fill value that requires grad (it is read as a number).
        raise TypeError(
            f"{op}: fill_value requires grad, and a fill value is a number to torch, which "
            "has no gradient; detach it, or multiply: x.new_ones(size) * v"
        )
    values = fill_value.data.detach().to(device=kwargs["device"], dtype=kwargs["dtype"])

    def make(shape: list[int]) -> torch.Tensor:
        per_example = values.reshape(batch, *[1] * (len(shape) - 1))
        return per_example.expand(shape).clone()  # a tensor of its own, written as any new one

    return make


@_lengths.aware
@_registry.implements(torch.zeros_like, torch.ones_like, torch.empty_like, torch.rand_like,
                      torch.randn_like, family="constructor")
def like(func, input, **kwargs):
    return MaskedBatch._make(func(input.data, **kwargs), input.mask, input.dims)


@_lengths.aware
@_registry.implements(torch.full_like, family="constructor")
def full_like(func, input, fill_value, **kwargs):
    """``torch.full_like(x, v)``; ``v`` a number, or a batch of per-example scalars that fills
    each example with its own value (see :func:`new_full`)."""
    if not isinstance(fill_value, MaskedBatch):
        if type(fill_value) in BATCH_SIZES:  # x.size(0): 1 in each example, B here
            refuse_batch_size_number(fill_value)
        return MaskedBatch._make(func(input.data, fill_value, **kwargs), input.mask, input.dims)
    op = _registry.op_name(func)
    if not isinstance(input, MaskedBatch):
        raise TypeError(f"{op}: with a per-example fill_value, input must be a batch (whose "
                        "examples' shapes the result takes); got a plain tensor")
    requires_grad = kwargs.pop("requires_grad", False)
    kwargs.pop("memory_format", None)  # (the filled data is a new contiguous tensor)
    kwargs["dtype"] = kwargs.get("dtype") or input.dtype
    kwargs["device"] = kwargs.get("device") or input.device
    data = _filler(op, input, fill_value, kwargs)(list(input.data.shape))
    batch = MaskedBatch._make(data, input.mask, input.dims)
    return batch.requires_grad_(requires_grad) if requires_grad else batch
