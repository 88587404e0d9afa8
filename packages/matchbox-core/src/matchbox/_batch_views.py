"""Views of batches that other distributions provide: what the registry lets them declare.

This module owns two declarations, both made by matchbox-nn and read elsewhere:

- the provider of views that move dimension 0 of a batch (``transpose(0, 1)``,
  which the shape ops hand over to it: :func:`provide_batch_dim_view`);
- the classes that are views of a batch (:data:`BATCH_VIEWS`), which
  matchbox-control merges and guards under ``@batch`` through the batch they
  hold.  ``matchbox._batch.Batch`` declares a batch type made with
  ``view=True`` here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Handler = Callable[..., Any]

# Views that move dimension 0 of a batch (each example's own size-one
# dimension), which the batch type itself cannot hold.  matchbox-nn provides the
# time-major view: ``x.transpose(0, 1)`` of ``(1, T, F)`` examples, which
# modules such as ``nn.MultiheadAttention(batch_first=True)`` write inside
# their own forward.  Without a provider such a transpose is refused.
_BATCH_DIM_VIEWS: dict[str, Handler] = {}


def provide_batch_dim_view(batch_type: str, factory: Handler) -> None:
    """Let ``factory(op, batch)`` answer ``transpose(0, 1)`` of a ``batch_type`` batch."""
    _BATCH_DIM_VIEWS[batch_type] = factory


def batch_dim_view(batch_type: str) -> Handler | None:
    """The provider of ``transpose(0, 1)`` views for ``batch_type``, if one is installed."""
    return _BATCH_DIM_VIEWS.get(batch_type)


#: Views of a batch (matchbox-nn's time-major ``TimeMajorBatch``): objects that
#: hold a batch in ``.batch`` and are rebuilt by calling their class on one.
#: matchbox-control merges and guards such a view under ``@batch`` through the
#: batch it holds.  A set, read directly on hot paths (``type(v) in BATCH_VIEWS``).
#: A view class may define ``held_example(value)``: one example of the view written as a
#: plain tensor (``h0`` of shape ``(L, 1, H)`` shared by every example) laid out as an
#: example of the batch it holds (``(1, L, H)``), so that a plain value merges with a view
#: (the initial state of a loop whose steps give views); without it that merge is refused.
BATCH_VIEWS: set[type] = set()


def register_batch_view(cls: type) -> None:
    """Declare ``cls`` a view of a batch (see :data:`BATCH_VIEWS`)."""
    BATCH_VIEWS.add(cls)
