"""Python's number functions of per-example numbers: ``round``, ``divmod``, the ``math``
module's functions, and ``torch.tensor``/``torch.as_tensor`` of a list of them.

Under ``@batch``, ``x.item()`` (and ``int(x)``, ``float(x)``) of a per-example scalar is
a batch of one number per example (``runtime.scalars``).  In the loop each of these
functions takes a Python number; here:

| written                       | per example                                           |
|-------------------------------|-------------------------------------------------------|
| ``round(v)``                  | Python's rounding (half to even), an int64 number per |
|                               | example (``ValueError`` for NaN, as Python raises)    |
| ``round(v, n)``               | refused: Python rounds the exact decimal value, which |
|                               | ``torch.round(v, decimals=n)`` only approximates      |
| ``divmod(v, d)``              | refused, saying to write ``v // d`` and ``v % d``     |
| ``math.f(v)``                 | refused, saying to write ``torch.f(v)``               |
| ``torch.tensor([a, b])``      | refused: a ``(2,)`` tensor per example, which a batch |
| (``as_tensor``)               | cannot hold; the message says how to write ``(1, 2)`` |
"""

from __future__ import annotations

import builtins
import math
from typing import Any

import torch

from matchbox.control.runtime.masks import _MASK
from matchbox.extending import EXAMPLE_SCALAR as SCALAR
from matchbox.extending import mark_example_scalar as mark
from matchbox.masked_batch import MaskedBatch

_WHAT = ("a per-example number (a batch of one number per example, as x.item(), int(x) "
         "and float(x) give under @batch)")


def _has_batch(args: Any) -> bool:
    if isinstance(args, MaskedBatch):
        return True
    if isinstance(args, (list, tuple)):
        return any(_has_batch(a) for a in args)
    return False


def round_(*args: Any, **kwargs: Any) -> Any:
    """``round(v)`` and ``round(v, n)``."""
    if not _has_batch(args) and not _has_batch(list(kwargs.values())):
        return builtins.round(*args, **kwargs)
    v = args[0] if args else kwargs.get("number")
    digits = args[1] if len(args) > 1 else kwargs.get("ndigits")
    if digits is not None or type(v) is not MaskedBatch or any(v.dims) or (
            v.data.numel() != v.data.size(0)):
        raise NotImplementedError(
            f"round(v, ndigits) of {_WHAT}: Python rounds each number's exact decimal value, "
            "which torch.round(v, decimals=n) only approximates; write "
            "torch.round(v, decimals=n) where that is meant (one value per example)"
            if digits is not None else
            f"round() takes {_WHAT} or a Python number; reduce each example to one value "
            "first")
    size = v.data.size(0)
    values = v.data.detach().reshape(size)
    real = None if v._mask is None else v._mask.reshape(size)
    if values.is_floating_point():
        bad = ~torch.isfinite(values)
        for keep in (real, _MASK.get()):
            if keep is not None:
                bad = bad & keep
        if bad.any():
            raise ValueError(f"round(): cannot convert float NaN or infinity to integer "
                             f"(examples {bad.nonzero().flatten().tolist()})")
        values = values.round()  # half to even, as Python's round
    elif values.is_complex():
        raise TypeError("type complex doesn't define __round__ method (a complex batch)")
    return mark(MaskedBatch._make(values.to(torch.int64), real, ()), SCALAR)


def divmod_(*args: Any, **kwargs: Any) -> Any:
    """``divmod(v, d)``."""
    if _has_batch(args):
        raise NotImplementedError(
            f"divmod() of {_WHAT} takes Python numbers; write q, r = v // d, v % d "
            "(floor division and remainder, one value per example)")
    return builtins.divmod(*args, **kwargs)


def refuse_number_functions(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """A ``math`` function, or ``torch.tensor``/``as_tensor`` of a list, given a batch."""
    in_math = getattr(fn, "__module__", None) == "math"  # first: every call comes here
    if not (in_math or fn is torch.tensor or fn is torch.as_tensor) or not (
            _has_batch(args) or _has_batch(list(kwargs.values()))):
        return
    name = getattr(fn, "__name__", "")
    if in_math and getattr(math, name, None) is fn:
        torch_fn = getattr(torch, name, None)
        hint = (f"write torch.{name}(v) (one value per example)" if callable(torch_fn)
                else "compute it with torch ops on v (one value per example)")
        raise NotImplementedError(f"math.{name}() of {_WHAT} takes a single Python number; "
                                  + hint)
    if fn in (torch.tensor, torch.as_tensor) and args and isinstance(args[0], (list, tuple)):
        shape, data = [], args[0]
        while isinstance(data, (list, tuple)):
            shape.append(len(data))
            data = data[0] if data else None
        sizes = ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "")
        why = ("" if shape[0] == 1 else "which a batch cannot hold (each example keeps a "
               "dimension 0 of size one), and ")
        raise NotImplementedError(
            f"torch.{name}() of a list holding {_WHAT}: in the loop it is a ({sizes}) tensor "
            f"per example, {why}a batch is not a Python number; build each example's tensor "
            "from tensors instead, e.g. torch.cat([x.new_full((1, 1), a), x.new_full((1, "
            "1), b)], 1) for a (1, 2) tensor of a and b (x.new_full takes one value per "
            "example)")
