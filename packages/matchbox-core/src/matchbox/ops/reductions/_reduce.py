"""What every reduction shares: the dimensions it reduces, the layout it leaves, and
``reduce``, which fills padding with the op's identity where it would be mixed in.

Other families that reduce a dimension (``ops/selection.py``) use it too, and so do
other distributions, through ``matchbox.extending``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch

from matchbox import _capture, _lengths, _masking
from matchbox._example_scalars import VECTOR, mark, reduced_over
from matchbox.masked_batch import MaskedBatch, mask_from_lengths, normalize_dim

__all__ = ["Reducer", "check_mean_dtype", "count", "highest", "lowest", "reduce",
           "reduced_dimensions", "reduced_layout", "refuse_empty"]

Reducer = Callable[[torch.Tensor, tuple[int, ...], bool], torch.Tensor]


def reduced_dimensions(op: str, x: MaskedBatch, dim: Any) -> tuple[int, ...]:
    """Normalised non-batch dimensions to reduce; ``None`` means all of them."""
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        return tuple(range(1, x.dim()))
    asked = dim if isinstance(dim, (tuple, list)) else (dim,)
    out = tuple(sorted({normalize_dim(op, d, x.dim()) for d in asked}))
    if 0 in out:
        raise ValueError(
            f"{op}: cannot reduce over dimension 0, the batch dimension of each example; "
            "reduce across examples with matchbox.batch_sum or matchbox.batch_mean"
        )
    return out


def reduced_layout(
    x: MaskedBatch, reduced: tuple[int, ...], keepdim: bool
) -> tuple[torch.Tensor, tuple[bool, ...]]:
    """The mask and dims of ``x`` reduced over the dimensions ``reduced`` (ints)."""
    remaining = tuple(d for i, d in enumerate(x.dims, start=1) if i not in reduced)
    if keepdim:
        new_dims = tuple(False if i in reduced else d for i, d in enumerate(x.dims, start=1))
    else:
        new_dims = remaining
    dynamic = [i for i in reduced if x.dims[i - 1]]
    if x._mask is None or (dynamic and not any(remaining)):
        # Every example's reduction is real, even over an empty extent (a sum
        # of nothing is 0).  A reduction over static dims only keeps the mask,
        # which may mark whole examples as not real (as after ``unbind``).
        return None, new_dims
    mask = x._mask
    lengths = _lengths.carried(mask)
    if lengths is not None:
        # An example empty in part has an all-false mask, whose ``any`` would lose
        # its sizes in the remaining dimensions: the mask comes from its lengths.
        kept = [k for k, i in enumerate(i for i, d in enumerate(x.dims, 1) if d)
                if i not in reduced]
        lengths = lengths[:, kept]
        shape = [1 if i in reduced else n for i, n in enumerate(x.data.shape)]
        mask = mask_from_lengths(lengths, shape, tuple(False if i in reduced else d
                                                       for i, d in enumerate(x.dims, 1)))
    elif dynamic:
        mask = mask.any(dim=dynamic, keepdim=True)
    if not keepdim:
        mask = mask.squeeze(reduced)
    return _lengths.rebuilt(mask, lengths, new_dims), new_dims


def reduce(
    op: str,
    x: MaskedBatch,
    dim: Any,
    keepdim: bool,
    reducer: Reducer,
    identity: float | bool | None,
) -> MaskedBatch:
    """Reduce ``x`` over ``dim``, filling padding with ``identity`` if it is mixed in."""
    rank = x.data.dim()
    if type(dim) is int and x._mask is None and -rank <= dim < rank:
        single = dim % rank
        if single and not x.dims[single - 1]:
            # The commonest reduction (``h.sum(-1)``): one static dimension of a
            # batch without padding, which has no padding to mix in or keep.
            dims = x.dims[:single - 1] + ((False,) if keepdim else ()) + x.dims[single:]
            return mark(MaskedBatch._make(reducer(x.data, (single,), keepdim), None, dims),
                        VECTOR)
    reduced = reduced_dimensions(op, x, dim)
    mixes_padding = any(x.dims[i - 1] for i in reduced)
    data = x.data
    if mixes_padding:
        if identity is None:
            raise NotImplementedError(f"{op} over a dynamic dimension is not supported")
        data = _masking.fill_padding(x, identity)
    mask, new_dims = reduced_layout(x, reduced, keepdim)
    if not reduced:
        # Examples are scalars of shape (1,): "every dimension" is none, but
        # torch reads an empty dim list as all of them, which would reduce
        # across the batch.  Reduce each example's own one-element view.
        result = MaskedBatch._make(reducer(data.unsqueeze(1), (1,), False), mask, new_dims)
    else:
        result = MaskedBatch._make(reducer(data, reduced, keepdim), mask, new_dims)
    # What the loop's result is (a 0-d tensor or not), where ``dim`` is as the user wrote
    # it: callers that pass dimensions they normalised leave it unknown, or mark it.
    return reduced_over(result, dim, keepdim) if type(dim) is not tuple else result


def count(x: MaskedBatch, reduced: tuple[int, ...]) -> torch.Tensor:
    """Each example's number of real elements over ``reduced``, kept as size-one dims."""
    dynamic = [i for i in reduced if x.dims[i - 1]]
    static = math.prod(x.data.size(i) for i in reduced if not x.dims[i - 1])
    dtype = x.dtype if x.dtype.is_floating_point or x.dtype.is_complex else torch.float32
    if not dynamic:
        return torch.tensor(float(static), dtype=dtype, device=x.device)
    return x.mask.sum(dim=dynamic, keepdim=True).to(dtype) * static


def refuse_empty(op: str, x: MaskedBatch, reduced: tuple[int, ...]) -> None:
    """Raise, as the loop would, when a running example is empty along the reduced dims.

    An example that is not running (``_masking.EXECUTION_MASK``) gets the
    reduction's identity instead; its result is discarded.
    """
    dynamic = [i for i in reduced if x.dims[i - 1]]
    if not dynamic:
        return
    lengths = x.lengths()
    columns = [sum(x.dims[: i - 1]) for i in dynamic]
    empty = _masking.running((lengths[:, columns] == 0).any(1))
    # The reduction goes on (an empty example gets its identity): on an accelerator,
    # inside @batch, the check is read when the call ends.
    _capture.check(empty, functools.partial(_empty_error, op, empty, dynamic[0]))


def _empty_error(op: str, empty: torch.Tensor, d: int) -> IndexError:
    return IndexError(f"{op}: example {int(empty.nonzero()[0])} has size 0 in dynamic "
                      f"dimension {d}, and {op} of an empty dimension is undefined")


def _keep(result: torch.Tensor, reduced: tuple[int, ...], keepdim: bool) -> torch.Tensor:
    return result if keepdim else result.squeeze(reduced)


def check_mean_dtype(op: str, dtype: torch.dtype) -> None:
    """Refuse integer (and bool) values as the loop's ``torch.mean`` does, with its
    message: a mean computed as a sum over a count would not."""
    if not (dtype.is_floating_point or dtype.is_complex):
        raise RuntimeError(
            f"{op}: could not infer output dtype. Input dtype must be either a floating "
            f"point or complex dtype. Got: {dtype}"
        )


def lowest(dtype: torch.dtype) -> float | bool:
    if dtype == torch.bool:
        return False
    if dtype.is_floating_point:
        return -math.inf
    return torch.iinfo(dtype).min


def highest(dtype: torch.dtype) -> float | bool:
    if dtype == torch.bool:
        return True
    if dtype.is_floating_point:
        return math.inf
    return torch.iinfo(dtype).max
