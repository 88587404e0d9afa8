"""Jagged ``torch.nested`` tensors: reading and making them, for every batch type.

A jagged nested tensor ``(B, j, *S)`` keeps its components' rows together in
``values()``, ``(N, *S)``: component ``e`` (an example without its leading
dimension of size one) is ``values[starts[e] : starts[e] + lengths[e]]``.  Its
``offsets()`` give the starts; a nested tensor with holes between components
(``torch.nested.narrow``) has ``lengths()`` too.

``MaskedBatch`` converts with them (``from_nested`` / ``to_nested``: one
``index_select`` or ``index_copy`` between the padded and the jagged rows), and
matchbox-packed's ``PackedBatch`` reads and makes its nested tensors with
:func:`read_jagged` and :func:`make_jagged`, moving the rows between the
jagged and its packed layout (``matchbox.nn.packing``).  Both ways carry
gradients; padding is never read.

A ``MaskedBatch`` and a jagged nested tensor cannot be arguments of one op:
they hold examples in two layouts, and the nested tensor's dimension 0 runs
over its components where a plain tensor beside a batch is the same for every
example.  Such an op raises, naming the conversions.
"""

from __future__ import annotations

from typing import Any

import torch


def read_jagged(op: str, nested: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(values, starts, lengths)`` of a jagged nested tensor ``(B, j, *S)``, checked.

    ``starts`` is on the values' device, ``lengths`` on the CPU (both int64).
    """
    if not isinstance(nested, torch.Tensor) or not nested.is_nested or (
            nested.layout != torch.jagged):
        raise TypeError(f"{op}: expected a nested tensor with layout=torch.jagged, got "
                        f"{describe_tensor(nested)}")
    ragged = getattr(nested, "_ragged_idx", 1)
    if ragged != 1:
        raise ValueError(f"{op}: the nested tensor is ragged in dimension {ragged}; a batch's "
                         "examples differ in size in dimension 1 (a (B, j, ...) nested "
                         "tensor): transpose it first")
    offsets = nested.offsets()
    starts = offsets[:-1]
    lengths = nested.lengths()
    if lengths is None:
        lengths = offsets[1:] - starts
    values = nested.values()
    return values, starts.to(values.device, torch.int64), lengths.to("cpu", torch.int64)


def make_jagged(values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The jagged nested tensor of ``values`` ``(N, *S)`` cut into components of
    ``lengths`` (CPU), in order; a view of ``values`` where torch can make one."""
    factory = getattr(torch.nested, "nested_tensor_from_jagged", None)
    if factory is None:
        # torch 2.3 has no public constructor from values and offsets; from the
        # components' views (one split) it concatenates them again: one more copy.
        return torch.nested.as_nested_tensor(list(values.split(lengths.tolist())),
                                             layout=torch.jagged)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    return factory(values, offsets.to(values.device))


def jagged_rows(lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For each row of the jagged layout of examples of ``lengths`` (CPU), in order:
    its example and its position in the example (CPU int64, ``(N,)`` each)."""
    examples = torch.repeat_interleave(torch.arange(lengths.numel()), lengths)
    starts = lengths.cumsum(0) - lengths
    return examples, torch.arange(examples.numel()) - starts[examples]


def describe_tensor(x: Any) -> str:
    """What ``x`` is, for an error that expected a tensor of another kind."""
    if isinstance(x, torch.Tensor):
        kind = "nested " if x.is_nested else ""
        return f"a {kind}{x.dim()}-D {x.dtype} tensor (layout {x.layout})"
    return type(x).__name__


# ---------------------------------------------------------------------------- mixing


def refuse_mixing(nested: Any) -> Any:
    raise TypeError(
        "an op between a MaskedBatch and a jagged torch.nested tensor: the two hold examples "
        "in different layouts (and a plain tensor beside a batch is the same for every "
        "example, where a nested tensor's dimension 0 runs over its components); convert one "
        "first: MaskedBatch.from_nested(nested) for a MaskedBatch, or batch.to_nested() for a "
        "nested tensor"
    )


def _jagged_tensor_type() -> type | None:
    try:  # the class of jagged nested tensors (already imported by torch itself)
        from torch.nested._internal.nested_tensor import NestedTensor
    except ImportError:
        return None
    return NestedTensor


#: The class of jagged nested tensors (None where torch has none); ``matchbox.ops.conversion``
#: registers :func:`refuse_mixing` for it beside a ``MaskedBatch``.
NESTED = _jagged_tensor_type()
