"""Ops within each row's static dimensions: ``repeat``/``tile``/
``repeat_interleave``, ``roll``, ``tril``/``triu`` and ``diagonal``.

Semantics: a ``PackedBatch`` holds exactly the real rows, ``(sum T_e, *S)``; an op that
works along the static dimensions ``S`` of each example (dimensions 2 and later) is the
same op on every row, so it runs once on ``data`` (example dimension ``d`` is row
dimension ``d - 1``) and keeps the layout.  Along the packed dimension 1 (or across the
batch dimension 0) these ops would mix or move an example's steps, which rows alone
cannot do: they raise ``NotImplementedError`` naming the op and the way out
(``as_masked``), as every op without a ``PackedBatch`` handler does (``gather``,
``scatter``, ``median``, ``cdist``, ... go through ``MaskedBatch``).
"""

from __future__ import annotations

from typing import Any

import torch

from matchbox.extending import implements, normalize_dim, op_name, refuse_out
from matchbox.packed.packed_batch import PackedBatch


def _along_packed(op: str, what: str) -> NotImplementedError:
    return NotImplementedError(
        f"{op} {what} is not implemented for PackedBatch (it would mix or move each "
        "example's steps, which packed rows cannot hold); convert the batch with "
        "matchbox.packed.as_masked(x) (or x.to_masked()) to use MaskedBatch's op")


def _row_dim(op: str, x: PackedBatch, dim: Any) -> int:
    """Example dimension ``dim`` as a dimension of the rows (static dims only)."""
    d = normalize_dim(op, dim, x.dim())
    if d < 2:
        raise _along_packed(op, f"along dimension {d} (the {'packed' if d else 'batch'} "
                                "dimension)")
    return d - 1


def _sizes(args: tuple[Any, ...]) -> list[int]:
    if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)):
        return [int(s) for s in args[0]]
    return [int(s) for s in args]


def _repeat_rows(op: str, x: PackedBatch, factors: list[int]) -> PackedBatch:
    if len(factors) != x.dim():
        raise _along_packed(op, f"with {len(factors)} factors for examples of rank {x.dim()} "
                                "(new dimensions go in front of the packed dimension)")
    if factors[0] != 1 or factors[1] != 1:
        raise _along_packed(op, f"with factors {factors[:2]} for dimensions 0 and 1 (each "
                                "must be 1)")
    return PackedBatch._make(x.data.repeat(1, *factors[2:]), x.layout)


@implements(torch.Tensor.repeat, family="repeat", batch_type="PackedBatch")
def repeat(func, input, *sizes):
    return _repeat_rows(op_name(func), input, _sizes(sizes))


@implements(torch.tile, torch.Tensor.tile, family="repeat", batch_type="PackedBatch")
def tile(func, input, dims):
    factors = _sizes((dims,))
    return _repeat_rows(op_name(func), input,
                        [1] * (input.dim() - len(factors)) + factors)


@implements(torch.repeat_interleave, torch.Tensor.repeat_interleave, family="repeat", batch_type="PackedBatch")
def repeat_interleave(func, input, repeats=None, dim=None, *, output_size=None):
    op = op_name(func)
    if repeats is None or dim is None:
        raise _along_packed(op, "without dim (it flattens each example)")
    if isinstance(repeats, PackedBatch):
        raise _along_packed(op, "with per-example repeats")
    d = _row_dim(op, input, dim)
    return PackedBatch._make(torch.repeat_interleave(input.data, repeats, d,
                                                     output_size=output_size), input.layout)


@implements(torch.roll, torch.Tensor.roll, family="ordering", batch_type="PackedBatch")
def roll(func, input, shifts, dims=None):
    op = op_name(func)
    if dims is None:
        raise _along_packed(op, "without dims (it rolls each example's flattened values)")
    shift_list = list(shifts) if isinstance(shifts, (tuple, list)) else [shifts]
    dim_list = list(dims) if isinstance(dims, (tuple, list)) else [dims]
    if len(shift_list) != len(dim_list):
        raise RuntimeError(f"{op}: shifts and dimensions must align: {len(shift_list)} "
                           f"shifts, {len(dim_list)} dims")
    pairs = [(s, normalize_dim(op, d, input.dim())) for s, d in zip(shift_list, dim_list)]
    kept = [(s, _row_dim(op, input, d)) for s, d in pairs if d != 0]  # dim 0: size one
    if not kept:
        return input
    return PackedBatch._make(input.data.roll([s for s, _ in kept], [d for _, d in kept]),
                             input.layout)


@implements(torch.tril, torch.Tensor.tril, torch.triu, torch.Tensor.triu,
            family="matrix", batch_type="PackedBatch")
def tril_triu(func, input, diagonal=0, *, out=None):
    op = op_name(func)
    refuse_out(op, out)
    if input.dim() < 4:
        raise _along_packed(op, f"of examples of rank {input.dim()} (their matrices, the last "
                                "two dimensions, include the packed dimension)")
    return PackedBatch._make(func(input.data, diagonal), input.layout)


@implements(torch.diagonal, torch.Tensor.diagonal, family="matrix", batch_type="PackedBatch")
def diagonal(func, input, offset=0, dim1=0, dim2=1):
    op = op_name(func)
    d1, d2 = _row_dim(op, input, dim1), _row_dim(op, input, dim2)
    return PackedBatch._make(input.data.diagonal(offset, d1, d2), input.layout)
