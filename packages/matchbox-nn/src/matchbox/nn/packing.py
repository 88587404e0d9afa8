"""PyTorch's packed layout of a batch's rows, and the moves between it and the others.

This is the one place where rows of examples ``(1, T_e, *S)`` (the length
``T_e`` differs between examples, ``S`` is static) move between layouts.  The
recurrent modules of matchbox-nn use it to run a ``MaskedBatch`` through the
packed path, and matchbox-packed's ``PackedBatch`` is built on it (its
PackedSequence, ``torch.nested`` and ``MaskedBatch`` conversions call these
functions).  ``B`` examples, ``N = sum(T_e)`` real rows:

| layout | tensor                       | example ``e``'s step ``t`` is at                 | used by |
|--------|------------------------------|--------------------------------------------------|---------|
| padded | ``(B, T_pad, *S)``           | ``data[e, t]``                                   | ``MaskedBatch`` |
| jagged | ``(N, *S)``, caller order    | ``values[starts[e] + t]``                        | ``torch.nested`` (jagged), ``fromlist`` |
| packed | ``(N, *S)``, time-major      | ``data[offsets[t] + unsorted_indices[e]]``       | ``PackedSequence``, cuDNN, ``PackedBatch`` |

The packed layout is PyTorch's ``PackedSequence``: the rows of step 0, then of
step 1, ...; within a step, the examples still running, ordered by decreasing
length.  Ties keep the caller's order (a stable sort), so the same lengths
always give the same layout.  ``sorted_indices[slot]`` is the example in a
slot, ``unsorted_indices[e]`` the slot of example ``e``; ``batch_sizes[t]`` is
the number of examples longer than ``t`` (on the CPU, as PyTorch's packed ops
read it).  Unlike a ``PackedSequence``, a :class:`Layout` may hold examples of
length zero: they take the last slots and no row (``batch_sizes[0]`` counts
only the non-empty ones).

Every move is one ``index_select`` / ``index_copy`` (one kernel on CUDA,
whatever the lengths) with indices computed once per layout; gradients flow
through all of them, and a move never reads padding.
"""

from __future__ import annotations

from typing import Any

import torch

from matchbox.extending import jagged_rows

__all__ = [
    "Layout",
    "gather_jagged",
    "gather_padded",
    "relayout",
    "scatter_jagged",
    "scatter_padded",
]


# Cached values that do not live on the layout's device (kept by Layout.to).
_HOST_KEYS = ("n_rows", "offsets", "unsorted_cpu")


class Layout:
    """Where every example's rows are in the packed layout: index tensors, no data.

    ``lengths`` (caller order), ``sorted_cpu`` and ``batch_sizes`` live on the
    CPU; the device tensors (``sorted_indices``, ``unsorted_indices``, the step
    and example of every row, padding masks) are made on first use and kept,
    so every batch that shares a layout shares them.
    """

    __slots__ = ("lengths", "sorted_cpu", "batch_sizes", "device", "_cache")

    def __init__(self, lengths: torch.Tensor, sorted_cpu: torch.Tensor,
                 batch_sizes: torch.Tensor, device: Any,
                 cache: dict[str, Any] | None = None):
        self.lengths = lengths
        self.sorted_cpu = sorted_cpu
        self.batch_sizes = batch_sizes
        self.device = torch.device(device)
        self._cache = {} if cache is None else cache

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_lengths(cls, lengths: torch.Tensor, device: Any) -> Layout:
        """The layout of examples of the given lengths (CPU int64, caller order)."""
        lengths = lengths.to("cpu", torch.int64)
        _, order = torch.sort(lengths, descending=True, stable=True)
        longest = int(lengths.max()) if lengths.numel() else 0
        # batch_sizes[t] = examples longer than t = B - examples of length <= t.
        at_most = torch.bincount(lengths, minlength=longest + 1).cumsum(0)
        batch_sizes = lengths.numel() - at_most[:longest]
        return cls(lengths, order, batch_sizes, device)

    @classmethod
    def from_packed(cls, op: str, batch_sizes: Any, sorted_indices: Any,
                    unsorted_indices: Any, batch_size: int | None, device: Any) -> Layout:
        """The layout a ``PackedSequence`` (or a ``PackedBatch``'s parts) describes, checked.

        ``sorted_indices=None`` means the examples are already sorted (what
        ``enforce_sorted=True`` gives).  ``batch_size`` larger than
        ``batch_sizes[0]`` adds examples of length zero in the last slots.
        """
        if not isinstance(batch_sizes, torch.Tensor) or batch_sizes.dim() != 1 or (
            batch_sizes.dtype != torch.int64 or batch_sizes.device.type != "cpu"
        ):
            raise ValueError(f"{op}: batch_sizes must be a 1-D int64 CPU tensor (as in a "
                             f"PackedSequence), got {_describe(batch_sizes)}")
        if batch_sizes.numel() and (batch_sizes.min() <= 0 or (
                batch_sizes[1:] > batch_sizes[:-1]).any()):
            raise ValueError(f"{op}: batch_sizes must be positive and non-increasing, got "
                             f"{batch_sizes.tolist()}")
        running = int(batch_sizes[0]) if batch_sizes.numel() else 0
        if sorted_indices is None:
            size = running if batch_size is None else batch_size
            sorted_cpu = torch.arange(size)
        else:
            sorted_cpu = _permutation(op, "sorted_indices", sorted_indices)
        size = sorted_cpu.numel()
        if batch_size is not None and batch_size != size:
            raise ValueError(f"{op}: sorted_indices has {size} entries for a batch of "
                             f"{batch_size} examples")
        if size < running:
            raise ValueError(f"{op}: batch_sizes[0] is {running} but there are only {size} "
                             "examples")
        if unsorted_indices is not None:
            unsorted_cpu = _permutation(op, "unsorted_indices", unsorted_indices)
            if unsorted_cpu.numel() != size or not torch.equal(
                    sorted_cpu[unsorted_cpu], torch.arange(size)):
                raise ValueError(f"{op}: unsorted_indices is not the inverse permutation of "
                                 "sorted_indices")
        # The example in slot s runs while batch_sizes[t] > s.
        sorted_lengths = (batch_sizes.unsqueeze(0) > torch.arange(size).unsqueeze(1)).sum(1)
        lengths = torch.empty_like(sorted_lengths)
        lengths[sorted_cpu] = sorted_lengths
        layout = cls(lengths, sorted_cpu, batch_sizes, device)
        # Keep the caller's device tensors (a PackedSequence's): no copy.
        device = layout.device
        for name, given in (("sorted_indices", sorted_indices),
                            ("unsorted_indices", unsorted_indices)):
            if isinstance(given, torch.Tensor) and given.device == device:
                layout._cache[name] = given
        return layout

    # ------------------------------------------------------------------ sizes

    @property
    def batch_size(self) -> int:
        return self.lengths.numel()

    @property
    def max_length(self) -> int:
        """The longest example's length (the number of steps)."""
        return self.batch_sizes.numel()

    @property
    def n_rows(self) -> int:
        """The number of real rows, ``sum(lengths)``."""
        return self._cached("n_rows", lambda: int(self.batch_sizes.sum()))

    @property
    def n_running(self) -> int:
        """The number of non-empty examples (they take the first slots)."""
        return int(self.batch_sizes[0]) if self.max_length else 0

    @property
    def offsets(self) -> torch.Tensor:
        """Where each step's rows begin (CPU, ``max_length + 1`` entries, last = ``N``)."""
        return self._cached("offsets", lambda: torch.cat(
            [torch.zeros(1, dtype=torch.int64), self.batch_sizes.cumsum(0)]))

    @property
    def unsorted_cpu(self) -> torch.Tensor:
        return self._cached("unsorted_cpu", lambda: _inverse(self.sorted_cpu))

    # ------------------------------------------------------------------ device tensors

    @property
    def sorted_indices(self) -> torch.Tensor:
        return self._cached("sorted_indices", lambda: self.sorted_cpu.to(self.device))

    @property
    def unsorted_indices(self) -> torch.Tensor:
        return self._cached("unsorted_indices", lambda: self.unsorted_cpu.to(self.device))

    @property
    def row_examples(self) -> torch.Tensor:
        """The caller's index of the example each packed row belongs to (device, ``(N,)``)."""
        return self._rows()[0]

    @property
    def row_steps(self) -> torch.Tensor:
        """The step (position along the packed dimension) of each packed row (device)."""
        return self._rows()[1]

    def _rows(self) -> torch.Tensor:
        def make() -> torch.Tensor:
            steps = torch.repeat_interleave(torch.arange(self.max_length), self.batch_sizes)
            slots = torch.arange(self.n_rows) - self.offsets[steps]
            # One host-to-device copy for both.
            return torch.stack([self.sorted_cpu[slots], steps]).to(self.device)

        return self._cached("rows", make)

    def device_offsets(self) -> torch.Tensor:
        return self._cached("device_offsets", lambda: self.offsets.to(self.device))

    def device_lengths(self) -> torch.Tensor:
        return self._cached("device_lengths", lambda: self.lengths.to(self.device))

    def padding_mask(self, total_length: int, rank: int) -> torch.Tensor:
        """The ``MaskedBatch`` mask of these examples padded to ``total_length``: true where real.

        Shape ``(B, total_length, 1, ...)`` of the given rank; one tensor per
        layout, so batches converted from the same layout share their mask.
        """
        def make() -> torch.Tensor:
            positions = torch.arange(total_length, device=self.device)
            mask = positions.unsqueeze(0) < self.device_lengths().unsqueeze(1)
            return mask.reshape(self.batch_size, total_length, *[1] * (rank - 2))

        return self._cached(("mask", total_length, rank), make)

    def jagged_starts(self) -> torch.Tensor:
        """Where each example's rows begin in the jagged layout (device, ``(B,)``)."""
        return self._cached("jagged_starts", lambda: (
            self.lengths.cumsum(0) - self.lengths).to(self.device))

    # ------------------------------------------------------------------ comparison, moves

    def same_as(self, other: Layout) -> bool:
        """Whether ``other`` puts every row in the same place (compared on the CPU)."""
        return other is self or (torch.equal(self.batch_sizes, other.batch_sizes)
                                 and torch.equal(self.sorted_cpu, other.sorted_cpu))

    def to(self, device: Any) -> Layout:
        """The same layout with its device tensors on ``device`` (made there on first use)."""
        device = torch.device(device)
        if device == self.device:
            return self
        host = {key: self._cache[key] for key in _HOST_KEYS if key in self._cache}
        return Layout(self.lengths, self.sorted_cpu, self.batch_sizes, device, host)

    def _cached(self, key: Any, make: Any) -> Any:
        value = self._cache.get(key)
        if value is None:
            value = self._cache[key] = make()
        return value

    def __repr__(self) -> str:
        return (f"Layout(lengths={self.lengths.tolist()}, batch_sizes="
                f"{self.batch_sizes.tolist()}, device='{self.device}')")


# ---------------------------------------------------------------------------- row moves


def gather_padded(data: torch.Tensor, layout: Layout) -> torch.Tensor:
    """Padded ``(B, T_pad, *S)`` -> packed rows ``(N, *S)``; padding is never read."""
    examples, steps = layout.row_examples, layout.row_steps
    return data.flatten(0, 1).index_select(0, examples * data.size(1) + steps)


def scatter_padded(rows: torch.Tensor, layout: Layout, total_length: int) -> torch.Tensor:
    """Packed rows -> padded ``(B, total_length, *S)`` in the caller's order, zero padding."""
    examples, steps = layout.row_examples, layout.row_steps
    padded = rows.new_zeros(layout.batch_size * total_length, *rows.shape[1:])
    padded = padded.index_copy(0, examples * total_length + steps, rows)
    return padded.view(layout.batch_size, total_length, *rows.shape[1:])


def gather_jagged(values: torch.Tensor, starts: torch.Tensor, layout: Layout) -> torch.Tensor:
    """Jagged rows (example ``e`` from ``starts[e]``, a device tensor) -> packed rows."""
    return values.index_select(0, starts.index_select(0, layout.row_examples) + layout.row_steps)


def scatter_jagged(rows: torch.Tensor, layout: Layout) -> torch.Tensor:
    """Packed rows -> jagged values ``(N, *S)``: each example's rows together, caller order."""
    def make() -> torch.Tensor:
        # Jagged row j is example e's step t; its packed row is offsets[t] + slot of e.
        examples, steps = jagged_rows(layout.lengths)
        packed_rows = layout.offsets[steps] + layout.unsorted_cpu[examples]
        return packed_rows.to(layout.device)

    return rows.index_select(0, layout._cached("jagged_rows", make))


def relayout(rows: torch.Tensor, source: Layout, target: Layout) -> torch.Tensor:
    """Packed rows of ``source`` in the order of ``target``, a layout of the same lengths."""
    if source.same_as(target):
        return rows
    index = (source.device_offsets().index_select(0, target.row_steps)
             + source.unsorted_indices.index_select(0, target.row_examples))
    return rows.index_select(0, index)


# ---------------------------------------------------------------------------- helpers


def _inverse(order: torch.Tensor) -> torch.Tensor:
    """The permutation that undoes ``order``."""
    positions = torch.arange(order.numel(), device=order.device)
    return torch.empty_like(order).scatter_(0, order, positions)


def _permutation(op: str, name: str, indices: Any) -> torch.Tensor:
    if not isinstance(indices, torch.Tensor) or indices.dim() != 1 or (
        indices.dtype != torch.int64
    ):
        raise ValueError(f"{op}: {name} must be a 1-D int64 tensor, got {_describe(indices)}")
    cpu = indices.cpu()
    if not torch.equal(torch.sort(cpu).values, torch.arange(cpu.numel())):
        raise ValueError(f"{op}: {name} must be a permutation of 0..{cpu.numel() - 1}, got "
                         f"{cpu.tolist()}")
    return cpu


def _describe(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return f"a {x.dim()}-D {x.dtype} tensor on {x.device}"
    return type(x).__name__
