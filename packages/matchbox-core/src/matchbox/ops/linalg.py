"""Matrix products: ``matmul``/``@``, ``mm``, ``bmm``, ``einsum``.

Semantics: each example is a tensor with a leading dimension of size one, so
a batch runs the per-example product with one more leading dimension: the
data gets a new dimension 1 (each example's own size-one dimension), the
product broadcasts over the batch like over any batch dimension, and the
new dimension is removed again.  This is exactly the per-example op, for any
ranks and for plain tensors (weights) on either side.

Products mix positions (a contraction sums over a dimension, a weight's
gradient sums over rows), so padding is zeroed first and gradients at padding
positions of the result are dropped (see ``matchbox._masking``).  The result
is real where its row (from the left operand) and column (from the right) are;
a contraction over an empty extent (a length-0 dynamic dimension summed away)
is a real 0, as in the loop.
"""

from __future__ import annotations

import string
from typing import Any

import torch

from matchbox import _lengths, _masking, _registry
from matchbox.masked_batch import MaskedBatch, constant_pad, mask_from_lengths
from matchbox.ops.einsum_ellipsis import spell_out


def _operand(x: Any) -> Any:
    if isinstance(x, MaskedBatch):
        return _masking.fill_padding(x, 0, running=True).unsqueeze(1)
    return x


def _drop_example_dim(op: str, result: torch.Tensor) -> torch.Tensor:
    if result.dim() < 2 or result.size(1) != 1:
        raise ValueError(
            f"{op}: the per-example result would not keep dimension 0 of size one "
            f"(batched result shape {tuple(result.shape)}); a plain tensor argument "
            "must not add leading dimensions"
        )
    return result.squeeze(1)


def _is_vector(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.dim() == 1


def _product_dims(a: Any, b: Any, rank: int) -> tuple[bool, ...]:
    """Which dimensions of ``a @ b`` are dynamic; ``rank`` is the operands' common rank."""
    if _is_vector(b):
        return a.dims[:-1]
    if _is_vector(a):
        return b.dims[:-2] + b.dims[-1:]
    lead = [False] * (rank - 3)
    for x in (a, b):
        if isinstance(x, MaskedBatch):
            lead = [d or e for d, e in zip(lead, x.dims[: rank - 3])]
    rows = [a.dims[-2]] if isinstance(a, MaskedBatch) and rank >= 3 else [False] * (rank >= 3)
    cols = [b.dims[-1]] if isinstance(b, MaskedBatch) else [False]
    return tuple(lead + rows + cols)


def _summed_out(
    mask: torch.Tensor, dim: int, contracted_dynamic: bool, kept_dynamic: bool
) -> torch.Tensor:
    """An operand's mask with its contracted dimension reduced to size one.

    A static contracted dimension already has size one in the mask: the mask
    (which may mark whole examples as not real, as after ``unbind``) is kept.
    Along a dynamic one, a kept position is real if any of its contracted
    positions is.  When an example's contracted extent is empty (length 0),
    that is none, yet the contraction (a sum of nothing, 0) is real: with no
    dynamic kept dimension every kept position is real.  (With one, such an
    example is empty in part, and its mask carries the lengths the result's
    mask is then built from: ``_with_lengths``.)
    """
    if not contracted_dynamic:
        return mask
    reduced = mask.any(dim=dim, keepdim=True)
    return reduced if kept_dynamic else torch.ones_like(reduced)


def _product_mask(a: Any, b: Any) -> torch.Tensor | None:
    """Real where the row of ``a`` and the column of ``b`` are real (with the extra dim 1)."""
    masks = []
    if isinstance(a, MaskedBatch) and a._mask is not None:
        rows = _summed_out(a._mask.unsqueeze(1), -1, a.dims[-1], any(a.dims[:-1]))
        masks.append(rows.squeeze(-1) if _is_vector(b) else rows)
    if isinstance(b, MaskedBatch) and b._mask is not None:
        contracted = b.dims[-2] if b.dim() > 2 else False
        kept = b.dims[:-2] + b.dims[-1:]
        cols = _summed_out(b._mask.unsqueeze(1), -2, contracted, any(kept))
        masks.append(cols.squeeze(-2) if _is_vector(a) else cols)
    return _masking.combine_masks(masks)


def _times_weight(a: MaskedBatch, b: torch.Tensor, op: Any) -> MaskedBatch:
    """The commonest product: a batch times a weight matrix over a static feature
    dimension.  Rows keep their mask; no per-example dimension is needed (a 2-D
    weight broadcasts over leading dimensions).  ``op``: the op or its name."""
    if a.data.size(-1) != b.size(0):
        op = op if isinstance(op, str) else _registry.op_name(op)
        _refuse_contraction(op, a, b, a.data.size(-1), b.size(0))
    result = torch.matmul(_masking.fill_padding(a, 0, running=True), b)
    return MaskedBatch._make(_masking.guard_gradient(result, a._mask), a._mask, a.dims)


def matmul_batches(op: str, a: Any, b: Any) -> MaskedBatch:
    if (isinstance(b, torch.Tensor) and b.dim() == 2 and isinstance(a, MaskedBatch)
            and a.dim() >= 2 and not a.dims[-1]):
        return _times_weight(a, b, op)
    for x in (a, b):
        if isinstance(x, MaskedBatch) and x.dim() < 2:
            raise ValueError(
                f"{op}: examples of rank {x.dim()} are not supported; each example "
                "needs at least rank 2 (its size-one dimension 0 and a vector dimension)"
            )
    # Per-example broadcasting right-aligns the operands: give batches the
    # common rank so that their batch dimensions line up.
    rank = max(a.dim(), b.dim())
    a = _masking.raise_rank(a, rank) if isinstance(a, MaskedBatch) else a
    b = _masking.raise_rank(b, rank) if isinstance(b, MaskedBatch) else b
    a, b = _check_contraction(op, a, b)
    result = _drop_example_dim(op, torch.matmul(_operand(a), _operand(b)))
    mask = _product_mask(a, b)
    if mask is not None and mask.dim() > 1:
        mask = mask.squeeze(1)
    dims = _product_dims(a, b, rank)
    mask = _masking.fit_mask(mask, result, dims)
    if mask is not None and (sum(dims) > 1 or _lengths.any_carried((a, b))):
        mask = _with_lengths(mask, result, dims, _matmul_sources(a, b, rank), (a, b))
    return MaskedBatch._make(_masking.guard_gradient(result, mask), mask, dims)


def _matmul_sources(a: Any, b: Any, rank: int) -> list[list[tuple[MaskedBatch, int]]]:
    """For each dimension of ``a @ b`` (operands of ``rank``), the operand dimensions
    that give its size."""
    def pairs(i: int, *operands: Any) -> list[tuple[MaskedBatch, int]]:
        return [(x, i) for x in operands if isinstance(x, MaskedBatch)]

    if _is_vector(b):
        return [pairs(i, a) for i in range(1, rank - 1)]
    if _is_vector(a):
        return [pairs(i, b) for i in range(1, rank - 2)] + [pairs(rank - 1, b)]
    return ([pairs(i, a, b) for i in range(1, rank - 2)] + [pairs(rank - 2, a)]
            + [pairs(rank - 1, b)])


def _with_lengths(mask: torch.Tensor, result: torch.Tensor, dims: tuple[bool, ...],
                  sources: list[list[tuple[MaskedBatch, int]]],
                  operands: tuple[Any, ...]) -> torch.Tensor:
    """The product's mask, carrying its lengths where it needs them (see ``_lengths``).

    Each dynamic dimension of the result has each example's size along the
    operand dimensions it comes from (``sources``, one list per result
    dimension): the contracted dimensions are gone, so a contraction over an
    example's empty extent is a real 0, as in the loop.  An example absent from
    an operand static in every dimension is absent from the result.  When an
    operand's mask carries lengths, the result's mask is built from the new
    lengths (an operand's example empty in part has an all-false mask, which
    the row and column masks would spread); otherwise a result with several
    dynamic dimensions is checked once for an example empty in part (as
    ``q @ k.transpose(1, 2)`` with no keys gives), a device sync.
    """
    columns = []
    for i, dynamic in enumerate(dims, start=1):
        if dynamic:
            sizes = [_lengths.along(x, d) for x, d in sources[i - 1] if x.dims[d - 1]]
            columns.append(sizes[0] if len(sizes) == 1 else torch.stack(sizes).amin(0))
    batch = result.size(0)
    lengths = (torch.stack(columns, 1) if columns else
               torch.zeros(batch, 0, dtype=torch.long, device=result.device))
    for x in operands:
        if isinstance(x, MaskedBatch) and x._mask is not None and not any(x.dims):
            lengths = lengths * x._mask.reshape(batch, -1).any(1, keepdim=True)
    if not _lengths.any_carried(operands):
        return _lengths.settle(mask, lengths)
    if not columns:
        return mask  # every dynamic dimension summed away: the mask says which are real
    rebuilt = mask_from_lengths(lengths, result.shape, dims)
    return _lengths.rebuilt(rebuilt, lengths, dims)


def _example_shape(x: Any) -> str:
    """An example's shape as the loop sees it: ``*`` for a dynamic size."""
    if isinstance(x, MaskedBatch):
        sizes = ["1"] + ["*" if d else str(x.data.size(i)) for i, d in enumerate(x.dims, 1)]
    else:
        sizes = [str(n) for n in x.shape]
    return "(" + ", ".join(sizes) + ("," if len(sizes) == 1 else "") + ")"


def _refuse_contraction(op: str, a: Any, b: Any, left: int, right: int) -> None:
    raise ValueError(
        f"{op}: each example multiplies shape {_example_shape(a)} by {_example_shape(b)}, "
        f"but the contracted dimension has size {left} in the first and {right} in the "
        f"second (they must be equal)"
    )


def _side(x: Any, dim: int) -> tuple[bool | None, int]:
    """Whether ``x`` is dynamic along ``dim`` (``None``: a plain tensor) and its size there."""
    if isinstance(x, MaskedBatch):
        return x.dims[dim - 1], x.data.size(dim)
    return None, x.size(dim)


def _extend(x: Any, dim: int, size: int) -> Any:
    """``x`` grown to ``size`` along ``dim``: a dynamic dim with padding, a static one of a
    batch with zeros (the running examples' lengths in the other operand are its size, so
    the zeros meet padding only, and contribute nothing to a contraction)."""
    extra = size - x.data.size(dim)
    if extra <= 0:
        return x
    if x.dims[dim - 1]:
        return _masking.pad_to(x, dim, size)
    pads = [0, 0] * (x.data.dim() - 1 - dim) + [0, extra]
    return MaskedBatch._make(constant_pad(x.data, pads), x._mask, x.dims)


def _check_contraction(op: str, a: Any, b: Any) -> tuple[Any, Any]:
    """Each example's sizes must agree where the operands meet, as in the loop.

    The contracted dimension (the last of ``a``, the second to last of ``b``, or
    a vector's only one): dynamic on both sides, each example's lengths must
    agree; dynamic on one side and static on the other, each running example's
    length must be the static size; static (or a plain tensor) on both, the
    sizes must be equal; dynamic against a plain tensor, the tensor must span
    the padded size.  The broadcast dimensions in front of the matrices, between
    two batches, follow the pointwise rule.  Returns the operands grown to
    common padded sizes where they differ.
    """
    ia = a.dim() - 1
    ib = b.dim() - 2 if b.dim() >= 2 else 0
    if isinstance(b, MaskedBatch) and ib == 0:
        return a, b  # rank-2 examples: the contraction is over their size-one dim 0
    (da, na), (db, nb) = _side(a, ia), _side(b, ib)
    pairs = [(x, i) for x, i, d in ((a, ia, da), (b, ib, db)) if d]
    fixed = [(x, i) for x, i, d in ((a, ia, da), (b, ib, db)) if d is False]
    if len(pairs) == 2:
        _masking.check_lengths_agree(op, pairs)
    elif pairs and fixed:
        _masking.check_static_extents(op, pairs, fixed, exact=True)
    elif not pairs and na != nb:
        _refuse_contraction(op, a, b, na, nb)
    elif pairs and na != nb:
        padded, plain = (na, nb) if da else (nb, na)
        raise ValueError(
            f"{op}: each example multiplies shape {_example_shape(a)} by "
            f"{_example_shape(b)}; the contracted dimension is dynamic in the batch, so a "
            f"plain tensor shared by every example must span its padded size {padded} "
            f"there, not {plain}"
        )
    elif pairs and da is None and a.dim() >= 2:
        _masking.check_padded_square(op, a, ia, ia - 1, b, ib)
    elif pairs and db is None and b.dim() >= 2:
        _masking.check_padded_square(op, b, ib, ib + 1, a, ia)
    if na != nb and isinstance(a, MaskedBatch) and isinstance(b, MaskedBatch):
        size = max(na, nb)
        a, b = _extend(a, ia, size), _extend(b, ib, size)
    if isinstance(a, MaskedBatch) and isinstance(b, MaskedBatch):
        for i in range(1, a.dim() - 2):
            (da, na), (db, nb) = _side(a, i), _side(b, i)
            if da and db:
                _masking.check_lengths_agree(op, [(a, i), (b, i)])
            elif da or db:
                dynamic, fixed_side = ((a, b) if da else (b, a))
                _masking.check_static_extents(op, [(dynamic, i)], [(fixed_side, i)])
                if fixed_side.data.size(i) == 1:
                    continue
            elif na != nb and 1 not in (na, nb):
                raise ValueError(
                    f"{op}: each example multiplies shape {_example_shape(a)} by "
                    f"{_example_shape(b)}, whose dimension {i} (in front of the matrices) "
                    f"has size {na} in the first and {nb} in the second; they do not "
                    f"broadcast"
                )
            else:
                continue
            if na != nb:
                a, b = _extend(a, i, max(na, nb)), _extend(b, i, max(na, nb))
    return a, b


@_lengths.aware
def matmul(func, input, other):
    return matmul_batches(_registry.op_name(func), input, other)


def _matmul_fast(func: Any) -> Any:
    """The fast path of ``x @ W`` (see ``matchbox._methods``): the batch-times-weight
    product inlined (the hot path); ``None`` (the dispatch) for every other call."""

    def fast(func: Any, self: MaskedBatch, args: tuple[Any, ...]) -> Any:
        if len(args) == 1:
            other = args[0]
            if (isinstance(other, torch.Tensor) and other.dim() == 2 and self.data.dim() >= 2
                    and not self.dims[-1]):
                return _times_weight(self, other, func)
        return None

    return fast


# Registered here, with its fast path: a fast path given after registering is never used.
_registry.register((torch.matmul, torch.linalg.matmul, torch.Tensor.matmul,
                    torch.Tensor.__matmul__), matmul, family="linalg", fast_path=_matmul_fast)


@_lengths.aware
@_registry.implements(torch.Tensor.__rmatmul__, family="linalg")
def rmatmul(func, input, other):
    return matmul_batches(_registry.op_name(func), other, input)


def _refuse_out_dtype(func: Any, out_dtype: Any) -> None:
    """``out_dtype=`` (newer torch: a product of low-precision inputs in another dtype, on
    some accelerators) is not taken by batches; ``None``, its default spelled out, is."""
    if out_dtype is not None:
        raise NotImplementedError(f"{_registry.op_name(func)}: out_dtype= is not supported "
                                  "for batches; cast the result instead")


# The rank of the examples ``mm`` and ``bmm`` take: both are ``matmul`` without broadcasting.
_PRODUCT_RANKS = {torch.mm: 2, torch.Tensor.mm: 2, torch.bmm: 3, torch.Tensor.bmm: 3}


@_lengths.aware
@_registry.implements(*_PRODUCT_RANKS, family="linalg")
def mm_bmm(func, input, mat2, out_dtype=None):
    _refuse_out_dtype(func, out_dtype)
    _require_rank(func, _PRODUCT_RANKS[func], input, mat2)
    return matmul_batches(_registry.op_name(func), input, mat2)


def _require_rank(func: Any, rank: int, *args: Any) -> None:
    for position, x in enumerate(args):
        if x.dim() != rank:
            raise ValueError(
                f"{_registry.op_name(func)}: argument {position} has examples of rank "
                f"{x.dim()}, expected {rank}"
            )


def _check_example_dim_kept(op: str, terms: list[str], operands: tuple[Any, ...], output: str,
                            implicit: bool) -> None:
    """Each example's dimension 0 (size one) must stay the result's dimension 0: a
    per-example result without it is not an example of a batch (a 0-d one, every label
    summed, is a per-example scalar)."""
    for term, x in zip(terms, operands):
        if isinstance(x, MaskedBatch) and term and output and not output.startswith(term[0]):
            hint = (f"; implicit mode (no '->') sums the labels that appear more than once, "
                    f"'{term[0]}' among them: write the output explicitly, e.g. "
                    f"'->{term[0]}...'" if implicit else "")
            raise ValueError(
                f"{op}: label '{term[0]}' of operand '{term}' is dimension 0 of each example "
                f"(size one) and must be the first label of the output, but the output is "
                f"'{output}'{hint}")


@_lengths.aware
@_registry.implements(torch.einsum, family="linalg")
def einsum(func, equation, *operands):
    op = _registry.op_name(func)
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    equation = spell_out(op, equation.replace(" ", ""), operands)
    inputs, _, output = equation.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(operands):
        raise ValueError(f"{op}: the equation has {len(terms)} operands, got {len(operands)}")
    if "->" not in equation:
        letters = "".join(terms)
        output = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    _check_example_dim_kept(op, terms, operands, output, implicit="->" not in equation)
    new = next(c for c in string.ascii_letters if c not in equation)
    operands = _check_einsum(op, terms, operands)
    _check_plain_squares(op, terms, operands, output)
    dynamic: dict[str, bool] = {}
    masks = []
    for term, x in zip(terms, operands):
        if not isinstance(x, MaskedBatch):
            continue
        if len(set(term)) != len(term):
            raise NotImplementedError(
                f"{op}: repeated indices within one batch operand ('{term}') are not supported"
            )
        for letter, d in zip(term[1:], x.dims):
            dynamic[letter] = dynamic.get(letter, False) or d
        if x._mask is None:
            continue
        kept_dynamic = any(d for letter, d in zip(term[1:], x.dims) if letter in output)
        summed_dynamic = any(d for letter, d in zip(term[1:], x.dims) if letter not in output)
        masks.append(_einsum_mask(x._mask.unsqueeze(1), new + term, new + output,
                                  summed_dynamic, kept_dynamic))
    batched = [new + t if isinstance(x, MaskedBatch) else t for t, x in zip(terms, operands)]
    data = [_operand(x) for x in operands]
    result = torch.einsum(",".join(batched) + "->" + new + output, *data)
    mask = _masking.combine_masks(masks)
    if output:
        result = _drop_example_dim(op, result)
        # No mask at all when every batch operand is all real (equal lengths).
        mask = None if mask is None else mask.squeeze(1)
    dims = tuple(dynamic.get(letter, False) for letter in output[1:])
    mask = _masking.fit_mask(mask, result, dims)
    if mask is not None and (sum(dims) > 1 or _lengths.any_carried(operands)):
        sources = [[(x, term.index(letter)) for term, x in zip(terms, operands)
                    if isinstance(x, MaskedBatch) and letter in term[1:]]
                   for letter in output[1:]]
        mask = _with_lengths(mask, result, dims, sources, operands)
    return MaskedBatch._make(_masking.guard_gradient(result, mask), mask, dims)


def _check_einsum(op: str, terms: list[str], operands: tuple[Any, ...]) -> tuple[Any, ...]:
    """Each index must have each example's size in every operand, as in the loop.

    The rule of :func:`_check_contraction`, index by index: dynamic in several
    batch operands, each example's lengths agree; dynamic in one and static in
    another, each running example's length is the static size; static sizes
    (and plain tensors' sizes) agree, size one broadcasting; a plain tensor
    along a dynamic index spans the padded size.  Returns the operands grown to
    common padded sizes where they differ.
    """
    operands = list(operands)
    for letter in dict.fromkeys("".join(terms)):
        dynamic, fixed, plain = [], [], []
        for k, (term, x) in enumerate(zip(terms, operands)):
            if letter not in term or (isinstance(x, MaskedBatch) and term[0] == letter):
                continue  # an example's dim 0 (size one) broadcasts
            i = term.index(letter)
            if isinstance(x, MaskedBatch):
                (dynamic if x.dims[i - 1] else fixed).append((k, i))
            elif i < x.dim():
                plain.append((k, i))
        if not dynamic and not fixed:
            continue
        sizes = {(k, i): (operands[k].data.size(i) if isinstance(operands[k], MaskedBatch)
                          else operands[k].size(i)) for k, i in dynamic + fixed + plain}
        shared = [(k, i) for k, i in fixed + plain if sizes[k, i] != 1]
        if len({sizes[e] for e in shared}) > 1:
            (k1, i1), (k2, i2) = shared[0], next(e for e in shared if sizes[e] != sizes[shared[0]])
            raise ValueError(
                f"{op}: index '{letter}' has size {sizes[k1, i1]} in operand {k1} and "
                f"{sizes[k2, i2]} in operand {k2}, the same in every example; they do not "
                f"broadcast"
            )
        label = f"index '{letter}'"
        pairs = [(operands[k], i) for k, i in dynamic]
        if len(pairs) > 1:
            _masking.check_lengths_agree(op, pairs)
        if pairs and fixed:
            _masking.check_static_extents(op, pairs, [(operands[k], i) for k, i in fixed],
                                          label=label)
        padded = max([sizes[e] for e in dynamic] + [sizes[e] for e in shared], default=1)
        if dynamic:
            for k, i in plain:
                if sizes[k, i] not in (1, padded):
                    raise ValueError(
                        f"{op}: index '{letter}' is dynamic in the batch operands; plain "
                        f"operand {k}, shared by every example, has size {sizes[k, i]} "
                        f"there, which must be 1 or span the padded size {padded}"
                    )
        for k, i in dynamic + fixed:
            if sizes[k, i] not in (1, padded) or (sizes[k, i] == 1 and (k, i) in dynamic):
                operands[k] = _extend(operands[k], i, padded)
    return tuple(operands)


def _check_plain_squares(op: str, terms: list[str], operands: tuple[Any, ...],
                         output: str) -> None:
    """A plain operand along an index dynamic in a batch, keeping an index of the same
    size in the output (``torch.ones(T, T).tril()``): see ``check_padded_square``."""
    for term, x in zip(terms, operands):
        for i, letter in enumerate(term if isinstance(x, torch.Tensor) else ()):
            source = next(((b, t.index(letter)) for t, b in zip(terms, operands)
                           if isinstance(b, MaskedBatch) and letter in t[1:]
                           and b.dims[t.index(letter) - 1]), None)
            for j, other in enumerate(term if source else ()):
                if other != letter and other in output:
                    _masking.check_padded_square(op, x, i, j, *source)


def _einsum_mask(
    mask: torch.Tensor, term: str, output: str, summed_dynamic: bool, kept_dynamic: bool
) -> torch.Tensor:
    """An operand's mask reduced over its summed letters and laid out like the output."""
    summed = [i for i, c in enumerate(term) if c not in output]
    if summed:
        mask = _summed_out(mask, summed, summed_dynamic, kept_dynamic).squeeze(summed)
    kept = [c for c in term if c in output]
    mask = mask.permute(sorted(range(len(kept)), key=lambda i: output.index(kept[i])))
    present = sorted(kept, key=output.index)
    return mask.reshape([mask.size(present.index(c)) if c in present else 1 for c in output])
