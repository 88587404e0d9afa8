"""``torch.tensordot``: written as the ``einsum`` it is, so ``einsum``'s rule for batches
(``linalg.py``) runs it: padding zeroed where a dimension is summed, each index's sizes
checked example by example, the result real where its kept dimensions are.

Per example, as torch reads it: ``dims=k`` contracts the last ``k`` dimensions of ``a``
with the first ``k`` of ``b``; ``dims=(da, db)`` contracts ``a``'s dimensions ``da`` with
``b``'s ``db``, pair by pair.  The result holds ``a``'s other dimensions, then ``b``'s.
Each example's dimension 0 (of size one) must stay the result's dimension 0: the batch is
``a`` (its dimension 0 not contracted), or ``b`` beside a 0-d ``a`` (``dims=0``).  Any
other call is refused, naming the argument.  As in ``einsum``, a plain ``b`` along a
dynamic dimension of ``a`` spans its padded size (``x.maxsize(d)``).
"""

from __future__ import annotations

import string
from typing import Any

import torch

from matchbox import _lengths, _registry
from matchbox.masked_batch import MaskedBatch, normalize_dim
from matchbox.ops.linalg import einsum


def _contracted(op: str, a: Any, b: Any, dims: Any) -> tuple[list[int], list[int]]:
    """The dimensions of ``a`` and of ``b`` contracted pair by pair (normalised)."""
    if isinstance(dims, MaskedBatch):
        raise NotImplementedError(f"{op}: dims must be the same for every example, not a batch")
    if isinstance(dims, torch.Tensor):
        dims = dims.tolist()
    if isinstance(dims, int):
        if dims < 0:
            raise RuntimeError(f"{op}: tensordot expects dims >= 0, but got dims={dims}")
        if dims > min(a.dim(), b.dim()):
            raise RuntimeError(f"{op}: tensordot expects dims < ndim_a or ndim_b, but got "
                               f"dims={dims}")
        return list(range(a.dim() - dims, a.dim())), list(range(dims))
    first, second = dims
    if isinstance(first, int) or isinstance(second, int):
        raise TypeError(f"{op}: dims must be an int or two lists of dimensions, got {dims!r}")
    first, second = list(first), list(second)
    if len(first) != len(second):
        raise RuntimeError(f"{op}: both dimension lists should have same length")
    return ([normalize_dim(op, d, a.dim()) for d in first],
            [normalize_dim(op, d, b.dim()) for d in second])


@_lengths.aware  # (einsum's rule builds the lengths)
@_registry.implements(torch.tensordot, family="linalg")
def tensordot(func, a, b, dims=2, out=None):
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    in_a, in_b = _contracted(op, a, b, dims)
    if len(set(in_a)) != len(in_a) or len(set(in_b)) != len(in_b):
        raise RuntimeError(f"{op}: a dimension appears twice in dims {dims!r}")
    if isinstance(b, MaskedBatch) and a.dim() > 0:
        raise ValueError(
            f"{op}: b is a batch, and the result would hold each example's dimension 0 (of "
            "size one, b's first) after a's dimensions, or contract it: pass the batch as a "
            "(tensordot(b, a, dims) with the dims swapped), then permute the result")
    if isinstance(a, MaskedBatch) and 0 in in_a:
        raise ValueError(
            f"{op}: dims contracts dimension 0 of a, each example's own batch dimension (of "
            "size one), which the result must keep as its dimension 0")
    letters = iter(string.ascii_letters)
    term_a = [next(letters) for _ in range(a.dim())]
    term_b = [next(letters) for _ in range(b.dim())]
    for i, j in zip(in_a, in_b):
        term_b[j] = term_a[i]
    output = ([c for i, c in enumerate(term_a) if i not in in_a]
              + [c for j, c in enumerate(term_b) if j not in in_b])
    equation = f"{''.join(term_a)},{''.join(term_b)}->{''.join(output)}"
    return einsum(func, equation, a, b)
