"""The Python state a captured graph freezes, and the effects it cannot replay.

A graph is made of tensor ops; the Python values a call reads while it is
captured (a module's ``training`` flag, a dropout's ``p``, a temperature kept
as an attribute) are baked into it.  :func:`module_key` makes them part of
the specialisation's key, so that changing one captures a new graph, as
``torch.compile``'s guards do; :func:`globals_key` does the same for the plain
globals and closed-over values that the compiled function (or the methods of the
module's own classes) reads, and that the user's functions it names read in turn.
A value reached through an attribute (``config.SCALE``) is not seen (see
``docs/compile.md``).

A graph also cannot replay what a call does to Python objects: an attribute
set in ``forward`` (attention weights kept for inspection), a counter, a hook
that runs.  While capturing, such an attribute would hold fake tensors, and a
hook would run once for many calls; :func:`watch_effects` refuses the
capture instead (the call then runs eagerly) and puts the attributes back.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import inspect
import types
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from matchbox._capture import NotCapturable
from matchbox.compiler.structure import own_tensors

if TYPE_CHECKING:
    from matchbox.compiler.graph import Specialization

_PLAIN = (bool, int, float, complex, str, bytes, type(None), torch.dtype, torch.device)
# Functions keyed by identity (a module's ``self.activation = F.relu``, a global
# ``ACT = torch.tanh``): the graph holds the ops of the one it was captured with.
_FUNCTIONS = (types.FunctionType, types.BuiltinFunctionType, types.MethodType,
              functools.partial)
_MISSING = object()
# Containers of plain values keyed by their items (a module's ``self.scales = (1.0, 2.0)``,
# a global list of flags), up to this many items in all: a larger one (a vocabulary) is not.
_MOST_ITEMS = 64


def plain_value(value: Any) -> Any:
    """``value`` as a key if it is plain (a number, string, flag, an enum member, a
    function, by identity) or a tuple, list, dict or dataclass instance of such (by their
    items or fields, as they are now: a list changed in place, a config's field set, is
    another key), else ``_MISSING``."""
    budget = [_MOST_ITEMS]

    def frozen(v: Any) -> Any:
        if type(v) in _PLAIN or isinstance(v, enum.Enum):
            return v
        if isinstance(v, _FUNCTIONS):
            return ("function", _Identity(v))
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            fields = [(f.name, getattr(v, f.name)) for f in dataclasses.fields(v)]
            budget[0] -= len(fields)
            if budget[0] < 0:
                return _MISSING
            parts = tuple((name, frozen(item)) for name, item in fields)
            if any(part is _MISSING for _, part in parts):
                return _MISSING
            return (type(v), parts)
        if type(v) not in (tuple, list, dict):
            return _MISSING
        budget[0] -= len(v)
        if budget[0] < 0:
            return _MISSING
        items = list(v.items()) if type(v) is dict else list(enumerate(v))
        parts = []
        for k, item in items:
            key, part = frozen(k), frozen(item)
            if key is _MISSING or part is _MISSING:
                return _MISSING
            parts.append((key, part))
        return (type(v).__name__, tuple(parts))

    return frozen(value)


class _Identity:
    """A key equal to another only for the same object (a ``functools.partial`` or a bound
    method compares by value, or not at all)."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Identity) and (
            other.value is self.value or (isinstance(self.value, types.MethodType)
                                          and other.value == self.value))

    def __hash__(self) -> int:
        if isinstance(self.value, types.MethodType):
            return hash((id(self.value.__self__), id(self.value.__func__)))
        return id(self.value)

    def __repr__(self) -> str:
        return getattr(self.value, "__qualname__", repr(self.value))


def module_key(module: nn.Module) -> tuple[Any, ...]:
    """What a graph of ``module`` depends on besides tensors: every submodule's
    ``training`` flag and plain attributes (numbers, strings, flags), and the names of
    the parameters and buffers in the order the graph takes them."""
    parts = []
    for name, sub in module.named_modules(remove_duplicate=False):
        attributes = tuple(sorted((k, v) for k, v in (
            (k, plain_value(v)) for k, v in vars(sub).items() if not k.startswith("_"))
            if v is not _MISSING))
        parts.append((name, sub.training, attributes))
    names = tuple(n for n, _ in module.named_parameters()) + tuple(
        n for n, _ in module.named_buffers())
    return tuple(parts), names


def globals_key(functions: list[Any]) -> tuple[Any, ...]:
    """The plain values (numbers, strings, flags) of the globals and closed-over variables
    that ``functions`` read (``SCALE = 0.5`` at the top of the file), and that the user's
    functions they name read in turn: frozen into a graph when it is captured, so a change
    must capture a new one.  Not seen: a value reached through an attribute
    (``config.SCALE``) or an object's method other than a module's own."""
    parts: list[Any] = []
    seen: set[types.CodeType] = set()
    todo = list(functions)
    while todo:
        fn = inspect.unwrap(todo.pop())  # @batch's rewritten function -> the user's
        code = getattr(fn, "__code__", None)
        if code is None or code in seen:
            continue
        seen.add(code)
        for name, value in _reads(fn, code):
            if _is_users_function(value):
                todo.append(value)  # what it reads, and which function it is
            if (key := plain_value(value)) is not _MISSING:
                parts.append((name, key))
    return tuple(parts)


def _reads(fn: types.FunctionType, code: types.CodeType) -> Iterator[tuple[str, Any]]:
    """The globals ``fn`` may read and its closed-over variables, with their values now."""
    module_globals = fn.__globals__
    for name in _global_names(code):
        value = module_globals.get(name, _MISSING)
        if value is not _MISSING:
            yield name, value
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            yield name, cell.cell_contents
        except ValueError:  # a variable not yet assigned
            continue


def _is_users_function(value: Any) -> bool:
    return isinstance(value, types.FunctionType) and not _from_library(value.__module__)


def _from_library(module_name: str | None) -> bool:
    """Whether code of the module ``module_name`` is PyTorch's or Matchbox's (which read no
    global a user changes); by the top-level package, so a user's ``torch_models`` is not."""
    return (module_name or "").partition(".")[0] in ("torch", "matchbox", "builtins")


@functools.cache
def _global_names(code: types.CodeType) -> tuple[str, ...]:
    """Names ``code`` may read as globals, its nested code (comprehensions, lambdas) too;
    attribute names are among them, which can only add to the key."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names.update(_global_names(const))
    return tuple(sorted(names))


def module_functions(module: nn.Module) -> list[Any]:
    """The functions of the module's and its submodules' classes that are the user's own
    (``forward`` and the methods it calls on ``self``); PyTorch's layers read no globals a
    user changes."""
    functions: list[Any] = []
    seen: set[type] = set()
    for sub in module.modules():
        for kind in type(sub).__mro__:
            if kind in seen or _from_library(kind.__module__):
                continue
            seen.add(kind)
            functions += [v for v in vars(kind).values() if isinstance(v, types.FunctionType)]
    return functions


def call_refusing_rebinds(module: nn.Module, names: list[str], params: list[torch.Tensor],
                          args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``module(*args, **kwargs)`` with ``params`` for its parameters and buffers (named
    ``names``), as ``torch.func.functional_call`` does, refusing a call that assigns one
    of them a new tensor (``self.steps = self.steps + 1``): ``functional_call`` puts the
    module's own back after the call, and a graph replays the read of the new tensor but
    not the assignment, so every later call started from the old buffer again (a silent
    wrong answer; an update in place, ``self.steps += 1``, is an input the graph changes)."""
    return torch.func.functional_call(_Rebinds(module), {
        f"inner.{n}": p for n, p in zip(names, params)}, (dict(zip(names, params)), args, kwargs))


class _Rebinds(nn.Module):
    def __init__(self, module: nn.Module):
        super().__init__()
        self.inner = module

    def forward(self, passed: dict[str, torch.Tensor], args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> Any:
        result = self.inner(*args, **kwargs)
        now = dict(self.inner.named_parameters())
        now.update(self.inner.named_buffers())
        for name, tensor in passed.items():
            if now.get(name) is not tensor:
                what = "buffer" if name in dict(self.inner.named_buffers()) else "parameter"
                where = name if "." in name else f"self.{name}"
                raise NotCapturable(
                    f"the call assigns the {what} {where} a new tensor ({where} = ...): a "
                    "graph replays the call's tensor ops, not the assignment, so every call "
                    f"would start from the old {what} again; update it in place "
                    f"({where} += ..., {where}.copy_(...))")
        return result


@contextlib.contextmanager
def watch_effects(module: nn.Module | None) -> Iterator[None]:
    """Refuse a capture that changes a module's attributes or runs a hook."""
    if module is None:
        yield
        return
    _refuse_hooks(module)
    before = {id(sub): dict(vars(sub)) for sub in module.modules()}
    try:
        yield
    finally:
        changed = _restore(module, before)
    if changed:
        raise NotCapturable(
            f"the call sets {', '.join(changed)}: a graph cannot replay what a call does "
            "to Python objects (only its tensor ops), so the attribute would hold the "
            "capture's fake tensors or be set once for every call")


def _restore(module: nn.Module, before: dict[int, dict[str, Any]]) -> list[str]:
    """Put back every attribute the capture changed; the names of those changed."""
    changed = []
    for name, sub in module.named_modules():
        old = before.get(id(sub))
        if old is None:
            continue
        now = vars(sub)
        torch_owned = type(sub).__module__.startswith("torch.")
        for key in set(old) | set(now):
            if key in ("_parameters", "_buffers", "_modules") or (
                    torch_owned and key.startswith("_")):
                # functional_call swaps tensors in and back itself (nn.RNN's flat
                # weights follow it): torch's own bookkeeping, not the user's state.
                continue
            if key not in now or key not in old or now[key] is not old[key]:
                changed.append(f"{(name + '.') if name else 'self.'}{key}")
                if key in old:
                    now[key] = old[key]
                else:
                    del now[key]
    return sorted(changed)


def _refuse_hooks(module: nn.Module) -> None:
    from torch.nn.modules import module as module_module

    global_hooks = [getattr(module_module, n, None) for n in
                    ("_global_forward_hooks", "_global_forward_pre_hooks")]
    if any(global_hooks):
        raise NotCapturable("global forward hooks are registered (nn.modules.module."
                            "register_module_forward_hook): a graph runs no hooks")
    for name, sub in module.named_modules():
        if sub._forward_hooks or sub._forward_pre_hooks:
            raise NotCapturable(f"{name or 'the module'} has forward hooks: a graph runs no "
                                "hooks (they would run once, while it is captured)")


def torch_state_key() -> tuple[Any, ...]:
    """PyTorch's global settings a graph freezes: whether autocast is on, per device, and
    its dtypes (a graph captured under autocast holds its casts); the default dtype (a
    ``torch.tensor([1.0])`` made in the call is a constant of the graph); deterministic
    algorithms and float32 matmul precision (code may read them, and inductor does)."""
    settings = (torch.get_default_dtype(), torch.are_deterministic_algorithms_enabled(),
                torch.is_deterministic_algorithms_warn_only_enabled(),
                torch.get_float32_matmul_precision())
    try:
        return settings + tuple((d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d))
                                for d in ("cpu", "cuda"))
    except TypeError:  # torch 2.3: the per-device functions of the time
        return settings + (torch.is_autocast_enabled(), torch.is_autocast_cpu_enabled(),
                           torch.get_autocast_gpu_dtype(), torch.get_autocast_cpu_dtype())


# ---------------------------------------------------------------------- in-place updates

def copied_because(spec: Specialization, n_params: int, tensors: list[torch.Tensor],
                   arguments: Any) -> str | None:
    """Why the call cannot run on the graph, which gets a batch argument as a copy (padded
    to the bucket): the call changes it in place, or its result is the argument or a view
    of one (eagerly the result shares the argument's data: a write into one is seen in the
    other; the graph's result would be a view of the copy).  ``None``: it can."""
    own = own_tensors(arguments)

    def copied(positions: tuple[int, ...]) -> bool:
        return any(i >= n_params and id(tensors[i - n_params]) not in own for i in positions)

    if copied(spec.mutated):
        return ("it changes a batch argument in place, and the graph would get it padded to "
                "the bucket (a copy the change would not leave); compile with bucket=None, or "
                "make the change out of place")
    if copied(spec.aliased):
        return ("its result is a batch argument or a view of one (return x, x[:, :2]), and "
                "the graph would get the argument padded to the bucket (a copy: the result "
                "would not share the argument's data, as it does eagerly); compile with "
                "bucket=None, or return a copy (x.clone())")
    return None


def before_run(spec: Specialization, inputs: list[torch.Tensor]
               ) -> list[tuple[torch.Tensor, int, torch.Tensor | None]]:
    """The tensors the run will change in place, their versions, and (when a run may be
    discarded, see the flags) copies to put back."""
    if not spec.mutated:
        return []
    keep = spec.has_flags
    return [(inputs[i], inputs[i]._version, inputs[i].detach().clone() if keep else None)
            for i in spec.mutated]


def restore(kept: list[tuple[torch.Tensor, int, torch.Tensor | None]]) -> None:
    """Puts back the tensors a discarded run changed in place (see :func:`before_run`)."""
    with torch.no_grad():
        for tensor, _, copy in kept:
            if copy is not None:
                tensor.copy_(copy)
