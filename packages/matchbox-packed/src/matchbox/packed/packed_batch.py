"""``PackedBatch``: a batch packed along the batch dimension and one dynamic dimension.

Each example is a tensor ``(1, T_e, *S)``: dimension 1 is the packed (dynamic)
dimension, whose size ``T_e`` may differ between examples (zero included),
and the dimensions ``S`` after it are static.  The batch holds

- ``data``: ``(sum(T_e), *S)``, exactly the real rows, in PyTorch's packed
  layout (``PackedSequence``, what cuDNN reads): time-major, and within each
  step the examples still running ordered by decreasing length (ties keep the
  caller's order);
- ``layout`` (a :class:`matchbox.nn.packing.Layout`): ``batch_sizes`` (rows per
  step, on the CPU), ``offsets`` (where each step's rows begin),
  ``sorted_indices`` / ``unsorted_indices`` (the permutations between the
  caller's order and the sorted one) and the lengths.

Examples of length zero are held (they take the last slots and no row); a
``PackedSequence`` cannot hold them, so :meth:`to_packed_sequence` refuses
such a batch with a clear error.  Every conversion between layouts is in
``matchbox.nn.packing``; this class calls it.

Dimension numbers are those of one example, as for ``MaskedBatch``: ``x.sum(1)``
sums over the packed dimension, ``x.size(2)`` is the first static size.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.nn.utils.rnn import PackedSequence

from matchbox.extending import (
    Batch,
    BatchShape,
    MaskedBatch,
    batch_size_as_asked,
    check_examples,
    describe_tensor,
    lengths_along,
    make_jagged,
    normalize_dim,
    padded_size_of,
    pytree_rank_error,
    read_jagged,
    why_size_was_asked,
)
from matchbox.nn.extending import (
    Layout,
    gather_jagged,
    gather_padded,
    relayout,
    scatter_jagged,
    scatter_padded,
)


class PackedBatch(Batch):
    """Examples ``(1, T_e, *S)`` packed without padding, in cuDNN's (PackedSequence's) layout."""

    __slots__ = ("data", "layout", "dims")
    _unsupported_hint = ("; convert the batch with matchbox.packed.as_masked(x) (or "
                         "x.to_masked()) to use MaskedBatch's ops")

    data: torch.Tensor
    layout: Layout
    dims: tuple[bool, ...]

    def __init__(self, data: torch.Tensor, batch_sizes: torch.Tensor,
                 sorted_indices: torch.Tensor | None = None,
                 unsorted_indices: torch.Tensor | None = None, *,
                 batch_size: int | None = None):
        """Wrap packed rows, validated (what a ``PackedSequence`` holds).

        ``batch_size`` larger than ``batch_sizes[0]`` (or ``sorted_indices``
        longer than it) adds examples of length zero in the last slots.
        """
        op = "PackedBatch"
        if not isinstance(data, torch.Tensor) or data.dim() == 0:
            raise ValueError(f"{op}: data must be a tensor of packed rows (rows, *static), "
                             f"got {describe_tensor(data)}")
        layout = Layout.from_packed(op, batch_sizes, sorted_indices, unsorted_indices,
                                    batch_size, data.device)
        if data.size(0) != layout.n_rows:
            raise ValueError(f"{op}: data has {data.size(0)} rows but batch_sizes sums to "
                             f"{layout.n_rows}")
        self.data = data
        self.layout = layout
        self.dims = _dims(data)

    @classmethod
    def _make(cls, data: torch.Tensor, layout: Layout) -> PackedBatch:
        """Build without validation: for ops, whose results are valid by construction."""
        batch = object.__new__(cls)
        batch.data = data
        batch.layout = layout
        batch.dims = _dims(data)
        return batch

    # ------------------------------------------------------------------ construction

    @classmethod
    def fromlist(cls, examples: Sequence[torch.Tensor],
                 dims: Sequence[bool] | None = None) -> PackedBatch:
        """Pack a non-empty list of tensors ``(1, T_e, *S)``; gradients flow back to each.

        ``dims`` (optional, as for ``MaskedBatch.fromlist``) must mark
        dimension 1 dynamic (or static, when every length agrees) and every
        later dimension static.
        """
        op = "PackedBatch.fromlist"
        if dims is None:
            first = examples[0] if isinstance(examples, Sequence) and len(examples) else None
            rank = first.dim() if isinstance(first, torch.Tensor) else 2
            if rank < 2:
                raise ValueError(
                    f"{op}: each example must be (1, length, ...), a batch dimension of size "
                    f"one first; example 0 has shape {tuple(first.shape)} (add it with "
                    "x.unsqueeze(0))"
                )
            dims = (True,) + (False,) * (rank - 2)
        dims = _check_dims(op, tuple(bool(d) for d in dims))
        shapes = check_examples(
            op, examples, dims, static_hint="a PackedBatch has one dynamic dimension, 1; "
            "use MaskedBatch.fromlist for more")
        device = examples[0].device
        layout = Layout.from_lengths(torch.tensor([s[1] for s in shapes]), device)
        # One cat gives the jagged layout (each example's rows together); one
        # index_select puts the rows in the packed order.
        values = torch.cat(list(examples), 1)[0]
        return cls._make(gather_jagged(values, layout.jagged_starts(), layout), layout)

    @classmethod
    def from_masked(cls, batch: MaskedBatch, dim: int = 1) -> PackedBatch:
        """Pack a ``MaskedBatch`` whose examples have dimension ``dim`` (which must be 1)
        dynamic and the others static; padding is never read."""
        op = "PackedBatch.from_masked"
        if not isinstance(batch, MaskedBatch):
            raise TypeError(f"{op}: expected a MaskedBatch, got {type(batch).__name__}")
        if batch.dim() < 2:
            raise ValueError(f"{op}: examples of rank {batch.dim()} have no dimension 1 to pack")
        d = normalize_dim(op, dim, batch.dim())
        if d != 1:
            raise ValueError(
                f"{op}: a PackedBatch packs dimension 1 of each example (examples (1, length, "
                f"...)), got dim={dim}; move that dimension to position 1 first "
                f"(x.transpose(1, {d}))" if d else
                f"{op}: dimension 0 is the batch dimension of each example; a PackedBatch "
                "packs dimension 1"
            )
        _check_dims(op, batch.dims)
        data = batch.data
        if batch._mask is None or not batch.dims[0]:  # every example has the full length
            lengths = torch.full((data.size(0),), data.size(1), dtype=torch.int64)
        else:
            lengths = lengths_along(batch, 1).cpu()
        layout = Layout.from_lengths(lengths, data.device)
        return cls._make(gather_padded(data, layout), layout)

    @classmethod
    def from_packed_sequence(cls, sequence: PackedSequence) -> PackedBatch:
        """The batch a ``PackedSequence`` holds, sharing its data (no copy)."""
        op = "PackedBatch.from_packed_sequence"
        if not isinstance(sequence, PackedSequence):
            raise TypeError(f"{op}: expected a PackedSequence, got {type(sequence).__name__}")
        data = sequence.data
        layout = Layout.from_packed(op, sequence.batch_sizes, sequence.sorted_indices,
                                    sequence.unsorted_indices, None, data.device)
        if data.size(0) != layout.n_rows:
            raise ValueError(f"{op}: data has {data.size(0)} rows but batch_sizes sums to "
                             f"{layout.n_rows}")
        return cls._make(data, layout)

    @classmethod
    def from_nested(cls, nested: torch.Tensor) -> PackedBatch:
        """The batch a jagged ``torch.nested`` tensor ``(B, j, *S)`` holds: example ``e`` is
        ``nested[e].unsqueeze(0)``.  Its values are gathered into the packed order."""
        values, starts, lengths = read_jagged("PackedBatch.from_nested", nested)
        layout = Layout.from_lengths(lengths, nested.device)
        return cls._make(gather_jagged(values, starts, layout), layout)

    # ------------------------------------------------------------------ conversions

    def to_masked(self) -> MaskedBatch:
        """The same examples as a ``MaskedBatch``, padded to the longest with zeros.

        Batches converted from one layout share their mask tensor, so masked
        ops between them skip the length comparison.
        """
        layout = self.layout
        total = layout.max_length
        data = scatter_padded(self.data, layout, total)
        lengths = layout.lengths
        if lengths.numel() == 0 or bool((lengths == total).all()):
            return MaskedBatch._make(data, None, self.dims)
        return MaskedBatch._make(data, layout.padding_mask(total, self.dim()), self.dims)

    def to_packed_sequence(self) -> PackedSequence:
        """The ``PackedSequence`` of these examples, sharing ``data`` (no copy).

        A ``PackedSequence`` cannot hold an example of length zero: such a batch
        is refused with a ``ValueError`` naming the example.
        """
        layout = self.layout
        if layout.n_running < layout.batch_size:
            empty = int((layout.lengths == 0).nonzero()[0])
            raise ValueError(
                f"PackedBatch.to_packed_sequence: example {empty} has length 0, which a "
                "PackedSequence cannot hold (PyTorch packs only non-empty sequences); use "
                "to_masked() or leave the empty examples out"
            )
        return PackedSequence(self.data, layout.batch_sizes, layout.sorted_indices,
                              layout.unsorted_indices)

    def to_nested(self) -> torch.Tensor:
        """A jagged ``torch.nested`` tensor ``(B, j, *S)``; component ``e`` is example ``e``
        without its leading dimension.  The rows are copied into the caller's order."""
        return make_jagged(scatter_jagged(self.data, self.layout), self.layout.lengths)

    def examples(self) -> Iterator[torch.Tensor]:
        """Each example ``(1, T_e, *S)`` in the caller's order (views of one gathered tensor;
        gradients flow back to the batch)."""
        values = scatter_jagged(self.data, self.layout)
        for example in values.split(self.layout.lengths.tolist()):
            yield example.unsqueeze(0)

    def _with_data(self, data: torch.Tensor) -> PackedBatch:
        """The batch of the same layout holding ``data``; the layout's device tensors follow
        it to its device (batch_sizes stays on the CPU, as PyTorch's packed ops want it)."""
        return PackedBatch._make(data, self.layout.to(data.device))

    # The rows protocol (matchbox._batch): the packed rows are exactly the real ones.

    def rows(self, static: int = 1) -> torch.Tensor:
        data = self.data
        return data.reshape(-1, *data.shape[data.dim() - static:])

    def from_rows(self, values: torch.Tensor, static: int = 1) -> PackedBatch:
        data = self.data
        lead = data.shape[:data.dim() - static]
        return PackedBatch._make(values.reshape(*lead, *values.shape[1:]), self.layout)

    def row_examples(self, static: int = 1) -> torch.Tensor:
        data = self.data
        per_row = 1
        for size in data.shape[1:data.dim() - static]:
            per_row *= size
        examples = self.layout.row_examples
        return examples if per_row == 1 else examples.repeat_interleave(per_row)

    def _take_converted(self, result: MaskedBatch) -> None:
        # An in-place op handed to MaskedBatch ran on a padded copy: take its rows.  (The
        # data tensor is replaced, not written: autograd may have saved the old one.)
        self.data = gather_padded(result.data, self.layout)

    def backward(self, gradient: Any = None, **kwargs: Any) -> None:
        """Backward with an explicit ``gradient`` (a ``PackedBatch`` of the same layout or a
        tensor like ``data``)."""
        if gradient is None:
            raise RuntimeError(
                "backward(): grad can be implicitly created only for per-example scalars, but "
                "a PackedBatch's examples have a packed dimension; reduce each example first "
                "(for example x.sum(), which gives a MaskedBatch of scalars) or pass gradient="
            )
        if isinstance(gradient, PackedBatch):
            gradient = relayout(gradient.data, gradient.layout, self.layout)
        self.data.backward(gradient, **kwargs)

    # ------------------------------------------------------------------ inspection

    @property
    def batch_sizes(self) -> torch.Tensor:
        """Rows per step (int64, CPU), as in a ``PackedSequence``."""
        return self.layout.batch_sizes

    @property
    def offsets(self) -> torch.Tensor:
        """Where each step's rows begin in ``data`` (int64, CPU; the last one is the row count)."""
        return self.layout.offsets

    @property
    def sorted_indices(self) -> torch.Tensor:
        """``sorted_indices[slot]``: the caller's index of the example in each slot."""
        return self.layout.sorted_indices

    @property
    def unsorted_indices(self) -> torch.Tensor:
        """``unsorted_indices[e]``: the slot of the caller's example ``e``."""
        return self.layout.unsorted_indices

    def lengths(self) -> torch.Tensor:
        """Per-example lengths as ``MaskedBatch.lengths`` gives them: int64 ``(batch, 1)``."""
        return self.layout.device_lengths().unsqueeze(1)

    @property
    def batch_size(self) -> int:
        return self.layout.batch_size

    @property
    def ndim(self) -> int:
        return self.dim()

    @property
    def shape(self) -> BatchShape:
        return BatchShape(self)  # type: ignore[arg-type]

    def dim(self) -> int:
        """The rank of every example (its batch dimension and the packed one included)."""
        return self.data.dim() + 1

    def size(self, dim: int | None = None) -> Any:
        """The size of a static dimension; ``size(0)`` is the batch size.

        Dimension 1 (the packed one) has no single size: that raises ``ValueError``
        (use ``maxsize(1)`` for the longest example or ``lengths()``).
        """
        if dim is None:
            raise ValueError(
                "size(): dimension 1 is the packed dimension, whose size differs between "
                "examples; use maxsize(1) for the longest example or lengths()"
            )
        i = normalize_dim("size", dim, self.dim())
        if i == 1:
            raise ValueError(
                f"size({dim}): dimension 1 is the packed dimension, whose size differs "
                "between examples; use maxsize(1) for the longest example or lengths()"
                f"{why_size_was_asked('PackedBatch', 1)}"
            )
        return batch_size_as_asked(self.batch_size) if i == 0 else self.data.size(i - 1)

    def maxsize(self, dim: int | None = None) -> Any:
        """The longest example's size along ``dim`` (for a static dimension, its size);
        without ``dim``, every dimension's as a ``torch.Size``."""
        if dim is None:
            return torch.Size(self.maxsize(d) for d in range(self.dim()))
        i = normalize_dim("maxsize", dim, self.dim())
        if i == 1:
            return padded_size_of(self.layout.max_length, dim, True, self)
        return self.batch_size if i == 0 else self.data.size(i - 1)

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt through the validating constructor, from CPU copies of the
        # permutations (a loaded batch is checked as a constructed one is).
        layout = self.layout
        return (PackedBatch, (self.data, layout.batch_sizes, layout.sorted_cpu,
                              layout.unsorted_cpu))

    def __repr__(self) -> str:
        layout = self.layout
        static = tuple(self.data.shape[1:])
        shown = ", ".join(str((1, n, *static)) for n in layout.lengths[:8].tolist())
        more = f", ... ({layout.batch_size} examples)" if layout.batch_size > 8 else ""
        grad = ", requires_grad=True" if self.requires_grad else ""
        device = "" if self.device.type == "cpu" else f", device='{self.device}'"
        padded = layout.batch_size * layout.max_length
        return (f"PackedBatch(batch_size={layout.batch_size}, dtype={self.dtype}{device}{grad}, "
                f"rows={layout.n_rows} (padded: {padded}), examples=[{shown}{more}])")

    # Dataclass fields: the constructor's arguments (dataclasses.replace rebuilds a
    # batch), those whose dimension 0 is the batch first (a batch-size search finds the
    # number of examples before the rows).  Pytree: the rows are the one child (the
    # layout's index tensors are not values a transform may change: torch.func would
    # try to differentiate them); the layout and the rows' rank are the context.
    _tree_fields = ("sorted_indices", "unsorted_indices", "data", "batch_sizes")
    _tree_children = ("data",)

    def _tree_flatten(self) -> tuple[list[torch.Tensor], _LayoutContext]:
        return [self.data], _LayoutContext(self.layout, len(self.dims))  # the rows' rank

    @staticmethod
    def _tree_unflatten(children: list[Any], context: _LayoutContext) -> PackedBatch:
        data, = children
        layout = context.layout
        if not isinstance(data, torch.Tensor):
            # A tree of other leaves (tools map a tree to its in_dims, its shapes, ...).
            batch = object.__new__(PackedBatch)
            batch.data, batch.layout = data, layout
            batch.dims = (True,) + (False,) * (context.rank - 1)
            return batch
        if data.dim() != context.rank:
            raise pytree_rank_error("PackedBatch", "rows", data.dim(), context.rank)
        return PackedBatch._make(data, layout.to(data.device))

    @staticmethod
    def _tree_dump_context(context: _LayoutContext) -> list[Any]:
        return _dumpable(context)

    @staticmethod
    def _tree_load_context(dumped: list[Any]) -> _LayoutContext:
        return _from_dumpable(dumped)


def _dims(data: torch.Tensor) -> tuple[bool, ...]:
    """Dims of examples whose rows are ``data``: the packed dimension, then static ones."""
    return (True,) + (False,) * (data.dim() - 1)


def _check_dims(op: str, dims: tuple[bool, ...]) -> tuple[bool, ...]:
    if not dims:
        raise ValueError(f"{op}: examples need a dimension 1 to pack (dims is empty: "
                         "examples of shape (1,))")
    dynamic = [i for i, d in enumerate(dims[1:], start=2) if d]
    if dynamic:
        raise ValueError(
            f"{op}: dimension {dynamic[0]} is dynamic too; a PackedBatch packs one dynamic "
            "dimension (dimension 1) and keeps the others static (use a MaskedBatch)"
        )
    return dims


# ---------------------------------------------------------------------------- PyTorch's tools


class _LayoutContext:
    """A ``PackedBatch``'s pytree context: its layout and the rank of its rows, equal
    to any that puts every row in the same place (``torch.export`` checks that a
    call's inputs have the tree spec, and so the layout, of the example inputs)."""

    __slots__ = ("layout", "rank")

    def __init__(self, layout: Layout, rank: int):
        self.layout = layout
        self.rank = rank

    def key(self) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
        layout = self.layout
        return self.rank, tuple(layout.lengths.tolist()), tuple(layout.sorted_cpu.tolist())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _LayoutContext) and (
            (other.layout is self.layout and other.rank == self.rank)
            or other.key() == self.key())

    def __hash__(self) -> int:
        return hash(self.key())

    def __repr__(self) -> str:
        rank, lengths, order = self.key()
        return f"PackedLayout(rank={rank}, lengths={list(lengths)}, sorted_indices={list(order)})"


def _dumpable(context: _LayoutContext) -> list[Any]:
    rank, lengths, order = context.key()
    return [rank, list(lengths), list(order)]


def _from_dumpable(dumped: list[Any]) -> _LayoutContext:
    rank, lengths, order = dumped
    layout = Layout.from_lengths(torch.tensor(lengths, dtype=torch.int64), "cpu")
    if list(order) != layout.sorted_cpu.tolist():
        layout = Layout(layout.lengths, torch.tensor(order, dtype=torch.int64),
                        layout.batch_sizes, "cpu")
    return _LayoutContext(layout, rank)
