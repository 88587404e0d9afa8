"""Gathering and scattering by index: ``gather``, ``take_along_dim``, ``index_select``,
``scatter`` / ``scatter_add`` / ``scatter_reduce`` (and their in-place forms), and the
tensor (advanced) indices of ``x[:, idx]``.

Indices are positions inside each example, as in the loop.  An index is a batch (one
index tensor per example, its own layout) or a plain tensor (the same index for every
example); so is the input of ``gather``/``take_along_dim`` (a table shared by every
example, indexed per example).  What happens to padding and mask:

| ops                         | result layout                | padding                                   |
|-----------------------------|------------------------------|-------------------------------------------|
| gather, take_along_dim,     | the index's (a plain index:  | a padding index position reads position 0 |
| x[:, idx]                   | static); x[:, idx] puts the  | and its gradient is dropped; a real one   |
|                             | index's dims in place of the | must be inside its example's real extent  |
|                             | indexed dim                  | (else IndexError naming the example)      |
| index_select                | the input's, the selected    | as gather; a 1-D plain index or one int   |
|                             | dim static (size k)          | per example (a 0-d index: size 1)         |
| scatter, scatter_add,       | the input's                  | a padding index position writes into a    |
| scatter_reduce (and _)      |                              | slot past the data, dropped afterwards;   |
|                             |                              | real ones must be inside the example      |
| index_add, index_copy (and  | the input's                  | the scatter they are, by a plain 1-D      |
| _), index_fill (and _)      |                              | index expanded to the source's layout;    |
|                             |                              | index_fill: where each example's          |
|                             |                              | positions are selected (negative: from    |
|                             |                              | its end)                                  |

Checks are the loop's: in every dimension but ``dim`` the index may not be larger
than the input (nor, for scatter, than ``src`` in any dimension), counted per example;
a real index value outside ``[0, size)`` of its own example along ``dim`` (negative
values count from the example's end in ``x[:, idx]``, and in ``take_along_dim`` where the
installed torch's does: torch 2.3's raises for them, as ``gather`` does) raises, naming
the example, where the loop would raise for it.  Only running examples
(``_masking.EXECUTION_MASK``) are checked.  Along dimension 0 (each example's own
size-one batch dimension) the only position is 0.  ``out=`` is refused.

One family (``gather``), a module per concern: ``_indices`` (the index as a batch, its
checks, its positions), ``gathering`` (``gather``, ``take_along_dim``, ``index_select``),
``scattering`` (the ``scatter`` ops), ``index_writes`` (``index_add``/``_copy``/``_fill``) and ``tensor_indices`` (``x[:, idx]``, and a plain
tensor indexed by a batch, ``W[idx]``).
"""

# Importing the modules registers their ops.
from matchbox.ops.gather import gathering, index_writes, scattering  # noqa: I001
from matchbox.ops.gather._indices import (
    as_batch,
    check_not_larger,
    checked_positions,
    refuse_partly_empty,
)
from matchbox.ops.gather.tensor_indices import is_tensor_index, table_lookup, tensor_index

__all__ = ["as_batch", "check_not_larger", "checked_positions", "is_tensor_index",
           "refuse_partly_empty", "table_lookup", "tensor_index"]
