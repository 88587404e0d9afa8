"""Pointwise ops' number arguments given one value per example.

``x.fill_(v)`` with one value per example: each example filled with its own ``v``.
In the loop ``v`` is a Python number or a 0-d tensor (``x.sum()``, ``n.item()`` under
``@batch``), one per example: a batch of per-example scalars (``dims == ()``, marked a
scalar).  The pointwise in-place rule aligns it to ``(batch, 1, ...)``, which torch's
``fill_`` refuses (it takes a 0-d value); :func:`per_example_fill` gives the pointwise rule
a copy of the aligned value instead, which fills each example with its own value and sends
``v`` the sum of the gradient reaching the filled positions, as ``fill_`` does.  A batch
of any other examples (a ``(1,)`` tensor or larger in the loop) is refused, as torch
refuses such a value.

The activations' parameters that torch takes as Python numbers only (``leaky_relu``'s
``negative_slope``, ``elu``'s ``alpha``, ...: :data:`NUMBER_ARGUMENTS`) given a batch are
refused naming the op and the argument (:func:`refuse_number_batches`); torch's own error
named neither the batch nor what to do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from matchbox._arguments import only_input_batched
from matchbox._example_scalars import SCALAR
from matchbox._op_table import op_name
from matchbox.masked_batch import MaskedBatch

_FILLS = {torch.Tensor.fill_, torch.fill_}


def per_example_fill(func: Any, args: Sequence[Any]) -> Any:
    """``func``, or, for ``fill_`` of a batch value, what fills each example with its own."""
    if func not in _FILLS or len(args) < 2 or not isinstance(args[1], MaskedBatch):
        return func
    value = args[1]
    if value.dims or value._scalar is not SCALAR:
        kind = (f"examples of rank {value.dim()}" if value.dims else
                "one value per example, but a (1,) tensor in the loop")
        raise ValueError(
            f"{op_name(func)}: the value is a batch of {kind}; fill_ takes a number or a 0-d "
            "tensor per example (x.sum(), n.item() under @batch): reduce or index each "
            "example's value to one number first (v.sum(), v[:, 0] of a (1, 1) example)")
    return _fill_from


def _fill_from(target: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    return target.copy_(value.expand_as(target))


# The parameters torch takes as Python numbers only, in their positional order after the
# input, by ATen name (the in-place variants' too: ``leaky_relu_``).
NUMBER_ARGUMENTS: dict[str, tuple[str, ...]] = {
    "leaky_relu": ("negative_slope",), "elu": ("alpha",), "celu": ("alpha",),
    "softplus": ("beta", "threshold"), "hardtanh": ("min_val", "max_val"),
    "threshold": ("threshold", "value"), "softshrink": ("lambd",), "hardshrink": ("lambd",),
    "rrelu": ("lower", "upper", "training"),
}


def refuse_number_batches(func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
    """Refuse a batch given as one of ``func``'s number-only parameters, naming it."""
    names = NUMBER_ARGUMENTS.get(getattr(func, "__name__", "").strip("_"))
    if names and args:
        only_input_batched(op_name(func), args[0], **dict(zip(names, args[1:])), **{
            k: v for k, v in kwargs.items() if k in names})
