"""Pointwise ops: one rule for the whole family.

Semantics: each argument batch is broadcast the way its examples would be; the
op runs once on the aligned data; the result's mask is true where every batch
argument is real ("unary keeps the mask, n-ary combines masks with and").
Padding only reaches padding, so no fill is needed; an argument that is real
where the result is padding (a state next to an ended step, a broadcast
weight) gets no gradient from there (``_masking.guard_wider``).  In-place
variants write into the first argument's data and narrow its mask.

The family is found by rule, not listed by hand: every torch function, Tensor
method and ``torch.nn.functional`` function whose ATen op carries PyTorch's
``pointwise`` tag is registered, plus the few elementwise functions PyTorch
composes in Python or leaves untagged (``ELEMENTWISE_UNTAGGED``).

In-place ops torch cannot differentiate raise naming the op (``INPLACE_DERIVATIVE_PROBES``);
number arguments given per example: ``matchbox.ops.scalar_arguments``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from matchbox import _copies, _example_scalars, _lengths, _masking, _registry
from matchbox._example_scalars import ADDITIONS, combined, refuse_a_sum_of_booleans
from matchbox._example_scalars import refuse_python_mismatches as _refuse_mismatches
from matchbox._layout import zero_padding_mask
from matchbox._sizes import BATCH_SIZES, refuse_batch_size_number  # x.size(0): refused
from matchbox.masked_batch import MaskedBatch, mark_zero_padding
from matchbox.ops.integer_division import DIVIDING, read_zeros_as_ones
from matchbox.ops.pointwise_aliases import POINTWISE_ALIASES
from matchbox.ops.pointwise_counters import with_counter as _with_counter
from matchbox.ops.scalar_arguments import per_example_fill, refuse_number_batches

# Python operators and the ATen op each one is.
DUNDER_OPS = {
    "add": "add", "sub": "sub", "rsub": "rsub", "mul": "mul", "truediv": "div",
    "div": "div", "floordiv": "floor_divide", "mod": "remainder", "pow": "pow",
    "neg": "neg", "pos": "positive", "abs": "abs", "invert": "bitwise_not",
    "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor",
    "lshift": "bitwise_left_shift", "rshift": "bitwise_right_shift",
    "eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge",
}
# Names that are pointwise under some overload but not as a whole.
NOT_POINTWISE = {"max", "min", "equal", "frexp"}
# Elementwise functions whose ATen op is untagged or that PyTorch composes in Python.
# The activations are listed because PyTorch tagged them only in later releases
# (torch 2.3 tags none of them, 2.11 not leaky_relu), and torch>=2.3 is supported.
ELEMENTWISE_UNTAGGED = {
    "floor_divide", "log_sigmoid", "logsigmoid", "hardswish", "softsign", "tanhshrink",
    "fill", "fill_", "zero_", "bernoulli", "bernoulli_", "uniform_", "normal_",
    "exponential_", "cauchy_", "geometric_", "log_normal_", "random_",
    "relu6", "mish", "elu", "selu", "celu", "leaky_relu", "hardtanh", "hardsigmoid",
    "softplus", "softshrink", "hardshrink", "threshold", "rrelu",
}
# Ops that keep the record that padding holds zeros (``mark_zero_padding``), so that a
# row op after them does not zero it again (``_real_rows.batch_rows`` says why that is
# exact): unary ops with f(0) == 0 exactly and a finite derivative at 0 (a zero
# gradient at padding stays zero on its way back: not sqrt), and sums, differences and
# products of two batches with zeros at padding and the same mask.  By ATen name,
# called without other arguments (``leaky_relu(x, -2.0)`` would do, ``hardtanh(x, 1,
# 2)`` would not: no argument is looked at).
ZERO_KEEPING_UNARY = {"relu", "tanh", "neg", "positive", "abs", "gelu", "silu"}
ZERO_KEEPING_BINARY = {"add", "sub", "rsub", "mul"}
_KEEPS_ZEROS: dict[Any, tuple[bool, bool]] = {}


def keeps_zeros(func: Any) -> tuple[bool, bool]:
    """Whether ``func`` on its own keeps zeros (unary) and on two batches (binary)."""
    kept = _KEEPS_ZEROS.get(func)
    if kept is None:
        aten = _aten_name(getattr(func, "__name__", ""))
        kept = _KEEPS_ZEROS[func] = (aten in ZERO_KEEPING_UNARY, aten in ZERO_KEEPING_BINARY)
    return kept


# Ops that check their input values: padding is replaced by a valid value first.
VALUE_CHECKED = {"bernoulli": 0.0, "bernoulli_": 0.0}
# In-place ops that some supported torch cannot differentiate, each with a call that
# shows whether the installed one can.  torch 2.3's ``ldexp_`` writes through
# ``mul(out=...)``, which autograd refuses (pytorch/pytorch#68966).
INPLACE_DERIVATIVE_PROBES: dict[str, Callable[[torch.Tensor], Any]] = {
    "ldexp_": lambda x: x.ldexp_(torch.ones(1)),
}


@functools.cache
def inplace_has_derivative(name: str) -> bool:
    """Whether the installed torch can differentiate the in-place op ``name``."""
    probe = INPLACE_DERIVATIVE_PROBES.get(name)
    if probe is None:
        return True
    try:
        probe(torch.ones(1, requires_grad=True) * 1)  # a non-leaf, as in-place ops need
    except RuntimeError:
        return False
    return True


def check_inplace_derivative(func: Any, values: list[Any]) -> None:
    """Refuse an in-place op this torch cannot differentiate when autograd would need it
    (every batch type's in-place path; ``values``: the tensors the op is called on)."""
    name = getattr(func, "__name__", "")
    if name not in INPLACE_DERIVATIVE_PROBES or not torch.is_grad_enabled():
        return
    if any(isinstance(v, torch.Tensor) and v.requires_grad for v in values) and \
            not inplace_has_derivative(name):
        raise NotImplementedError(
            f"{_registry.op_name(func)}: this torch ({torch.__version__}) cannot "
            f"differentiate the in-place {name} (it writes through mul(out=...), which "
            f"autograd refuses, pytorch/pytorch#68966); use the out-of-place "
            f"torch.{name[:-1]}, or a torch whose {name} supports autograd"
        )


def _aten_name(name: str) -> str | None:
    if name.startswith("__") and name.endswith("__"):
        core = name[2:-2]
        if core in DUNDER_OPS:
            return DUNDER_OPS[core]
        if core[:1] in ("r", "i") and core[1:] in DUNDER_OPS:
            return DUNDER_OPS[core[1:]]
        return None
    return name[:-1] if name.endswith("_") else name


def _is_pointwise(name: str) -> bool:
    aten = _aten_name(name)
    if aten is None or aten in NOT_POINTWISE:
        return False
    aten = POINTWISE_ALIASES.get(aten, aten)
    if name in ELEMENTWISE_UNTAGGED or aten in ELEMENTWISE_UNTAGGED:
        return True
    packet = getattr(torch.ops.aten, aten, None)
    if packet is None:
        return False
    try:
        overloads = packet.overloads()
    except (AttributeError, RuntimeError):
        return False
    return any(torch.Tag.pointwise in getattr(packet, o).tags for o in overloads)


def pointwise_ops() -> list[Any]:
    """Every torch callable of the pointwise family, found by the rule above."""
    found = []
    namespaces = [(torch.Tensor, True), (torch, False), (F, False), (torch.special, False)]
    for namespace, methods in namespaces:
        for name in dir(namespace):
            if name.startswith("_") and not (methods and name.startswith("__")):
                continue
            func = getattr(namespace, name, None)
            if callable(func) and not isinstance(func, type) and (_is_pointwise(name) or (
                    namespace is torch.special and _is_pointwise(func.__name__))):
                found.append(func)
    return found


# How the family runs an op, worked out once per op (this is the hot path).
_PLAIN, _INPLACE, _CHECKED, _DIVIDES = 1, 2, 3, 4  # _DIVIDES: added for a // n, n % k
_PATHS: dict[Any, int] = {}


def _path(func: Any) -> int:
    path = _PATHS.get(func)
    if path is None:
        path = _PATHS[func] = ((_INPLACE if _registry.writes_first_argument(func) else
                                _CHECKED if func.__name__ in VALUE_CHECKED else _PLAIN)
                               + (_DIVIDES if func.__name__ in DIVIDING else 0))
    return path


def pointwise(func: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a pointwise op once on the batch data and combine the masks."""
    path = _PATHS.get(func) or _path(func)
    if path > _CHECKED or (kwargs and kwargs.get("rounding_mode") is not None):  # n // k
        args, path = read_zeros_as_ones(args, path % _DIVIDES == _INPLACE), path % _DIVIDES
    if kwargs:
        if len(kwargs) == 1 and kwargs.get("inplace") is False:
            kwargs = {}  # F.relu(x) passes its default on: the fast path serves it
        elif "out" in kwargs:
            _registry.refuse_out(func, kwargs.pop("out"))
            if not kwargs:
                return pointwise(func, *args)
        if kwargs.get("inplace"):
            path = _INPLACE
    if path == _INPLACE:
        return _pointwise_inplace(func, args, kwargs)
    given = args  # (the checked path's fills lose what the batches stand for)
    if path == _CHECKED:
        fill = VALUE_CHECKED[func.__name__]
        args = tuple(MaskedBatch._make(_masking.fill_padding(a, fill), a._mask, a.dims)
                     if isinstance(a, MaskedBatch) else a for a in args)
    elif not kwargs and args:
        result = _plain(func, args[0], args[1:]) if type(args[0]) is MaskedBatch else None
        if result is None and len(args) == 2:
            result = _with_counter(func, args[0], args[1])
        if result is not None:
            return result
    if not kwargs and _same_layout(args):
        return _kind_of(_run_same_layout(func, args), given, func)
    refuse_number_batches(func, args, kwargs)  # leaky_relu(x, slope) of a per-example slope
    names = list(kwargs)
    flat = list(args) + [kwargs[k] for k in names]
    op = _registry.op_name(func)
    values, mask, dims = _masking.align(op, flat)
    values = _masking.guard_wider(flat, values, mask, dims)
    n = len(args)
    result = func(*values[:n], **dict(zip(names, values[n:])))
    return _kind_of(_wrap(result, mask, dims), [*given, *flat[n:]], func)


def _kind_of(result: Any, args: Any, func: Any = None) -> Any:
    """``result``, with what a batch of one value per example stands for in the loop (a
    number or a (1,) tensor: ``matchbox._example_scalars``) worked out from ``args``."""
    if type(result) is MaskedBatch and not result.dims:
        result._scalar = combined(args)
        _refuse_mismatches(result, func, args)
    elif type(result) is tuple or isinstance(result, tuple):
        for item in result:
            _kind_of(item, args)
    return result


def _same_layout(args: tuple[Any, ...]) -> bool:
    """Whether the arguments need no alignment (the fast path of most model ops).

    True when every batch argument has one layout (or, with static dimensions only and
    one mask object, shapes that broadcast as the examples' do) and every plain tensor
    broadcasts into it without growing it and without a size along a dynamic dimension
    or dimension 0.  Anything else takes the general path, which also gives the errors.

    Batches that differ in layout (a dimension dynamic in one, static in another) never
    come here: ``_masking.align`` checks the static size against each running example's
    length, a device sync only they pay.  A plain tensor spanning a dynamic dimension's
    padded size is the idiom ``pe[:, :x.maxsize(1)]``, which in the loop slices each
    example's own length: position for position the same values, so it needs no check.
    """
    first = next((a for a in args if isinstance(a, MaskedBatch)), None)
    shape = first._data.shape
    rank = len(shape)
    for a in args:
        if isinstance(a, MaskedBatch) and a is not first:
            if a.dims != first.dims:
                return False
            if a._data.shape != shape:
                shape = _static_broadcast(first, a, shape)
                if shape is None:
                    return False
    for a in args:
        if isinstance(a, MaskedBatch):
            continue
        if isinstance(a, torch.Tensor):
            offset = rank - a.dim()
            if offset < 0 or (offset == 0 and a.size(0) != 1):
                return False
            for j, size in enumerate(a.shape):
                # A plain tensor may span a dynamic dimension's padded size: its
                # positions line up with every example's (padding comes last).
                if size != 1 and size != shape[j + offset]:
                    return False
    return True


def _static_broadcast(first: MaskedBatch, other: MaskedBatch, shape: torch.Size
                      ) -> torch.Size | None:
    """The shape ``other`` and ``shape`` broadcast to, where that is every example's
    broadcast too: static dimensions only, one batch size and one mask object (none, or
    one per example), so that the data broadcast as each example's would (a one-hot
    write into a stack: ``where(at, item.unsqueeze(1), stack)``); else ``None``."""
    if any(first.dims) or other._mask is not first._mask:
        return None
    theirs = other._data.shape
    if len(theirs) != len(shape) or theirs[0] != shape[0]:
        return None
    out = []
    for a, b in zip(shape, theirs):
        if a != b and a != 1 and b != 1:
            return None
        out.append(max(a, b))
    return torch.Size(out)


def _fits_each_example(plain: torch.Tensor, data: torch.Tensor) -> bool:
    """Whether a plain tensor of lower rank broadcasts into every example of ``data``
    without growing it (a bias, a per-feature scale)."""
    offset = data.dim() - plain.dim()
    if offset <= 0:
        return False
    shape = data.shape
    for j, size in enumerate(plain.shape, offset):
        if size != 1 and size != shape[j]:
            return False
    return True


def _run_same_layout(func: Any, args: tuple[Any, ...]) -> Any:
    first = mask = None
    shared = True  # every batch argument has the same mask (the commonest case)
    values = []
    for a in args:
        if isinstance(a, MaskedBatch):
            values.append(a._data)
            if first is None:
                first, mask = a, a._mask
            elif a._mask is not mask:
                shared = False
        else:
            values.append(refuse_batch_size_number(a) if type(a) in BATCH_SIZES else a)  # x.size(0)
    dims = first.dims
    if not shared:
        batches = [a for a in args if isinstance(a, MaskedBatch)]
        if any(dims):
            for i, dynamic in enumerate(dims, start=1):
                if dynamic:
                    _masking.check_broadcast_lengths(func, [(b, i) for b in batches])
        mask = _masking.combine_layouts(batches)
    if len(values) > 1 and (mask is not None or _masking.EXECUTION_MASK.get() is not None):
        values = _masking.guard_wider(args, values, mask, dims)
    result = func(*values)
    if isinstance(result, torch.Tensor) and result.shape == first._data.shape:
        return MaskedBatch._make(result, mask, dims)
    return _wrap(result, mask, dims)


def _wrap(result: Any, mask: torch.Tensor, dims: tuple[bool, ...]) -> Any:
    if isinstance(result, torch.Tensor):
        return MaskedBatch._make(result, _masking.fit_mask(mask, result, dims), dims)
    if isinstance(result, tuple):
        return type(result)(_wrap(r, mask, dims) for r in result)
    return result


def _pointwise_inplace(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    target = args[0] if args else kwargs.get("input")
    op = _registry.op_name(func)
    if not isinstance(target, MaskedBatch):
        raise ValueError(
            f"{op}: an in-place op on a plain tensor cannot take a batch argument (the "
            "tensor would have to hold every example); use the out-of-place op"
        )
    _copies.refuse_in_place(op, target)
    refuse_number_batches(func, args, kwargs)
    names = list(kwargs)
    flat = list(args) + [kwargs[k] for k in names]
    if not target.dims and target._data.dtype == torch.bool and func in ADDITIONS:
        refuse_a_sum_of_booleans(combined(flat), func)  # (c += n > 3)
    values, mask, dims = _masking.align(op, flat, inplace_target=target)
    check_inplace_derivative(func, values)
    guarded = _masking.guard_wider(flat, values, mask, dims)
    for k, (arg, value) in enumerate(zip(flat, values)):
        if arg is target and guarded[k] is not value:
            # The target is real where the result will be padding: its data is
            # guarded in place (every alias sees that, as it sees the op).
            value.copy_(guarded[k])
            guarded[k] = value
    values = guarded
    n = len(args)
    per_example_fill(func, flat)(*values[:n], **dict(zip(names, values[n:])))
    target.mask = _masking.fit_mask(mask, target.data, target.dims)
    return _kind_of(target, flat)


POWERS = _example_scalars.POWERS
_INT_FLOAT = (int, float)
_MISMATCHES = ADDITIONS | POWERS  # refuse_python_mismatches's ops
_make = MaskedBatch._make  # (one global load per call: _plain makes most op results)


def _plain(func: Any, self: Any, args: tuple[Any, ...]) -> Any:
    """The commonest calls, inlined: ``x.tanh()``, ``x * 2``, ``x + y`` (one layout and
    mask), ``x * w`` (a weight); a result of one value per example records what it stands
    for (``combined``).  Any other call gives ``None``: the general rule then runs, or,
    for a method, the dispatch (arguments of another batch type, ``masked + packed``, join
    there)."""
    if type(self) is not MaskedBatch:
        return None
    if not args:
        out = _make(func(self._data), self._mask, self.dims)
        if self._zero_padding is not None and keeps_zeros(func)[0]:
            zeros_outside = zero_padding_mask(self)
            if zeros_outside is not None:  # f(0) == 0: zeros where the input's are
                mark_zero_padding(out, zeros_outside)
        if not out.dims:
            out._scalar = self._scalar  # (``combined`` of the batch alone)
        return out
    if len(args) != 1:
        return None
    other = args[0]
    if isinstance(other, _INT_FLOAT):
        if type(other) in BATCH_SIZES:
            other = refuse_batch_size_number(other)
        out = _make(func(self._data, other), self._mask, self.dims)
        if not out.dims:
            out._scalar = self._scalar  # (``combined``: a number does not change it)
            if func in _MISMATCHES and (func in POWERS or out._data.dtype == torch.bool):
                _refuse_mismatches(out, func, (self, other))  # (only those can refuse)
        return out
    if (type(other) is MaskedBatch and other.dims == self.dims
            and other._data.shape == self._data.shape):
        if other._mask is self._mask:
            # Same layout and mask: elementwise, so the result has both.
            out = _make(func(self._data, other._data), self._mask, self.dims)
            if self._zero_padding is not None and other._zero_padding is not None \
                    and keeps_zeros(func)[1]:
                zeros_outside = zero_padding_mask(self)
                if zeros_outside is not None and \
                        zero_padding_mask(other) is zeros_outside:
                    mark_zero_padding(out, zeros_outside)  # 0 + 0, 0 - 0, 0 * 0
        else:
            out = _run_same_layout(func, (self, other))
    elif isinstance(other, torch.Tensor):  # a weight, a bias
        if (self._mask is None and _masking.EXECUTION_MASK.get() is None
                and _fits_each_example(other, self._data)):
            # Nothing to guard: no padding, and every example runs.
            out = _make(func(self._data, other), None, self.dims)
        elif _same_layout((self, other)):
            out = _run_same_layout(func, (self, other))
        else:
            return None
    else:
        return None
    if out is not None and not out.dims:
        out._scalar = combined((self, other))
        if func in _MISMATCHES:
            _refuse_mismatches(out, func, (self, other))
    return out


def _fast(func: Any) -> Any:
    """The fast path of a Tensor method of the family (``matchbox._methods``): calls without
    keywords, with gradients, no profiler; :func:`_plain` takes the commonest of them."""
    return _plain if _path(func) == _PLAIN else None


_lengths.aware(pointwise)  # masks combine in _masking.align / combine_layouts
_registry.register(pointwise_ops(), pointwise, family="pointwise", fast_path=_fast)


@_registry.implements(torch.where, family="pointwise")
@_lengths.aware  # as pointwise, which runs it
def where(func: Any, *args: Any, **kwargs: Any) -> Any:
    """``torch.where(condition, input, other)``, pointwise; in a ``@batch`` region (under
    an execution mask), the examples that do not run it take ``other``.

    What the region computes for them is discarded by its merge, which selects the
    variable's old value for them: ``stack = torch.where(at, item, stack)`` (a write into
    a stack) merged is ``where(running, where(at, item, stack), stack)``, two copies of
    the stack.  With the running examples folded into the condition (a ``(batch, 1, ...)``
    and), the result already equals ``other`` for the others, in values and in gradient
    (the where sends theirs to ``other``); recorded so (``_masking.record_equal_outside``),
    it is merged with no copy.
    """
    running = _masking.EXECUTION_MASK.get()
    if running is None or kwargs or len(args) != 3:
        return pointwise(func, *args, **kwargs)
    condition, input, other = args
    if (type(condition) is MaskedBatch and type(input) is MaskedBatch
            and type(other) is MaskedBatch and other._mask is None
            and condition._mask is None and input._mask is None):
        # No padding and static dimensions (a one-hot write into a stack): the data
        # broadcast as each example's would, and nothing needs a guard (the general rule,
        # whose checks this skips, would find so: ``_static_broadcast``, ``guard_wider``).
        data, values, others, dims = condition._data, input._data, other._data, other.dims
        rank = data.dim()
        if (data.dtype == torch.bool and dims and not any(dims)
                and input.dims == dims == condition.dims and rank == values.dim() == others.dim()
                and data.size(0) == values.size(0) == others.size(0) == running.size(0)):
            try:
                out = torch.where(data & _masking.mask_view(running, rank), values, others)
            except RuntimeError:  # shapes that do not broadcast: the general rule's error
                out = None
            if out is not None:
                result = MaskedBatch._make(out, None, dims)
                if out.shape == others.shape:
                    _masking.record_equal_outside(result, running, others, others._version,
                                                  None)
                return result
    if (type(condition) is not MaskedBatch or type(other) is not MaskedBatch
            or condition._data.dtype != torch.bool
            or not condition._data.size(0) == other._data.size(0) == running.size(0)
            or condition._mask is not other._mask
            or (isinstance(input, MaskedBatch) and input._mask is not other._mask)):
        # (Masks of their own: the result's is not ``other``'s, and its merge selects.)
        return pointwise(func, *args)
    data = condition._data
    folded = MaskedBatch._make(data & _masking.mask_view(running, data.dim()),
                               condition._mask, condition.dims)
    folded._scalar = condition._scalar
    result = pointwise(func, folded, input, other)
    if (type(result) is MaskedBatch and result._mask is other._mask
            and result._data.shape == other._data.shape):
        _masking.record_equal_outside(result, running, other._data, other._data._version,
                                      other._mask)
    return result
