"""Calls of Python builtins whose answer differs between examples.

The rewriting (``converters.builtin_calls``) routes calls written with these
names through :func:`call`, which looks the callable up at run time (the name
may be rebound) and runs the per-example version of the ones below; any other
callable is called as it is.

| callable                              | per example                        |
|---------------------------------------|------------------------------------|
| ``sum``, ``max``, ``min``, ``any``, ``all``, ``functools.reduce`` | ``folds`` |
| ``len``                               | ``sequences.length``               |
| ``int``, ``float``, ``bool``          | ``scalars``                        |
| ``isinstance``, ``torch.is_tensor``   | ``type_tests`` (warns for a batch) |
"""

from __future__ import annotations

import builtins
import functools
from collections.abc import Callable
from typing import Any

import torch

from matchbox.control.runtime import folds, scalars, sequences, type_tests

_LOWERED: dict[Any, Callable[..., Any]] = {
    builtins.sum: folds.sum_, builtins.max: folds.max_, builtins.min: folds.min_,
    builtins.any: folds.any_, builtins.all: folds.all_, functools.reduce: folds.reduce_,
    builtins.len: sequences.length,
    builtins.int: scalars.int_, builtins.float: scalars.float_, builtins.bool: scalars.bool_,
    builtins.isinstance: type_tests.isinstance_, torch.is_tensor: type_tests.is_tensor,
}

#: The names a call may be written with to reach :func:`call` (a function's own
#: name, or the attribute of a module: ``functools.reduce``, ``torch.is_tensor``).
NAMES = frozenset({"sum", "max", "min", "any", "all", "len", "int", "float", "bool",
                   "isinstance", "reduce", "is_tensor"})
ATTRIBUTES = frozenset({"reduce", "is_tensor"})


def call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, per example where ``fn`` is one of the builtins above."""
    try:
        lowered = _LOWERED.get(fn)
    except TypeError:  # an unhashable callable
        lowered = None
    if lowered is None:
        return fn(*args, **kwargs)
    return lowered(*args, **kwargs)
