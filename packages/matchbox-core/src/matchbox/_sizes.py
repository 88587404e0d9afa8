"""Sizes as PyTorch's code asks a batch for them: ``shape`` (:class:`BatchShape`), and
the batch size that ``nn.RNN``/``nn.LSTM``/``nn.GRU`` read (:func:`batch_size_as_asked`)
or the hint when they ask for a size that differs between examples
(:func:`why_size_was_asked`).

Shared by the batch types (``MaskedBatch``, ``PackedBatch``, ``TimeMajorBatch``), which
import them; ``matchbox.masked_batch`` re-exports them.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matchbox.masked_batch import MaskedBatch


class BatchShape:
    """``MaskedBatch.shape``: indexable like ``torch.Size``; dynamic sizes raise."""

    __slots__ = ("_batch",)

    def __init__(self, batch: MaskedBatch):
        self._batch = batch

    def _no_single_value(self, *args: Any) -> Any:
        raise TypeError(
            "a MaskedBatch holds one value per example, not a single value; use "
            "matchbox.batch_sum / batch_mean for a plain tensor, or examples()"
        )

    __float__ = __int__ = __index__ = __complex__ = item = tolist = _no_single_value

    def __len__(self) -> int:
        return self._batch.dim()

    def __getitem__(self, index: int) -> int:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(len(self))[index])  # type: ignore[return-value]
        return self._batch.size(index)

    def __iter__(self) -> Iterator[int]:
        return (self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        sizes = ["*" if i > 0 and self._batch.dims[i - 1] else str(self._batch.size(i))
                 for i in range(len(self))]
        return f"BatchShape({', '.join(sizes)})  # * = dynamic"


def why_size_was_asked(batch_type: str, dim: int) -> str:
    """A hint when PyTorch's own code asked a batch of type ``batch_type`` for a size that
    differs between examples, not the user's code (call it from ``size``).

    ``nn.RNN``/``nn.LSTM``/``nn.GRU`` ask for their batch size before the op
    that would explain it runs: ``size(1)`` when built with
    ``batch_first=False``, ``size(0)`` when built with ``batch_first=True``.
    """
    if sys._getframe(2).f_globals.get("__name__") != "torch.nn.modules.rnn":
        return ""
    if dim == 1:
        return (" (asked by an nn.RNN/LSTM/GRU built with batch_first=False, which reads "
                f"dimension 1 of its input as the batch; a {batch_type} is batch-major: build "
                "the module with batch_first=True, or call it on matchbox.nn.time_major(x))")
    if dim == 0:
        return (" (asked by an nn.RNN/LSTM/GRU built with batch_first=True, which reads "
                f"dimension 0 of its input as the batch; a {batch_type} is time-major: build the "
                "module with batch_first=False, or call it on the batch itself)")
    return ""


class SharedStateBatchSize(int):
    """The batch size as ``nn.RNN``/``nn.LSTM``/``nn.GRU`` read it to check their initial
    states: equal to the batch size, and to 1.

    In the loop over examples an initial state ``(layers, 1, hidden)`` has each
    example's batch size, 1.  On a batch the module compares the state's size
    with ``(layers, batch size, hidden)`` before Matchbox sees the call; this
    size lets a plain ``(layers, 1, hidden)`` state (one state for every
    example, a learned start state) pass that check too, and the recurrent
    ops then broadcast it to every example, as pointwise ops broadcast a plain
    tensor.  It is an ``int`` equal to the batch size everywhere else.
    """

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, int):
            return int(other) in (int(self), 1)
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = int.__hash__


def batch_size_as_asked(size: int) -> int:
    """``size`` (a batch size that ``size(0)`` of a batch type returns), as a
    :class:`SharedStateBatchSize` when PyTorch's recurrent modules ask for it."""
    if isinstance(size, int) and sys._getframe(2).f_globals.get("__name__") == \
            "torch.nn.modules.rnn":
        return SharedStateBatchSize(size)
    # (A symbolic batch size, while ``matchbox.compile`` captures: an ``int`` of it would
    # fix it.  A shared initial state then fails the module's check, and the call is
    # captured again with its own sizes.)
    return size
