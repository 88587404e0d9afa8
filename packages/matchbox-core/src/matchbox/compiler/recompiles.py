"""The recompile limit: how many graphs one compiled model captures, and what changed.

Every value a graph freezes is part of its key (``compiler/state.py``), so a value that
changes at every call (a global list the training loop appends to, a float argument)
captures and compiles a graph at every call: seconds each, silently.  As
``torch.compile``'s ``recompile_limit`` does, a compiled model captures at most
``recompile_limit`` graphs (``matchbox.compile(..., recompile_limit=8)``); a call that
needs one more runs eagerly (its values are eager Matchbox's), with one warning that names
what its key changed from the last graph's (a global, a module's attribute, an argument's
size or value).  The graphs compiled before keep running for the calls that fit them.
"""

from __future__ import annotations

import warnings
from typing import Any

from matchbox.compiler import graph as _graph
from matchbox.compiler.graph import CaptureError, Specialization

#: How many graphs a compiled model captures before new specialisations run eagerly.
RECOMPILE_LIMIT = 8

_PARTS = ("the arguments' structure", "the parameters' dtypes, devices or requires_grad",
          "the arguments' tensors", "grad mode",
          "PyTorch's settings (autocast, the default dtype, deterministic algorithms, "
          "float32 matmul precision)", None, "which arguments are one tensor")
_FIELDS = ("size", "dtype", "device", "requires_grad")


def check_limit(limit: Any) -> None:
    if limit is None or (isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0):
        return
    raise ValueError(f"matchbox.compile: recompile_limit must be an int >= 0 (how many graphs "
                     f"to capture before calls that need another run eagerly) or None (no "
                     f"limit), got {limit!r}")


class RecompileLimit:
    """Counts a compiled model's captures; past the limit, refuses new ones."""

    def __init__(self, limit: int | None, name: str, fallback: str, module: bool):
        self.limit = limit
        self.name = name
        self.fallback = fallback
        self.module = module  # whether keys hold a module's state (else a function's)
        self.last_key: tuple[Any, ...] | None = None
        self.eager: Specialization | None = None

    def captured(self, key: tuple[Any, ...]) -> None:
        self.last_key = key

    def reached(self, graphs: dict[tuple[Any, ...], Specialization]) -> bool:
        return self.limit is not None and len(graphs) >= self.limit

    def refuse(self, key: tuple[Any, ...]) -> Specialization:
        """The specialisation that runs, eagerly, every call past the limit (warned once;
        ``fallback="raise"``: :class:`CaptureError`)."""
        if self.eager is not None:
            return self.eager
        change = "nothing" if self.last_key is None else describe_change(
            self.last_key, key, self.module)
        message = (f"matchbox.compile({self.name}): recompile_limit={self.limit} reached "
                   f"({self.limit} graphs captured): calls that need a new graph run eagerly "
                   f"from now on (those compiled still run); this call's key differs from the "
                   f"last graph's in {change}. A value that changes at every call (a global "
                   "list appended to, a float argument, a size bucket= does not round) "
                   "captures a graph each time: pass it as a tensor argument, or raise "
                   "recompile_limit (None: no limit)")
        if self.fallback == "raise":
            raise CaptureError(message)
        filename, line = _graph.user_frame()
        warnings.warn_explicit(message, UserWarning, filename, line)
        self.eager = Specialization(summary="(past recompile_limit)", bound=0,
                                    eager_reason=f"recompile_limit={self.limit} reached")
        return self.eager


def describe_change(old: tuple[Any, ...], new: tuple[Any, ...], module: bool) -> str:
    """What differs between two keys (``_Specializations.__call__``'s), in words."""
    changes: list[str] = []
    for i, (a, b) in enumerate(zip(old, new)):
        if a == b:
            continue
        if i == 0:
            changes.append(_structure_change(a, b))
        elif i == 2:
            changes.append(_tensors_change(a, b))
        elif i == 5:
            changes += _extra_changes(a, b, module)
        else:
            changes.append(_PARTS[i])
    return "; ".join(changes) or "nothing"


def _structure_change(old: Any, new: Any) -> str:
    """The first plain argument value that differs, else the structure."""
    if (isinstance(old, tuple) and isinstance(new, tuple) and len(old) == len(new)
            and old[:1] == new[:1]):
        if old[0] == "value":
            return f"a plain argument ({old[1]!r} -> {new[1]!r})"
        for a, b in zip(old, new):
            if a != b:
                return _structure_change(a, b)
    return _PARTS[0]


def _tensors_change(old: tuple[Any, ...], new: tuple[Any, ...]) -> str:
    if len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            for field, x, y in zip(_FIELDS, a, b):
                if x != y:
                    return f"the {field} of the arguments' tensor {i} ({x} -> {y})"
    return _PARTS[2]


def _extra_changes(old: Any, new: Any, module: bool) -> list[str]:
    if not module:
        return _named_changes(old, new, "the global or closed-over value ")
    (old_parts, old_names), old_globals = old
    (new_parts, new_names), new_globals = new
    changes: list[str] = []
    for (name, training, attributes), (_, new_training, new_attributes) in zip(
            old_parts, new_parts):
        prefix = f"{name}." if name else "self."
        if training != new_training:
            changes.append(f"{prefix}training")
        changes += _named_changes(attributes, new_attributes, "the attribute " + prefix)
    if old_names != new_names or len(old_parts) != len(new_parts):
        changes.append("the module's parameters, buffers or submodules")
    return changes + _named_changes(old_globals, new_globals,
                                    "the global or closed-over value ")


def _named_changes(old: tuple[Any, ...], new: tuple[Any, ...], what: str) -> list[str]:
    """The names whose values differ between two tuples of ``(name, value)``."""
    before, after = dict(old), dict(new)
    return [f"{what}{name}" for name in sorted(set(before) | set(after))
            if before.get(name, _GONE) != after.get(name, _GONE)]


_GONE = object()
