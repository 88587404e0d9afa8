"""``searchsorted`` and ``bucketize``: where values would go in sorted sequences; ``isin``:
whether they are among others.

| sorted sequence (boundaries) | values  | how                                               |
|------------------------------|---------|---------------------------------------------------|
| a plain 1-D tensor           | a batch | torch's op on the data, position by position: the  |
|                              |         | values' layout kept (padding gives padding)        |
| a plain tensor of each       | a batch | the same, the plain tensor expanded over the batch |
| example's rank               |         | (its leading dimensions must be the examples')     |
| a batch                      | a batch | torch's binary search run on each line of each     |
|                              | or a    | example's own length (a dynamic last dimension):   |
|                              | plain   | the same comparisons as torch's kernel, so even a  |
|                              | tensor  | sequence that is not sorted (NaN in it) gives the  |
|                              |         | loop's positions; the values' layout kept          |

The leading dimensions (all but the last) of the sequences and of the values must be each
example's same sizes, as in the loop.  The results are integers (no gradient).  A batch of
sequences with ``sorter`` is refused (sort each example's sequences first), and so are
``bucketize``'s boundaries as a batch (torch takes only 1-D boundaries, and each example
is at least ``(1, n)``).
"""

from __future__ import annotations

from typing import Any

import torch

from matchbox import _masking, _registry
from matchbox._example_scalars import mark
from matchbox.masked_batch import MaskedBatch

FAMILY = "search"


def _right(op: str, right: bool, side: str | None) -> bool:
    if side is not None and side not in ("left", "right"):
        raise RuntimeError(f"{op}: side can only be 'left' or 'right' but got {side}")
    if side == "left" and right:
        raise RuntimeError(f"{op}: side and right can't be set to opposites, got side of left "
                           "while right was True")
    return bool(right) or side == "right"


@_registry.implements(torch.searchsorted, family=FAMILY)
def searchsorted(func, sorted_sequence, input, *, out_int32=False, right=False, side=None,
                 sorter=None, out=None):
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    right = _right(op, right, side)
    if not isinstance(sorted_sequence, MaskedBatch):
        return _in_plain_sequence(op, func, sorted_sequence, input, out_int32, right, sorter)
    if sorter is not None:
        raise NotImplementedError(
            f"{op}: sorter with a batch of sorted sequences is not supported; sort each "
            "example's sequences first (torch.sort) and search those")
    seq = sorted_sequence
    rank = seq.dim()
    if rank < 2:
        raise ValueError(f"{op}: the sorted sequences are scalars (each example (1,)), whose "
                         "only dimension is each example's dimension 0: unsqueeze them first")
    values = input.data if isinstance(input, MaskedBatch) else input
    if not isinstance(values, torch.Tensor):
        raise RuntimeError(f"{op}: input is a number, which needs 1-D sorted sequences; each "
                           f"example's sorted_sequence has {rank} dimensions")
    if values.dim() != rank or (not isinstance(input, MaskedBatch) and values.size(0) != 1):
        raise RuntimeError(
            f"{op}: input (each example's shape {_example_shape(input)}) and sorted_sequence "
            f"(rank {rank} per example) must have the same leading dimensions, as torch "
            "requires of the loop's")
    _check_leading(op, seq, input)
    if not isinstance(input, MaskedBatch):
        values = values.expand(seq.data.size(0), *values.shape[1:])
    # torch's own argument checks (dtypes), on no example.
    func(seq.data.narrow(0, 0, 0), values.narrow(0, 0, 0), out_int32=out_int32, right=right)
    result = _binary_search(seq, values, right)
    result = result.to(torch.int32) if out_int32 else result
    if isinstance(input, MaskedBatch):
        return MaskedBatch._make(result, input._mask, input.dims)
    dims = seq.dims[:-1] + (False,)
    mask = None if seq._mask is None else _masking.fit_mask(
        seq._mask.any(-1, keepdim=True), result, dims)
    return MaskedBatch._make(result, mask if any(dims) else None, dims)


def _example_shape(x: Any) -> tuple[int, ...]:
    return tuple(x.data.shape[1:]) if isinstance(x, MaskedBatch) else tuple(x.shape)


def _check_leading(op: str, seq: MaskedBatch, input: Any) -> None:
    """The leading dimensions of ``seq`` and ``input`` are each example's same sizes."""
    for d in range(1, seq.dim() - 1):
        if isinstance(input, MaskedBatch):
            if seq.dims[d - 1] != input.dims[d - 1]:
                raise ValueError(
                    f"{op}: dimension {d} is dynamic in one of sorted_sequence and input and "
                    "static in the other; each example's sizes there must be the same")
            if seq.dims[d - 1]:
                _masking.check_lengths_agree(op, [(seq, d), (input, d)])
                if seq.data.size(d) != input.data.size(d):
                    raise ValueError(
                        f"{op}: dimension {d} is padded to {seq.data.size(d)} in "
                        f"sorted_sequence and {input.data.size(d)} in input")
                continue
            size = input.data.size(d)
        else:
            if seq.dims[d - 1]:
                raise ValueError(
                    f"{op}: dimension {d} of sorted_sequence is dynamic and input is a plain "
                    "tensor, of one size there for every example; pass input as a batch")
            size = input.size(d)
        if seq.data.size(d) != size:
            raise RuntimeError(
                f"{op}: sorted_sequence has size {seq.data.size(d)} and input {size} in "
                f"dimension {d}; the leading dimensions must be the same")


def _binary_search(seq: MaskedBatch, values: torch.Tensor, right: bool) -> torch.Tensor:
    """torch's lower (upper) bound of each value in its line of ``seq``, searched over the
    line's own length: the comparisons of torch's kernel, so the loop's positions even
    where the line is not sorted."""
    data = seq.data
    size = data.size(-1)
    lengths = _masking.sizes_along(seq, seq.dim() - 1).view(-1, *[1] * (data.dim() - 1))
    start = torch.zeros(values.shape, dtype=torch.long, device=values.device)
    end = lengths.expand(values.shape).clone()
    if size == 0:
        return start
    for _ in range(int(size).bit_length()):  # (each step halves every range)
        mid = start + torch.div(end - start, 2, rounding_mode="floor")
        between = data.gather(-1, mid.clamp(max=size - 1))
        after = ~(between > values) if right else ~(between >= values)
        searching = start < end
        start = torch.where(searching & after, mid + 1, start)
        end = torch.where(searching & ~after, mid, end)
    return start


def _in_plain_sequence(op: str, func: Any, seq: Any, input: MaskedBatch, out_int32: bool,
                       right: bool, sorter: Any) -> MaskedBatch:
    """Each value's position in the plain sequences ``seq``: 1-D (one for every value) or
    of each example's rank (one per line, the same for every example)."""
    if isinstance(sorter, MaskedBatch):
        raise NotImplementedError(f"{op}: sorter is a batch and sorted_sequence a plain "
                                  "tensor; sorter must be sorted_sequence's own order")
    data = input.data
    if seq.dim() > 1:
        if seq.dim() != input.dim() or seq.size(0) != 1:
            raise RuntimeError(
                f"{op}: sorted_sequence of shape {tuple(seq.shape)} and input (each example "
                f"{_example_shape(input)}) must have the same leading dimensions, as torch "
                "requires of the loop's")
        for d in range(1, seq.dim() - 1):
            if input.dims[d - 1]:
                raise ValueError(
                    f"{op}: dimension {d} of input is dynamic and sorted_sequence is a plain "
                    "tensor, of one size there for every example; pass it as a batch")
            if seq.size(d) != data.size(d):
                raise RuntimeError(
                    f"{op}: sorted_sequence has size {seq.size(d)} and input {data.size(d)} "
                    f"in dimension {d}; the leading dimensions must be the same")
        # (contiguous: torch would copy it with a warning)
        seq = seq.expand(data.size(0), *seq.shape[1:]).contiguous()
        if sorter is not None:
            sorter = sorter.expand(data.size(0), *sorter.shape[1:]).contiguous()
    result = func(seq, data, out_int32=out_int32, right=right, sorter=sorter)
    result = MaskedBatch._make(result, input._mask, input.dims)
    return mark(result, input._scalar) if not input.dims else result


@_registry.implements(torch.bucketize, family=FAMILY)
def bucketize(func, input, boundaries, *, out_int32=False, right=False, out=None):
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    if isinstance(boundaries, MaskedBatch):
        raise RuntimeError(
            f"{op}: boundaries is a batch, whose examples have at least 2 dimensions; torch "
            "takes 1-D boundaries only: use torch.searchsorted(boundaries, input) (its "
            "leading dimensions are input's)")
    result = MaskedBatch._make(func(input.data, boundaries, out_int32=out_int32, right=right),
                               input._mask, input.dims)
    return mark(result, input._scalar) if not input.dims else result


@_registry.implements(torch.isin, family=FAMILY)
def isin(func, elements, test_elements=None, *, assume_unique=False, invert=False,
          out=None, test_element=None):
    """Whether each element is among the test elements: plain ones (the same for every
    example) by torch's op on the data; a batch of them, each example's own real values,
    compared as torch compares them (``==``: NaN is in nothing).  ``test_element=`` is
    torch's name for one number."""
    op = _registry.op_name(func)
    if test_element is not None:
        test_elements = test_element
    _registry.refuse_out(op, out)
    if not isinstance(test_elements, MaskedBatch):
        result = func(elements.data, test_elements, assume_unique=assume_unique,
                      invert=invert)
        result = MaskedBatch._make(result, elements._mask, elements.dims)
        return mark(result, elements._scalar) if not elements.dims else result
    tests = test_elements
    batch = tests.data.size(0)
    real = tests.mask.expand_as(tests.data).reshape(batch, 1, -1)
    pool = tests.data.reshape(batch, 1, -1)
    if isinstance(elements, MaskedBatch):
        values, mask, dims = elements.data, elements._mask, elements.dims
    else:
        values = torch.as_tensor(elements, device=tests.device)
        if values.dim() == 0:
            values, mask, dims = values.expand(batch), None, ()
        elif values.size(0) != 1:
            raise ValueError(
                f"{op}: elements is a plain tensor of shape {tuple(values.shape)} and "
                "test_elements a batch: each example's result would have elements' shape, "
                "whose dimension 0 must be each example's (of size one)")
        else:
            values, mask, dims = values.expand(batch, *values.shape[1:]), None, \
                (False,) * (values.dim() - 1)
    found = ((values.reshape(batch, -1, 1) == pool) & real).any(-1).view(values.shape)
    result = MaskedBatch._make(found ^ bool(invert), mask, dims)
    if not dims:
        kind = (elements._scalar if isinstance(elements, MaskedBatch)
                else torch.as_tensor(elements).dim() == 0)
        result = mark(result, kind)
    return result
