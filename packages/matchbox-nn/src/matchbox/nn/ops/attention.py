"""``F.scaled_dot_product_attention`` on batches, and the masks attention shares.

The oracle is the call on each example alone.  Query, key and value are
batches of ``(1, [heads,] L, E)`` examples whose sequence dimension (the
second to last) may be dynamic; the batch runs ONE attention call for all
examples, with a mask derived from the batch:

| situation (per example)             | PyTorch, example alone           | on the batch               |
|-------------------------------------|----------------------------------|----------------------------|
| key ``j`` is padding                 | (no such key)                    | masked out                 |
| ``is_causal=True``, ``Lq != Lk``     | top-left causal mask (query      | the same, aligned at each  |
|                                      | ``i`` sees keys ``0..i``)        | example's own start        |
| a query row sees no key (zero-length | ``torch >= 2.5``: zeros, value   | zeros, value and gradient, |
| keys, or an ``attn_mask`` row that   | and gradient (``torch < 2.5``:   | on every torch version     |
| hides every key)                     | NaN)                             |                            |
| zero-length queries                  | empty output                     | empty output               |
| ``dropout_p > 0``                    | its own random mask              | independent masks, other   |
|                                      |                                  | random numbers             |

Padding may hold anything (NaN): padded query, key and value rows are
replaced by zeros before the products (``0 * NaN`` would be NaN), padded keys
are masked, and gradients arriving at padded output rows are dropped (core's
mixing rule).  A row that sees no key attends to every (zeroed) key instead,
so no softmax is taken over nothing, and its output is zeroed afterwards.

``attn_mask`` (bool: True = take part; float: added to the scores) is a plain
tensor shared by every example, whose sizes along the query and key
dimensions are 1 or the batch's padded sizes (each example reads its top-left
corner, as a causal mask built with ``maxsize`` is read), or a batch of
per-example masks ``(1, [heads,] Lq, Lk)``.  ``scale`` and ``enable_gqa``
(torch >= 2.5) pass through.  ``nn.MultiheadAttention`` is in
``multihead_attention.py``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from matchbox.extending import (
    MaskedBatch,
    check_lengths_agree,
    combine_masks,
    expanded_row,
    fill_padding,
    fit_mask,
    guard_gradient,
    implements,
    op_name,
    raise_rank,
)

# -------------------------------------------------------------------- operands


def _check_operands(op: str, operands: dict[str, Any]) -> tuple[int, int]:
    """Rank and batch size of the attention operands; errors name the argument."""
    batches = {name: x for name, x in operands.items() if isinstance(x, MaskedBatch)}
    rank = next(iter(batches.values())).dim()
    for name, x in batches.items():
        if x.dim() != rank or rank < 3:
            raise ValueError(
                f"{op}: {name} has examples of rank {x.dim()}; query, key and value must be "
                "batches of the same rank, at least 3: (1, [heads,] length, features)"
            )
        for i, dynamic in enumerate(x.dims, start=1):
            if dynamic and i != rank - 2:
                raise ValueError(
                    f"{op}: dimension {i} of {name} is dynamic; only the sequence dimension "
                    f"({rank - 2}, the second to last) may differ between examples"
                )
    sizes = {x.data.size(0) for x in batches.values()}
    if len(sizes) > 1:
        raise ValueError(f"{op}: query, key and value have different batch sizes {sorted(sizes)}")
    batch_size = sizes.pop()
    for name, x in operands.items():
        if not isinstance(x, torch.Tensor):
            continue
        # Expanded from size one to the batch size (``cls.expand(x.size(0), -1, -1)``): the
        # same for every example, as a pointwise op takes it (``expanded_row``).
        x = expanded_row(x, batch_size)
        if x.dim() > rank or x.dim() == rank and x.size(0) != 1:
            raise ValueError(
                f"{op}: {name} is a plain tensor of shape {tuple(x.shape)}; a tensor shared by "
                f"every example must have at most rank {rank} and size 1 in dimension 0 (or "
                f"be expanded from size 1 to the batch size there)"
            )
    return rank, batch_size


def _data(x: Any, rank: int, batch_size: int) -> torch.Tensor:
    """Padding zeroed; a plain tensor (the same for every example) expanded over the batch."""
    if isinstance(x, MaskedBatch):
        return fill_padding(x, 0)
    x = x.reshape((1,) * (rank - x.dim()) + tuple(x.shape))
    return x.expand(batch_size, *x.shape[1:])


def _sequence_mask(x: Any) -> torch.Tensor | None:
    """``(B, 1.., 1, L)``: which positions along the sequence dimension are real."""
    if not isinstance(x, MaskedBatch) or x._mask is None:
        return None
    return x._mask.transpose(-1, -2)


def check_same_keys(op: str, key: Any, value: Any, dim: int) -> None:
    """Keys and values must have each example's length, as in the loop."""
    if isinstance(key, MaskedBatch) and isinstance(value, MaskedBatch):
        if key.dims[dim - 1] != value.dims[dim - 1]:
            raise ValueError(
                f"{op}: the sequence dimension {dim} is dynamic in one of key and value and "
                "static in the other; they must have the same length in every example"
            )
        if key.dims[dim - 1]:
            check_lengths_agree(op, [(key, dim), (value, dim)])
    elif isinstance(key, MaskedBatch) != isinstance(value, MaskedBatch):
        batch = key if isinstance(key, MaskedBatch) else value
        if batch.dims[dim - 1]:
            raise ValueError(
                f"{op}: one of key and value is a batch with a dynamic sequence dimension and "
                "the other a plain tensor; they must have the same length in every example"
            )


# -------------------------------------------------------------------- masks


def allowed_and_visible(
    parts: list[torch.Tensor | None], bias: torch.Tensor | None, check_rows: bool
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The mask for the attention call and the rows that see at least one key.

    ``parts`` are bool masks (True = may attend) that broadcast to the scores;
    ``bias`` is a float mask added to them.  The result is a bool mask, or a
    float one when ``bias`` is given.  A row that sees no key is opened (it
    attends to every key, whose padding is zeroed, so its softmax is finite)
    and reported in ``visible`` so that its output can be zeroed; with
    ``check_rows=False`` the caller knows every real row sees a key and
    ``visible`` is ``None``.
    """
    allowed = combine_masks(parts)
    if bias is not None:
        if allowed is not None:
            bias = torch.where(allowed, bias, torch.full((), -math.inf, dtype=bias.dtype,
                                                          device=bias.device))
        if not check_rows:
            return bias, None
        visible = (bias != -math.inf).any(-1, keepdim=True)
        return bias.masked_fill(~visible, 0.0), visible
    if allowed is None:
        return None, None
    visible = allowed.any(-1, keepdim=True)
    return allowed | ~visible, visible if check_rows else None


def _causal(queries: int, keys: int, device: torch.device) -> torch.Tensor:
    """Top-left causal mask: query ``i`` sees keys ``0..i`` (as PyTorch's ``is_causal``)."""
    return torch.ones(queries, keys, dtype=torch.bool, device=device).tril()


def _plain_mask(op: str, name: str, mask: torch.Tensor, rank: int,
                padded: list[tuple[str, int, bool]]) -> torch.Tensor:
    """Check a mask shared by every example against the padded (query, key) sizes."""
    if mask.dim() > rank or (mask.dim() == rank and mask.size(0) != 1):
        raise ValueError(
            f"{op}: {name} is a plain tensor of shape {tuple(mask.shape)}; a mask shared by "
            f"every example must have at most rank {rank} and size 1 in dimension 0"
        )
    for offset, (what, size, dynamic) in zip((2, 1), padded):
        if mask.dim() < offset:
            continue
        given = mask.size(-offset)
        if given != 1 and given != size:
            where = ("which is dynamic in the batch: a mask shared by every example has size "
                     f"1 there or the padded size {size} (each example reads its leading "
                     "corner)") if dynamic else f"which has size {size}"
            raise ValueError(
                f"{op}: {name} has size {given} along the {what} (dimension "
                f"{mask.dim() - offset}), {where}"
            )
    return mask


def _batch_mask(op: str, name: str, mask: MaskedBatch, rank: int, query: Any, key: Any,
                sizes: tuple[int, int]) -> torch.Tensor:
    """A batch of per-example masks, padding filled and padded to the (query, key) sizes."""
    if mask.dim() > rank:
        raise ValueError(f"{op}: {name} has examples of rank {mask.dim()}, more than the "
                         f"query's {rank}")
    mask = raise_rank(mask, rank)
    for dim, other, what in ((rank - 2, query, "query"), (rank - 1, key, "key")):
        if not mask.dims[dim - 1]:
            continue
        if not (isinstance(other, MaskedBatch) and other.dims[rank - 3]):
            raise ValueError(f"{op}: {name} is dynamic in dimension {dim} but the {what} "
                             "sequence is not")
        check_lengths_agree(op, [(mask, dim), (other, rank - 2)])
    fill = False if mask.dtype == torch.bool else 0.0
    data = fill_padding(mask, fill)
    for dim, size in zip((rank - 2, rank - 1), sizes):
        if mask.dims[dim - 1] and data.size(dim) != size:
            if data.size(dim) > size:
                data = data.narrow(dim, 0, size)
            else:
                pad = [0, 0] * (rank - 1 - dim) + [0, size - data.size(dim)]
                data = F.pad(data, pad, value=fill)
    return data


def _user_mask(op: str, attn_mask: Any, rank: int, query: Any, key: Any,
               q: torch.Tensor, k: torch.Tensor) -> torch.Tensor | None:
    if attn_mask is None:
        return None
    if isinstance(attn_mask, MaskedBatch):
        return _batch_mask(op, "attn_mask", attn_mask, rank, query, key,
                           (q.size(-2), k.size(-2)))
    padded = [("query sequence", q.size(-2), _dynamic_sequence(query)),
              ("key sequence", k.size(-2), _dynamic_sequence(key))]
    return _plain_mask(op, "attn_mask", attn_mask, rank, padded)


def _dynamic_sequence(x: Any) -> bool:
    return isinstance(x, MaskedBatch) and x.dims[-2]


def _split_user_mask(mask: torch.Tensor | None) -> tuple[list[Any], torch.Tensor | None]:
    """A user mask as a bool part (True = may attend) or a float bias."""
    if mask is None:
        return [], None
    if mask.dtype == torch.bool:
        return [mask], None
    return [], mask


# -------------------------------------------------------------------- results


def _result_mask(query: Any, key: Any, value: Any) -> torch.Tensor | None:
    """Real output rows: the query's; a key/value batch with a static sequence dimension
    may mark whole examples as not real (as after ``unbind``), which carries over."""
    masks = [query._mask] if isinstance(query, MaskedBatch) else []
    for x in (key, value):
        if isinstance(x, MaskedBatch) and not x.dims[-2] and x._mask is not None:
            masks.append(x._mask)
    return combine_masks(masks)


def _finish(out: torch.Tensor, visible: torch.Tensor | None, mask: torch.Tensor | None,
            dims: tuple[bool, ...]) -> MaskedBatch:
    """Zero rows that saw no key and drop gradients at padding: one ``where`` for both."""
    if visible is not None:
        keep = visible if mask is None else visible & mask
        out = torch.where(keep, out, out.new_zeros(()))
    else:
        out = guard_gradient(out, mask)
    mask = fit_mask(mask, out, dims)
    return MaskedBatch._make(out, mask, dims)


# -------------------------------------------------------------------- sdpa


@implements(F.scaled_dot_product_attention, family="attention")
def scaled_dot_product_attention(func, query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    op = op_name(func)
    operands = {"query": query, "key": key, "value": value}
    rank, batch_size = _check_operands(op, operands)
    if is_causal and attn_mask is not None:
        # The message PyTorch gives for one example.
        raise RuntimeError(f"{op}: Explicit attn_mask should not be set when is_causal=True")
    check_same_keys(op, key, value, rank - 2)
    q, k, v = (_data(x, rank, batch_size) for x in (query, key, value))
    extra: dict[str, Any] = {}
    if scale is not None:
        extra["scale"] = scale
    if enable_gqa:
        extra["enable_gqa"] = True

    key_valid = _sequence_mask(key)
    user = _user_mask(op, attn_mask, rank, query, key, q, k)
    parts, bias = _split_user_mask(user)
    if key_valid is None and user is None:
        # No padding among the keys: PyTorch's own causal mask is the example's.
        out = func(q, k, v, dropout_p=dropout_p, is_causal=is_causal, **extra)
        visible = None
    else:
        if is_causal:
            parts.append(_causal(q.size(-2), k.size(-2), q.device))
        # Every real query row sees a key unless the user's mask hides some, or
        # an example has no keys (impossible when keys and queries share a mask).
        same_lengths = isinstance(query, MaskedBatch) and key_valid is not None and (
            query._mask is key._mask)
        mask, visible = allowed_and_visible([key_valid, *parts], bias,
                                             check_rows=user is not None or not same_lengths)
        out = func(q, k, v, attn_mask=mask, dropout_p=dropout_p, **extra)
    dims = (query.dims[:-1] if isinstance(query, MaskedBatch) else (False,) * (rank - 2)) + (
        False,)
    return _finish(out, visible, _result_mask(query, key, value), dims)
