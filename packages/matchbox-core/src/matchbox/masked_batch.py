"""``MaskedBatch``: a batch of examples whose sizes differ in some dimensions.

Layout:

- ``data``: dimension 0 is the batch; a static dimension has the size of every
  example; a dynamic dimension is at least as large as the largest example.
- ``mask``: same rank; the batch size in dimension 0, size 1 in static
  dimensions, the size of ``data`` in dynamic dimensions; ``True`` where
  ``data`` holds real values.  Real values come first along each dynamic
  dimension (padding is at the end), as ``pad_sequence`` lays it out.
- ``dims``: one bool per non-batch dimension, ``True`` = dynamic.
- lengths: each example's size along each dynamic dimension, ``(batch,
  n_dynamic)`` (``lengths()``).  The mask is, per example, the product of one
  prefix per dynamic dimension, so it tells the lengths -- unless an example is
  empty in one dynamic dimension and not in another (``(1, 3, 0)``: its mask is
  all false, as that of ``(1, 0, 0)``).  Such a mask carries the lengths itself
  (an attribute of the mask tensor, see ``matchbox._lengths``): every op that
  passes a mask on passes them on, ops that build a new mask build them, and
  ``lengths()``, ``examples()``, ``size_as_tensor`` and ``repr`` read them.
  Only ops that can make such an example check for one (``fromlist``, products,
  outer broadcasts, ``narrow``/slices to length 0, constructors with per-example
  sizes); while a mask carrying lengths is alive, ``__torch_function__`` refuses
  an op that built a new mask without them (``_lengths.check_call``).  The
  constructor takes them as ``MaskedBatch(data, mask, dims, lengths=...)``.

Values under a false mask are unspecified (NaN and inf included); every op is
written so that they reach neither a real output nor a gradient.

Dimension numbers in user code are those of one example, whose dimension 0 has
size one: ``x.sum(1)`` on an example of shape ``(1, n, 128)`` and on a batch
mean the same thing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch

from matchbox import _example_scalars, _lengths, _region_guard
from matchbox._absent import batch_backward, refuse_absent
from matchbox._arguments import normalize_dim
from matchbox._batch import Batch, pytree_rank_error
from matchbox._example_scalars import VECTOR, mark
from matchbox._jagged import jagged_rows, make_jagged, read_jagged
from matchbox._layout import (
    check_examples,
    check_padding_value,
    constant_pad,
    dims_argument,
    example_shape,
    full_mask,
    has_zero_padding,  # noqa: F401  (this module is the helpers' public address)
    mark_zero_padding,
    mask_from_lengths,
    some_example_empty_in_part,
    validate_layout,
    validate_lengths,
)
from matchbox._padding import fill_padding, guard_gradient, mixing_mask
from matchbox._real_rows import RowMask, batch_rows, real_rows, unpack_guarded
from matchbox._sizes import BatchShape, batch_size_of, padded_size_of, why_size_was_asked

_new = object.__new__
_RAW_READS = _region_guard.RAW_READS
_MT = torch.Tensor.mT.__get__  # Tensor.mT, as __torch_function__ names it (ops/ordering.py)


class MaskedBatch(Batch):
    """A batch of tensors ("examples") that may differ in size in some dimensions."""

    __slots__ = ("_data", "_mask", "dims", "_zero_padding", "_guards", "_not_a_view",
                 "_present", "_kept_outside", "_deferred_guard", "_scalar", "__weakref__")

    data: torch.Tensor
    dims: tuple[bool, ...]
    # ``None`` means "every position is real" (a fresh state, a batch without
    # padding): ops then skip mask arithmetic and padding fills entirely.
    _mask: torch.Tensor | None
    # Unset, or (data, mask, data's version) when the padding was known to hold
    # zeros (see ``has_zero_padding``).
    _zero_padding: tuple[torch.Tensor, torch.Tensor, int]
    # None (unset), or the batch this one stands for inside a masked ``@batch`` region
    # (matchbox-control's gradient guard is a new batch): an in-place update of
    # the guard is written through to it, as Python would write into the object.
    _guards: MaskedBatch | None
    # None, or True for the result of indexing a dynamic dimension at positions that differ
    # between examples (``x[:, :-1]``): a view in the loop, a copy here, so an in-place op on
    # it is refused, not silently lost; for one position per example (``x[:, j]``) a tuple
    # saying where such an op is written back (``ops/one_position_writes``; weak references).
    _not_a_view: bool
    # None, or matchbox-control's record that it equals a batch outside a region's mask.
    _kept_outside: tuple
    # None, or a ``(batch,)`` bool tensor: the examples that have this batch as an item of
    # a Python list (appended under a per-example condition), by which ``len(items)`` counts.
    _present: torch.Tensor | None
    # None, or the (mask, rows) of the region whose guard is deferred (_region_guard).
    _deferred_guard: tuple | None
    # dims == (): each example is, in the loop, a number or 0-d (True), a (1,) tensor
    # (False) or not known (None): ``matchbox._example_scalars``.
    _scalar: bool | None

    def __init__(
        self, data: torch.Tensor, mask: torch.Tensor | None, dims: Sequence[bool], *,
        lengths: torch.Tensor | None = None,
    ):
        """``lengths`` (optional, ``(batch, n_dynamic)`` ints): each example's size along
        each dynamic dimension, needed only for an example that is empty in one dynamic
        dimension and not in another (its mask is all false); ``mask=None`` with
        ``lengths`` builds the mask from them."""
        dims = tuple(dims)
        if lengths is not None:
            validate_layout(data, full_mask(data, dims) if mask is None else mask, dims)
            lengths = validate_lengths(data, lengths, dims)
            described = mask_from_lengths(lengths, data.shape, dims)
            if mask is None:
                mask = described
            else:
                mask = mask if mask.dtype == torch.bool else mask != 0
                if not torch.equal(mask, described):
                    raise ValueError(
                        "MaskedBatch: the mask is not the one the lengths describe (real "
                        "positions first, exactly each example's length along each dynamic "
                        "dimension)")
            mask = _lengths.rebuilt(mask, lengths, dims)
        elif mask is not None:
            validate_layout(data, mask, dims)
            mask = mask if mask.dtype == torch.bool else mask != 0
        else:
            validate_layout(data, full_mask(data, dims), dims)
        self._data = data
        self._mask = mask
        self.dims = tuple(bool(d) for d in dims)
        self._present = self._zero_padding = self._not_a_view = self._kept_outside = None
        self._deferred_guard = None  # (``_guards`` left unset, as by ``_make``)
        self._scalar = VECTOR  # the layout's own meaning: examples of shape (1, ...)

    @staticmethod
    def _make(data: torch.Tensor, mask: torch.Tensor | None, dims: tuple[bool, ...]
              ) -> MaskedBatch:
        """Build without validation: for ops, whose results are valid by construction.

        A static method: ops call it for every result, and it saves binding a method."""
        batch = _new(MaskedBatch)
        batch._data = data
        batch._mask = mask
        batch.dims = dims
        # All set but ``_guards``, read only by ``getattr`` with a default, never on an op's
        # hot path (``__getattr__`` answers None): a store fewer per op result (issue 22).
        batch._present = batch._zero_padding = batch._not_a_view = batch._kept_outside = None
        batch._deferred_guard = batch._scalar = None
        return batch

    def __getattr__(self, name: str) -> Any:  # (a name the class lacks, or unset _guards)
        return None if name == "_guards" else Batch.__getattr__(self, name)

    @property
    def data(self) -> torch.Tensor:
        """The padded values, dimension 0 the batch (see the module docstring)."""
        if self._deferred_guard is not None and not _RAW_READS[0]:
            _region_guard.resolve(self)  # a @batch region's guard, applied when read
        return self._data

    @data.setter
    def data(self, value: torch.Tensor) -> None:
        self._data = value

    @property
    def mask(self) -> torch.Tensor:
        """True where ``data`` holds real values (see the module docstring)."""
        if self._mask is None:
            return full_mask(self.data, self.dims)
        return self._mask

    @mask.setter
    def mask(self, value: torch.Tensor | None) -> None:
        self._mask = value

    # ------------------------------------------------------------------ construction

    @classmethod
    def fromlist(
        cls,
        examples: Sequence[torch.Tensor],
        dims: Sequence[bool],
        *,
        padding_value: float = 0.0,
    ) -> MaskedBatch:
        """Batch a non-empty list of tensors with a leading dimension of size one.

        ``dims`` says, for each dimension after the first, whether it is
        dynamic (may differ between examples).  Gradients flow back to every
        example.
        """
        dims = dims_argument("MaskedBatch.fromlist", dims)
        shapes = check_examples("MaskedBatch.fromlist", examples, dims)
        if all(shape == shapes[0] for shape in shapes):
            # Every example has the same size: one cat, no padding.
            return mark(cls._make(torch.cat(list(examples), 0), None, dims), VECTOR)
        max_sizes = [max(s[i] for s in shapes) for i in range(1, len(dims) + 1)]
        check_padding_value(padding_value, examples[0].dtype)
        rows = []
        for example in examples:
            pads: list[int] = []
            for size, max_size in zip(reversed(example.shape[1:]), reversed(max_sizes)):
                pads += [0, max_size - size]
            rows.append(constant_pad(example, pads, padding_value))
        data = torch.cat(rows, 0)
        lengths = torch.tensor(
            [[s[i + 1] for i, d in enumerate(dims) if d] for s in shapes], device=data.device
        )
        mask = mask_from_lengths(lengths, data.shape, dims)
        if some_example_empty_in_part(shapes, dims):
            # The mask of such an example is all false: it carries the lengths.
            mask = _lengths.carry(mask, lengths)
        batch = mark(cls._make(data, mask, dims), VECTOR)
        if padding_value == 0:
            mark_zero_padding(batch)
        return batch

    @classmethod
    def from_nested(cls, nested: torch.Tensor) -> MaskedBatch:
        """The batch a jagged ``torch.nested`` tensor ``(B, j, *S)`` holds: example ``e`` is
        ``nested[e].unsqueeze(0)``, dimension 1 dynamic and the others static.

        The padding holds zeros; gradients flow back to the nested tensor.
        """
        values, starts, lengths = read_jagged("MaskedBatch.from_nested", nested)
        size, longest = lengths.numel(), int(lengths.max())
        examples, steps = jagged_rows(lengths)
        device = values.device
        rows = values
        if nested.lengths() is not None:  # holes between the components: take their rows
            rows = values.index_select(0, starts.index_select(0, examples.to(device))
                                       + steps.to(device))
        padded = values.new_zeros(size * longest, *values.shape[1:]).index_copy(
            0, (examples * longest + steps).to(device), rows)
        data = padded.view(size, longest, *values.shape[1:])
        dims = (True,) + (False,) * (values.dim() - 1)
        if bool((lengths == longest).all()):
            return MaskedBatch._make(data, None, dims)
        batch = MaskedBatch._make(data, mask_from_lengths(lengths.unsqueeze(1).to(device),
                                                           data.shape, dims), dims)
        mark_zero_padding(batch)
        return batch

    def to_nested(self) -> torch.Tensor:
        """The examples as a jagged ``torch.nested`` tensor ``(B, j, *S)``: component ``e``
        is example ``e`` without its leading dimension.

        Dimension 1 must be the one dynamic dimension (or none is).  The real rows
        are copied (the padding never); gradients flow back to the batch.
        """
        op = "MaskedBatch.to_nested"
        if self.dim() < 2:
            raise ValueError(f"{op}: examples of rank {self.dim()} have no dimension 1 for "
                             "the nested tensor to be ragged in")
        dynamic = [i for i, d in enumerate(self.dims[1:], start=2) if d]
        if dynamic:
            raise ValueError(f"{op}: dimension {dynamic[0]} is dynamic; a jagged nested tensor "
                             "is ragged in one dimension, 1: make the other dimensions static "
                             "(or move the dynamic one to dimension 1)")
        data = self.data
        size, padded = data.shape[:2]
        if self._mask is None or not self.dims[0]:
            lengths = torch.full((size,), padded, dtype=torch.int64)
        else:
            lengths = _lengths.along(self, 1).cpu()
        examples, steps = jagged_rows(lengths)
        values = data.flatten(0, 1).index_select(0, (examples * padded + steps).to(data.device))
        return make_jagged(values, lengths)

    # ------------------------------------------------------------------ inspection

    def examples(self) -> Iterator[torch.Tensor]:
        """Each example as a tensor of batch size one, trimmed to its true size.

        Views of ``data`` (gradients flow back); an absent example raises (``_absent``).
        """
        refuse_absent(self, "MaskedBatch.examples")
        return self._examples()

    def _examples(self) -> Iterator[torch.Tensor]:
        sizes = self.lengths().tolist() if any(self.dims) else None
        dynamic = [i for i, d in enumerate(self.dims) if d]
        for b in range(self.data.size(0)):
            example = self.data[b : b + 1]
            if sizes is not None:
                for k, i in enumerate(dynamic):
                    example = example.narrow(i + 1, 0, sizes[b][k])
            yield example

    def lengths(self) -> torch.Tensor:
        """Per-example sizes along each dynamic dimension: int64 ``(batch, n_dynamic)``."""
        return _lengths.of(self)

    @property
    def batch_size(self) -> int:
        return self._data.size(0)

    @property
    def ndim(self) -> int:
        return self._data.dim()

    @property
    def shape(self) -> BatchShape:
        return BatchShape(self)

    def dim(self) -> int:
        """The rank of every example (dimension 0, the batch, included)."""
        return self._data.dim()
    ndimension = dim  # as Tensor.ndimension is (torch.distributions calls it)

    def size(self, dim: int | None = None) -> Any:
        """The size of a static dimension; ``size(0)`` is the batch size (a ``BatchSize``,
        refused as a number).

        A dynamic dimension has no single size: that raises ``ValueError``
        (use ``maxsize`` for the padded size or ``size_as_tensor`` for the
        per-example sizes).
        """
        if dim is None:
            if any(self.dims):
                raise ValueError(
                    f"size(): dimensions {[i for i, d in enumerate(self.dims, 1) if d]} are "
                    "dynamic, so their sizes differ between examples; use maxsize(dim) for "
                    "the padded size or size_as_tensor(dim) for each example's size"
                )
            return tuple(self.size(i) for i in range(self.dim()))
        i = normalize_dim("size", dim, self.dim())
        if i == 0:
            return batch_size_of(self._data.size(0))
        if self.dims[i - 1]:
            raise ValueError(
                f"size({dim}): dimension {i} is dynamic, so its size differs between "
                "examples; use maxsize(dim) for the padded size or size_as_tensor(dim) "
                f"for each example's size{why_size_was_asked('MaskedBatch', i)}"
            )
        return self._data.size(i)

    @property
    def mT(self) -> MaskedBatch:
        """Batched ``Tensor.mT``: each example's last two dimensions transposed."""
        return self.__torch_function__(_MT, (MaskedBatch,), (self,))

    def maxsize(self, dim: int | None = None) -> Any:
        """The padded size of a dimension (the largest example's size, or more).

        Without ``dim``, every dimension's padded size as a ``torch.Size`` (dimension
        0: the batch size), as the original Matchbox gave it:
        ``encodings.expand(x.maxsize())``.
        """
        if dim is None:
            return self._data.size()
        i = normalize_dim("maxsize", dim, self.dim())
        return padded_size_of(self._data.size(i), dim, i > 0 and self.dims[i - 1], self)

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt through the validating constructor: a loaded batch (torch.load,
        # also with weights_only=True) is checked as a constructed one is.
        return (MaskedBatch, (self.data, self._mask, self.dims))

    def __repr__(self) -> str:
        if any(self.dims):
            sizes = [tuple(row) for row in self.lengths().tolist()]
            shown = ", ".join(example_shape(self, s) for s in sizes[:8])
            more = f", ... ({len(sizes)} examples)" if len(sizes) > 8 else ""
        else:
            shown = example_shape(self, ())
            more = f" x {self.batch_size}"
        grad = ", requires_grad=True" if self.requires_grad else ""
        device = "" if self.device.type == "cpu" else f", device='{self.device}'"
        dims = "".join("D" if d else "S" for d in self.dims) or "scalar"
        return (
            f"MaskedBatch(batch_size={self.batch_size}, dims={dims} "
            f"{self.dims}, dtype={self.dtype}{device}{grad}, examples=[{shown}{more}])"
        )

    # ------------------------------------------------------------------ conversions

    def _with_data(self, data: torch.Tensor) -> MaskedBatch:
        """The batch of the same layout holding ``data``; the mask follows it to its device."""
        mask = self._mask
        if mask is not None and data.device != mask.device:
            mask = _lengths.kept(mask.to(data.device), mask)
        return mark(MaskedBatch._make(data, mask, self.dims), self._scalar)

    # ------------------------------------------------------------------ the rows protocol
    # (matchbox._batch: row-wise ops such as F.linear are written once, over it)

    # The real rows are gathered and scattered by matchbox._real_rows.

    def rows(self, static: int = 1) -> torch.Tensor:
        """The real rows, ``(n_real, *last static dims)``; under ``@batch`` (while gradients
        are recorded) the rows of examples that do not run the code at hand zeroed: an op
        with a shared weight must not send what was computed for them into the weight's
        gradient (``_real_rows.batch_rows``)."""
        return batch_rows(self, static)

    def from_rows(self, values: torch.Tensor, static: int = 1) -> MaskedBatch:
        """``values`` ``(n_real, *tail)``, rows of ``self.rows(static)`` transformed, in this
        layout with the last ``static`` dims replaced by ``tail`` (static), zeros at
        padding."""
        data = self.data
        out = unpack_guarded(values, real_rows(self, static), data.shape[:data.dim() - static],
                             self._mask)
        mask, dims = self._mask, self.dims
        new = values.dim() - 1
        if new != static:
            dims = dims[:len(dims) - static] + (False,) * new
            if mask is not None:
                mask = _lengths.kept(
                    mask.reshape(*mask.shape[:mask.dim() - static], *(1,) * new), mask)
        batch = MaskedBatch._make(out, mask, dims)
        # Zeros at every padding row, whichever way unpack_guarded went (index_copy into
        # zeros, a where with the mask, or with the mask and the running examples): the
        # next row op need not zero them again (batch_rows says why that is exact).
        mark_zero_padding(batch)
        return batch

    def row_examples(self, static: int = 1) -> torch.Tensor:
        """The example of each row of ``self.rows(static)``, ``(n_real,)``; -1 for a padding
        row (only while capturing a graph, where rows are every row)."""
        data = self.data
        lead = data.shape[:data.dim() - static]
        per_example = 1
        for size in lead[1:]:
            per_example *= size
        rows = real_rows(self, static)
        if rows is None or type(rows) is RowMask:
            every = torch.arange(data.size(0) * per_example, device=data.device) // per_example
            return every if rows is None else torch.where(rows.mask, every, -1)
        return torch.div(rows, per_example, rounding_mode="floor")

    def positions(self, shared: bool = False) -> torch.Tensor:
        """The padded data; with ``shared``, padding (and, under ``@batch``, the rows of
        examples not running the code at hand) zeroed: the op's parameter gradient sums
        over positions (the mixing rule)."""
        if shared and mixing_mask(self._mask, self.data) is not None:
            return fill_padding(self, 0, running=True)
        return self.data

    def from_positions(self, values: torch.Tensor, shared: bool = False) -> MaskedBatch:
        """``values`` in this layout; when ``shared``, with the gradient at padding (and
        non-running rows) dropped."""
        if shared and mixing_mask(self._mask, self.data) is not None:
            values = guard_gradient(values, self._mask)
        return MaskedBatch._make(values, self._mask, self.dims)

    def pin_memory(self) -> MaskedBatch:
        """The batch in page-locked memory, for faster, asynchronous copies to an accelerator
        (``DataLoader(pin_memory=True)`` calls this on every batch it loads); the mask too."""
        mask = None if self._mask is None else _lengths.kept(self._mask.pin_memory(), self._mask)
        return MaskedBatch._make(self.data.pin_memory(), mask, self.dims)

    def backward(self, gradient: Any = None, **kwargs: Any) -> None:
        """Backward on a batch of per-example scalars: the gradient of their sum.

        Equals calling ``backward()`` on every example's scalar in a loop.  A batch with
        an absent example (a step past its end) is refused (``matchbox._absent``).
        """
        batch_backward(self, gradient, kwargs)

    # ------------------------------------------------------------------ PyTorch's tools

    # Dataclass fields: the two tensors whose dimension 0 is the batch (dims is
    # not a field: a batch-size search must meet tensors only).  Pytree children: the
    # data, and the mask unless it is None (a batch without padding): tools such as
    # torch.func want tensors only, and the unflattened batch keeps its None (and its
    # fast paths).  Context: dims, and whether there is a mask.
    _tree_fields = ("data", "mask")
    _tree_children = ("data", "_mask")

    def _tree_flatten(self) -> tuple[list[torch.Tensor], tuple[tuple[bool, ...], bool]]:
        if self._mask is None:
            return [self.data], (self.dims, False)
        return [self.data, self._mask], (self.dims, True)

    @staticmethod
    def _tree_unflatten(children: list[Any], context: tuple[tuple[bool, ...], bool]
                        ) -> MaskedBatch:
        dims, has_mask = context
        data, mask = (children[0], children[1]) if has_mask else (children[0], None)
        for name, value in (("data", data), ("mask", mask)):
            if isinstance(value, torch.Tensor) and value.dim() != len(dims) + 1:
                raise pytree_rank_error("MaskedBatch", name, value.dim(), len(dims) + 1)
        return MaskedBatch._make(data, mask, dims)

    @staticmethod
    def _tree_dump_context(context: tuple[tuple[bool, ...], bool]) -> list[Any]:
        return [list(context[0]), context[1]]

    @staticmethod
    def _tree_load_context(dumped: list[Any]) -> tuple[tuple[bool, ...], bool]:
        return (tuple(bool(d) for d in dumped[0]), bool(dumped[1]))


for _module in (_region_guard, _example_scalars):  # they name the batch type (a cycle)
    _module.bind_batch_type(MaskedBatch)
