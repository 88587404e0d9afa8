"""``matchbox.nn.extending``: what a batch type of another distribution builds on.

matchbox-packed's ``PackedBatch`` is written with these names only (besides core's
``matchbox.extending``), as a third party's batch type would be:

- the packed layout and the moves of a batch's rows between the padded, jagged and
  packed layouts (``matchbox.nn.packing``: :class:`Layout`, :func:`relayout`,
  ``gather_*``/``scatter_*``);
- :func:`time_major_view`, the view a batch type returns for ``x.transpose(0, 1)``;
- the recurrent modules' rule (:data:`RECURRENT_MODULE_OPS`, :func:`check_batch_first`,
  :func:`run_on_rows`, :func:`refuse_under_functorch`), which runs ``nn.RNN``/``nn.LSTM``/``nn.GRU`` on a batch's rows
  in PyTorch's packed path.
"""

from __future__ import annotations

from matchbox.nn import packing
from matchbox.nn.ops.recurrent_modules import (
    RECURRENT_MODULE_OPS,
    check_batch_first,
    refuse_under_functorch,
    run_on_rows,
)
from matchbox.nn.packing import *  # noqa: F403 (the layout and its moves: packing.__all__)
from matchbox.nn.time_major import time_major_view

__all__ = [
    *packing.__all__,
    "time_major_view",
    "RECURRENT_MODULE_OPS", "check_batch_first", "run_on_rows", "refuse_under_functorch",
]
