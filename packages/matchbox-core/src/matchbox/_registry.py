"""The one op registry of Matchbox, and the one dispatch every batch type goes through.

Every torch function, ``torch.Tensor`` method and ``torch.nn.functional``
function that batch types support is a key of one table, filled by the
:func:`implements` decorator (in the style of PyTorch's jagged nested tensors).
The dispatch looks ops up here, ``dir(MaskedBatch)`` is generated from here,
and the op documentation and the registry-parametrised tests read it.

A handler is called as ``handler(func, *args, **kwargs)``: ``func`` is the torch
callable that was invoked (``torch.tanh``, ``torch.Tensor.tanh``, ...), so one
handler can serve a whole family of ops.  Its arguments are bound to ``func``'s
own signature first and handed over by the handler's parameter names
(``matchbox._binding``), so a handler serving ``F.softmax`` and
``Tensor.softmax`` reads ``dtype`` whichever order its callable takes it in.

Handlers are registered per batch type (``"MaskedBatch"``, ``"PackedBatch"``,
``"TimeMajorBatch"``), or for ``"Batch"``: then every batch type that shares
rules (every one but views) runs it, unless it registers its own handler for
the op.  A rule for ``"Batch"`` is written over the protocol of
``matchbox._batch.Batch`` (``rows()``/``from_rows()``, ``_with_data()``).

The dispatch (:func:`_make_dispatch`) is one function per batch type; it is the
batch type's ``__torch_function__`` and every generated method calls it.  For
each op it: hands the call to another batch type when one it converts into is
among the arguments (the mixing rule, :func:`register_conversion`); looks up the
handler (an unknown op raises :func:`unsupported`); refuses a batch inside an
``autograd.Function``'s forward (``matchbox._autograd_function``); labels the
op while a profiler records (:func:`labelled`); converts arguments of other
batch types that join it; binds the arguments; runs the handler; and, while
a mask carrying lengths is alive, checks that the result kept them
(``matchbox._lengths``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.autograd import profiler as autograd_profiler

from matchbox import _lengths
from matchbox._autograd_function import grad_enabled, refuse_untracked
from matchbox._binding import binding_for

Handler = Callable[..., Any]
_LIVE = _lengths.LIVE

#: The batch type name under which a rule shared by every batch type is registered.
SHARED = "Batch"


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


# (batch type name, torch callable) -> entry, as registered ("Batch": shared rules).
_TABLE: dict[tuple[str, Any], OpEntry] = {}


class Kind:
    """A batch type as the dispatch knows it: its class, its handlers and its neighbours.

    ``routes`` maps each torch callable to ``(handler, prefix, keywords)``: the
    handler and what of a call reaches it unbound (see ``matchbox._binding``);
    a fresh entry has ``prefix`` -1, so that its first call works the binding
    out.  ``joins`` are the batch types this one converts into when they meet
    in one op; ``conversions`` the classes that convert into this one.
    """

    __slots__ = ("name", "cls", "view", "routes", "bindings", "joins", "conversions",
                 "dispatch")

    def __init__(self, name: str, cls: type, view: bool):
        self.name = name
        self.cls = cls
        self.view = view  # a view of a batch (TimeMajorBatch): no shared rules
        self.routes: dict[Any, tuple[Handler, int, Any]] = {}
        self.bindings: dict[Any, Any] = {}
        self.joins: list[Kind] = []
        self.conversions: dict[type, Callable[[Any], Any]] = {}
        self.dispatch = _make_dispatch(self)


_KINDS: dict[str, Kind] = {}
# The classes registered as batch types (views excluded), for isinstance checks.
_BATCH_TYPES: tuple[type, ...] = ()

# Ops that another distribution implements: a helpful error names it.
_PROVIDERS: list[tuple[Callable[[Any], bool], str]] = []


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
    if isinstance(func, str):
        return func
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
    namespace = _NAMESPACES.get(module)
    if namespace is not None:
        # A C function of torch.special is named special_digamma: the prefix goes.
        prefix = namespace.rsplit(".", 1)[1] + "_"
        return f"{namespace}.{name[len(prefix):] if name.startswith(prefix) else name}"
    if module in _PYTHON_NAMESPACES:
        return f"{module}.{name}"
    if getattr(torch.Tensor, name, None) is func:
        return f"Tensor.{name}"
    return f"torch.{name}"


# The modules of torch's namespaces of functions, as their C functions report them.
_NAMESPACES = {f"torch._C._{n}": f"torch.{n}" for n in ("special", "linalg", "fft", "nested")}
_PYTHON_NAMESPACES = {"torch.special", "torch.linalg", "torch.fft"}


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

# Python operators that write into their left operand (``x += y``).
_INPLACE_DUNDERS = {f"__i{name}__" for name in (
    "add", "sub", "mul", "truediv", "div", "floordiv", "mod", "pow", "and", "or", "xor",
    "lshift", "rshift", "matmul")}


def writes_first_argument(func: Any) -> bool:
    """Whether ``func`` writes into its first argument (``add_``, ``__iadd__``)."""
    name = getattr(func, "__name__", "")
    if name in _INPLACE_DUNDERS:
        return True
    return not name.startswith("__") and name.endswith("_")


# ---------------------------------------------------------------------------- registering


def implements(
    *funcs: Any, family: str, batch_type: str = "MaskedBatch"
) -> Callable[[Handler], Handler]:
    """Register the decorated handler for every callable in ``funcs``.

    ``batch_type="Batch"`` registers a rule for every batch type that shares rules
    (see the module docstring); a batch type's own handler for the op wins.
    """

    def decorator(handler: Handler) -> Handler:
        register(funcs, handler, family=family, batch_type=batch_type)
        return handler

    return decorator


def register(
    funcs: Iterable[Any], handler: Handler, *, family: str, batch_type: str = "MaskedBatch"
) -> None:
    """Register ``handler`` for every callable in ``funcs`` (``None`` entries are skipped:
    callables missing from the installed torch)."""
    for func in funcs:
        if func is None:
            continue
        _TABLE[(batch_type, func)] = OpEntry(func, handler, family, batch_type)
        if batch_type == SHARED:
            for kind in _KINDS.values():
                if not kind.view and (kind.name, func) not in _TABLE:
                    _route(kind, func, handler)
        else:
            kind = _KINDS.get(batch_type)
            if kind is not None:
                _route(kind, func, handler)


def _route(kind: Kind, func: Any, handler: Handler) -> None:
    kind.routes[func] = (handler, -1, frozenset())  # bound on the first call
    kind.bindings.pop(func, None)
    _install_method(kind, func, handler)


def register_host(batch_type: str, cls: type, *, view: bool = False) -> Kind:
    """Make ``cls`` a batch type (a view of one with ``view=True``): give it the one
    dispatch and a method for every Tensor method registered for it (and, unless it
    is a view, for the rules shared by every batch type)."""
    global _BATCH_TYPES
    kind = _KINDS[batch_type] = Kind(batch_type, cls, view)
    if not view:
        _BATCH_TYPES = (*_BATCH_TYPES, cls)
    for (bt, func), entry in list(_TABLE.items()):
        if bt == batch_type or (bt == SHARED and not view and (batch_type, func) not in _TABLE):
            _route(kind, func, entry.handler)
    return kind


def kind_of(batch_type: str) -> Kind:
    """The registered batch type named ``batch_type``."""
    return _KINDS[batch_type]


def lookup(func: Any, batch_type: str = "MaskedBatch") -> Handler | None:
    """The handler ``batch_type`` runs for ``func`` (its own or a shared one), if any."""
    kind = _KINDS.get(batch_type)
    if kind is not None:
        route = kind.routes.get(func)
        return None if route is None else route[0]
    entry = _TABLE.get((batch_type, func)) or _TABLE.get((SHARED, func))
    return None if entry is None else entry.handler


def entries(batch_type: str = "MaskedBatch") -> list[OpEntry]:
    """Every op a batch type runs (its own and the shared rules), sorted by family and name."""
    kind = _KINDS.get(batch_type)
    rows = [e for (bt, _), e in _TABLE.items() if bt == batch_type]
    if kind is not None and not kind.view:
        rows += [e for (bt, func), e in _TABLE.items()
                 if bt == SHARED and (batch_type, func) not in _TABLE]
    return sorted(rows, key=lambda e: (e.family, e.name))


def batch_type_names() -> list[str]:
    """The registered batch types' names (views included), in registration order."""
    return list(_KINDS)


def batch_types() -> tuple[type, ...]:
    """Every class registered as a batch type (``MaskedBatch``, ``PackedBatch``, ...)."""
    return _BATCH_TYPES


# ---------------------------------------------------------------------------- the dispatch


def _make_dispatch(kind: Kind) -> Callable[..., Any]:
    """The one dispatch of ``kind``: its ``__torch_function__``, called by its methods too
    (with ``types=None``).  Everything it reads is bound here, for the hot path."""
    name = kind.name
    routes = kind.routes
    joins = kind.joins
    conversions = kind.conversions
    live = _LIVE

    def dispatch(func: Any, types: Any, args: tuple[Any, ...] = (),
                 kwargs: dict[str, Any] | None = None) -> Any:
        if joins and (types is None or len(types) > 1):
            # A batch type this one converts into is among the arguments: the op is its.
            target = _joined(args, kwargs, joins)
            if target is not None:
                return _hand_over(kind, target, func, args, kwargs or {})
        route = routes.get(func)
        if route is None:
            raise unsupported(func, name, kwargs)
        handler, prefix, keywords = route
        if not grad_enabled():  # an autograd.Function's forward would lose the gradient
            refuse_untracked(func, args)
        if autograd_profiler._is_profiler_enabled:
            handler = labelled(name, func, handler)
        if conversions and (types is None or len(types) > 1):
            # Another batch type among the arguments joins this one (PackedBatch -> Masked).
            args, kwargs = adopt_with(conversions, args, kwargs)
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
        handler = kind.routes[func][0]
        binding = kind.bindings[func] = binding_for(op_name(func), func, handler)
        kind.routes[func] = (handler, binding.prefix, binding.keywords)
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


class _KindOfClass(dict):  # type -> Kind, computed for subclasses on first use
    def __missing__(self, cls: type) -> Kind | None:
        found = next((k for k in _KINDS.values() if issubclass(cls, k.cls)), None)
        self[cls] = found
        return found


_KIND_OF: dict[type, Kind | None] = _KindOfClass()


# ---------------------------------------------------------------------------- methods


def _install_method(kind: Kind, func: Any, handler: Handler) -> None:
    cls = kind.cls
    for name in tensor_method_names(func):
        if _written_by_hand(cls, name):
            continue  # methods written by hand win over generated ones
        _install_one(kind, name, func, handler)


def _written_by_hand(cls: type, name: str) -> bool:
    for klass in cls.__mro__[:-1]:  # not object
        method = klass.__dict__.get(name)
        if method is not None:
            return not (getattr(method, "_matchbox_generated", False)
                        or getattr(method, "_matchbox_fallback", False))
    return False


def _install_one(kind: Kind, name: str, func: Any, handler: Handler) -> None:
    dispatch = kind.dispatch
    # A handler may build its op a faster method (the pointwise family does: methods are
    # the hot path of model code): ``method_factory(func, dispatch)`` returns a method
    # that takes the plainest calls itself and hands every other to ``dispatch``.  Its
    # first line must be the guard below: any call with keywords, without gradients (a
    # batch inside an autograd.Function's forward is refused there) or while a profiler
    # records (labels) goes to the dispatch, which makes every check.  Such a handler
    # must be written for masks carrying lengths (its plain calls skip that check).
    #
    #     if kwargs or not grad_enabled() or autograd_profiler._is_profiler_enabled:
    #         return dispatch(func, None, (self, *args), kwargs)
    factory = getattr(handler, "method_factory", None)
    method = factory(func, dispatch) if factory is not None else None
    if method is None:

        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            return dispatch(func, None, (self, *args), kwargs)

    elif handler not in _lengths.AWARE:
        raise TypeError(f"{op_name(func)}: a handler with a method_factory must be "
                        "written for masks carrying lengths (_lengths.aware): its plain "
                        "calls skip the dispatch's check")

    method.__name__ = name
    method.__qualname__ = f"{kind.cls.__name__}.{name}"
    method.__doc__ = f"Batched ``Tensor.{name}``: equals the per-example result."
    method._matchbox_generated = True  # type: ignore[attr-defined]
    setattr(kind.cls, name, method)


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
        entry = _TABLE.get((batch_type, func)) or _TABLE.get((SHARED, func))
        family = entry.family if entry is not None else "unregistered"
        label = (f"matchbox.{family}" if batch_type == "MaskedBatch"
                 else f"matchbox.{batch_type}.{family}")
        record = torch.profiler.record_function

        def run(*args: Any, **kwargs: Any) -> Any:
            with record(label):
                return handler(*args, **kwargs)

        _LABELLED[key] = run
    return run


# ---------------------------------------------------------------------------- batch-dim views

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
    source = _KIND_OF[cls]
    if source is not None and target not in source.joins:
        source.joins.append(target)


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
    # The hot path (every generated method calls this): nothing converts.
    for value in args:
        if _converts(value, conversions):
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
    return NotImplementedError(message + hint)


# torch.arange(n) of a per-example n (x.size_as_tensor(1), the spelling the size(1)
# refusal suggests): the loop's (n,) has no batch form, but (1, n) has one.
_ARANGE_HINT = (
    ": with a per-example n (a batch of per-example ints, such as x.size_as_tensor(1)) "
    "each example's torch.arange(n) is (n,), a shape no batch holds (every example keeps "
    "dimension 0 of size one); for positions 0..n-1 of each example as (1, n), write "
    "x.new_ones(1, n, dtype=torch.long).cumsum(1) - 1, which equals "
    "torch.arange(n).unsqueeze(0) in the loop")
