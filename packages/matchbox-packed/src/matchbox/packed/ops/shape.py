"""Shape ops on a ``PackedBatch``: ``cat``, and ``transpose(0, 1)`` (a time-major view).

Semantics (dimension numbers of one example ``(1, T_e, *S)``):

- along a static dimension (2 or later): the batches must hold examples of the
  same lengths; their rows are concatenated (``torch.cat`` on ``data``) in the
  first batch's order, and the layout is kept;
- along the packed dimension 1: each example's steps are concatenated, so
  example ``e`` of the result has the summed length; one ``index_select``
  builds the new packed layout from the parts' rows;
- dimension 0 is each example's own batch dimension: refused.

Every argument must be a batch (with a ``MaskedBatch`` among them the mixing
rule gives a ``MaskedBatch`` cat).

``x.transpose(0, 1)`` of examples ``(1, T, F)`` is ``(T, 1, F)`` per example:
matchbox-nn's time-major view of the batch (``time_major(x)``), what
per-example code hands a ``batch_first=False`` recurrent module.  Other
transposes are not implemented (convert with ``as_masked``).
"""

from __future__ import annotations

import torch

from matchbox.extending import implements, normalize_dim, op_name, refuse_out
from matchbox.nn.extending import Layout, time_major_view
from matchbox.packed.ops.pointwise import check_same_lengths, row_argument
from matchbox.packed.packed_batch import PackedBatch


@implements(torch.transpose, torch.Tensor.transpose, torch.swapaxes,
            torch.Tensor.swapaxes, torch.swapdims, torch.Tensor.swapdims,
            family="shape", batch_type="PackedBatch")
def transpose(func, input, dim0, dim1):
    op = op_name(func)
    if {normalize_dim(op, dim0, input.dim()), normalize_dim(op, dim1, input.dim())} == {0, 1}:
        return time_major_view(op, input)
    raise NotImplementedError(
        f"{op}({dim0}, {dim1}) is not implemented for PackedBatch (only transpose(0, 1), a "
        "time-major view); convert the batch with matchbox.packed.as_masked(x) (or "
        "x.to_masked()) to use MaskedBatch's ops"
    )


@implements(torch.cat, torch.concat, torch.concatenate, family="shape", batch_type="PackedBatch")
def cat(func, tensors, dim=0, *, axis=None, out=None):
    op = op_name(func)
    refuse_out(op, out)
    dim = dim if axis is None else axis
    parts = list(tensors)
    for i, part in enumerate(parts):
        if not isinstance(part, PackedBatch):
            raise TypeError(f"{op}: argument {i} is a {type(part).__name__}; every argument of "
                            "a PackedBatch cat must be a batch")
    first = parts[0]
    for part in parts[1:]:
        if part.dim() != first.dim():
            raise ValueError(f"{op}: the batches have examples of rank {first.dim()} and "
                             f"{part.dim()}")
        if part.batch_size != first.batch_size:
            raise ValueError(f"{op}: the batches have different batch sizes "
                             f"({first.batch_size} and {part.batch_size})")
    d = normalize_dim(op, dim, first.dim())
    if d == 0:
        raise ValueError(f"{op}: dimension 0 is the batch dimension of each example (size "
                         "one); concatenating along it is not defined for batches")
    if d > 1:
        data = torch.cat([row_argument(op, p, first) for p in parts], d - 1)
        return PackedBatch._make(data, first.layout)
    return _cat_packed(parts)


def _cat_packed(parts: list[PackedBatch]) -> PackedBatch:
    """Concatenate each example's steps: example ``e`` takes the parts' rows in turn."""
    device = parts[0].device
    lengths = torch.stack([p.layout.lengths for p in parts]).sum(0)
    layout = Layout.from_lengths(lengths, device)
    examples, steps = layout.row_examples, layout.row_steps
    source = torch.zeros_like(steps)
    start = torch.zeros_like(examples)  # where part k's steps begin in each result row's example
    base = 0  # where part k's rows begin in the concatenated data
    for part in parts:
        length = part.layout.device_lengths().index_select(0, examples)
        local = steps - start
        inside = (local >= 0) & (local < length)
        offsets = part.layout.device_offsets()
        row = base + offsets.index_select(0, local.clamp(0, offsets.numel() - 1)) + (
            part.layout.unsorted_indices.index_select(0, examples))
        source = torch.where(inside, row, source)
        start = start + length
        base += part.layout.n_rows
    data = torch.cat([p.data for p in parts], 0).index_select(0, source)
    return PackedBatch._make(data, layout)


_ = check_same_lengths  # row_argument() checks lengths through it
