"""Reading one position of a dimension per example: ``x[:, i]`` with ``i`` a batch of
per-example ints (``ops/indexing.py``'s ``__getitem__``, and its fast path
:func:`fast_getitem`), and what every one-position read shares: the loop's range check
(:func:`refuse_absent`) and the result where no example has the position
(:func:`nowhere`).
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

import torch

from matchbox import _capture, _copies, _lengths, _masking
from matchbox._example_scalars import SCALAR, VECTOR
from matchbox._host_reads import reads_values
from matchbox.masked_batch import MaskedBatch


def refuse_absent(present: torch.Tensor, index: int | torch.Tensor, n: int | torch.Tensor,
                   dimension: str, op: str = "Tensor.__getitem__") -> None:
    """Raise as the loop would for the first running example whose index is not
    ``present`` (in range).

    ``index``: every example's (an int) or each example's own (a ``(batch,)`` tensor),
    as written (negative: counted from the end); ``n``: the examples' sizes in
    ``dimension`` (an int: the same for every example).  On an accelerator, inside a
    ``@batch`` call, raised when the call ends (``_capture.fails``).
    """
    mask = _masking.EXECUTION_MASK.get()
    refused = (mask > present  # (running_without's commonest answer, without its frames)
               if mask is not None and present.dim() == 1 and mask.shape == present.shape
               else _masking.running_without(present))
    # (``_capture.version_of`` and ``_capture.check``, inline: every per-example read asks.)
    version = None if isinstance(index, int) or index.is_inference() else index._version
    error = functools.partial(_out_of_range, refused, index, version, n, dimension, op)
    if _capture.fails(refused, error):
        raise _capture.with_failed_flags(error(), refused)


def _out_of_range(refused: torch.Tensor, index: int | torch.Tensor, version: int | None,
                  n: int | torch.Tensor, dimension: str, op: str) -> IndexError:
    j = int(refused.nonzero()[0])
    size = n if isinstance(n, int) else int(n[j])
    if isinstance(index, torch.Tensor) and _capture.written_since(index, version):
        # The check was deferred to the end of the @batch call: the value it read is gone.
        return IndexError(f"{op}: an index is out of range for example {j}, "
                          f"which has size {size} in {dimension}")
    own = index if isinstance(index, int) else int(index[j])
    return IndexError(
        f"{op}: index {own} is out of range for example {j}, which has "
        f"size {size} in {dimension}"
    )


def nowhere(x: MaskedBatch, d: int, present: torch.Tensor,
             dims: tuple[bool, ...]) -> MaskedBatch:
    """``x`` indexed at a position along ``d`` that no example has: padding."""
    shape = x.data.shape[:d] + x.data.shape[d + 1:]
    data = torch.zeros(shape, dtype=x.data.dtype, device=x.data.device)
    mask = torch.zeros(shape, dtype=torch.bool, device=x.data.device)
    mask = selected_lengths(_masking.fit_mask(mask, data, dims), x, d, present, dims)
    return MaskedBatch._make(data, mask, dims)


def selected_lengths(mask: torch.Tensor, x: MaskedBatch, d: int, present: torch.Tensor,
                      dims: tuple[bool, ...]) -> torch.Tensor:
    """``mask``, of ``x`` indexed at one position of dimension ``d``, carrying the lengths
    of ``x``'s mask without d's (an example that lacks the position is absent: zeros)."""
    carried = _lengths.carried_by(x)
    if carried is None or sum(dims) < 2:
        return mask
    keep = [k for k in range(carried.size(1))
            if not (x.dims[d - 1] and k == _lengths.column(x.dims, d))]
    return _lengths.carry(mask, carried[:, keep] * present.reshape(-1, 1))


# The last bounds a per-example index read: (weak reference to the mask, its version,
# dim, bounds).  A loop reads one batch at a new index each step (``leaves[:, position]``):
# its lengths are summed once, not once a step.  Eager only (a capture's fake masks), and
# not for inference tensors (no version counter to tell a write).
_LAST_BOUNDS: tuple[Any, int, Any, Any] = (lambda: None, 0, None, None)


def _bounds_along(x: MaskedBatch, d: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each example's size along dynamic dim ``d`` of a batch with a mask, ``n``; ``-n``,
    the least index in range; and ``max(n, 1)``, a divisor that wraps any index into
    ``0 .. n - 1``."""
    global _LAST_BOUNDS
    mask = x._mask
    ref, version, dim, bounds = _LAST_BOUNDS
    if ref() is mask and version == mask._version and dim == (d, x.dims):
        return bounds
    n = _masking.lengths_along(x, d)
    bounds = (n, -n, n.clamp(min=1))
    if not mask.is_inference() and _capture.capturing() is None:
        _LAST_BOUNDS = (weakref.ref(mask), mask._version, (d, x.dims), bounds)
    return bounds


# ``arange(batch)`` on a device: the rows of a per-example index, made once (eager only:
# a capture records its own).  Made outside inference mode, so that code recording
# gradients may save it for the backward pass.
_EXAMPLE_ROWS: dict[tuple[int, torch.device], torch.Tensor] = {}


def _example_rows(like: torch.Tensor) -> torch.Tensor:
    batch = like.size(0)
    if type(like) is not torch.Tensor or _capture.capturing() is not None \
            or torch.compiler.is_compiling():
        return torch.arange(batch, device=like.device)
    key = (batch, like.device)
    rows = _EXAMPLE_ROWS.get(key)
    if rows is None:
        if len(_EXAMPLE_ROWS) >= 16:
            _EXAMPLE_ROWS.clear()
        with torch.inference_mode(False):
            rows = _EXAMPLE_ROWS[key] = torch.arange(batch, device=like.device)
    return rows


def is_per_example_int(item: Any) -> bool:
    return (isinstance(item, MaskedBatch) and item.dims == ()
            and item._data.dtype in _INTEGER_DTYPES)


_INTEGER_DTYPES = frozenset({torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8,
                             *(getattr(torch, f"uint{n}", None) for n in (16, 32, 64))}
                            - {None})


def select_per_example(x: MaskedBatch, d: int, index: MaskedBatch,
                       op: str = "Tensor.__getitem__", positions: list[Any] | None = None
                       ) -> MaskedBatch:
    """``x[..., i]`` along dim ``d`` with ``i`` a batch of per-example ints; ``positions``
    (a list) takes each example's position read (a ``(batch,)`` tensor, negative ones
    counted from the padded end, as advanced indexing reads them), for a write there.

    Each example's element is read with one advanced index (``data[rows, ..., i]``),
    not a ``gather`` of an index expanded over the other dimensions and squeezed.

    Called by the op's handler and fast path only, so a region's deferred guard has been
    applied or passes through (``matchbox._region_guard``): the slots are the data, read
    without the ``data`` property's frame.
    """
    x_data, i = x._data, index._data
    batch = x_data.size(0)
    if i.size(0) != batch:
        raise ValueError(
            f"{op}: the index holds {i.size(0)} examples but the batch "
            f"has {batch}"
        )
    dims = x.dims[1:] if d == 1 else x.dims[: d - 1] + x.dims[d:]
    size = x_data.size(d)
    i = i.long()
    if x.dims[d - 1] and x._mask is not None:
        # Each example's own size n: an index in -n .. n - 1 is in range, and wrapped
        # by n it reads its element (counted from the end when negative).
        n, least, divisor = _bounds_along(x, d)
        present = (i >= least) & (i < n)
        at = i.remainder(divisor)
    else:
        # A static dimension, or a dynamic one without a mask: every example has
        # ``size`` elements.
        n = size
        at = _in_range_everywhere(i, size) if index._mask is None else None
        if at is not None:
            present = None  # every example's index is in range: nothing to check
        else:
            present = i.clamp(-size, size - 1) == i
            at = i.remainder(size) if size else i
    if present is not None:
        if index._mask is not None:  # an index that is padding is not in range
            present = present & index._mask
        refuse_absent(present, i, n, f"dimension {d}", op)
    if positions is not None:
        positions.append(at)
    if size == 0:  # every example misses (a deferred check's, or one not running)
        return nowhere(x, d, present, dims)
    rows = _example_rows(at)
    selected = (rows, at) if d == 1 else (rows,) + (slice(None),) * (d - 1) + (at,)
    data = x_data[selected]
    mask = x._mask
    if mask is not None and not (x.dims[d - 1] and not any(dims)):
        mask = mask[selected] if mask.size(d) != 1 else mask.squeeze(d)
    else:
        # Every running example reads a position it has, and d is the only dynamic
        # dimension: every element read is real (an example not running may have read
        # padding, which its region discards).
        mask = None
    if sum(dims) >= 2 and _lengths.carried_by(x) is not None:
        # Lengths carried beside the mask: an example that lacks the position is empty.
        if present is None:
            present = torch.ones_like(i, dtype=torch.bool)
        present_view = present.view([-1] + [1] * (data.dim() - 1))
        real = present_view if mask is None else mask & present_view
        real = selected_lengths(real, x, d, present, dims)
        return MaskedBatch._make(data, _masking.fit_mask(real, data, dims), dims)
    # Every running example has its position, or the check above raises (at once, or when
    # the @batch call ends): the result's mask is the batch's own there. An example that
    # does not run reads an element of its own (the index wrapped), which its region
    # discards; the same mask object for every read of a batch spares the ops combining
    # two reads a guard (a stack's two top items, read to be reduced).
    return MaskedBatch._make(data, None if mask is None else _masking.fit_mask(mask, data, dims),
                             dims)


#: The most examples whose indices :func:`_in_range_everywhere` reads as a list: past
#: about 300, the list's Python ints cost more than the ops they spare (a loaded 2-core
#: CPU: 7.8 against 12.5 µs for 128 examples, 49 against 16 µs for 1024).
_LISTED = 256


def _in_range_everywhere(i: torch.Tensor, size: int) -> torch.Tensor | None:
    """``i`` (``(batch,)`` indices into a dimension of ``size`` elements) as the positions
    to read, where eager code reads values on the host (the CPU,
    ``matchbox._masking.host_reads``) and every example's index, running or not, is in
    range, read there in one ``tolist``: no per-example flags, wrap or check to compute
    (5 ops and a read, a TreeLSTM's ``stack[:, top - 1]`` each step); ``None`` otherwise,
    and for more than ``_LISTED`` examples (the caller computes and checks the flags)."""
    if (size == 0 or type(i) is not torch.Tensor or i.size(0) > _LISTED
            or _capture.capturing() is not None or not reads_values(i)
            or torch.compiler.is_compiling()):
        return None
    values = i.tolist()
    if not values:
        return None
    least = min(values)
    if least < -size or max(values) >= size:
        return None
    return i  # (a negative index counts from the end, as advanced indexing reads it)


def remember_source(result: MaskedBatch, input: MaskedBatch, index: Any) -> None:
    """Record on ``result`` (``input[index]``, one position per example, marked a copy)
    where an in-place op on it writes back (``ops/one_position_writes.write_through``): its
    ``_not_a_view`` becomes ``(input, index, input's data, its version)``, weak references
    (still true: views of it stay refused).  Not for an inference tensor's data (no
    version to tell a write since)."""
    data = input._data
    if not data.is_inference():
        result._not_a_view = (_ref(input), index, _ref(data), data._version)


_ref = weakref.ref


def getitem_fast_path(func: Any) -> Any:
    """The fast path of ``Tensor.__getitem__`` (``fast_path=`` of the registry, see
    ``matchbox._methods``): :func:`fast_getitem`."""
    return fast_getitem


def fast_getitem(func: Any, x: Any, args: tuple[Any, ...]) -> MaskedBatch | None:
    """``x[:, i]`` with ``i`` a batch of per-example ints standing for Python ints (a
    ``@batch`` counter: ``stack[:, top - 1]``), read without ``__getitem__``'s general
    parse of the index, as that would (``None``: any other call, which it takes)."""
    index = args[0] if len(args) == 1 else None
    if type(x) is not MaskedBatch or type(index) is not tuple or len(index) != 2:
        return None
    first, i = index
    if (type(first) is not slice or first.start is not None or first.stop is not None
            or first.step is not None or not isinstance(i, MaskedBatch)
            or i.dims or i._data.dtype not in _INTEGER_DTYPES  # (is_per_example_int)
            or i._scalar is not SCALAR or not x.dims or i._deferred_guard is not None):
        return None
    result = select_per_example(x, 1, i)
    _copies.mark(result)  # advanced indexing copies, as the loop's int does not
    data = x._data
    if not data.is_inference():  # (remember_source, inline: a stack is read every step)
        result._not_a_view = (_ref(x), index, _ref(data), data._version)
    if not result.dims:
        result._scalar = VECTOR  # x[:, k] of a (1, K) example is (1,) in the loop
    return result
