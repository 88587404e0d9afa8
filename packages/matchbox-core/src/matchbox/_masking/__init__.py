"""Mask arithmetic shared by the op families.

Three rules keep padding out of real values and gradients:

- *Pass-through*: an op that maps each position to the same position (pointwise
  ops, reductions over static dimensions) may compute on padding; padding only
  reaches padding.
- *Mixing*: an op that combines positions (a contraction or reduction over a
  dynamic dimension, a product with a shared weight whose gradient sums over
  positions) first replaces padding with a neutral value (:func:`fill_padding`)
  and, when gradients are needed, masks its output (:func:`guard_gradient`), so
  that a NaN gradient arriving at a padding position is dropped instead of
  being multiplied into a real one.  Under ``@batch``, an op with a shared
  weight treats the rows of examples that do not run the code at hand as
  padding too (:func:`mixing_mask`).
- *Boundary*: an op that combines masks with *and* (n-ary pointwise ops, a
  join along a static dimension) makes a position padding where an argument
  is real; that argument's gradient from there is dropped (:func:`guard_wider`).

Ops that act on each row of a static last dimension alone (a linear layer)
can instead run on the real rows only (:func:`real_rows`, :func:`pack_rows`,
:func:`unpack_rows`): padding is never read, the result's padding is zero and
no gradient reaches it, and no work is spent on padding.

The rules are in five modules, and this package re-exports them.  Three lie below
``MaskedBatch``, whose methods (the rows and positions protocol) are made of them, so
they are modules of ``matchbox`` beside ``masked_batch``, not of this package (whose
``__init__`` imports ``alignment``, which builds batches):

| module | what it holds |
|--------|---------------|
| ``matchbox._execution`` | the execution mask of ``@batch`` (which examples run the code at hand) |
| ``matchbox._padding`` | padding fills and gradient guards (the mixing rule) |
| ``matchbox._real_rows`` | ops on the real rows only (linear layers, norms, lookups) |
| ``matchbox._masking.alignment`` | batch arguments broadcast like their examples; the checks that they suit an op; the boundary rule (``guard_wider``) |
| ``matchbox._masking.plain_tensors`` | a plain tensor's dimension 0 beside a batch: one row, or expanded from it; a square one built at a padded size, in a product |
"""

from matchbox._execution import (  # noqa: F401
    EXECUTION_MASK,
    HOST_READS,
    and_running,
    host_reads,
    mask_and,
    mask_view,
    mask_view_for,
    reads_values,
    record_equal_outside,
    remember_mask_view,
    running,
    running_without,
    same_mask,
)
from matchbox._masking.alignment import (  # noqa: F401
    align,
    check_broadcast_lengths,
    check_lengths_agree,
    check_static_extents,
    check_static_join,
    combine_layouts,
    combined_lengths,
    example_rank,
    fit_mask,
    guard_wider,
    lengths_along,
    pad_to,
    raise_rank,
    sizes_along,
)
from matchbox._masking.plain_tensors import check_padded_square, check_plain_batch_dim  # noqa: F401
from matchbox._padding import (  # noqa: F401
    _ZERO,
    combine_masks,
    fill_padding,
    guard_gradient,
    mixing_mask,
    weight_input_data,
)
from matchbox._real_rows import RowMask, pack_rows, real_rows, unpack_rows  # noqa: F401
