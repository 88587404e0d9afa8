"""Sizes as PyTorch's code asks a batch for them: ``shape`` (:class:`BatchShape`), the
batch size ``x.size(0)`` gives (:class:`BatchSize`: the batch size as a size, refused as
a number, :func:`refuse_batch_size_number`, where each example's 1 and the batch size
differ), the
batch size that ``nn.RNN``/``nn.LSTM``/``nn.GRU`` read (:func:`batch_size_as_asked`)
or the hint when they ask for a size that differs between examples
(:func:`why_size_was_asked`).

Shared by the batch types (``MaskedBatch``, ``PackedBatch``, ``TimeMajorBatch``), which
import them; ``matchbox.masked_batch`` re-exports them.
"""

from __future__ import annotations

import functools
import operator
import sys
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from matchbox._op_table import batch_types

if TYPE_CHECKING:
    from matchbox.masked_batch import MaskedBatch


# The sizes of one dimension in every example, as ``BatchShape.__eq__`` compares them: each
# example's batch dimension (1 in the loop), or a dynamic dimension (one size per example).
_BATCH_DIM = object()
_DYNAMIC = object()


class BatchShape:
    """``MaskedBatch.shape``: indexable like ``torch.Size``; dynamic sizes raise.

    ``==`` and ``!=`` compare each example's shape, as the loop over examples does (with a
    ``BatchShape``, or a tuple or ``torch.Size``, whose first size may be 1 or the batch
    size, as ``x.size(0)`` gives it): a bool where the answer is the same for every example
    (static sizes alone decide it), else a batch of one bool per example (``if x.shape ==
    y.shape:`` under ``@matchbox.batch`` branches per example).  Unhashable: it may equal
    both ``(1, ...)`` and ``(batch size, ...)``.
    """

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

    __hash__ = None  # type: ignore[assignment]

    def __eq__(self, other: object) -> Any:
        if isinstance(other, BatchShape):
            if other._batch.batch_size != self._batch.batch_size:
                return False  # not the same examples (torch's shapes differ in dimension 0)
            theirs, given = other._example_dims(), False
        elif isinstance(other, tuple):  # torch.Size too, as torch.Size == tuple compares
            theirs, given = list(other), True
        else:
            return NotImplemented
        mine = self._example_dims()
        if len(mine) != len(theirs):
            return False
        batch_size = self._batch.batch_size
        per_example, later = [], []
        for i, (a, b) in enumerate(zip(mine, theirs)):
            if a is _DYNAMIC or (not given and b is _DYNAMIC):
                later.append(i)  # after the static sizes, which may decide it for all
                continue
            same = _same(a, b, given, batch_size)
            if isinstance(same, batch_types()):
                per_example.append(same)
            elif not same:
                return False
        for i in later:
            a = self._dynamic_size(i) if mine[i] is _DYNAMIC else mine[i]
            b = theirs[i] if given or theirs[i] is not _DYNAMIC else \
                other._dynamic_size(i)  # type: ignore[union-attr]
            per_example.append(_same(a, b, given, batch_size))
        return functools.reduce(operator.and_, per_example) if per_example else True

    def __ne__(self, other: object) -> Any:
        equal = self.__eq__(other)
        if equal is NotImplemented:
            return equal
        return ~equal if isinstance(equal, batch_types()) else not equal

    def _example_dims(self) -> list[Any]:
        """Each dimension of every example, as the loop has it: ``_BATCH_DIM``, a static
        size, or ``_DYNAMIC`` (its sizes: :meth:`_dynamic_size`)."""
        batch = self._batch
        if not batch.dims:  # one value per example: a number (or 0-d tensor), or (1,)
            kind = getattr(batch, "_scalar", None)
            if kind is None:
                raise TypeError(
                    "BatchShape ==: the batch holds one value per example, which the loop "
                    "may hold as a number or 0-d tensor (shape ()) or as a tensor of shape "
                    "(1,), and it came from an op that does not record which; compare the "
                    "shapes of the batches it was computed from")
            return [] if kind else [_BATCH_DIM]
        return [_BATCH_DIM] + [_DYNAMIC if dynamic else batch.size(i)
                               for i, dynamic in enumerate(batch.dims, start=1)]

    def _dynamic_size(self, i: int) -> Any:
        """Each example's size along dynamic dimension ``i``: a batch (``size_as_tensor``)."""
        batch = self._batch
        if hasattr(type(batch), "to_masked"):  # a PackedBatch
            batch = batch.to_masked()
        return batch.size_as_tensor(i)

    def __repr__(self) -> str:
        sizes = ["*" if i > 0 and self._batch.dims[i - 1] else str(self._batch.size(i))
                 for i in range(len(self))]
        return f"BatchShape({', '.join(sizes)})  # * = dynamic"


def _same(a: Any, b: Any, given: bool, batch_size: int) -> Any:
    """Whether sizes ``a`` (a ``BatchShape``'s) and ``b`` (another's, or an item of a tuple
    ``given``) are equal in every example: a bool, or a batch of one bool per example."""
    if a is _BATCH_DIM:
        if given:
            if isinstance(b, batch_types()):
                return b == 1
            return bool(b == 1) or bool(b == batch_size)  # 1, or the size x.size(0) gives
        return True if b is _BATCH_DIM else b == 1
    if b is _BATCH_DIM and not given:
        return a == 1
    return a == b


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


BATCH_SIZE_AS_A_NUMBER = (
    "x.size(0) of a MaskedBatch (x.shape[0]) is the batch size where a size is taken "
    "(x.new_zeros(x.size(0), H)), but each example's own size(0) is 1: used as a number "
    "it would differ between the loop over examples and the batch, so Matchbox refuses it. "
    "Use x.batch_size for the number of examples in the batch, or 1 for an example's own "
    "size(0)")


def refuse_batch_size_number(*args: Any) -> Any:
    """Raise ``TypeError``: ``x.size(0)`` of a batch (:class:`BatchSize`) used as a number,
    where the loop over examples (1) and the batch (its batch size) would differ; or, where
    the first argument is a :class:`PaddedSize`, ``x.maxsize(d)`` of a dynamic dimension
    (each example's own size in the loop, the longest's here)."""
    raise TypeError(size_as_a_number(args[0] if args else None))


def size_as_a_number(size: Any) -> str:
    """The message :func:`refuse_batch_size_number` raises for ``size`` (a
    :class:`PaddedSize`'s, else ``x.size(0)``'s), for an error that names its op first."""
    return padded_size_as_a_number(size.dim) if type(size) in PADDED_SIZES \
        else BATCH_SIZE_AS_A_NUMBER


def padded_size_as_a_number(dim: int) -> str:
    """Why ``x.maxsize(dim)`` of a dynamic dimension is refused as a number."""
    return (
        f"x.maxsize({dim}) is the padded size of dimension {dim}, which is dynamic: the "
        f"longest example's size there. Each example's own size differs (in the loop over "
        f"examples, x.maxsize({dim}) of an example is its own size), so used as a number "
        f"(arithmetic, an ordering, float(), a scalar argument of an op, range() under "
        f"@matchbox.batch) it would differ between the loop and the batch, and Matchbox "
        f"refuses it. Use x.size_as_tensor({dim}) for each example's size, or int(x.maxsize"
        f"({dim})) for the padded size itself; as a size (torch.ones(T, H), a slice bound, "
        f"view) it works as it is")


# How a batch type says its layout and sizes without its values: ``SIZE_PARTS[type](batch)``
# is ``(rebuild, *parts)``, ``rebuild(*parts)`` a batch of those sizes (matchbox._padded_sizes
# registers MaskedBatch's); a PaddedSize read from a batch of another type holds it.
SIZE_PARTS: dict[type, Any] = {}


class PaddedSize(int):
    """``x.maxsize(d)`` of a dimension ``d`` dynamic in a batch: the padded size (the
    longest example's size there) as a size, refused as a number (``TypeError``,
    :func:`padded_size_as_a_number`).

    In the loop over examples an example's ``maxsize(d)`` is its own size; on the batch,
    the longest example's.  As a size of a plain tensor (``torch.ones(T, H)``, ``pe[:T]``,
    ``range`` outside ``@matchbox.batch``, all through ``__index__``) each example meets
    its own first positions of what it builds, as the loop's would be; as a size of an op
    that builds a batch (``x.new_zeros(x.size(0), T, H)``, ``expand``, ``repeat``) each
    example's own size there, read from ``source``, the batch it came from
    (:mod:`matchbox._padded_sizes`);
    as a number (``x.sum(1) / x.maxsize(1)``, ``x[:, :T - 1]``, ``T > 10``) the shorter
    examples would get the longest's.  ``int()`` is the padded size as a plain number;
    ``==``, ``!=`` and the hash are the ``int``'s.  The same places as
    :class:`BatchSize`'s stay silent (a float on the left, ``math.log``, ``%d``,
    ``torch.tensor(T)``, torch ops on plain tensors only), and under ``matchbox.compile``'s
    capture a symbolic padded size is torch's own ``SymInt``.
    """

    def __new__(cls, size: int, dim: int, source: Any = None) -> PaddedSize:
        padded = int.__new__(cls, size)
        padded.dim = dim
        # The batch it was read from: each example's own size, which the ops that build
        # a batch of given sizes take (matchbox._padded_sizes).  Held weakly where the
        # batch type can say its sizes without its values (``_size_parts``), so that a
        # size kept (``self.T = x.maxsize(1)``) does not keep the batch and its graph.
        parts = SIZE_PARTS.get(type(source))
        if parts is None:
            padded._held, padded._ref = source, None
        else:
            padded._held, padded._ref = parts(source), weakref.ref(source)
        return padded

    @property
    def source(self) -> Any:
        """The batch the size was read from while it lives; after, a batch of its layout
        and sizes without its values (``SIZE_PARTS``, made once)."""
        ref = self._ref
        if ref is None:
            return self._held
        batch = ref()
        if batch is None:
            held = self._held
            batch = held if not isinstance(held, tuple) else held[0](*held[1:])
            self._held = batch  # (the stand-in, made once)
        return batch

    def __int__(self) -> int:
        return int.__index__(self)

    def __repr__(self) -> str:
        return int.__repr__(self)

    __str__ = __repr__
    __eq__ = int.__eq__
    __ne__ = int.__ne__
    __hash__ = int.__hash__

    def __reduce__(self) -> tuple[Any, ...]:
        return (int, (int(self),))


class SymPaddedSize(torch.SymInt):
    """:class:`PaddedSize` while ``matchbox.compile`` captures with symbolic padded sizes:
    the symbol as a size (torch's own shape code gets the plain ``SymInt`` underneath),
    refused as a number, as :class:`PaddedSize` (a compiled call's padded size may be its
    bucket's, larger still than the longest example's)."""

    def __init__(self, node: Any, dim: int, source: Any = None):
        super().__init__(node)
        self.dim = dim
        self.source = source

    __hash__ = torch.SymInt.__hash__


# x.maxsize(d) of a dynamic dimension.
PADDED_SIZES = (PaddedSize, SymPaddedSize)


def padded_size_of(size: Any, dim: int, dynamic: bool, source: Any = None) -> Any:
    """What ``maxsize(dim)`` of a batch (``source``) gives for a padded ``size``: a
    :class:`PaddedSize` (a :class:`SymPaddedSize` of a symbolic size) where the dimension
    is dynamic, else ``size``."""
    if not dynamic:
        return size
    kind = type(size)
    if kind is int:
        return PaddedSize(size, dim, source)
    return SymPaddedSize(size.node, dim, source) if kind is torch.SymInt else size


def plain_size(size: Any) -> Any:
    """``size`` as the plain ``int`` or ``SymInt`` a padded size stands for (a size that
    Matchbox's own code compares or adds, a slice bound); any other value as it is."""
    kind = type(size)
    if kind is PaddedSize:
        return int.__index__(size)
    return torch.SymInt(size.node) if kind is SymPaddedSize else size


class BatchSize(int):
    """``x.size(0)`` of a ``MaskedBatch`` (and ``x.shape[0]``, ``x.size()[0]``): the batch
    size where a size is taken; used as a number it raises ``TypeError``.

    In the loop over examples ``x.size(0)`` is 1.  On a batch it is the batch size, the
    original Matchbox's idiom ``h = x.new_zeros(x.size(0), H)`` (a size starting with the
    batch size names each example's batch dimension).  As a number neither reading is
    right everywhere: in the per-example model (``kl / x.size(0)``) it is 1, in code
    around the model (``seen += batch.size(0)``) the number of examples.  So this ``int``:

    - is the batch size as a size: ``int()``, ``operator.index`` (``range`` outside
      ``@matchbox.batch``, sizes of torch's functions and of the batch's
      ``new_zeros``/``view``/``expand``), ``repr``, ``str`` and the hash;
    - refuses to be a number (``TypeError``, :data:`BATCH_SIZE_AS_A_NUMBER`): Python
      arithmetic (``+ - * / // % **``, ``divmod``, their reflected forms, ``-x``, ``+x``,
      ``abs``, ``~``, bitwise ops, ``round``, ``math.floor``/``ceil``/``trunc``),
      ``float()`` (so ``math.sqrt`` and the other functions of floats), ``<``, ``<=``,
      ``>``, ``>=`` (so ``max``/``min``), and a scalar argument of an op on batches
      (``loss / n``, ``torch.full_like(x, n)``: :func:`refuse_batch_size_number`),
      numpy's ufuncs (``np.log(n)``) and the ``int``'s number methods (``bit_length``,
      ``as_integer_ratio``, ``real``, ``numerator``, ...);
    - ``==`` holds with 1 and with the batch size (``!=``: neither): a tensor built
      with it as a size (``torch.zeros(x.size(0), H)``: a plain ``(batch size, H)``
      state in the batch's order) has ``size(0) == x.size(0)`` as in the loop, and
      ``nn.RNN``/``nn.LSTM``/``nn.GRU``, which compare their initial state's size with
      the batch size they read from the input, accept a plain ``(layers, 1, hidden)``
      state (one state for every example, a learned start state; the recurrent ops
      broadcast it to every example) and a ``(layers, batch size, hidden)`` one.  So
      ``x.size(0) == 2`` holds for a batch of 2 examples, where each example's 1 does
      not.  Two ``BatchSize`` compare as sizes (``hx.size(1) == x.size(0)`` of a state
      view of another batch is false, as the module's check needs).

    Python reads an ``int``'s value directly, calling none of these methods, in some
    places, which stay silent (the batch size): a Python float on the left
    (``1.0 / x.size(0)``, ``2.5 * x.size(0)``: ``float``'s method runs first and takes
    any ``int``), ``math.log`` (``log2``, ``log10``), ``math.factorial``/``comb``/``gcd``,
    a three-argument ``pow``, ``%d``, ``np.array(n)``; and torch: ``torch.tensor(n)``,
    ``torch.full``'s fill value, ``torch.linspace``'s steps (its parser takes an ``int``
    subclass as an ``int`` there) and a torch op on plain tensors only (``w * x.size(0)``).
    torch 2.13 would hand the last to a ``__torch_function__`` here, but its parser then
    takes a size given first of several as the whole size list and refuses the rest
    (``torch.ones(n, H)``: "ones() takes 1 positional argument but 2 were given"), so
    the sizes have none (``tests/test_size_number_unaskable_reads.py``).
    """

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if type(other) is BatchSize:  # two batch sizes: as sizes (torch's checks of a state)
            return int(other) == int(self)
        if isinstance(other, (int, float)):
            return other == 1 or other == int(self)
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = int.__hash__


class SymBatchSize(torch.SymInt):
    """:class:`BatchSize` while ``matchbox.compile`` captures with a symbolic batch size:
    the symbol as a size (the graph serves every batch size), ``==`` with 1 or the batch
    size (a guard for the latter), and refused as a number, as :class:`BatchSize`.
    (Torch's own shape code gets the plain ``SymInt`` underneath, never this object.)"""

    def __eq__(self, other: object) -> Any:
        if isinstance(other, (int, float)) and other == 1:
            return True
        return torch.SymInt.__eq__(self, other)

    def __ne__(self, other: object) -> Any:
        if isinstance(other, (int, float)) and other == 1:
            return False
        return torch.SymInt.__ne__(self, other)

    __hash__ = torch.SymInt.__hash__


_NUMBER_METHODS = (
    "add", "sub", "mul", "truediv", "floordiv", "mod", "divmod", "pow", "and", "or", "xor",
    "lshift", "rshift", "matmul")
for _cls in (BatchSize, SymBatchSize, PaddedSize, SymPaddedSize):
    for _name in _NUMBER_METHODS:
        setattr(_cls, f"__{_name}__", refuse_batch_size_number)
        setattr(_cls, f"__r{_name}__", refuse_batch_size_number)
    for _name in ("lt", "le", "gt", "ge", "neg", "pos", "abs", "invert", "floor", "ceil",
                  "trunc", "round", "float", "complex", "sym_float"):
        setattr(_cls, f"__{_name}__", refuse_batch_size_number)
del _cls, _name

# x.size(0) of a batch, and x.maxsize(d) of a dynamic dimension, refused as a scalar
# argument of an op on batches (refuse_batch_size_number(value) says which).
BATCH_SIZES = (BatchSize, SymBatchSize, PaddedSize, SymPaddedSize)


def refuse_size_number(op: str, name: str, value: Any) -> None:
    """Refuse ``x.size(0)`` of a batch (a ``BatchSize``) or ``x.maxsize(d)`` of a dynamic
    dimension (a ``PaddedSize``) given as an argument that must be one number for every
    example (a count, an offset, a factor; looked for in lists and tuples too): in the loop
    over examples each example's ``x.size(0)`` is 1 and its ``x.maxsize(d)`` its own size,
    so the batch, which would read the batch size or the longest example's, would differ
    (``TypeError`` naming the op and the argument, then the size's own message,
    :func:`size_as_a_number`)."""
    kind = type(value)
    if kind is tuple or kind is list:
        for v in value:
            refuse_size_number(op, name, v)
    elif kind in BATCH_SIZES:
        raise TypeError(f"{op}: the {name} must be the same number for every example, but "
                        f"it is a batch's size: {size_as_a_number(value)}")


def _refuse_array_ufunc(self: Any, ufunc: Any, method: str, *inputs: Any,
                        **kwargs: Any) -> Any:
    """numpy's ufuncs (``np.log(n)``, ``np.float64(1) / n``): refused as a number."""
    refuse_batch_size_number(self)


def _refused_property(self: Any) -> Any:
    refuse_batch_size_number(self)


# numpy's ufuncs of a size are refused as a number.  (Torch's ops on plain tensors and
# torch.tensor(n) read the int's value itself, silently.  No __torch_function__ here: torch
# 2.13 would hand it a tensor argument given as a number, t * n, but never torch.tensor(n),
# torch.full's fill value or linspace's steps, and its parser would then take a size
# given first of several as the whole size list, refusing torch.ones(x.size(0), H).)
for _cls in (BatchSize, PaddedSize):
    _cls.__array_ufunc__ = _refuse_array_ufunc  # type: ignore[attr-defined]
    # The int's own methods of a number (its value, not its size).
    for _name in ("bit_length", "bit_count", "to_bytes", "as_integer_ratio", "conjugate",
                  "is_integer"):
        setattr(_cls, _name, refuse_batch_size_number)
    for _name in ("real", "numerator"):
        setattr(_cls, _name, property(_refused_property))
del _cls, _name


def refuse_later_batch_size(op: str, sizes: Any, start: int = 0) -> None:
    """Refuse ``x.size(0)`` of a batch (a :class:`BatchSize`) among an op's sizes other
    than the first (``sizes`` are dimensions ``start`` on): the first names each example's
    batch dimension, but at any other place the loop over examples reads 1 (each example's
    own ``x.size(0)``) where the batch would read the batch size."""
    for k, size in enumerate(sizes, start):
        if k and type(size) in (BatchSize, SymBatchSize):
            raise TypeError(
                f"{op}: size {k} is x.size(0) of a batch, which names each example's batch "
                "dimension only as the first size; as a later size it would differ (each "
                "example's own x.size(0) is 1 in the loop over examples): "
                + BATCH_SIZE_AS_A_NUMBER)


def batch_size_of(size: Any) -> Any:
    """What ``size(0)`` of a ``MaskedBatch`` whose data has ``size`` rows gives: a
    :class:`BatchSize`, or a :class:`SymBatchSize` of a symbolic batch size while
    ``matchbox.compile`` captures (an ``int`` of it would fix it)."""
    kind = type(size)
    if kind is int:
        return BatchSize(size)
    return SymBatchSize(size.node) if kind is torch.SymInt else size


def batch_size_as_asked(size: int) -> int:
    """``size`` (a batch size that ``size(0)`` of a batch type returns), as a
    :class:`BatchSize` when PyTorch's recurrent modules ask for it (``PackedBatch`` and
    ``TimeMajorBatch`` give a plain ``int`` otherwise)."""
    if isinstance(size, int) and sys._getframe(2).f_globals.get("__name__") == \
            "torch.nn.modules.rnn":
        return BatchSize(size)
    # (A symbolic batch size, while ``matchbox.compile`` captures: an ``int`` of it would
    # fix it.  A shared initial state then fails the module's check, and the call is
    # captured again with its own sizes.)
    return size
