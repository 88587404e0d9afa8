"""The one op registry of Matchbox.

Every torch function, ``torch.Tensor`` method and ``torch.nn.functional``
function that batch types support is a key of one table, filled by the
:func:`implements` decorator (in the style of PyTorch's jagged nested tensors).
``__torch_function__`` looks ops up here, ``dir(MaskedBatch)`` is generated from
here, and the op documentation and the registry-parametrised tests read it.

A handler is called as ``handler(func, *args, **kwargs)``: ``func`` is the torch
callable that was invoked (``torch.tanh``, ``torch.Tensor.tanh``, ...), so one
handler can serve a whole family of ops.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.autograd import profiler as autograd_profiler

from matchbox import _lengths
from matchbox._autograd_function import grad_enabled, refuse_untracked

Handler = Callable[..., Any]
_LIVE = _lengths.LIVE


@dataclasses.dataclass(frozen=True)
class OpEntry:
    """One registered op: the torch callable, its handler and its family."""

    func: Callable[..., Any]
    handler: Handler
    family: str
    batch_type: str

    @property
    def name(self) -> str:
        return op_name(self.func)


# (batch type name, torch callable) -> entry.  Several batch types (MaskedBatch,
# PackedBatch) share the table; each looks up its own rows.
_TABLE: dict[tuple[str, Any], OpEntry] = {}
# batch type name -> {torch callable: handler}: the same rows keyed for the hot
# path (``__torch_function__`` looks a handler up on every op).
_HANDLERS: dict[str, dict[Any, Handler]] = {}
# batch type name -> class, so that methods can be installed as ops register.
_HOSTS: dict[str, type] = {}

# Ops that another distribution implements: a helpful error names it.
_PROVIDERS: list[tuple[Callable[[Any], bool], str]] = []
# batch type name -> {class of a foreign argument: its conversion to that batch type}.
_CONVERSIONS: dict[str, dict[type, Callable[[Any], Any]]] = {}


def op_name(func: Any) -> str:
    """A readable name for a torch callable: ``torch.tanh``, ``Tensor.add_``.

    Handlers ask for it on every call (for their error messages), so it is
    worked out once per callable.
    """
    try:
        return _NAMES[func]
    except KeyError:
        name = _NAMES[func] = _op_name(func)
        return name
    except TypeError:  # an unhashable callable
        return _op_name(func)


_NAMES: dict[Any, str] = {}


def _op_name(func: Any) -> str:
    descriptor = getattr(func, "__self__", None)
    if getattr(func, "__name__", None) == "__get__" and isinstance(
            getattr(descriptor, "__objclass__", None), type):
        # A property's getter (``Tensor.mT.__get__``), as torch hands it over.
        return f"Tensor.{descriptor.__name__}"
    name = getattr(func, "__name__", None) or repr(func)
    qualname = getattr(func, "__qualname__", name)
    if qualname.startswith("_TensorBase.") or qualname.startswith("TensorBase."):
        qualname = "Tensor." + qualname.split(".", 1)[1]
    if qualname.startswith("Tensor."):
        return qualname
    module = getattr(func, "__module__", None) or ""
    if module.startswith("torch.nn.functional") or module == "torch._C._nn":
        return f"torch.nn.functional.{name}"
    if module.startswith("torch.special") or module == "torch._C._special":
        return f"torch.special.{name}"
    if getattr(torch.Tensor, name, None) is func:
        return f"Tensor.{name}"
    return f"torch.{name}"


def tensor_method_names(func: Any) -> list[str]:
    """Every ``torch.Tensor`` attribute name bound to ``func`` (``neg`` and ``__neg__``)."""
    global _TENSOR_NAMES
    if _TENSOR_NAMES is None:
        _TENSOR_NAMES = {}
        for name in dir(torch.Tensor):
            attribute = getattr(torch.Tensor, name, None)
            if callable(attribute):
                _TENSOR_NAMES.setdefault(id(attribute), []).append(name)
    return _TENSOR_NAMES.get(id(func), [])


def tensor_method_name(func: Any) -> str | None:
    """The ``torch.Tensor`` attribute name of ``func``, if it is a Tensor method."""
    name = getattr(func, "__name__", None)
    if name is not None and getattr(torch.Tensor, name, None) is func:
        return name
    names = tensor_method_names(func)
    return names[0] if names else None


_TENSOR_NAMES: dict[int, list[str]] | None = None


def implements(
    *funcs: Any, family: str, batch_type: str = "MaskedBatch"
) -> Callable[[Handler], Handler]:
    """Register the decorated handler for every callable in ``funcs``."""

    def decorator(handler: Handler) -> Handler:
        register(funcs, handler, family=family, batch_type=batch_type)
        return handler

    return decorator


def register(
    funcs: Iterable[Any], handler: Handler, *, family: str, batch_type: str = "MaskedBatch"
) -> None:
    for func in funcs:
        if func is None:
            continue
        _TABLE[(batch_type, func)] = OpEntry(func, handler, family, batch_type)
        handlers(batch_type)[func] = handler
        host = _HOSTS.get(batch_type)
        if host is not None:
            _install_method(batch_type, host, func, handler)


def lookup(func: Any, batch_type: str = "MaskedBatch") -> Handler | None:
    return handlers(batch_type).get(func)


def handlers(batch_type: str) -> dict[Any, Handler]:
    """The live ``{torch callable: handler}`` table of a batch type (for its dispatch)."""
    table = _HANDLERS.get(batch_type)
    if table is None:
        table = _HANDLERS[batch_type] = {}
    return table


def entries(batch_type: str = "MaskedBatch") -> list[OpEntry]:
    """Every registered op of a batch type, sorted by family and name."""
    rows = [e for (bt, _), e in _TABLE.items() if bt == batch_type]
    return sorted(rows, key=lambda e: (e.family, e.name))


def register_host(batch_type: str, cls: type) -> None:
    """Make ``cls`` receive a method for every Tensor method registered for it."""
    _HOSTS[batch_type] = cls
    for (bt, func), entry in list(_TABLE.items()):
        if bt == batch_type:
            _install_method(batch_type, cls, func, entry.handler)


def batch_types() -> tuple[type, ...]:
    """Every class registered as a batch type (``MaskedBatch``, ``PackedBatch``, ...)."""
    return tuple(_HOSTS.values())


# ---------------------------------------------------------------------------- profiler labels

# Labelled handlers, made on first use while a profiler records.
_LABELLED: dict[tuple[str, Any, Handler], Handler] = {}


def labelled(batch_type: str, func: Any, handler: Handler) -> Handler:
    """``handler`` run inside ``torch.profiler.record_function("matchbox.<family>")``.

    Every dispatch (``__torch_function__``, the generated methods) asks for it
    only while a profiler records: torch sets the flag
    ``torch.autograd.profiler._is_profiler_enabled`` when a profiler starts and
    stops, and reading it is the whole cost of labels otherwise.  Ops of
    another batch type than ``MaskedBatch`` are labelled
    ``"matchbox.<batch type>.<family>"``.
    """
    key = (batch_type, func, handler)
    run = _LABELLED.get(key)
    if run is None:
        entry = _TABLE.get((batch_type, func))
        family = entry.family if entry is not None else "unregistered"
        label = (f"matchbox.{family}" if batch_type == "MaskedBatch"
                 else f"matchbox.{batch_type}.{family}")
        record = torch.profiler.record_function

        def run(*args: Any, **kwargs: Any) -> Any:
            with record(label):
                return handler(*args, **kwargs)

        _LABELLED[key] = run
    return run


def _install_method(batch_type: str, cls: type, func: Any, handler: Handler) -> None:
    for name in tensor_method_names(func):
        if name in cls.__dict__ and not getattr(cls.__dict__[name], "_matchbox_generated", False):
            continue  # methods written by hand on the class win over generated ones
        _install_one(batch_type, cls, name, func, handler)


def _install_one(batch_type: str, cls: type, name: str, func: Any, handler: Handler) -> None:
    # A handler may build a faster method for its op (the pointwise family
    # does: methods are the hot path of model code); otherwise call through.
    factory = getattr(handler, "method_factory", None)
    method = factory(func) if factory is not None else None
    if method is None:

        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not grad_enabled():  # an autograd.Function's forward would lose the gradient
                refuse_untracked(func, (self, *args))
            run = (labelled(batch_type, func, handler)
                   if autograd_profiler._is_profiler_enabled else handler)
            if kwargs:
                args, kwargs = adopt(batch_type, args, with_torch_names(kwargs))
                result = run(func, self, *args, **kwargs)
            else:
                if args:
                    args, _ = adopt(batch_type, args, kwargs)
                result = run(func, self, *args)
            if _LIVE[0]:  # some mask carries lengths: no op may drop them (see _lengths)
                _lengths.check_call(handler, func, (self, *args), kwargs, result)
            return result

    method.__name__ = name
    method.__qualname__ = f"{cls.__name__}.{name}"
    method.__doc__ = f"Batched ``Tensor.{name}``: equals the per-example result."
    method._matchbox_generated = True  # type: ignore[attr-defined]
    setattr(cls, name, method)


# Views that move dimension 0 of a batch (each example's own size-one
# dimension), which the batch type itself cannot hold.  matchbox-nn provides the
# time-major view: ``x.transpose(0, 1)`` of ``(1, T, F)`` examples, which
# modules such as ``nn.MultiheadAttention(batch_first=True)`` write inside
# their own forward.  Without a provider such a transpose is refused.
_BATCH_DIM_VIEWS: dict[str, Handler] = {}


def provide_batch_dim_view(batch_type: str, factory: Handler) -> None:
    """Let ``factory(op, batch)`` answer ``transpose(0, 1)`` of a ``batch_type`` batch."""
    _BATCH_DIM_VIEWS[batch_type] = factory


def batch_dim_view(batch_type: str) -> Handler | None:
    """The provider of ``transpose(0, 1)`` views for ``batch_type``, if one is installed."""
    return _BATCH_DIM_VIEWS.get(batch_type)


#: Views of a batch (matchbox-nn's time-major ``TimeMajorBatch``): objects that
#: hold a batch in ``.batch`` and are rebuilt by calling their class on one.
#: matchbox-control merges and guards such a view under ``@batch`` through the
#: batch it holds.  A set, read directly on hot paths (``type(v) in BATCH_VIEWS``).
BATCH_VIEWS: set[type] = set()


def register_batch_view(cls: type) -> None:
    """Declare ``cls`` a view of a batch (see :data:`BATCH_VIEWS`)."""
    BATCH_VIEWS.add(cls)


_CONVENIENCE: list[str] = []


def declare_convenience(names: list[str]) -> None:
    """Record Matchbox's own methods (not torch ops) for the op documentation."""
    _CONVENIENCE[:] = names


def convenience_methods() -> list[str]:
    return list(_CONVENIENCE)


def register_conversion(cls: type, batch_type: str, convert: Callable[[Any], Any]) -> None:
    """Let an argument of class ``cls`` join an op of ``batch_type`` as ``convert(argument)``.

    This is how two batch types meet in one op.  PyTorch hands an op to the
    ``__torch_function__`` of the first batch argument's type (and ``x.add(y)``
    to ``x``'s method), so an op between, say, a ``MaskedBatch`` and a
    ``PackedBatch`` reaches either type's dispatch depending on the argument
    order.  The package that adds a batch type registers its conversion to the
    type that results when the two meet (matchbox-packed: ``PackedBatch`` ->
    ``MaskedBatch``); that type's dispatch converts such arguments
    (:func:`adopt`) before it looks up its handler, and the new type's own
    dispatch hands mixed calls over to it, so the result does not depend on
    the order of the arguments.
    """
    _CONVERSIONS.setdefault(batch_type, {})[cls] = convert


# Keyword spellings torch accepts for NumPy's sake, as the names handlers use.
_KEYWORD_ALIASES = {"axis": "dim", "keepdims": "keepdim"}


def with_torch_names(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with NumPy's spellings that torch accepts (``x.sum(axis=1)``,
    ``keepdims=True``) under torch's own names, which handlers take."""
    if not any(name in kwargs for name in _KEYWORD_ALIASES):
        return kwargs
    return {_KEYWORD_ALIASES.get(name, name): value for name, value in kwargs.items()}


def adopt(batch_type: str, args: tuple[Any, ...],
          kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``args`` and ``kwargs`` with every argument that converts to ``batch_type`` converted.

    Looks one level into lists and tuples (``torch.cat([x, y])``), as PyTorch
    does when it looks for overloaded arguments; returns the same objects when
    nothing converts.
    """
    conversions = _CONVERSIONS.get(batch_type)
    if not conversions:
        return args, kwargs
    # The hot path (every generated method calls this): nothing converts.
    for value in args:
        if _converts(value, conversions):
            break
    else:
        if not kwargs or not any(_converts(v, conversions) for v in kwargs.values()):
            return args, kwargs
    return (tuple(_convert(a, conversions) for a in args),
            {k: _convert(v, conversions) for k, v in kwargs.items()})


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


def declare_provider(predicate: Callable[[Any], bool], distribution: str) -> None:
    """Say that ops matching ``predicate`` are implemented by ``distribution``."""
    _PROVIDERS.append((predicate, distribution))


def refuse_out(op: Any, out: Any) -> None:
    """Batches have no ``out=`` (a result's layout is the op's to choose); ``out=None``,
    torch's default spelled out, is accepted."""
    if out is not None:
        name = op if isinstance(op, str) else op_name(op)
        raise NotImplementedError(f"{name}: out= is not supported for batches")


def unsupported(func: Any, batch_type: str = "MaskedBatch",
                kwargs: dict[str, Any] | None = None) -> NotImplementedError:
    """The error for an op that is not in the registry, naming the op."""
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
    return NotImplementedError(message)
