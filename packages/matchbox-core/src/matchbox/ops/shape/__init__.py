"""Shape ops: views, permutations, splitting, joining, stacking.

Semantics: the same view or permutation is applied to data and mask, and the
dims follow their dimensions.  Dimension 0 is each example's own size-one
batch dimension and stays in place; a new shape gives it as 1, -1 or the batch
size (what ``x.size(0)`` returns, so ``x.view(x.size(0), -1)`` runs unchanged).  A reshape keeps every dynamic dimension
(written -1) and may split or merge the static dimensions between them; the
static dimensions after the last dynamic one may also be merged into it (real
values stay first) or split back out of it.  Anything that would interleave
padding with real values raises an error naming the op and the dimension.
``cat`` along a dynamic dimension moves each example's parts together (a
gather), so each example's result is exactly the concatenation of its parts.
Along every other dynamic dimension the parts of a ``cat``/``stack`` must have
each example's size (the loop would raise otherwise); a plain tensor part spans
the padded size.  A join along a static (or new static) dimension of parts real
for different examples (the steps of ``x.unbind(1)`` for examples of different
lengths) is refused: the loop joins each example's own number of parts.  With
a part real for every example (a state, a plain tensor) it is a step of a loop,
padding for an example whose step has ended, as in a pointwise op.
``x.expand_as(y)`` with ``y`` a batch gives each size-one dimension each
example's own size of ``y``.
"""

from matchbox.ops.shape import (  # noqa: F401  (registers the ops)
    joins,
    reshape,
    sequences,
    stacks,
    views,
)
from matchbox.ops.shape.joins import stack_batches, stack_run
from matchbox.ops.shape.reshape import reshape_batch
from matchbox.ops.shape.views import transpose

__all__ = ["reshape_batch", "stack_batches", "stack_run", "transpose"]
