"""How a call reaches its handler: bound to the torch callable's own signature.

One handler serves several torch callables (``F.softmax``, ``torch.softmax``,
``Tensor.softmax``), whose parameters come in different orders and under
different names: ``Tensor.softmax(dim, dtype)`` takes ``dtype`` second where
``F.softmax(input, dim, _stacklevel, dtype)`` takes ``_stacklevel``;
``Tensor.split(split_size)`` is ``torch.split(split_size_or_sections)``;
``Tensor.view(size=...)`` fills the ``*shape`` of its handler.  The registry
therefore binds every call to the signature of the callable that was invoked and
hands the handler its arguments by the handler's own names, as PyTorch's jagged
tensors do with ``normalize_function``.

The binding is worked out once per (callable, handler) pair, on the callable's
first call (:func:`binding_for`), and costs nothing on the common path: a call
whose positional arguments line up with the handler's parameters and whose
keywords are names the handler takes (:attr:`Binding.prefix`,
:attr:`Binding.keywords`) goes to the handler as it is; only the others are
rebound (:meth:`Binding.bind`).

Where a callable's signature comes from (:func:`callable_signatures`):

| callable                                   | signature                                            |
|--------------------------------------------|------------------------------------------------------|
| written in Python (``F.softmax``, ``Tensor.split``) | ``inspect.signature``                        |
| a torch function in C (``torch.softmax``, ``F.linear``) | its ATen schemas (``torch.fx.operator_schemas``) |
| a ``Tensor`` method in C (``Tensor.softmax``) | the ATen schemas of its name (``torch._C``)          |
| operators, casts, ``boolean_dispatch`` functions | none known: calls go to the handler as they are |

Overloads are merged: a position whose name differs between overloads
(``Tensor.max(dim)`` / ``Tensor.max(other)``) passes through positionally, and the
handler tells the overloads apart as torch does, by the values.  ``out=`` variants
are left out (batches refuse ``out=``; the handlers that take it say so).
NumPy's spellings that torch accepts (``axis=``, ``keepdims=``) are read as
torch's (``dim``, ``keepdim``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

# Keyword spellings torch accepts for NumPy's sake, as the names handlers use.
KEYWORD_ALIASES = {"axis": "dim", "keepdims": "keepdim"}

_EMPTY = inspect.Parameter.empty
# A Binding's prefix when every positional argument passes to the handler as it is.
EVERY_POSITION = 1 << 30
_VAR_POSITIONAL = inspect.Parameter.VAR_POSITIONAL
_VAR_KEYWORD = inspect.Parameter.VAR_KEYWORD
_KEYWORD_ONLY = inspect.Parameter.KEYWORD_ONLY
_POSITIONAL_ONLY = inspect.Parameter.POSITIONAL_ONLY


class Parameters:
    """What is known of a callable's parameters, its overloads merged.

    ``positions[i]``: the names position ``i`` has in the overloads;
    ``position_of[name]``: the positions a name has; ``keyword_only``: names that
    are keyword-only in every overload; ``defaults``: default values (of the first
    overload that has one); ``open_tail``: the callable takes ``*args`` (positions
    beyond ``positions`` are not known).
    """

    __slots__ = ("positions", "position_of", "keyword_only", "defaults", "open_tail")

    def __init__(self, overloads: Sequence[Sequence[tuple[str, Any, Any]]]):
        positions: list[set[str]] = []
        position_of: dict[str, set[int]] = {}
        keyword_only: set[str] = set()
        positional_somewhere: set[str] = set()
        defaults: dict[str, Any] = {}
        open_tail = False
        for overload in overloads:
            i = 0
            for name, kind, default in overload:
                if kind is _VAR_POSITIONAL:
                    open_tail = True
                    continue
                if kind is _VAR_KEYWORD:
                    continue
                if default is not _EMPTY:
                    defaults.setdefault(name, default)
                if kind is _KEYWORD_ONLY:
                    keyword_only.add(name)
                    continue
                while len(positions) <= i:
                    positions.append(set())
                positions[i].add(name)
                position_of.setdefault(name, set()).add(i)
                positional_somewhere.add(name)
                i += 1
        self.positions = [frozenset(p) for p in positions]
        self.position_of = {n: frozenset(p) for n, p in position_of.items()}
        self.keyword_only = frozenset(keyword_only - positional_somewhere)
        self.defaults = defaults
        self.open_tail = open_tail

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self.position_of) | self.keyword_only


class _AnyKeyword:
    """The keyword names a handler taking ``**kwargs`` accepts as they are: any but
    NumPy's spellings, which are renamed first."""

    __slots__ = ()

    def issuperset(self, names: Iterable[str]) -> bool:
        return not any(name in KEYWORD_ALIASES for name in names)

    def __contains__(self, name: str) -> bool:
        return name not in KEYWORD_ALIASES


ANY_KEYWORD = _AnyKeyword()


class Binding:
    """How calls of one callable reach one handler.

    ``prefix``: how many positional arguments go to the handler as they are;
    ``keywords``: the keyword names that do.  A call within both is not touched;
    any other is rebound with :meth:`bind`.  ``targets`` maps each parameter name
    of the callable to the handler's: ``("name", handler_name)`` or
    ``("position", index)`` (a value for the handler's ``*args`` at that index,
    ``Tensor.view(size=...)`` for ``view(func, input, *shape)``);
    ``unmapped`` lists the callable's names the handler cannot take (a test
    checks that every registered pair has none).
    """

    __slots__ = ("op", "prefix", "keywords", "targets", "unmapped", "known", "_positions",
                 "_handler_positional", "_handler_keywords", "_handler_defaults", "_var_index")

    def __init__(self, op: str, callable_parameters: Parameters | None, handler: Callable[..., Any]):
        self.op = op
        handler_parameters = list(inspect.signature(handler).parameters.values())[1:]  # func
        positional: list[str] = []
        var_index: int | None = None
        accepts_any_keyword = False
        keywords: set[str] = set()
        defaults: dict[str, Any] = {}
        for parameter in handler_parameters:
            if parameter.kind is _VAR_POSITIONAL:
                var_index = len(positional)
            elif parameter.kind is _VAR_KEYWORD:
                accepts_any_keyword = True
            else:
                if parameter.kind is not _KEYWORD_ONLY and var_index is None:
                    positional.append(parameter.name)
                if parameter.kind is not _POSITIONAL_ONLY:
                    keywords.add(parameter.name)
                if parameter.default is not _EMPTY:
                    defaults[parameter.name] = parameter.default
        self._handler_positional = positional
        self._handler_keywords = frozenset(keywords)
        self._handler_defaults = defaults
        self._var_index = var_index
        self.keywords: Any = ANY_KEYWORD if accepts_any_keyword else frozenset(keywords)
        self.known = callable_parameters is not None
        if callable_parameters is None:
            # Nothing known of the callable: calls go to the handler as they are.
            self.prefix = EVERY_POSITION
            self.targets: dict[str, tuple[str, Any]] = {}
            self.unmapped: list[str] = []
            self._positions: list[frozenset[str]] = []
            return
        names = callable_parameters.names
        targets = {}
        unmapped = []
        for name in sorted(names):
            target = self._target(name, names, callable_parameters, accepts_any_keyword)
            if target is None:
                unmapped.append(name)
            else:
                targets[name] = target
        self.targets = targets
        self.unmapped = unmapped
        self._positions = callable_parameters.positions
        self.prefix = self._passable_prefix(callable_parameters)

    def _target(self, name: str, names: frozenset[str], parameters: Parameters,
                accepts_any_keyword: bool) -> tuple[str, Any] | None:
        if name in self._handler_keywords:
            return ("name", name)
        places = parameters.position_of.get(name, frozenset())
        if len(places) == 1:
            (place,) = places
            positional = self._handler_positional
            if place < len(positional) and positional[place] not in names:
                return ("name", positional[place])  # the same parameter under another name
            if accepts_any_keyword:
                return ("name", name)
            if place == self._var_index:
                return ("position", place)
        elif accepts_any_keyword:
            return ("name", name)
        return None

    def _passable_prefix(self, parameters: Parameters) -> int:
        """How many positional arguments reach the handler's parameter of the same name
        when passed as they are."""
        positional = self._handler_positional
        var_index = self._var_index
        for i, names in enumerate(parameters.positions):
            if var_index is not None and i >= var_index:
                return EVERY_POSITION  # the rest fills the handler's *args in order
            if i >= len(positional):
                return i
            if not any(self.targets.get(n) == ("name", positional[i]) for n in names):
                return i
        if var_index is None and not parameters.open_tail:
            return max(len(parameters.positions), len(positional))
        return EVERY_POSITION

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]
             ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``args`` and ``kwargs`` of a call as the handler's arguments."""
        prefix = self.prefix
        out = list(args[:prefix])
        named: dict[str, Any] = {}
        slots: dict[int, Any] = {}
        targets = self.targets
        positions = self._positions
        for i in range(prefix, len(args)):
            choices = {targets[n] for n in positions[i] if n in targets} if i < len(positions) \
                else set()
            if len(choices) == 1:
                self._place(choices.pop(), args[i], named, slots)
            elif not named and not slots and len(out) == i:
                out.append(args[i])  # overloads disagree here: positional, as given
            else:
                raise TypeError(f"{self.op}: cannot tell which parameter positional argument "
                                f"{i} is")
        for name, value in kwargs.items():
            if name not in targets:
                name = KEYWORD_ALIASES.get(name, name)
            target = targets.get(name)
            if target is None:
                if name in named:
                    raise TypeError(f"{self.op}: got multiple values for argument '{name}'")
                named[name] = value  # not a parameter of the callable: the handler decides
            else:
                self._place(target, value, named, slots)
        if slots:
            self._fill_to(out, max(slots), named, slots)
        for name in named:
            position = self._handler_index(name)
            if position is not None and position < len(out):
                raise TypeError(f"{self.op}: got multiple values for argument '{name}'")
        return tuple(out), named

    def _place(self, target: tuple[str, Any], value: Any, named: dict[str, Any],
               slots: dict[int, Any]) -> None:
        kind, where = target
        if kind == "name":
            if where in named:
                raise TypeError(f"{self.op}: got multiple values for argument '{where}'")
            named[where] = value
        else:
            slots[where] = value

    def _fill_to(self, out: list[Any], last: int, named: dict[str, Any],
                 slots: dict[int, Any]) -> None:
        """Extend ``out`` to position ``last`` (a value for the handler's ``*args``):
        the handler's named parameters before it from ``named`` or their defaults."""
        positional = self._handler_positional
        for j in range(len(out), last + 1):
            if j in slots:
                out.append(slots[j])
            elif j < len(positional) and positional[j] in named:
                out.append(named.pop(positional[j]))
            elif j < len(positional) and positional[j] in self._handler_defaults:
                out.append(self._handler_defaults[positional[j]])
            else:
                what = positional[j] if j < len(positional) else f"argument {j}"
                raise TypeError(f"{self.op}: missing a value for {what}")

    def _handler_index(self, name: str) -> int | None:
        try:
            return self._handler_positional.index(name)
        except ValueError:
            return None


# ---------------------------------------------------------------------------- signatures


Overload = list[tuple[str, Any, Any]]  # (name, inspect.Parameter kind, default or empty)


def callable_signatures(func: Any) -> list[Overload] | None:
    """The parameters of ``func``'s overloads as Python sees them; ``None`` if unknown."""
    if inspect.isfunction(func):
        try:
            signature = inspect.signature(func)
        except ValueError:  # a wrapper of a C function (Tensor.__rpow__)
            signature = None
        if signature is not None:
            kinds = {p.kind for p in signature.parameters.values()}
            if kinds <= {_VAR_POSITIONAL, _VAR_KEYWORD}:
                return None  # a dispatcher (F.max_pool1d's boolean_dispatch): nothing known
            return [[(p.name, p.kind, p.default) for p in signature.parameters.values()]]
    schemas = _schemas(func)
    if not schemas:
        return None
    return [_signature(schema) for schema in schemas]


def _schemas(func: Any) -> list[Any]:
    """The ATen schemas of a torch callable written in C (``out=`` variants and overloads
    that take no tensor first left out)."""
    schemas: list[Any] = []
    name = getattr(func, "__name__", None)
    if name is None or name.startswith("__"):
        return []  # operators: called positionally, by Python
    if getattr(torch.Tensor, name, None) is func or getattr(func, "__objclass__", None) in (
            torch.Tensor, torch._C.TensorBase):
        try:
            schemas = list(torch._C._jit_get_schemas_for_operator(f"aten::{name}"))
        except RuntimeError:
            schemas = []
    else:
        try:
            from torch.fx.operator_schemas import get_signature_for_torch_op

            found = get_signature_for_torch_op(func, return_schemas=True)
            schemas = list(found[1] or []) if isinstance(found, tuple) else []
        except Exception:  # noqa: BLE001  (no schema known for it: nothing to bind)
            schemas = []
    return [s for s in schemas if _takes_a_tensor_first(s) and not _writes_out(s)
            and not _names_dimensions(s) and _reaches_python(s)]


def _names_dimensions(schema: Any) -> bool:
    """Whether the overload is one of named tensors' (``flatten.DimnameList``,
    ``flatten.named_out_dim``, ``diagonal.Dimname``): a batch has no dimension names.
    Torch 2.3 still lists them, with ``Dimname`` shown as ``str``, so the overload's
    name tells them apart."""
    name = schema.overload_name
    return "Dimname" in name or "names" in name or name.startswith("named")


def _reaches_python(schema: Any) -> bool:
    """Whether PyTorch's dispatcher has the overload (TorchScript's own overloads, such as
    ``copy_.Tensor(self, other)`` or ``sort.int(self, reverse)``, have no Python spelling)."""
    find = getattr(torch._C, "_dispatch_find_schema_or_throw", None)
    if find is None:
        return True
    try:
        find(schema.name, schema.overload_name)
    except RuntimeError:
        return False
    return True


def _takes_a_tensor_first(schema: Any) -> bool:
    if not schema.arguments:
        return False
    kind = str(schema.arguments[0].type)
    return kind.startswith("Tensor") or kind.startswith("List[Tensor")


def _writes_out(schema: Any) -> bool:
    for argument in schema.arguments:
        alias = argument.alias_info
        if argument.kwarg_only and alias is not None and alias.is_write:
            return True
    return False


def _signature(schema: Any) -> Overload:
    parameters = []
    for k, argument in enumerate(schema.arguments):
        name = "input" if k == 0 and argument.name == "self" else argument.name
        kind = _KEYWORD_ONLY if argument.kwarg_only else inspect.Parameter.POSITIONAL_OR_KEYWORD
        default = argument.default_value if argument.has_default_value() else _EMPTY
        parameters.append((name, kind, default))
    return parameters


_PARAMETERS: dict[Any, Parameters | None] = {}


def parameters_of(func: Any) -> Parameters | None:
    """``func``'s merged :class:`Parameters` (``None`` if unknown), worked out once."""
    try:
        return _PARAMETERS[func]
    except KeyError:
        pass
    except TypeError:  # unhashable
        signatures = callable_signatures(func)
        return None if signatures is None else Parameters(signatures)
    signatures = callable_signatures(func)
    found = _PARAMETERS[func] = None if signatures is None else Parameters(signatures)
    return found


def binding_for(op: str, func: Any, handler: Callable[..., Any]) -> Binding:
    """The :class:`Binding` of calls of ``func`` to ``handler`` (``op``: its name, for errors)."""
    return Binding(op, parameters_of(func), handler)
