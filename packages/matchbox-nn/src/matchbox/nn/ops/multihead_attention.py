"""``nn.MultiheadAttention`` on batches, through ``F.multi_head_attention_forward``.

How a module call gets here: ``nn.MultiheadAttention.forward`` turns bool
masks into float ones, skips its fast path (an argument has
``__torch_function__``), and, when built with ``batch_first=True``, transposes
query, key and value to ``(L, N, E)``.  On a batch that transpose gives a
time-major view (``matchbox.nn.time_major``; per example ``(1, L, E) ->
(L, 1, E)``), and ``F.multi_head_attention_forward``, which checks
``has_torch_function`` first, dispatches here with the views.  The output
comes back as a view, which the module transposes back into a batch.  A module
built with ``batch_first=False`` is called on ``time_major(x)`` by the
per-example code itself (``x.transpose(0, 1)`` on a tensor).

Semantics (the oracle is the same module called on each example alone):

| argument / result          | per example                    | on the batch                          |
|----------------------------|--------------------------------|---------------------------------------|
| query, key, value          | ``(1, L, E)`` (batch first)    | ``MaskedBatch``; key and value share  |
|                            |                                | each example's length                 |
| ``key_padding_mask``       | ``(1, S)``, True / -inf = skip | a ``MaskedBatch`` of them, combined   |
|                            |                                | with the batch's own key padding      |
| ``attn_mask``              | ``(L, S)`` / ``(heads, L, S)`` | a plain tensor of the padded sizes;   |
|                            |                                | each example reads ``[:L, :S]``       |
| output                     | ``(1, L, E)``                  | ``MaskedBatch``, the query's mask     |
| weights (``need_weights``) | ``(1, [heads,] L, S)``         | ``MaskedBatch`` with dynamic L and S  |
| ``bias_k``/``bias_v``,     | appended after the last key    | appended after each example's last    |
| ``add_zero_attn``          |                                | key                                   |
| a query that sees no key   | ``need_weights=False``: zeros  | zeros (then ``out_proj``), weights 0, |
|                            | (torch >= 2.5); ``True``: NaN  | on every torch version                |
| dropout (training)         | its own random mask            | independent masks, other numbers      |

The projections are grouped as PyTorch groups them for one example (one
packed product for self-attention, query and key/value for ``key is value``),
so the numbers agree.  ``static_k``/``static_v`` are not supported.  A
batch cannot hold an example whose weights are empty in one of their two
dynamic dimensions (no queries but some keys, or the reverse): with
``need_weights=True`` that raises, naming the example; pass
``need_weights=False``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
import torch.nn.functional as F

from matchbox.extending import (
    EXECUTION_MASK,
    MaskedBatch,
    check_lengths_agree,
    combine_masks,
    expanded_row,
    fill_padding,
    fit_mask,
    guard_gradient,
    has_zero_padding,
    implements,
    lengths_along,
    mark_zero_padding,
    mask_lengths,
    op_name,
    pack_rows,
    real_rows,
    unpack_rows,
    unsupported,
    weight_input_data,
)
from matchbox.nn.ops.attention import allowed_and_visible, check_same_keys
from matchbox.nn.time_major import TimeMajorBatch


@dataclasses.dataclass
class _Inputs:
    """Query, key and value batch-major, ``(B, L, E)``: their batches and their data.

    A plain tensor shared by every example has no batch (``None``) and keeps
    its ``(1, L, E)`` data until after its projection.
    """

    batches: tuple[MaskedBatch | None, MaskedBatch | None, MaskedBatch | None]
    data: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    batch_size: int

    @property
    def query(self) -> MaskedBatch | None:
        return self.batches[0]

    @property
    def key(self) -> MaskedBatch | None:
        return self.batches[1]

    @property
    def embed_dim(self) -> int:
        return self.data[0].size(-1)

    def length(self, i: int) -> int:
        return self.data[i].size(1)

    def key_lengths(self) -> torch.Tensor:
        if self.key is None or self.key._mask is None:
            return torch.full((self.batch_size,), self.length(1), device=self.data[1].device)
        return lengths_along(self.key, 1)

    def project(self, i: int, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """``F.linear`` of input ``i`` on its real rows: zeros, and no gradient, at padding."""
        batch, data = self.batches[i], self.data[i]
        if batch is None:
            return F.linear(data, weight, bias).expand(self.batch_size, -1, -1)
        rows = real_rows(batch)
        # ``data`` is weight_input_data(batch): zero at padding under @batch, as the
        # batch's own data is where recorded so (fromlist's, a norm's result).
        zeroed = EXECUTION_MASK.get() is not None or has_zero_padding(batch)
        out = F.linear(pack_rows(data, rows, zeroed=zeroed), weight, bias)
        return unpack_rows(out, rows, data.shape[:-1])


def _inputs(op: str, query: Any, key: Any, value: Any) -> _Inputs:
    views = [x for x in (query, key, value) if isinstance(x, TimeMajorBatch)]
    batch_size = views[0].batch.data.size(0)
    for x in views:
        if x.batch.data.size(0) != batch_size:
            raise ValueError(f"{op}: query, key and value have different batch sizes "
                             f"({batch_size} and {x.batch.data.size(0)})")
    pairs = [_operand(op, name, x, batch_size) for name, x in (("query", query), ("key", key),
                                                                ("value", value))]
    (_, k), (_, v) = pairs[1], pairs[2]
    check_same_keys(op, pairs[1][0] if pairs[1][0] is not None else k,
                    pairs[2][0] if pairs[2][0] is not None else v, 1)
    return _Inputs(tuple(b for b, _ in pairs), tuple(d for _, d in pairs), batch_size)


def _operand(op: str, name: str, x: Any, batch_size: int) -> tuple[Any, torch.Tensor]:
    """A time-major input ``(L, N, E)`` per example as batch-major ``(batch, data)``."""
    if isinstance(x, TimeMajorBatch):
        if x.batch.dims[1]:
            raise ValueError(f"{op}: the feature dimension (2) of {name} is dynamic; it must "
                             "be static")
        return x.batch, weight_input_data(x.batch)
    if isinstance(x, torch.Tensor) and x.dim() == 3:
        # The same (L, 1, E) for every example, or one expanded from it to the batch size
        # (``cls.expand(x.size(0), -1, -1)``, time-major): its one example, as a pointwise
        # op takes it (``expanded_row``).
        example = expanded_row(x.transpose(0, 1), batch_size)
        if example.size(0) == 1:
            return None, example
    shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
    raise ValueError(
        f"{op}: {name} must be a time-major batch (matchbox.nn.time_major(x), which "
        "nn.MultiheadAttention(batch_first=True) builds itself) or a plain (L, 1, E) tensor "
        "shared by every example (time-major: a batch-first (1, L, E) tensor such as a class "
        f"token, passed itself or expanded from size 1 with .expand(x.size(0), -1, -1)); got "
        f"{shape}"
    )


def _check_embedding(op: str, embed_dim: int, embed_dim_to_check: int, num_heads: int) -> None:
    # PyTorch's own checks and messages, for the batch.
    if embed_dim != embed_dim_to_check:
        raise AssertionError(f"{op}: was expecting embedding dimension of {embed_dim_to_check}, "
                             f"but got {embed_dim}")
    if embed_dim % num_heads:
        raise AssertionError(f"{op}: embed_dim {embed_dim} not divisible by num_heads "
                             f"{num_heads}")


def _in_projection(query: Any, key: Any, value: Any, x: _Inputs, weight: torch.Tensor | None,
                   bias: torch.Tensor | None, separate: tuple | None) -> list[torch.Tensor]:
    """The q, k, v projections, grouped as PyTorch groups them for one example."""
    embed_dim = x.embed_dim
    biases = [None] * 3 if bias is None else list(bias.chunk(3))
    if separate is not None:
        weights = list(separate)
    elif key is value and query is key:
        proj = x.project(0, weight, bias).unflatten(-1, (3, embed_dim))
        return [proj[..., i, :] for i in range(3)]
    elif key is value:
        w_q, w_kv = weight.split([embed_dim, 2 * embed_dim])
        b_q, b_kv = (None, None) if bias is None else bias.split([embed_dim, 2 * embed_dim])
        kv = x.project(1, w_kv, b_kv).unflatten(-1, (2, embed_dim))
        return [x.project(0, w_q, b_q), kv[..., 0, :], kv[..., 1, :]]
    else:
        weights = list(weight.chunk(3))
    return [x.project(i, w, b) for i, (w, b) in enumerate(zip(weights, biases))]


def _append_at_ends(x: torch.Tensor, lengths: torch.Tensor,
                    rows: list[torch.Tensor | None]) -> torch.Tensor:
    """``rows`` after each example's last real position: ``(B, S, E) -> (B, S + n, E)``.

    One example alone gets ``bias_k``/``bias_v`` and the zero key of
    ``add_zero_attn`` at its end, which in the padded layout differs between
    examples.  ``None`` is a zero row.
    """
    out = F.pad(x, [0, 0, 0, len(rows)])
    position = torch.arange(out.size(1), device=x.device)
    for i, row in enumerate(rows):
        at = (position == (lengths.unsqueeze(1) + i)).unsqueeze(-1)
        out = torch.where(at, out.new_zeros(()) if row is None else row.reshape(-1), out)
    return out


def _key_padding_mask(op: str, mask: Any, x: _Inputs, size: int) -> torch.Tensor | None:
    """``key_padding_mask`` (True / -inf = ignore) as ``(B|1, S)`` data, padding filled."""
    if mask is None:
        return None
    dynamic = x.key is not None and x.key.dims[0]
    if isinstance(mask, MaskedBatch):
        if mask.dim() != 2:
            raise ValueError(f"{op}: key_padding_mask must have examples of shape (1, key "
                             f"length); got examples of rank {mask.dim()}")
        if mask.dims[0]:
            if not dynamic:
                raise ValueError(f"{op}: key_padding_mask is dynamic in dimension 1 but the "
                                 "key length is the same for every example")
            check_lengths_agree(op, [(mask, 1), (x.key, 1)])
        data = fill_padding(mask, False if mask.dtype == torch.bool else 0.0)
    elif isinstance(mask, torch.Tensor):
        if mask.dim() != 2 or mask.size(0) != 1:
            raise ValueError(f"{op}: key_padding_mask is a plain tensor of shape "
                             f"{tuple(mask.shape)}; shared by every example it must be (1, "
                             f"{size})")
        data = mask
    else:
        raise TypeError(f"{op}: key_padding_mask must be a tensor or a batch, got "
                        f"{type(mask).__name__}")
    if data.size(1) != size:
        if not isinstance(mask, MaskedBatch):
            raise ValueError(f"{op}: key_padding_mask has {data.size(1)} key positions; the "
                             f"batch's keys have padded length {size}")
        data = _fit_length(data, size)
    return data


def _fit_length(data: torch.Tensor, size: int) -> torch.Tensor:
    if data.size(1) > size:
        return data[:, :size]
    return F.pad(data, [0, size - data.size(1)], value=False if data.dtype == torch.bool else 0.0)


def _attn_mask(op: str, mask: Any, num_heads: int, sizes: tuple[int, int]) -> Any:
    """``attn_mask`` (True / -inf = hide), ``(Lq, S)`` or ``(heads, Lq, S)`` padded sizes."""
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor):
        raise TypeError(
            f"{op}: attn_mask must be a plain tensor of the padded sizes {sizes} or "
            f"{(num_heads, *sizes)}, shared by every example (per-example masks go in "
            f"key_padding_mask); got {type(mask).__name__}"
        )
    if tuple(mask.shape) not in (sizes, (num_heads, *sizes)):
        raise ValueError(
            f"{op}: attn_mask has shape {tuple(mask.shape)}; for this batch it must be "
            f"{sizes} or {(num_heads, *sizes)}: the padded query and key lengths (each example "
            "reads its top-left corner, as a loop slicing it to the example's lengths would)"
        )
    return mask.reshape(1, 1 if mask.dim() == 2 else num_heads, *sizes)


def _masks(op: str, x: _Inputs, key_padding_mask: Any, attn_mask: Any, num_heads: int,
           lengths: torch.Tensor, appended: int, source: int
           ) -> tuple[Any, Any, torch.Tensor | None]:
    """The attention mask ``(B|1, 1|heads, Lq|1, S)``, the rows that see a key, key_valid.

    Like PyTorch, bool masks become ``-inf`` biases when a float mask takes
    part; without one, the bool masks are combined (the same attention).
    """
    key_valid = None
    if appended or (x.key is not None and x.key._mask is not None):
        position = torch.arange(source, device=lengths.device)
        key_valid = (position < (lengths + appended).unsqueeze(1)).reshape(-1, 1, 1, source)
    user = [m for m in (_attn_mask(op, attn_mask, num_heads, (x.length(0), source - appended)),
                        _key_padding_mask_4d(op, key_padding_mask, x, source - appended))
            if m is not None]
    if appended:
        user = [_allow_appended(m, lengths, appended) for m in user]
    parts = [key_valid] + [~m for m in user if m.dtype == torch.bool]
    floats = [m for m in user if m.dtype != torch.bool]
    bias = None
    if floats:
        bias = floats[0] if len(floats) == 1 else floats[0] + floats[1]  # attn_mask + kpm
    # A real query row can see no key only when the user's masks hide them all or
    # its example has no keys; appended keys are always visible, and keys that
    # share the queries' mask exist wherever a query does.
    same_mask = key_valid is None or (x.query is not None and x.key is not None
                                      and x.query._mask is x.key._mask)
    check_rows = not appended and (bool(user) or not same_mask)
    mask, visible = allowed_and_visible(parts, bias, check_rows)
    return mask, visible, key_valid


def _key_padding_mask_4d(op: str, mask: Any, x: _Inputs, size: int) -> torch.Tensor | None:
    data = _key_padding_mask(op, mask, x, size)
    return None if data is None else data.reshape(data.size(0), 1, 1, size)


def _allow_appended(mask: torch.Tensor, lengths: torch.Tensor, extra: int) -> torch.Tensor:
    """PyTorch pads the masks with 0 (attend) for the keys appended at each example's end."""
    position = torch.arange(mask.size(-1) + extra, device=mask.device)
    appended = ((position >= lengths.unsqueeze(1)) & (position < lengths.unsqueeze(1) + extra)
                ).reshape(-1, 1, 1, position.numel())
    if mask.dtype == torch.bool:
        return F.pad(mask, [0, extra], value=False) & ~appended
    return F.pad(mask, [0, extra]).masked_fill(appended, 0.0)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, num_heads: int, mask: Any,
            visible: Any, dropout_p: float, need_weights: bool) -> tuple[torch.Tensor, Any]:
    """Attention of ``(B, L, E)`` projections over heads: ``((B, Lq, E), weights or None)``."""
    q, k, v = (t.unflatten(-1, (num_heads, -1)).transpose(1, 2) for t in (q, k, v))
    weights = None
    if need_weights:
        # As PyTorch computes it when the weights are wanted: an explicit softmax.
        scores = (q * math.sqrt(1.0 / float(q.size(-1)))) @ k.transpose(-2, -1)
        if mask is not None:
            scores = (scores.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool
                      else scores + mask)
        weights = torch.softmax(scores, dim=-1)
        if visible is not None:
            weights = torch.where(visible, weights, weights.new_zeros(()))
        if dropout_p > 0.0:
            weights = F.dropout(weights, p=dropout_p)
        attn = weights @ v
    else:
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
    if visible is not None:
        attn = torch.where(visible, attn, attn.new_zeros(()))
    return attn.transpose(1, 2).flatten(2), weights


def _weights_batch(op: str, weights: torch.Tensor, x: _Inputs, key_valid: Any,
                   average: bool) -> MaskedBatch:
    """Per example ``(1, [heads,] Lq, S)``: a batch with dynamic query and key dimensions."""
    rows = x.query._mask if x.query is not None else None
    q_dynamic = x.query is not None and x.query.dims[0]
    k_dynamic = x.key is not None and x.key.dims[0]
    mask = combine_masks([
        None if rows is None else rows.reshape(rows.size(0), 1, -1, 1), key_valid])
    if average:
        weights = weights.mean(dim=1)
        mask = None if mask is None else mask.squeeze(1)
        dims = (q_dynamic, k_dynamic)
    else:
        dims = (False, q_dynamic, k_dynamic)
    mask = fit_mask(mask, weights, dims)
    if q_dynamic and k_dynamic and mask is not None:
        # An example with queries but no keys (or keys but no queries) has weights
        # (1, Lq, 0) (or (1, 0, S)): empty in part, its mask carries the lengths.
        batch, size = weights.size(0), weights.shape[-2:]
        lengths = torch.stack([
            torch.full((batch,), size[0], device=weights.device) if rows is None
            else rows.reshape(batch, -1).sum(1),
            torch.full((batch,), size[1], device=weights.device) if key_valid is None
            else key_valid.reshape(batch, -1).sum(1)], 1)
        mask = mask_lengths.settle(mask, lengths)
    return MaskedBatch._make(guard_gradient(weights, mask), mask, dims)


@implements(F.multi_head_attention_forward, family="multihead_attention",
            batch_type="TimeMajorBatch")
def multi_head_attention_forward(
    func, query, key, value, embed_dim_to_check, num_heads, in_proj_weight, in_proj_bias,
    bias_k, bias_v, add_zero_attn, dropout_p, out_proj_weight, out_proj_bias, training=True,
    key_padding_mask=None, need_weights=True, attn_mask=None, use_separate_proj_weight=False,
    q_proj_weight=None, k_proj_weight=None, v_proj_weight=None, static_k=None, static_v=None,
    average_attn_weights=True, is_causal=False,
):
    op = op_name(func)
    if static_k is not None or static_v is not None:
        raise NotImplementedError(f"{op}: static_k / static_v are not supported for batches")
    if is_causal and attn_mask is None:
        raise RuntimeError(  # PyTorch's message for one example
            f"{op}: Need attn_mask if specifying the is_causal hint. You may use the "
            "Transformer module method `generate_square_subsequent_mask` to create this mask.")
    if (bias_k is None) != (bias_v is None):
        raise AssertionError(f"{op}: bias_k and bias_v must be given together")
    for view in (query, key, value):
        if isinstance(view, TimeMajorBatch) and not isinstance(view.batch, MaskedBatch):
            # A PackedBatch's view (nn.MultiheadAttention, nn.TransformerEncoderLayer):
            # the standard refusal, saying how to convert.
            raise unsupported(func, type(view.batch).__name__)
    x = _inputs(op, query, key, value)
    _check_embedding(op, x.embed_dim, embed_dim_to_check, num_heads)
    separate = (q_proj_weight, k_proj_weight, v_proj_weight) if use_separate_proj_weight else None
    q, k, v = _in_projection(query, key, value, x, in_proj_weight, in_proj_bias, separate)

    # is_causal is only a hint that attn_mask is causal; the mask itself is used
    # (what PyTorch does whenever a padding mask takes part).
    lengths = x.key_lengths()
    extra_k = ([bias_k] if bias_k is not None else []) + ([None] if add_zero_attn else [])
    extra_v = ([bias_v] if bias_v is not None else []) + ([None] if add_zero_attn else [])
    if extra_k:
        k, v = _append_at_ends(k, lengths, extra_k), _append_at_ends(v, lengths, extra_v)
    mask, visible, key_valid = _masks(op, x, key_padding_mask, attn_mask, num_heads, lengths,
                                      len(extra_k), k.size(1))
    attn, weights = _attend(q, k, v, num_heads, mask, visible,
                            dropout_p if training else 0.0, need_weights)

    # The output projection on real rows only: padding gets zeros and no gradient.
    query_rows = None if x.query is None else real_rows(x.query)
    out = F.linear(pack_rows(attn, query_rows), out_proj_weight, out_proj_bias)
    out = unpack_rows(out, query_rows, attn.shape[:-1])
    out = guard_gradient(out, None)  # under @batch: no gradient at examples not running
    out = MaskedBatch._make(out, None if x.query is None else x.query._mask,
                            (False, False) if x.query is None else x.query.dims)
    mark_zero_padding(out)  # zeros at padding (unpack_rows): a residual sum keeps that
    if weights is not None:
        weights = _weights_batch(op, weights, x, key_valid, average_attn_weights)
    return TimeMajorBatch(out), weights
