"""``x.item()``, ``int(x)``, ``float(x)`` and ``bool(x)`` of a per-example scalar.

In the loop over examples each gives a Python number, a different one for each
example.  A Python number cannot differ between examples, so under ``@batch``
it is a batch of per-example numbers (``dims == ()``), detached as a Python
number is, which everything that takes a number per example accepts: a bound
of ``range`` (``for i in range(n.item())``), a batch condition (``if int(k) >
2:``), arithmetic (which stays a batch), an index of a batch (``x[:, int(j)]``)
or of a list (``items[int(j)]``).

| written         | per example                                                  |
|-----------------|--------------------------------------------------------------|
| ``x.item()``    | its value, in ``x``'s dtype                                  |
| ``int(x)``      | truncated toward zero, int64 (``ValueError`` naming the      |
|                 | examples whose value is NaN or infinite, as Python raises)   |
| ``float(x)``    | ``x``'s floating dtype (torch's default for integer ``x``)   |
| ``bool(x)``     | its truth value                                              |

``x`` must hold one value per example (static dimensions of size one, or
``dims == ()``), as ``item()`` needs one value in the loop.  Where a Python
number is needed as such (a size: ``torch.zeros(n.item())``, ``x.view(k, -1)``),
core's error says that a size must be the same for every example.  Any other
argument is Python's own call.
"""

from __future__ import annotations

import builtins
from typing import Any

import torch

from matchbox.control.runtime.masks import _MASK, per_example_truth
from matchbox.extending import EXAMPLE_SCALAR as SCALAR
from matchbox.extending import mark_example_scalar as mark
from matchbox.masked_batch import MaskedBatch


def _values(batch: MaskedBatch, what: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The one value of each example (``(batch,)``, detached) and which examples are real."""
    data = batch.data
    size = data.size(0)
    if any(batch.dims) or data.numel() != size:
        shape = ", ".join(["1", *("*" if d else str(s) for d, s in zip(batch.dims,
                                                                     data.shape[1:]))])
        raise ValueError(
            f"@batch: {what} needs one value per example, but the examples have shape "
            f"({shape}) (dims {batch.dims}); in the loop over examples only a one-element "
            "tensor converts to a Python number: reduce each example first (sum, max, ...)")
    real = None if batch._mask is None else batch._mask.reshape(size)
    return data.detach().reshape(size), real


def _batch(values: torch.Tensor, real: torch.Tensor | None) -> MaskedBatch:
    return mark(MaskedBatch._make(values, real, ()), SCALAR)  # Python numbers


def item(obj: Any) -> Any:
    """``obj.item()``."""
    if type(obj) is not MaskedBatch:
        return obj.item()
    return _batch(*_values(obj, "item()"))


def int_(*args: Any, **kwargs: Any) -> Any:
    """``int(x)``."""
    if len(args) != 1 or kwargs or type(args[0]) is not MaskedBatch:
        return builtins.int(*args, **kwargs)
    values, real = _values(args[0], "int()")
    if values.is_floating_point() or values.is_complex():
        if values.is_complex():
            raise TypeError("int() argument must be a real number, not a complex batch")
        bad = ~torch.isfinite(values)
        if real is not None:
            bad = bad & real
        outer = _MASK.get()
        if outer is not None:
            bad = bad & outer
        if bad.any():
            examples = bad.nonzero().flatten().tolist()
            raise ValueError(f"cannot convert float NaN or infinity to integer (examples "
                             f"{examples})")
        values = values.trunc()
    return _batch(values.to(torch.int64), real)


def float_(*args: Any, **kwargs: Any) -> Any:
    """``float(x)``."""
    if len(args) != 1 or kwargs or type(args[0]) is not MaskedBatch:
        return builtins.float(*args, **kwargs)
    values, real = _values(args[0], "float()")
    if values.is_complex():
        raise TypeError("float() argument must be a real number, not a complex batch")
    if not values.is_floating_point():
        values = values.to(torch.get_default_dtype())
    return _batch(values, real)


def bool_(*args: Any, **kwargs: Any) -> Any:
    """``bool(x)``."""
    if len(args) != 1 or kwargs or type(args[0]) is not MaskedBatch:
        return builtins.bool(*args, **kwargs)
    _, real = _values(args[0], "bool()")
    return _batch(per_example_truth(args[0]), real)
