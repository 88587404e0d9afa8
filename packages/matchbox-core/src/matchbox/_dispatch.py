"""The one dispatch of every batch type, with what it applies to each op.

This module owns running an op on batches:

- :func:`make_dispatch`: one function per batch type, its
  ``__torch_function__``, which every generated method calls too.  For each op
  it: hands the call to another batch type when one it converts into is among
  the arguments (the mixing rule, :func:`register_conversion`); looks up the
  handler (an unknown op raises :func:`unsupported`); refuses a batch inside an
  ``autograd.Function``'s forward (``matchbox._autograd_function``); applies a
  ``@batch`` region's deferred gradient guard, or carries it through the op
  (``matchbox._region_guard``); labels the
  op while a profiler records (:func:`labelled`); converts arguments of other
  batch types that join it; binds the arguments to ``func``'s own signature
  (``matchbox._binding``); runs the handler; and, while a mask carrying lengths
  is alive, checks that the result kept them (``matchbox._lengths``);
- :func:`dispatch`: an op on batches called from inside a handler;
- mixing of batch types (:func:`register_conversion`, :func:`adopt`);
- the errors of the dispatch (:func:`unsupported`, :func:`refuse_out`, and the
  distributions that provide ops, :func:`declare_provider`).

A handler is called as ``handler(func, *args, **kwargs)``: ``func`` is the torch
callable that was invoked (``torch.tanh``, ``torch.Tensor.tanh``, ...), so one
handler can serve a whole family of ops.  Its arguments are bound to ``func``'s
own signature first and handed over by the handler's parameter names, so a
handler serving ``F.softmax`` and ``Tensor.softmax`` reads ``dtype`` whichever
order its callable takes it in.  The table the dispatch reads is
``matchbox._op_table``; the fast methods that take plain calls without it, and
the guard that sends every other call here, are ``matchbox._methods``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.autograd import profiler as autograd_profiler

from matchbox import _copies, _lengths, _region_guard
from matchbox._autograd_function import grad_enabled, refuse_untracked
from matchbox._binding import binding_for
from matchbox._execution import EXECUTION_MASK
from matchbox._masked_writes import WRITE_WATCH, in_place_copy, write_running
from matchbox._op_table import (
    _KIND_OF,
    _KINDS,
    _TABLE,
    Handler,
    Kind,
    batch_types,
    op_name,
    writes_first_argument,
)
from matchbox._sizes import refuse_size_number

_LIVE = _lengths.LIVE

# Ops that another distribution implements: a helpful error names it.
_PROVIDERS: list[tuple[Callable[[Any], bool], str]] = []


def make_dispatch(kind: Kind) -> Callable[..., Any]:
    """The one dispatch of ``kind``: its ``__torch_function__``, called by its methods too
    (with ``types=None``).  Everything it reads is bound here, for the hot path."""
    name = kind.name
    routes = kind.routes
    joins = kind.joins
    conversions = kind.conversions
    live = _LIVE
    deferred = _region_guard.LIVE
    deferred_arguments = _region_guard.deferred_arguments
    run_deferred = _region_guard.run_deferred
    running = EXECUTION_MASK.get
    watched = WRITE_WATCH

    def dispatch(func: Any, types: Any, args: tuple[Any, ...] = (),
                 kwargs: dict[str, Any] | None = None) -> Any:
        if deferred[0]:  # a @batch region's gradient guard, deferred to the op needing it
            found = deferred_arguments(args, kwargs)
            if found:  # (_region_guard.run_passing, the search made here)
                return run_deferred(func, types, args, kwargs, run, found)
        return run(func, types, args, kwargs)

    def run(func: Any, types: Any, args: tuple[Any, ...] = (),
            kwargs: dict[str, Any] | None = None) -> Any:
        if joins and (types is None or len(types) > 1):
            # A batch type this one converts into is among the arguments: the op is its.
            target = _joined(args, kwargs, joins)
            if target is not None:
                return _hand_over(kind, target, func, args, kwargs or {})
        route = routes.get(func)
        if route is None:
            raise unsupported(func, name, kwargs)
        handler, prefix, keywords, writes = route
        if not grad_enabled():  # an autograd.Function's forward would lose the gradient
            refuse_untracked(func, args)
        if autograd_profiler._is_profiler_enabled:
            handler = labelled(name, func, handler)
        if conversions and (types is None or len(types) > 1):
            # Another batch type among the arguments joins this one (PackedBatch -> Masked).
            args, kwargs = adopt_with(conversions, args, kwargs)
        if writes or (kwargs and kwargs.get("inplace")):
            if args and type(getattr(args[0], "_not_a_view", None)) is tuple:
                # x[:, j] of a per-example int j, a view in the loop: the op writes through.
                return _copies.WRITE_BACK[0](run, func, types, args, kwargs)
            if running() is not None:
                # In place under a per-example condition: the running examples only.
                result = _write_running(kind, handler, func, args, kwargs)
                if result is not None:
                    return result
            elif watched[0] is not None:  # every example writes: the watcher sees it first
                target = _written(args, kwargs)
                if isinstance(target, kind.cls):
                    watched[0](target, None, op_name(func))
        if kwargs:
            if len(args) > prefix or not keywords.issuperset(kwargs):
                args, kwargs = _bind(kind, func, args, kwargs)
            result = handler(func, *args, **kwargs)
        elif len(args) > prefix:
            args, kwargs = _bind(kind, func, args, {})
            result = handler(func, *args, **kwargs)
        else:
            result = handler(func, *args)
        if live[0]:  # some mask carries lengths: no op may drop them (see _lengths)
            _lengths.check_call(route[0], func, args, kwargs, result)
        return result

    return dispatch


def _bind(kind: Kind, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
          ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call's arguments bound for its handler; the binding is worked out on the first
    call of ``func`` and kept (its route then lets calls that need none through)."""
    binding = kind.bindings.get(func)
    if binding is None:
        handler, _, _, writes = kind.routes[func]
        binding = kind.bindings[func] = binding_for(op_name(func), func, handler)
        kind.routes[func] = (handler, binding.prefix, binding.keywords, writes)
        if len(args) <= binding.prefix and binding.keywords.issuperset(kwargs):
            return args, kwargs
    return binding.bind(args, kwargs)


def binding(batch_type: str, func: Any) -> Any:
    """The ``matchbox._binding.Binding`` of calls of ``func`` to ``batch_type``'s handler
    (worked out now if no call has yet), for tests and tools."""
    kind = _KINDS[batch_type]
    found = kind.bindings.get(func)
    if found is None:
        _bind(kind, func, (), {})
        found = kind.bindings[func]
    return found


def _write_running(kind: Kind, handler: Handler, func: Any, args: tuple[Any, ...],
                   kwargs: dict[str, Any] | None) -> Any:
    """An op that writes its first argument in place, run while an execution mask is
    active: on a copy of the batch, whose values the running examples then take
    (``matchbox._masked_writes``).  ``None`` when the first argument is not a batch of
    ``kind`` (a handler refuses a plain tensor; a view's ops reach its batch's dispatch)."""
    target = _written(args, kwargs)
    if not isinstance(target, kind.cls):
        return None
    if not kind.masked_writes:
        if kind.view:
            return None
        raise NotImplementedError(
            f"{op_name(func)}: an in-place op on a {kind.name} under a per-example "
            "condition is not supported (it would change the examples that do not run "
            "the code too); write it out of place (y = op(x)), which @batch merges per "
            "example")
    _region_guard.refuse_a_view_of_a_guard(op_name(func), target)
    copy = in_place_copy(target)
    if args:
        args = (copy, *args[1:])
    else:
        kwargs = {**kwargs, "input" if "input" in kwargs else "self": copy}
    args, kwargs = _bind(kind, func, args, kwargs or {})
    handler(func, *args, **kwargs)
    return write_running(target, copy, name=f"the batch written by {op_name(func)}")


def _written(args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> Any:
    """The argument an in-place op writes: its first (``input`` or ``self`` by keyword)."""
    if args:
        return args[0]
    kwargs = kwargs or {}
    return kwargs.get("input" if "input" in kwargs else "self")


def _joined(args: tuple[Any, ...], kwargs: dict[str, Any] | None, joins: list[Kind]
            ) -> Kind | None:
    """The first batch type of ``joins`` among the arguments (one level into lists)."""
    for value in (*args, *kwargs.values()) if kwargs else args:
        kind = type(value)
        if kind is list or kind is tuple:
            for item in value:
                for target in joins:
                    if isinstance(item, target.cls):
                        return target
            continue
        for target in joins:
            if isinstance(value, target.cls):
                return target
    return None


def _hand_over(kind: Kind, target: Kind, func: Any, args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> Any:
    """Run ``func`` through ``target``'s dispatch, which converts ``kind``'s arguments.

    An in-place op on a batch of ``kind`` (``packed.add_(masked)``) runs on the
    converted copy; the batch then takes that copy's values (``_take_converted``),
    so that it changes as each example would in the loop.
    """
    result = target.dispatch(func, (kind.cls, target.cls), args, kwargs)
    first = args[0] if args else kwargs.get("input")
    if type(first) is kind.cls and (writes_first_argument(func) or kwargs.get("inplace")):
        first._take_converted(result)
        return first
    return result


def dispatch(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None) -> Any:
    """``func(*args, **kwargs)`` through the dispatch of its first batch argument's type
    (for code that calls an op on batches from inside a handler, a view's op on its batch)."""
    for value in (*args, *(kwargs or {}).values()):
        kind = _KIND_OF[type(value)]
        if kind is not None:
            return kind.dispatch(func, None, args, kwargs)
    return func(*args, **(kwargs or {}))


# ---------------------------------------------------------------------------- profiler labels

# Labelled handlers, made on first use while a profiler records.
_LABELLED: dict[tuple[str, Any, Handler], Handler] = {}


def labelled(batch_type: str, func: Any, handler: Handler) -> Handler:
    """``handler`` run inside ``torch.profiler.record_function("matchbox.<family>")``.

    The dispatch asks for it only while a profiler records: torch sets the flag
    ``torch.autograd.profiler._is_profiler_enabled`` when a profiler starts and
    stops, and reading it is the whole cost of labels otherwise.  Ops of
    another batch type than ``MaskedBatch`` are labelled
    ``"matchbox.<batch type>.<family>"``.
    """
    key = (batch_type, func, handler)
    run = _LABELLED.get(key)
    if run is None:
        entry = _TABLE.get((batch_type, func)) or _TABLE.get(("Batch", func))
        family = entry.family if entry is not None else "unregistered"
        label = (f"matchbox.{family}" if batch_type == "MaskedBatch"
                 else f"matchbox.{batch_type}.{family}")
        record = torch.profiler.record_function

        def run(*args: Any, **kwargs: Any) -> Any:
            with record(label):
                return handler(*args, **kwargs)

        _LABELLED[key] = run
    return run


# ---------------------------------------------------------------------------- mixing


def register_conversion(cls: type, batch_type: str, convert: Callable[[Any], Any]) -> None:
    """Let an argument of class ``cls`` join an op of ``batch_type`` as ``convert(argument)``.

    This is how two batch types meet in one op.  PyTorch hands an op to the
    ``__torch_function__`` of the first batch argument's type (and ``x.add(y)``
    to ``x``'s method), so an op between, say, a ``MaskedBatch`` and a
    ``PackedBatch`` reaches either type's dispatch depending on the argument
    order.  The package that adds a batch type registers its conversion to the
    type that results when the two meet (matchbox-packed: ``PackedBatch`` ->
    ``MaskedBatch``); that type's dispatch converts such arguments
    (:func:`adopt`) before it looks up its handler, and ``cls``'s own dispatch
    hands every call that holds a ``batch_type`` argument over to it, so the
    result does not depend on the order of the arguments.
    """
    target = _KINDS[batch_type]
    target.conversions[cls] = convert
    target.foreign.add(cls)
    source = _KIND_OF[cls]
    if source is not None and target not in source.joins:
        source.joins.append(target)
        source.foreign.add(target.cls)


def adopt(batch_type: str, args: tuple[Any, ...],
          kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``args`` and ``kwargs`` with every argument that converts to ``batch_type`` converted."""
    return adopt_with(_KINDS[batch_type].conversions, args, kwargs)


def adopt_with(conversions: dict[type, Callable[[Any], Any]], args: tuple[Any, ...],
               kwargs: dict[str, Any] | None) -> tuple[tuple[Any, ...], dict[str, Any] | None]:
    """``args`` and ``kwargs`` with every argument of a class in ``conversions`` converted.

    Looks one level into lists and tuples (``torch.cat([x, y])``), as PyTorch
    does when it looks for overloaded arguments; returns the same objects when
    nothing converts.
    """
    # The hot path (every generated method calls this): nothing converts; each argument
    # looked at inline, a list or a tuple only then looked into.
    for value in args:
        kind = type(value)
        if kind in conversions or ((kind is list or kind is tuple)
                                   and _converts(value, conversions)):
            break
    else:
        if not kwargs or not any(_converts(v, conversions) for v in kwargs.values()):
            return args, kwargs
    return (tuple(_convert(a, conversions) for a in args),
            {k: _convert(v, conversions) for k, v in (kwargs or {}).items()})


def _converts(value: Any, conversions: dict[type, Callable[[Any], Any]]) -> bool:
    kind = type(value)
    return kind in conversions or (
        (kind is list or kind is tuple) and any(type(v) in conversions for v in value))


def _convert(value: Any, conversions: dict[type, Callable[[Any], Any]]) -> Any:
    to = conversions.get(type(value))
    if to is not None:
        return to(value)
    if isinstance(value, (list, tuple)) and _converts(value, conversions):
        return type(value)(_convert(v, conversions) for v in value)
    return value


# ---------------------------------------------------------------------------- errors


def declare_provider(predicate: Callable[[Any], bool], distribution: str) -> None:
    """Say that ops matching ``predicate`` are implemented by ``distribution``."""
    _PROVIDERS.append((predicate, distribution))


def refuse_out(op: Any, out: Any) -> None:
    """Batches have no ``out=`` (a result's layout is the op's to choose); ``out=None``,
    torch's default spelled out, is accepted."""
    if out is not None:
        name = op if isinstance(op, str) else op_name(op)
        raise NotImplementedError(f"{name}: out= is not supported for batches")


def refuse_per_example(op: str, name: str, value: Any, instead: str) -> None:
    """Refuse an argument that must be one value for every example (a size, an offset) but
    is a batch of one per example (``len`` of a per-example list, a merged counter): without
    this, the op would call itself on it (a ``RecursionError``) or ask it for a truth value."""
    if isinstance(value, (tuple, list)):
        for v in value:
            refuse_per_example(op, name, v, instead)
    elif isinstance(value, batch_types()):
        raise NotImplementedError(
            f"{op}: the {name} is a batch (one value per example); per-example values are "
            f"not implemented here: {name} must be the same int for every example; {instead}")


def int_argument(op: str, name: str, value: Any,
                 instead: str = "keep the positions and mask them with torch.where on a "
                                "comparison of positions with the per-example value") -> int:
    """``int(value)`` of an argument that must be one int for every example: a batch of one
    per example is refused naming the op and the argument (``int()`` of it said neither),
    and so is a batch's size (:func:`matchbox._sizes.refuse_size_number`), which ``int()``
    would read as the batch size or the padded size where each example's own differs."""
    refuse_per_example(op, name, value, instead)
    refuse_size_number(op, name, value)
    return int(value)


def unsupported(func: Any, batch_type: str = "MaskedBatch",
                kwargs: dict[str, Any] | None = None) -> NotImplementedError:
    """The error for an op that is not in the registry, naming the op (and, from the batch
    type's ``_unsupported_hint``, the way out)."""
    name = op_name(func)
    if kwargs and isinstance(kwargs.get("out"), batch_types()):
        # A factory handed a batch to write into (torch.arange(0, T, out=x.new(1, T))).
        return NotImplementedError(
            f"{name}: out= a {batch_type} is not supported (torch would resize out to the "
            "result's shape, which a batch's examples cannot take); leave out= away and pass "
            "dtype= and device=, or give a plain tensor: x.new(T) with a single size is one, "
            "as in the original Matchbox's torch.arange(0, T, out=x.new(T))"
        )
    message = f"{name} is not implemented for {batch_type}"
    for predicate, distribution in _PROVIDERS:
        if predicate(func):
            message += (
                f"; it is provided by the {distribution} distribution: "
                f"pip install {distribution}"
            )
            break
    kind = _KINDS.get(batch_type)
    hint = getattr(kind.cls, "_unsupported_hint", "") if kind is not None else ""
    if func is torch.arange:
        hint = _ARANGE_HINT
    elif func in _COUNTED_RESULTS:
        hint = _COUNTED_HINT
    elif func in _HISTOGRAMS:
        hint = _HISTOGRAM_HINT
    return NotImplementedError(message + hint)


# torch.arange(n) of a per-example n (x.size_as_tensor(1), the spelling the size(1)
# refusal suggests): the loop's (n,) has no batch form, but (1, n) has one.
_ARANGE_HINT = (
    ": with a per-example n (a batch of per-example ints, such as x.size_as_tensor(1)) "
    "each example's torch.arange(n) is (n,), a shape no batch holds (every example keeps "
    "dimension 0 of size one); for positions 0..n-1 of each example as (1, n), write "
    "x.new_ones(1, n, dtype=torch.long).cumsum(1) - 1, which equals "
    "torch.arange(n).unsqueeze(0) in the loop")


# Ops whose per-example result has one row per selected (nonzero) value: (k,) or (k, rank),
# k each example's own count, in dimension 0, where every example of a batch keeps its
# own size-one batch dimension.
_COUNTED_RESULTS = frozenset({
    torch.masked_select, torch.Tensor.masked_select, torch.nonzero, torch.Tensor.nonzero,
    torch.argwhere, torch.Tensor.argwhere, torch.nonzero_static, torch.Tensor.nonzero_static})
_COUNTED_HINT = (
    ": each example's result has its own count of selected positions in dimension 0 (the "
    "loop's (k,) or (k, rank)), which no batch holds (every example keeps dimension 0 of "
    "size one); keep the layout with torch.where(mask, x, fill) or x.masked_fill(~mask, "
    "fill), or reduce with the mask ((x * mask).sum(1), and mask.sum(1) for the counts)")

# Histograms: each example's counts are (bins,), whatever its shape, in dimension 0.
_HISTOGRAMS = frozenset({torch.histc, torch.Tensor.histc, torch.histogram,
                         torch.Tensor.histogram, torch.bincount, torch.Tensor.bincount})
_HISTOGRAM_HINT = (
    ": each example's result is 1-D, one count per bin in dimension 0 (the loop's (bins,)), "
    "which no batch holds (every example keeps dimension 0 of size one); count each bin "
    "over the positions instead, e.g. ((x.unsqueeze(-1) >= low) & (x.unsqueeze(-1) < high))"
    ".sum(1), low and high the bins' edges: (1, bins) in each example")
