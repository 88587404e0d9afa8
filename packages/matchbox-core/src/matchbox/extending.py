"""``matchbox.extending``: how a package adds ops (and batch types) to Matchbox.

Matchbox's own distributions (matchbox-nn, matchbox-packed, matchbox-control)
are written with this module, and a third party adds the ops its layers need
the same way.  An op is a torch callable (a ``torch`` function, a
``torch.Tensor`` method, a ``torch.nn.functional`` function) registered with
a handler in the one registry::

    import torch.nn.functional as F
    from matchbox.extending import MaskedBatch, implements, op_name, only_input_batched

    @implements(F.silu, family="activation")          # for MaskedBatch (the default)
    def silu(func, input, inplace=False):
        only_input_batched(op_name(func), input)
        return input.from_positions(func(input.positions()))   # per position: padding stays padding

A handler is called as ``handler(func, *args, **kwargs)``, ``func`` being the
callable that was invoked, with the call's arguments bound to ``func``'s own
signature and handed over by the handler's parameter names (a handler serving
``F.softmax`` and ``Tensor.softmax`` names its parameters as torch does:
``input, dim, dtype``).  ``batch_type="Batch"`` registers a rule for every
batch type (``MaskedBatch``, ``PackedBatch``, ...) written over their common
protocol (:class:`Batch`: ``rows()``/``from_rows()`` for ops on each row of the
static trailing dimensions, ``positions()``/``from_positions()`` for ops on each
position); a batch type's own handler for an op wins over the shared rule.

Rules every handler follows (the product's contract: a batch equals the loop
over its examples, values and gradients, whatever the padding holds):

- padding never reaches a real value or a gradient: an op that mixes positions
  fills padding first (:func:`fill_padding`) and drops the gradient arriving at
  padding (:func:`guard_gradient`); an op on real rows only needs neither;
- an argument that does not suit an op raises an error naming the op, the
  argument and the dimension (:func:`example_dim`, :func:`only_input_batched`,
  ...; every helper that names the op takes it first: ``example_dim(op, dim, rank)``,
  ``normalize_dim(op, dim, rank)``, ``check_examples(op, examples, dims)``); a check on
  values raises only for the examples that run the code at hand
  (:func:`running`) and asks :func:`fails` (so that ``matchbox.compile`` can
  record it instead of reading the value); a check that can go on safely when it
  fails (indices clamped) passes how to build its error (:func:`check`), so that a
  ``@batch`` call on an accelerator reads it at its end, with the others
  (:class:`deferred_checks`), instead of syncing once per op;
- a handler that builds a new mask from a mask that carries lengths builds their
  lengths too and is marked :func:`lengths_aware` (see ``mask_lengths``);
  otherwise the dispatch refuses it for such a batch;
- a handler of an in-place op writes the batch as if every example ran it: under an
  execution mask the dispatch runs it on a copy and writes back only the running
  examples' values (:func:`write_running`).

A distribution registers its ops when it is imported.  To be imported with
``import matchbox``, it declares an entry point in the group
``matchbox.ops`` (``[project.entry-points."matchbox.ops"]`` in its
``pyproject.toml``: ``my_ops = "my_package.matchbox_ops"``); matchbox-core
loads every such entry point once, so its ops are there whichever module
the user imports first.
"""

from __future__ import annotations

from matchbox import _lengths as mask_lengths
from matchbox._arguments import (
    example_dim,
    normalize_dim,
    normalized_dims,
    only_input_batched,
    static_dim,
    static_trailing,
)
from matchbox._batch import Batch, is_batch, pytree_rank_error
from matchbox._capture import (
    call_state,
    capturing,
    check,
    deferred_checks,
    failed_flags,
    fails,
    refuse,
    some,
    with_failed_flags,
)
from matchbox._example_scalars import SCALAR as EXAMPLE_SCALAR
from matchbox._example_scalars import VECTOR as EXAMPLE_VECTOR
from matchbox._example_scalars import mark as mark_example_scalar
from matchbox._host_reads import any_true
from matchbox._jagged import describe_tensor, jagged_rows, make_jagged, read_jagged
from matchbox._layout import expanded_row
from matchbox._masked_writes import watch_writes, write_running
from matchbox._masking import _ZERO as ZERO
from matchbox._masking import (
    EXECUTION_MASK,
    align,
    and_running,
    check_lengths_agree,
    combine_masks,
    fill_padding,
    fit_mask,
    guard_gradient,
    lengths_along,
    mask_and,
    mask_view,
    mask_view_for,
    mixing_mask,
    pack_rows,
    pad_to,
    raise_rank,
    reads_values,
    real_rows,
    record_equal_outside,
    remember_mask_view,
    running,
    same_mask,
    sizes_along,
    unpack_rows,
    weight_input_data,
)
from matchbox._masking.plain_tensors import check_plain_batch_dim
from matchbox._region_guard import defer as defer_region_guard
from matchbox._region_guard import deferred_mask as deferred_region_guard
from matchbox._region_guard import resolve as apply_region_guard
from matchbox._registry import (
    BATCH_VIEWS,
    batch_types,
    dispatch,
    entries,
    implements,
    lookup,
    op_name,
    provide_batch_dim_view,
    refuse_out,
    refuse_size_number,
    register,
    register_conversion,
    unsupported,
    writes_first_argument,
)
from matchbox._sizes import (
    BATCH_SIZES,
    BatchSize,
    PaddedSize,
    batch_size_as_asked,
    padded_size_of,
    refuse_batch_size_number,
    size_as_a_number,
)
from matchbox.masked_batch import (
    BatchShape,
    MaskedBatch,
    check_examples,
    has_zero_padding,
    mark_zero_padding,
    mask_from_lengths,
    why_size_was_asked,
)
from matchbox.ops.pointwise import check_inplace_derivative, pointwise_ops
from matchbox.ops.reductions import (
    check_mean_dtype,
    highest,
    lowest,
    reduced_dimensions,
    reduced_layout,
)

#: Mark a handler as written for masks that carry lengths (see ``mask_lengths``).
lengths_aware = mask_lengths.aware

__all__ = [
    # what a batch of one value per example is in the loop (matchbox._example_scalars)
    "EXAMPLE_SCALAR", "EXAMPLE_VECTOR", "mark_example_scalar",
    # the registry and the dispatch
    "implements", "register", "op_name", "lookup", "entries", "dispatch", "unsupported",
    "refuse_out", "register_conversion", "writes_first_argument", "batch_types", "is_batch",
    "BATCH_VIEWS", "provide_batch_dim_view",
    # batch types
    "Batch", "MaskedBatch", "BatchShape", "batch_size_as_asked", "why_size_was_asked",
    "BatchSize", "BATCH_SIZES", "refuse_batch_size_number", "size_as_a_number",
    "refuse_size_number",
    "PaddedSize", "padded_size_of",
    "check_examples", "pytree_rank_error", "mask_from_lengths", "mark_zero_padding",
    "has_zero_padding",
    # argument checks (the op first, for the message)
    "normalize_dim", "example_dim", "static_dim", "static_trailing", "normalized_dims",
    "only_input_batched",
    # masks: guards, alignment, the execution mask, real rows
    "fill_padding", "guard_gradient", "mixing_mask", "weight_input_data", "combine_masks",
    "same_mask", "fit_mask", "align", "raise_rank", "pad_to", "check_lengths_agree",
    "lengths_along", "sizes_along", "running", "and_running", "real_rows", "pack_rows",
    "unpack_rows", "expanded_row",
    "check_plain_batch_dim",
    # checks on values, compile-safe
    "fails", "check", "failed_flags", "with_failed_flags", "deferred_checks", "some", "capturing", "refuse",
    # the execution mask as matchbox-control runs code under it, viewed (batch, 1, ..., 1)
    "EXECUTION_MASK", "reads_values", "any_true", "mask_view", "mask_view_for", "remember_mask_view",
    "mask_and", "ZERO", "write_running", "record_equal_outside",
    # matchbox-control's watch of in-place writes, and the @batch call its records are for
    "watch_writes", "call_state",
    # a @batch region's gradient guard, deferred to the op that needs it
    "defer_region_guard", "deferred_region_guard", "apply_region_guard",
    # lengths that a mask cannot tell
    "mask_lengths", "lengths_aware",
    # jagged torch.nested tensors (the layout of to_nested / from_nested)
    "read_jagged", "make_jagged", "jagged_rows", "describe_tensor",
    # families other distributions build on
    "pointwise_ops", "check_inplace_derivative", "reduced_dimensions", "reduced_layout",
    "highest", "lowest", "check_mean_dtype",
]
