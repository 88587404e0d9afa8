"""The methods of batch types, generated from the op table, and the guard of fast ones.

This module owns making a class a batch type (:func:`register_host`: its
:class:`~matchbox._op_table.Kind`, its dispatch, its methods) and the
``torch.Tensor`` methods each batch type gets for the ops it runs: ``x.tanh()``,
``x + y``, ``x @ W``.  A method written by hand on the class wins over a
generated one.

A generated method calls the batch type's dispatch (``matchbox._dispatch``),
which makes every check.  A handler may come with a fast path
(``fast_path=`` of ``matchbox._op_table.register``): methods are the hot path
of model code, and the plainest calls (``x.tanh()``, ``x * 2``, ``x + y`` of
one layout, ``x @ W``) can skip the dispatch's frames.  ``fast_path(func)``
gives ``fast(func, self, args)`` for one method, or ``None`` (no fast path for
that callable).  The method is then :func:`guarded`, the registry's one guard:

- a call with keywords, without gradients (a batch inside an
  ``autograd.Function``'s forward is refused by the dispatch), while a
  profiler records (the dispatch labels the op), or with an argument of a
  class the dispatch converts or hands over to another batch type (the
  mixing rule: ``masked * packed``, a jagged nested tensor) goes to the
  dispatch, and ``fast`` never sees it;
- ``fast(func, self, args)`` gets the others; it returns the result, or ``None`` for
  a call it does not take itself (any other argument type, a subclass, a list),
  which then goes to the dispatch.

The one check ``fast`` skips is the lengths net (``matchbox._lengths``): a
handler with a fast path must be marked ``_lengths.aware``, which
:func:`register_host` and later registrations check when they make the method.
"""

from __future__ import annotations

import functools
import inspect
import sys
from typing import Any

from torch.autograd import profiler as autograd_profiler

from matchbox import _lengths, _region_guard
from matchbox._autograd_function import grad_enabled
from matchbox._dispatch import make_dispatch
from matchbox._op_table import DIRECT, Kind, OpEntry, add_kind, op_name, tensor_method_names


def register_host(batch_type: str, cls: type, *, view: bool = False) -> Kind:
    """Make ``cls`` a batch type (a view of one with ``view=True``): give it the one
    dispatch and a method for every Tensor method registered for it (and, unless it
    is a view, for the rules shared by every batch type)."""
    kind = Kind(batch_type, cls, view)
    kind.dispatch = make_dispatch(kind)
    kind.install = functools.partial(_install_method, kind)
    add_kind(kind)
    return kind


def _install_method(kind: Kind, func: Any, entry: OpEntry) -> None:
    cls = kind.cls
    for name in tensor_method_names(func):
        if _written_by_hand(cls, name):
            continue  # methods written by hand win over generated ones
        _install_one(kind, name, func, entry)


def _written_by_hand(cls: type, name: str) -> bool:
    for klass in cls.__mro__[:-1]:  # not object
        method = klass.__dict__.get(name)
        if method is not None:
            return not (getattr(method, "_matchbox_generated", False)
                        or getattr(method, "_matchbox_fallback", False))
    return False


def _install_one(kind: Kind, name: str, func: Any, entry: OpEntry) -> None:
    dispatch = kind.dispatch
    fast = _fast_of(entry, func)
    if fast is None:

        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            return dispatch(func, None, (self, *args), kwargs)

    elif entry.handler not in _lengths.AWARE:
        raise TypeError(f"{op_name(func)}: a handler with a fast path must be written for "
                        "masks carrying lengths (_lengths.aware): its plain calls skip the "
                        "dispatch's check")
    else:
        method = guarded(kind, func, fast)

    method.__name__ = name
    method.__qualname__ = f"{kind.cls.__name__}.{name}"
    method.__doc__ = f"Batched ``Tensor.{name}``: equals the per-example result."
    method._matchbox_generated = True  # type: ignore[attr-defined]
    setattr(kind.cls, name, method)


def _fast_of(entry: OpEntry, func: Any) -> Any:
    """``fast(func, self, args)`` for ``func``'s methods, or ``None``."""
    if entry.fast_path is DIRECT:
        return _direct(entry.handler)
    return entry.fast_path(func) if entry.fast_path is not None else None


def _direct(handler: Any) -> Any:
    """The handler as the fast path (``DIRECT``): called with the method's positional
    arguments; a call with more than it takes goes to the dispatch, whose binding names
    the op in its error."""
    parameters = list(inspect.signature(handler).parameters.values())[2:]  # func, self
    if any(p.kind is p.VAR_POSITIONAL for p in parameters):
        most = sys.maxsize
    else:
        most = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters)

    def fast(func: Any, self: Any, args: tuple[Any, ...]) -> Any:
        return handler(func, self, *args) if len(args) <= most else None

    return fast


def guarded(kind: Kind, func: Any, fast: Any) -> Any:
    """The method of ``func`` for ``kind`` that runs ``fast(func, self, args)`` behind the
    registry's guard (see the module docstring), and every other call through the
    dispatch."""
    dispatch = kind.dispatch
    foreign = kind.foreign  # a set: conversions registered later are seen
    profiler = autograd_profiler
    deferred = _region_guard.LIVE  # a region's guard to apply first: the dispatch does
    regions = _region_guard
    # Whether a region's guard may pass through ``func`` (``_region_guard.passes``): if
    # not, a deferred guard among the arguments is applied here, as the dispatch would.
    through = func in _region_guard.PASS_THROUGH or func is _region_guard.GETITEM

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not kwargs and grad_enabled() and not profiler._is_profiler_enabled:
            if deferred[0]:
                # One pass over the arguments: a foreign one, or one deferring a guard.
                # (``regions.MaskedBatch`` read where used: most calls have one argument
                # or none, and a local cost more than it spared.)
                pending = self._deferred_guard is not None  # (None: a class's, Batch's)
                for value in args:
                    cls = type(value)
                    if cls in foreign:
                        break
                    if cls is regions.MaskedBatch and value._deferred_guard is not None:
                        pending = True
                else:
                    if not pending:
                        result = fast(func, self, args)
                    elif through:  # the dispatch's handling of a region's guard
                        result = run_passing(func, None, (self, *args), None, fast_call)
                    else:  # the guards applied (``resolve_all``'s, argument by argument)
                        regions.resolve(self)
                        for value in args:
                            if type(value) is regions.MaskedBatch:
                                regions.resolve(value)
                            elif type(value) is list or type(value) is tuple:
                                for item in value:  # (one level in, as the dispatch looks)
                                    regions.resolve(item)
                        result = fast(func, self, args)
                    if result is not None:
                        return result
            else:
                for value in args:
                    if type(value) in foreign:
                        break
                else:
                    result = fast(func, self, args)
                    if result is not None:
                        return result
        return dispatch(func, None, (self, *args), kwargs)

    def fast_call(func: Any, _types: Any, call: tuple[Any, ...], _kwargs: Any) -> Any:
        return fast(func, call[0], call[1:])

    run_passing = _region_guard.run_passing
    return method
