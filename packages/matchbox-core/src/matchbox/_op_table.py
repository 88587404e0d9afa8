"""The op table: which handler each batch type runs for each torch callable.

This module owns the one table of Matchbox's ops and what reads it without
running an op:

- the table itself: every torch function, ``torch.Tensor`` method and
  ``torch.nn.functional`` function that batch types support is a key, filled
  by :func:`implements` / :func:`register` (in the style of PyTorch's jagged
  nested tensors) and read by :func:`lookup` and :func:`entries` (the op
  documentation, ``dir(MaskedBatch)`` and the registry-parametrised tests);
- the batch types as the dispatch knows them (:class:`Kind`): each one's
  routes (torch callable -> handler), filled from the table;
- readable names of torch callables (:func:`op_name`, ``Tensor`` method names);
- the list of Matchbox's own convenience methods, for the op documentation.

Handlers are registered per batch type (``"MaskedBatch"``, ``"PackedBatch"``,
``"TimeMajorBatch"``), or for ``"Batch"`` (the base class): then every batch
type that shares rules (every one but views) runs it, unless it registers its
own handler for the op.  A rule for ``"Batch"`` is written over the protocol of
``matchbox._batch.Batch`` (``rows()``/``from_rows()``, ``_with_data()``).

A handler may come with a fast path for its ``Tensor`` methods (``fast_path=``
of :func:`register`); ``matchbox._methods`` makes the methods and applies the
registry's guard to it.  The dispatch is ``matchbox._dispatch``; this module
imports nothing of Matchbox.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import torch

Handler = Callable[..., Any]



@dataclasses.dataclass(frozen=True)
class OpEntry:
    """One registered op: the torch callable, its handler and its family (and the
    handler's fast path for methods, if it has one: see ``matchbox._methods``)."""

    func: Callable[..., Any]
    handler: Handler
    family: str
    batch_type: str
    fast_path: Callable[..., Any] | str | None = None  # or DIRECT

    @property
    def name(self) -> str:
        return op_name(self.func)


#: ``fast_path=DIRECT``: the handler is its own methods' fast path.  Their positional
#: arguments are the handler's, in order (``x.chunk(2, -1)``, ``x.unsqueeze(1)``): the
#: plain calls of a method skip the dispatch's frames (``matchbox._methods``).
DIRECT = "the handler itself"

# (batch type name, torch callable) -> entry, as registered ("Batch": shared rules).
_TABLE: dict[tuple[str, Any], OpEntry] = {}


class Kind:
    """A batch type as the dispatch knows it: its class, its handlers and its neighbours.

    ``routes`` maps each torch callable to ``(handler, prefix, keywords, writes)``:
    the handler, what of a call reaches it unbound (see ``matchbox._binding``; a
    fresh entry has ``prefix`` -1, so that its first call works the binding out),
    and whether the op writes values into its first argument (:func:`writes_values`).
    ``joins`` are the batch types this one converts into when they meet in one op; ``conversions`` the classes that convert into this one;
    ``foreign`` the classes of both (exact types), which a fast method hands to
    the dispatch.  ``dispatch`` and ``install`` (which puts a route's method on
    the class) are set by ``matchbox._methods.register_host``.
    """

    __slots__ = ("name", "cls", "view", "routes", "bindings", "joins", "conversions",
                 "foreign", "dispatch", "install", "masked_writes")

    def __init__(self, name: str, cls: type, view: bool):
        self.name = name
        self.cls = cls
        self.view = view  # a view of a batch (TimeMajorBatch): no shared rules
        self.routes: dict[Any, tuple[Handler, int, Any, bool]] = {}
        self.bindings: dict[Any, Any] = {}
        self.joins: list[Kind] = []
        self.conversions: dict[type, Callable[[Any], Any]] = {}
        self.foreign: set[type] = set()
        self.dispatch: Callable[..., Any] | None = None
        self.install: Callable[[Any, OpEntry], None] | None = None
        # Whether an in-place op on this type under an execution mask can change only the
        # running examples (``matchbox._masked_writes``: a MaskedBatch's data and mask).
        self.masked_writes = name == "MaskedBatch"


_KINDS: dict[str, Kind] = {}
# The classes registered as batch types (views excluded), for isinstance checks.
_BATCH_TYPES: tuple[type, ...] = ()


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
    if module == "torch._C._nn" and name in _RNN_UTILITIES:
        return f"torch.nn.utils.rnn.{name}"  # called by that function, of that name
    if module.startswith("torch.nn.functional") or module == "torch._C._nn":
        return f"torch.nn.functional.{name}"
    namespace = _NAMESPACES.get(module)
    if namespace is not None:
        # A C function of torch.special is named special_digamma: the prefix goes.
        prefix = namespace.rsplit(".", 1)[1] + "_"
        return f"{namespace}.{name[len(prefix):] if name.startswith(prefix) else name}"
    if module in _PYTHON_NAMESPACES:
        return f"{module}.{name}"
    if module.startswith("torch.") and not module.startswith("torch._") and (
            module not in _TOP_LEVEL_MODULES):
        return f"{module}.{name}"  # torch.autograd.grad, not torch.grad
    if getattr(torch.Tensor, name, None) is func:
        return f"Tensor.{name}"
    return f"torch.{name}"


# The modules of torch's namespaces of functions, as their C functions report them.
_NAMESPACES = {f"torch._C._{n}": f"torch.{n}" for n in ("special", "linalg", "fft", "nested")}
_PYTHON_NAMESPACES = {"torch.special", "torch.linalg", "torch.fft"}
# C functions of ``torch._C._nn`` that torch offers in ``torch.nn.utils.rnn``.
_RNN_UTILITIES = {"pad_sequence"}
# Modules whose functions torch offers as ``torch.<name>`` (``torch.functional.einsum``).
_TOP_LEVEL_MODULES = {"torch.functional", "torch.random", "torch.serialization"}


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


# In-place methods that change no value (flags, storage).
_NOT_VALUE_WRITES = frozenset({"requires_grad_", "share_memory_", "detach_", "retain_grad_"})


def writes_values(func: Any) -> bool:
    """Whether ``func`` writes values into its first argument: :func:`writes_first_argument`
    but for the in-place methods that set a flag (``requires_grad_``, ``detach_``)."""
    return writes_first_argument(func) and getattr(func, "__name__", "") not in _NOT_VALUE_WRITES


# ---------------------------------------------------------------------------- registering


def implements(
    *funcs: Any, family: str, batch_type: str = "MaskedBatch",
    fast_path: Callable[..., Any] | None = None,
) -> Callable[[Handler], Handler]:
    """Register the decorated handler for every callable in ``funcs``.

    ``batch_type="Batch"`` registers a rule for every batch type that shares rules
    (see the module docstring); a batch type's own handler for the op wins.
    ``fast_path``: see :func:`register`.
    """

    def decorator(handler: Handler) -> Handler:
        register(funcs, handler, family=family, batch_type=batch_type, fast_path=fast_path)
        return handler

    return decorator


def register(
    funcs: Iterable[Any], handler: Handler, *, family: str, batch_type: str = "MaskedBatch",
    fast_path: Callable[..., Any] | None = None,
) -> None:
    """Register ``handler`` for every callable in ``funcs`` (``None`` entries are skipped:
    callables missing from the installed torch).

    ``fast_path(func)`` may give, for a ``Tensor`` method, a function
    ``fast(func, self, args)`` that takes the plainest calls of the method itself
    (``None`` when it has none for ``func``); ``matchbox._methods`` says what
    it may assume and what the registry checks before it runs.  ``fast_path=DIRECT``:
    the handler itself, called with the method's positional arguments.
    """
    for func in funcs:
        if func is None:
            continue
        entry = _TABLE[(batch_type, func)] = OpEntry(func, handler, family, batch_type,
                                                     fast_path)
        if batch_type == "Batch":
            for kind in _KINDS.values():
                if not kind.view and (kind.name, func) not in _TABLE:
                    _route(kind, entry)
        else:
            kind = _KINDS.get(batch_type)
            if kind is not None:
                _route(kind, entry)


def _route(kind: Kind, entry: OpEntry) -> None:
    """Make ``kind`` run ``entry``'s handler for its op (and give it the op's methods)."""
    func = entry.func
    # Bound on the first call; the last item: whether the op writes values into its
    # first argument (the dispatch runs it for the running examples only under a mask).
    kind.routes[func] = (entry.handler, -1, frozenset(), writes_values(func))
    kind.bindings.pop(func, None)
    if kind.install is not None:
        kind.install(func, entry)


def add_kind(kind: Kind) -> None:
    """Make ``kind`` a batch type: route every op registered for it (and, unless it is a
    view, the rules shared by every batch type) to it."""
    global _BATCH_TYPES
    _KINDS[kind.name] = kind
    if not kind.view:
        _BATCH_TYPES = (*_BATCH_TYPES, kind.cls)
    for (bt, func), entry in list(_TABLE.items()):
        if bt == kind.name or (bt == "Batch" and not kind.view
                               and (kind.name, func) not in _TABLE):
            _route(kind, entry)


def kind_of(batch_type: str) -> Kind:
    """The registered batch type named ``batch_type``."""
    return _KINDS[batch_type]


def kind_of_class(cls: type) -> Kind | None:
    """The batch type ``cls`` is (or is a subclass of), if any."""
    return _KIND_OF[cls]


class _KindOfClass(dict):  # type -> Kind, computed for subclasses on first use
    def __missing__(self, cls: type) -> Kind | None:
        found = next((k for k in _KINDS.values() if issubclass(cls, k.cls)), None)
        self[cls] = found
        return found


_KIND_OF: dict[type, Kind | None] = _KindOfClass()


def lookup(func: Any, batch_type: str = "MaskedBatch") -> Handler | None:
    """The handler ``batch_type`` runs for ``func`` (its own or a shared one), if any."""
    kind = _KINDS.get(batch_type)
    if kind is not None:
        route = kind.routes.get(func)
        return None if route is None else route[0]
    entry = _TABLE.get((batch_type, func)) or _TABLE.get(("Batch", func))
    return None if entry is None else entry.handler


def entries(batch_type: str = "MaskedBatch") -> list[OpEntry]:
    """Every op a batch type runs (its own and the shared rules), sorted by family and name."""
    kind = _KINDS.get(batch_type)
    rows = [e for (bt, _), e in _TABLE.items() if bt == batch_type]
    if kind is not None and not kind.view:
        rows += [e for (bt, func), e in _TABLE.items()
                 if bt == "Batch" and (batch_type, func) not in _TABLE]
    return sorted(rows, key=lambda e: (e.family, e.name))


def batch_type_names() -> list[str]:
    """The registered batch types' names (views included), in registration order."""
    return list(_KINDS)


def batch_types() -> tuple[type, ...]:
    """Every class registered as a batch type (``MaskedBatch``, ``PackedBatch``, ...)."""
    return _BATCH_TYPES


# ---------------------------------------------------------------------------- documentation

_CONVENIENCE: list[str] = []


def declare_convenience(names: list[str]) -> None:
    """Record Matchbox's own methods (not torch ops) for the op documentation."""
    _CONVENIENCE[:] = names


def convenience_methods() -> list[str]:
    return list(_CONVENIENCE)
