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

import sys
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from matchbox import _lengths
from matchbox._arguments import normalize_dim
from matchbox._batch import Batch, pytree_rank_error

_new = object.__new__


class MaskedBatch(Batch):
    """A batch of tensors ("examples") that may differ in size in some dimensions."""

    __slots__ = ("data", "_mask", "dims", "_zero_padding", "_guards", "_not_a_view",
                 "_present")

    data: torch.Tensor
    dims: tuple[bool, ...]
    # ``None`` means "every position is real" (a fresh state, a batch without
    # padding): ops then skip mask arithmetic and padding fills entirely.
    _mask: torch.Tensor | None
    # Unset, or (data, mask, data's version) when the padding was known to hold
    # zeros (see ``has_zero_padding``).
    _zero_padding: tuple[torch.Tensor, torch.Tensor, int]
    # Unset, or the batch this one stands for inside a masked ``@batch`` region
    # (matchbox-control's gradient guard is a new batch): an in-place update of
    # the guard is written through to it, as Python would write into the object.
    _guards: MaskedBatch
    # Unset, or True for the result of indexing a dynamic dimension at positions
    # that differ between examples (``x[:, -1]``, ``x[:, :-1]``): in the loop a
    # view of each example, here a copy (or a view reaching past the result), so
    # an in-place op on it is refused rather than silently lost.
    _not_a_view: bool
    # None, or a ``(batch,)`` bool tensor: the examples that have this batch as an
    # item of a Python list (matchbox-control sets it on an item appended, or made by
    # a comprehension step, under a per-example condition; the others' rows are
    # padding).  ``len(items)`` and ``items[-1]`` in ``@batch`` count per example by it.
    # Set (to None) at construction: it is read on hot paths (a ``for``'s steps, the
    # parts of ``cat``/``stack``), where an unset slot would go through ``__getattr__``.
    _present: torch.Tensor | None

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
            _validate(data, _full_mask(data, dims) if mask is None else mask, dims)
            lengths = _validate_lengths(data, lengths, dims)
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
            _validate(data, mask, dims)
            mask = mask if mask.dtype == torch.bool else mask != 0
        else:
            _validate(data, _full_mask(data, dims), dims)
        self.data = data
        self._mask = mask
        self.dims = tuple(bool(d) for d in dims)
        self._present = None

    @staticmethod
    def _make(data: torch.Tensor, mask: torch.Tensor | None, dims: tuple[bool, ...]
              ) -> MaskedBatch:
        """Build without validation: for ops, whose results are valid by construction.

        A static method (not a class method): ops call it for every result, and
        it saves them binding a method.
        """
        batch = _new(MaskedBatch)
        batch.data = data
        batch._mask = mask
        batch.dims = dims
        batch._present = None
        return batch

    @property
    def mask(self) -> torch.Tensor:
        """True where ``data`` holds real values (see the module docstring)."""
        if self._mask is None:
            return _full_mask(self.data, self.dims)
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
        dims = _dims_argument("MaskedBatch.fromlist", dims)
        shapes = check_examples(examples, dims)
        if all(shape == shapes[0] for shape in shapes):
            # Every example has the same size: one cat, no padding.
            return cls._make(torch.cat(list(examples), 0), None, dims)
        max_sizes = [max(s[i] for s in shapes) for i in range(1, len(dims) + 1)]
        _check_padding_value(padding_value, examples[0].dtype)
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
        if _empty_in_part(shapes, dims):
            # The mask of such an example is all false: it carries the lengths.
            mask = _lengths.carry(mask, lengths)
        batch = cls._make(data, mask, dims)
        if padding_value == 0:
            mark_zero_padding(batch)
        return batch

    @classmethod
    def from_nested(cls, nested: torch.Tensor) -> MaskedBatch:
        """The batch a jagged ``torch.nested`` tensor ``(B, j, *S)`` holds: example ``e`` is
        ``nested[e].unsqueeze(0)``, dimension 1 dynamic and the others static.

        The padding holds zeros; gradients flow back to the nested tensor.
        """
        from matchbox._jagged import masked_from_nested  # it imports this module

        return masked_from_nested(nested)

    def to_nested(self) -> torch.Tensor:
        """The examples as a jagged ``torch.nested`` tensor ``(B, j, *S)``: component ``e``
        is example ``e`` without its leading dimension.

        Dimension 1 must be the one dynamic dimension (or none is).  The real rows
        are copied (the padding never); gradients flow back to the batch.
        """
        from matchbox._jagged import masked_to_nested  # it imports this module

        return masked_to_nested(self)

    # ------------------------------------------------------------------ inspection

    def examples(self) -> Iterator[torch.Tensor]:
        """Each example as a tensor of batch size one, trimmed to its true size.

        The examples are views of ``data``: gradients flow back to the batch.
        """
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
        return self.data.size(0)

    @property
    def ndim(self) -> int:
        return self.data.dim()

    @property
    def shape(self) -> BatchShape:
        return BatchShape(self)

    def dim(self) -> int:
        """The rank of every example (dimension 0, the batch, included)."""
        return self.data.dim()

    def size(self, dim: int | None = None) -> Any:
        """The size of a static dimension; ``size(0)`` is the batch size.

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
        i = normalize_dim(dim, self.dim(), "size")
        if i == 0:
            return batch_size_as_asked(self.data.size(0))
        if self.dims[i - 1]:
            raise ValueError(
                f"size({dim}): dimension {i} is dynamic, so its size differs between "
                "examples; use maxsize(dim) for the padded size or size_as_tensor(dim) "
                f"for each example's size{why_size_was_asked(i)}"
            )
        return self.data.size(i)

    def maxsize(self, dim: int | None = None) -> Any:
        """The padded size of a dimension (the largest example's size, or more).

        Without ``dim``, every dimension's padded size as a ``torch.Size`` (dimension
        0: the batch size), as the original Matchbox gave it:
        ``encodings.expand(x.maxsize())``.
        """
        if dim is None:
            return self.data.size()
        return self.data.size(normalize_dim(dim, self.dim(), "maxsize"))

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt through the validating constructor: a loaded batch (torch.load,
        # also with weights_only=True) is checked as a constructed one is.
        return (MaskedBatch, (self.data, self._mask, self.dims))

    def __repr__(self) -> str:
        if any(self.dims):
            sizes = [tuple(row) for row in self.lengths().tolist()]
            shown = ", ".join(_example_shape(self, s) for s in sizes[:8])
            more = f", ... ({len(sizes)} examples)" if len(sizes) > 8 else ""
        else:
            shown = _example_shape(self, ())
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
        return MaskedBatch._make(data, mask, self.dims)

    # ------------------------------------------------------------------ the rows protocol
    # (matchbox._batch: row-wise ops such as F.linear are written once, over it)

    # rows(static), from_rows(values, static) and row_examples(static) are implemented
    # in matchbox._masking.rows (they gather and scatter the real rows), which installs
    # them here: it imports this module.  positions()/from_positions() follow.

    def positions(self, shared: bool = False) -> torch.Tensor:
        """The padded data; with ``shared``, padding (and, under ``@batch``, the rows of
        examples not running the code at hand) zeroed: the mixing rule."""
        if not shared:
            return self.data
        from matchbox._masking.guards import masked_positions

        return masked_positions(self, shared)

    def from_positions(self, values: torch.Tensor, shared: bool = False) -> MaskedBatch:
        if not shared:
            return MaskedBatch._make(values, self._mask, self.dims)
        from matchbox._masking.guards import masked_from_positions

        return masked_from_positions(self, values, shared)

    def pin_memory(self) -> MaskedBatch:
        """The batch in page-locked memory, for faster, asynchronous copies to an accelerator
        (``DataLoader(pin_memory=True)`` calls this on every batch it loads); the mask too."""
        mask = None if self._mask is None else _lengths.kept(self._mask.pin_memory(), self._mask)
        return MaskedBatch._make(self.data.pin_memory(), mask, self.dims)

    def backward(self, gradient: Any = None, **kwargs: Any) -> None:
        """Backward on a batch of per-example scalars: the gradient of their sum.

        Equals calling ``backward()`` on every example's scalar in a loop.
        """
        from matchbox.batch_reduce import batch_sum  # it imports this module

        if gradient is not None:
            gradient = gradient.data if isinstance(gradient, MaskedBatch) else gradient
            masked = torch.where(self.mask, self.data, torch.zeros_like(self.data))
            masked.backward(torch.where(self.mask, gradient, torch.zeros_like(gradient)), **kwargs)
            return
        if self.dims:
            raise RuntimeError(
                "backward(): grad can be implicitly created only for a batch of "
                f"per-example scalars (dims == ()), but this batch has dims {self.dims}; "
                "reduce each example first (for example .sum()) or pass gradient="
            )
        batch_sum(self).backward(**kwargs)

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


def _dims_argument(op: str, dims: Any) -> tuple[bool, ...]:
    """``dims`` as a tuple of bools; anything but booleans (or 0 and 1) is refused.

    ``bool()`` of each entry would read ``None`` as static and a string as all
    dynamic, silently describing other examples than the user's.
    """
    entries = list(dims) if isinstance(dims, (tuple, list)) else None
    if entries is None or not all(not isinstance(d, str) and d in (0, 1) for d in entries):
        raise TypeError(
            f"{op}: dims must be a tuple of bools, one per dimension after the first (True "
            f"where the examples may differ in size); got {dims!r}"
        )
    return tuple(bool(d) for d in entries)


def why_size_was_asked(dim: int, kind: str = "MaskedBatch") -> str:
    """A hint when PyTorch's own code asked a batch of type ``kind`` for a size that
    differs between examples, not the user's code (call it from ``size``).

    ``nn.RNN``/``nn.LSTM``/``nn.GRU`` ask for their batch size before the op
    that would explain it runs: ``size(1)`` when built with
    ``batch_first=False``, ``size(0)`` when built with ``batch_first=True``.
    """
    if sys._getframe(2).f_globals.get("__name__") != "torch.nn.modules.rnn":
        return ""
    if dim == 1:
        return (" (asked by an nn.RNN/LSTM/GRU built with batch_first=False, which reads "
                f"dimension 1 of its input as the batch; a {kind} is batch-major: build "
                "the module with batch_first=True, or call it on matchbox.nn.time_major(x))")
    if dim == 0:
        return (" (asked by an nn.RNN/LSTM/GRU built with batch_first=True, which reads "
                f"dimension 0 of its input as the batch; a {kind} is time-major: build the "
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
    if sys._getframe(2).f_globals.get("__name__") == "torch.nn.modules.rnn":
        return SharedStateBatchSize(size)
    return size


def _full_mask(data: torch.Tensor, dims: tuple[bool, ...]) -> torch.Tensor:
    """The mask of a batch without padding (every example has the padded size, which
    the mask carries as lengths if it is 0 in one dynamic dimension and not another)."""
    shape = [data.size(0)] + [data.size(i) if d else 1 for i, d in enumerate(dims, start=1)]
    mask = torch.ones(shape, dtype=torch.bool, device=data.device)
    sizes = [n for n, d in zip(shape[1:], dims) if d]
    if 0 in sizes and any(sizes):
        mask = _lengths.carry(mask, torch.tensor([sizes] * shape[0], device=data.device))
    return mask


def mark_zero_padding(batch: MaskedBatch, mask: torch.Tensor | None = None) -> None:
    """Record that every padding position of ``batch.data`` holds zero, as of now.

    ``fill_padding(batch, 0)`` then returns the data as it is (a product with a
    weight needs no ``where`` for a batch built with ``padding_value=0``).  The
    record holds only while the batch keeps this data tensor and this mask and
    nothing has written into the data (its version counter, which views share,
    has not moved).  Writes that bypass the version counter (through
    ``Tensor.data`` or a NumPy view) are not seen: write into ``batch.data``
    itself, or build a new batch.

    ``mask`` (default: the batch's own) names the positions that are not
    zero: ``@batch``'s region guard records that the rows of the examples not
    running the region hold zeros.
    """
    data = batch.data
    mask = batch._mask if mask is None else mask
    if mask is not None and not data.is_inference():
        batch._zero_padding = (data, mask, data._version)


def has_zero_padding(batch: MaskedBatch, mask: torch.Tensor | None = None) -> bool:
    """Whether ``batch`` is known to hold zeros outside ``mask`` (default: its padding).

    See :func:`mark_zero_padding`.
    """
    record = getattr(batch, "_zero_padding", None)
    return (record is not None and record[0] is batch.data
            and record[1] is (batch._mask if mask is None else mask)
            and record[2] == batch.data._version)


def mask_from_lengths(
    lengths: torch.Tensor, shape: Sequence[int], dims: tuple[bool, ...]
) -> torch.Tensor:
    """The mask of a batch of the given padded shape and per-example ``lengths``.

    ``lengths`` is ``(batch, n_dynamic)``: one column per dynamic dimension.
    """
    rank = len(shape)
    mask = torch.ones([shape[0]] + [1] * (rank - 1), dtype=torch.bool, device=lengths.device)
    column = 0
    for i, dynamic in enumerate(dims, start=1):
        if dynamic:
            view = [shape[0]] + [1] * (rank - 1)
            view[i] = shape[i]
            positions = torch.arange(shape[i], device=lengths.device)
            along = positions.unsqueeze(0) < lengths[:, column].unsqueeze(1)
            mask = mask & along.reshape(view)
            column += 1
    return mask


def constant_pad(tensor: torch.Tensor, pads: Sequence[int], value: Any = 0) -> torch.Tensor:
    """``F.pad(tensor, pads, value=value)`` (constant mode, pads >= 0), also where the
    result is empty in a padded dimension.

    Examples empty in part give such results (``fromlist`` of a ``(1, 0, 0)`` example
    beside a ``(1, 0, 1)`` one), and torch 2.3 refuses to pad into them ("resulted in a
    negative output size"); a result with no elements is the tensor itself reshaped,
    which keeps it in the autograd graph.
    """
    if tensor.numel() == 0:
        shape = list(tensor.shape)
        for i in range(len(pads) // 2):
            shape[-1 - i] += pads[2 * i] + pads[2 * i + 1]
        if 0 in shape:
            return tensor.reshape(shape)
    return torch.nn.functional.pad(tensor, list(pads), value=value)


def _example_shape(batch: MaskedBatch, sizes: Sequence[int]) -> str:
    it = iter(sizes)
    parts = ["1"] + [str(next(it)) if d else str(batch.data.size(i + 1))
                     for i, d in enumerate(batch.dims)]
    return "(" + ", ".join(parts) + ")"


def _validate(data: Any, mask: Any, dims: tuple[bool, ...]) -> None:
    if not isinstance(data, torch.Tensor):
        raise ValueError(f"MaskedBatch: data must be a torch.Tensor, got {type(data).__name__}")
    if not isinstance(mask, torch.Tensor):
        raise ValueError(f"MaskedBatch: mask must be a torch.Tensor, got {type(mask).__name__}")
    if not all(isinstance(d, bool) for d in dims):
        raise ValueError(f"MaskedBatch: dims must be a tuple of bools, got {dims!r}")
    if data.dim() == 0:
        raise ValueError("MaskedBatch: data must have a batch dimension (dimension 0)")
    if data.dim() != len(dims) + 1:
        raise ValueError(
            f"MaskedBatch: dims has {len(dims)} entries but data has {data.dim() - 1} "
            f"non-batch dimensions (data shape {tuple(data.shape)})"
        )
    if mask.dim() != data.dim():
        raise ValueError(
            f"MaskedBatch: mask has rank {mask.dim()} but data has rank {data.dim()}"
        )
    if mask.requires_grad:
        raise ValueError("MaskedBatch: mask must not require grad")
    if mask.device != data.device:
        raise ValueError(
            f"MaskedBatch: mask is on {mask.device} but data is on {data.device}"
        )
    if mask.size(0) != data.size(0):
        raise ValueError(
            f"MaskedBatch: mask has batch size {mask.size(0)} but data has {data.size(0)}"
        )
    for i, dynamic in enumerate(dims, start=1):
        expected = data.size(i) if dynamic else 1
        if mask.size(i) != expected:
            kind = "dynamic" if dynamic else "static"
            raise ValueError(
                f"MaskedBatch: mask has size {mask.size(i)} in dimension {i}, which is "
                f"{kind}, but must have size {expected} there"
            )
    if not mask.dtype == torch.bool and not (mask == 0).logical_or(mask == 1).all():
        raise ValueError("MaskedBatch: a non-bool mask must hold only zeros and ones")
    bool_mask = mask if mask.dtype == torch.bool else mask != 0
    for i, dynamic in enumerate(dims, start=1):
        if dynamic and bool_mask.size(i) > 1:
            rising = bool_mask.narrow(i, 1, bool_mask.size(i) - 1) & ~bool_mask.narrow(
                i, 0, bool_mask.size(i) - 1
            )
            if rising.any():
                raise ValueError(
                    f"MaskedBatch: the mask of dynamic dimension {i} has a real position "
                    "after a padding position; real values must come first"
                )


def _check_padding_value(value: float, dtype: torch.dtype) -> None:
    if dtype.is_floating_point or dtype.is_complex:
        return
    if value != value or value in (float("inf"), float("-inf")) or (
        dtype != torch.bool and value != int(value)
    ):
        raise ValueError(
            f"MaskedBatch.fromlist: padding_value {value} is not representable in the "
            f"examples' dtype {dtype}"
        )


def _empty_in_part(shapes: list[torch.Size], dims: tuple[bool, ...]) -> bool:
    """Whether an example is empty in one dynamic dimension and not in another (its mask
    would be all false and lose its other sizes)."""
    for shape in shapes:
        sizes = [shape[i] for i, d in enumerate(dims, start=1) if d]
        if 0 in sizes and any(sizes):
            return True
    return False


def _validate_lengths(data: torch.Tensor, lengths: Any, dims: tuple[bool, ...]) -> torch.Tensor:
    if not isinstance(lengths, torch.Tensor) or lengths.dtype.is_floating_point or \
            lengths.dtype.is_complex or lengths.dtype == torch.bool:
        raise ValueError("MaskedBatch: lengths must be an integer tensor")
    expected = (data.size(0), sum(dims))
    if tuple(lengths.shape) != expected:
        raise ValueError(
            f"MaskedBatch: lengths must have shape (batch, number of dynamic dimensions) "
            f"= {expected}, got {tuple(lengths.shape)}")
    if lengths.device != data.device:
        raise ValueError(f"MaskedBatch: lengths are on {lengths.device} but data is on "
                         f"{data.device}")
    padded = torch.tensor([data.size(i) for i, d in enumerate(dims, start=1) if d],
                          device=data.device, dtype=torch.long)
    if bool(((lengths < 0) | (lengths > padded)).any()):
        raise ValueError("MaskedBatch: lengths must lie between 0 and the padded size of "
                         "their dimension")
    return lengths.long()


def check_examples(
    examples: Sequence[Any], dims: tuple[bool, ...], op: str = "MaskedBatch.fromlist",
    static_hint: str = "mark it dynamic in dims",
) -> list[torch.Size]:
    """Each example's shape, after checking the list (``static_hint``: what to do
    when examples differ along a static dimension)."""
    if isinstance(examples, torch.Tensor) or not isinstance(examples, Sequence):
        raise TypeError(
            f"{op}: examples must be a list of tensors, got "
            f"{type(examples).__name__}"
        )
    if len(examples) == 0:
        raise ValueError(f"{op}: the list of examples is empty")
    first = examples[0]
    for b, example in enumerate(examples):
        if not isinstance(example, torch.Tensor):
            raise TypeError(
                f"{op}: example {b} is a {type(example).__name__}, not a tensor"
            )
        if example.dim() != len(dims) + 1:
            raise ValueError(
                f"{op}: example {b} has rank {example.dim()} but dims "
                f"{dims} describes examples of rank {len(dims) + 1}"
            )
        if example.size(0) != 1:
            raise ValueError(
                f"{op}: example {b} has size {example.size(0)} in "
                "dimension 0; every example needs a leading dimension of size one"
            )
        if example.dtype != first.dtype:
            raise ValueError(
                f"{op}: example {b} has dtype {example.dtype} but example 0 "
                f"has {first.dtype}"
            )
        if example.device != first.device:
            raise ValueError(
                f"{op}: example {b} is on {example.device} but example 0 "
                f"is on {first.device}"
            )
        for i, dynamic in enumerate(dims, start=1):
            if not dynamic and example.size(i) != first.size(i):
                raise ValueError(
                    f"{op}: dimension {i} is static but the examples differ "
                    f"in size there: example 0 has {first.size(i)}, example {b} has "
                    f"{example.size(i)} ({static_hint})"
                )
    return [e.shape for e in examples]

