"""How batch types make themselves known to PyTorch's generic tools.

Code that does not know Matchbox walks a model's inputs and outputs with three
protocols, and a batch type declares itself in each (:func:`declare_batch_type`):

| protocol | who walks it | what a batch declares |
|----------|--------------|-----------------------|
| pytree (``torch.utils._pytree``) | DDP (``find_unused_parameters``, ``static_graph``), ``torch.func``, ``torch.export`` | its tensors as children, the rest (``dims``) as context |
| dataclass fields (``dataclasses.fields``) | DDP's ``_find_tensors``, Lightning's batch-size inference | tensors whose dimension 0 is the batch, first |
| ``weights_only`` unpickling (``torch.serialization.add_safe_globals``) | ``torch.load`` | the classes and functions its pickle calls |

The dataclass declaration sets the field table of the ``dataclasses`` protocol
(``__dataclass_fields__``, what ``dataclasses.is_dataclass`` and
``dataclasses.fields`` read) and nothing else: no generated ``__init__``,
``__eq__`` or ``__repr__``.  A ``MaskedBatch``'s fields are not all of its
constructor's arguments (``dims`` is not a tensor, and a batch-size search must
not meet it), so ``dataclasses.replace`` of one raises ``TypeError`` (and FSDP,
which rebuilds dataclasses that way, cannot take one); a ``PackedBatch``'s are.

A pytree's children may be replaced by the tool that flattened it (DDP
passes them through an autograd function; ``torch.func`` wraps them); each
batch type's unflatten function checks that they still describe its examples
(a ``torch.func.vmap`` over a batch strips dimension 0 from every child), so
a changed batch raises instead of being misread.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree


def declare_batch_type(
    cls: type,
    *,
    fields: Sequence[str],
    flatten: Callable[[Any], tuple[list[Any], Any]],
    unflatten: Callable[[list[Any], Any], Any],
    child_names: Sequence[str],
    to_dumpable_context: Callable[[Any], Any] | None = None,
    from_dumpable_context: Callable[[Any], Any] | None = None,
    safe_globals: Sequence[Any] = (),
) -> None:
    """Declare ``cls`` in the three protocols of the module docstring.

    ``fields`` are the attribute names of its dataclass fields; ``flatten`` and
    ``unflatten`` its pytree functions, whose children are the attributes
    ``child_names`` in this order (their key paths; a batch may leave out the
    last ones, such as a mask it does not have); ``safe_globals`` every class or
    function its pickle (``__reduce__``) calls, besides ``cls``.
    """
    _declare_fields(cls, fields)
    _register_pytree_node(cls, flatten, unflatten, child_names, to_dumpable_context,
                          from_dumpable_context)
    add_safe_globals([cls, *safe_globals])


def _declare_fields(cls: type, names: Sequence[str]) -> None:
    # The field table of a dataclass with these fields, read-only attributes of
    # ``cls`` (its slots or properties): ``dataclasses.fields(batch)`` lists
    # them and ``getattr(batch, name)`` reads them.
    spec = dataclasses.make_dataclass(f"{cls.__name__}Fields", [(n, Any) for n in names],
                                      init=False, repr=False, eq=False)
    cls.__dataclass_fields__ = spec.__dataclass_fields__  # type: ignore[attr-defined]
    cls.__dataclass_params__ = spec.__dataclass_params__  # type: ignore[attr-defined]


def _register_pytree_node(cls: type, flatten: Callable[..., Any], unflatten: Callable[..., Any],
                          child_names: Sequence[str], to_dumpable: Any, from_dumpable: Any
                          ) -> None:
    def flatten_with_keys(tree: Any) -> tuple[list[tuple[Any, Any]], Any]:
        children, context = flatten(tree)
        keys = [pytree.GetAttrKey(name) for name in child_names]
        return list(zip(keys, children)), context

    options: dict[str, Any] = {
        "serialized_type_name": f"{cls.__module__}.{cls.__qualname__}",
        "to_dumpable_context": to_dumpable,
        "from_dumpable_context": from_dumpable,
    }
    accepted = inspect.signature(pytree.register_pytree_node).parameters
    if "flatten_with_keys_fn" in accepted:  # torch.export names its inputs by key path
        options["flatten_with_keys_fn"] = flatten_with_keys
    pytree.register_pytree_node(cls, flatten, unflatten, **options)


def add_safe_globals(objects: Sequence[Any]) -> None:
    """Let ``torch.load(weights_only=True)`` call ``objects`` (classes, functions).

    torch before 2.4 has no allowlist (``torch.serialization.add_safe_globals``):
    there ``weights_only=True`` refuses every batch, as it refuses any class
    it does not know.
    """
    add = getattr(torch.serialization, "add_safe_globals", None)
    if add is not None:
        add(list(objects))


def pytree_rank_error(kind: str, what: str, got: int, expected: int) -> ValueError:
    """The error of an unflatten whose children no longer describe the batch's examples."""
    return ValueError(
        f"{kind}: a pytree transform changed the rank of the batch's {what} from {expected} "
        f"to {got}, so they no longer hold the batch's examples. torch.func.vmap does this to a "
        "batch it maps over (in_dims) or returns (out_dims): vmap cannot map over a batch's "
        "examples nor stack batches. A batch already runs every example: call the function "
        "on the batch itself, or vmap over plain tensors and return plain tensors"
    )
