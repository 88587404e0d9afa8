"""``Batch``: the base class of every batch type (``MaskedBatch``, ``PackedBatch``,
matchbox-nn's ``TimeMajorBatch`` view).

A batch type is a class that holds examples' values in a tensor ``data`` and
describes them with ``dims`` (one bool per dimension after the first, ``True``
where the examples may differ in size).  Subclassing :class:`Batch` makes it one:

- *Dispatch.*  ``__torch_function__`` is the batch type's one dispatch
  (``matchbox._dispatch``), and every ``torch.Tensor`` method registered for it
  becomes a method of the class that calls the same dispatch; a Tensor method
  that is not registered raises ``NotImplementedError`` naming it (the
  ``__getattr__`` shim).  The class name is the batch type's name in the
  registry (``class PackedBatch(Batch)`` registers its ops under
  ``"PackedBatch"``); ``view=True`` in the class statement makes it a view of
  a batch, which runs only its own handlers.
- *What every batch answers alike*: ``dtype``, ``device``, ``requires_grad``,
  ``grad``, ``to``/``cuda``/``cpu``/``pin_memory``/``detach``/
  ``requires_grad_``, and the refusals of ``bool()``, ``len()``, ``iter()``,
  ``int()``/``float()``/``.item()`` and indexing it does not support, which name
  the class.
- *PyTorch's tools*: a subclass that defines ``_tree_flatten`` is declared to
  pytree, to the ``dataclasses`` protocol and to ``torch.load``'s allowlist (the
  table below).

What a subclass implements:

| member | what it is |
|--------|------------|
| ``data``, ``dims`` | the values and the dynamic dimensions |
| ``_with_data(data)`` | the batch with the same layout holding ``data`` (same shape, or another device) |
| ``rows(static)`` / ``from_rows(values, static)`` / ``row_examples(static)`` | the protocol of row-wise ops (``F.linear``, ``layer_norm``, ``embedding``): the real positions of every dimension but the last ``static`` (which must be static) as rows, ``(n_rows, *those dims)``; such rows back in the batch's layout with new trailing dims; the example of each row |
| ``positions(shared)`` / ``from_positions(values, shared)`` | the same for ops on each position (``dropout``, ``glu``, ``prelu``): the values in the batch's own layout, and back; ``shared``: the op has a parameter whose gradient sums over positions (``prelu``'s weight), so padding is zeroed going in and gets no gradient coming out (the default: ``data`` and ``_with_data``) |
| ``batch_size``, ``dim()``, ``size()``, ``examples()`` | what the examples look like |
| ``_take_converted(result)`` | (optional) take the values of ``result``, a batch of the type this one converts into, after an in-place op handed to it (the mixing rule) |
| ``_unsupported_hint`` | (optional) text appended to the error of an unsupported op: the way out |

PyTorch's tools.  Code that does not know Matchbox walks a model's inputs and
outputs with three protocols, and a batch type declares itself in each
(:func:`declare_to_pytorch_tools`, called for every subclass that defines
``_tree_flatten``):

| protocol | who walks it | what a batch declares |
|----------|--------------|-----------------------|
| pytree (``torch.utils._pytree``) | DDP (``find_unused_parameters``, ``static_graph``), ``torch.func``, ``torch.export`` | its tensors as children (``_tree_children``), the rest (``dims``) as context |
| dataclass fields (``dataclasses.fields``) | DDP's ``_find_tensors``, Lightning's batch-size inference | tensors whose dimension 0 is the batch, first (``_tree_fields``) |
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

from matchbox._batch_views import register_batch_view
from matchbox._capture import in_batch_call
from matchbox._methods import register_host
from matchbox._op_table import batch_types, op_name


class Batch:
    """The base class of batch types (see the module docstring)."""

    __slots__ = ()
    data: torch.Tensor
    dims: tuple[bool, ...]
    #: Appended to the error of an op the batch type does not implement: the way out.
    _unsupported_hint: str = ""
    #: ``MaskedBatch``'s slot (``matchbox._region_guard``); ``None`` for every other batch
    #: type, so that a fast method reads it of any batch without a type test.
    _deferred_guard: Any = None

    def __init_subclass__(cls, *, view: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if Batch not in cls.__bases__:
            return  # a subclass of a batch type is of that type
        kind = register_host(cls.__name__, cls, view=view)
        # The dispatch itself (not a method calling it): PyTorch calls it on every op.
        # PyTorch reads ``__torch_function__.__self__`` to warn about plain methods; a
        # function without one costs it an AttributeError per op, so it gets the class,
        # as a classmethod's would be.
        kind.dispatch.__self__ = cls  # type: ignore[attr-defined]
        # TorchDynamo of torch 2.3 reads ``__torch_function__.__func__`` (a classmethod's
        # function, called with the class first) to trace the override; it then meets
        # Matchbox's files on its skip list and runs the op eagerly.
        kind.dispatch.__func__ = _with_class_first(kind.dispatch)  # type: ignore[attr-defined]
        cls.__torch_function__ = staticmethod(kind.dispatch)  # type: ignore[assignment]
        if view:
            register_batch_view(cls)
        if "_tree_flatten" in cls.__dict__:
            declare_to_pytorch_tools(cls)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001
        raise NotImplementedError(f"{op_name(func)}: Batch is the base class of "
                                  "batch types; make a batch of one of them")

    # ------------------------------------------------------------------ the protocol

    def _with_data(self, data: torch.Tensor) -> Batch:
        """The batch of the same layout holding ``data`` (the same shape, or on another
        device: the layout's tensors follow)."""
        raise NotImplementedError(f"{type(self).__name__}._with_data")

    def rows(self, static: int = 1) -> torch.Tensor:
        """The real positions of every dimension but the last ``static`` (which must be
        static: check with ``matchbox.extending.static_trailing``) as rows,
        ``(n_rows, *those dims)``: what an op on each row alone runs on."""
        raise NotImplementedError(f"{type(self).__name__}.rows")

    def from_rows(self, values: torch.Tensor, static: int = 1) -> Batch:
        """``values`` ``(n_rows, *tail)``, the rows of :meth:`rows` transformed, as a batch
        of this layout whose last ``static`` dimensions are replaced by ``tail``."""
        raise NotImplementedError(f"{type(self).__name__}.from_rows")

    def row_examples(self, static: int = 1) -> torch.Tensor:
        """The example of each row of :meth:`rows`, ``(n_rows,)`` (-1: not a real row)."""
        raise NotImplementedError(f"{type(self).__name__}.row_examples")

    def positions(self, shared: bool = False) -> torch.Tensor:
        """The values in the batch's own layout (``data``), for an op on each position
        alone; ``shared``: the op has a parameter whose gradient sums over positions, so
        positions that are not real must not reach it."""
        return self.data

    def from_positions(self, values: torch.Tensor, shared: bool = False) -> Batch:
        """``values``, :meth:`positions` transformed, as a batch of this layout."""
        return self._with_data(values)

    def _data_dim(self, dim: int) -> int:
        """Example dimension ``dim`` (normalised, past dimension 0) as a dimension of
        ``data`` (a ``PackedBatch``'s rows have one dimension fewer than an example)."""
        return dim - (self.dim() - self.data.dim())

    def _take_converted(self, result: Any) -> None:
        raise NotImplementedError(
            f"{type(self).__name__}: an in-place op handed to another batch type cannot "
            "write back into this one")

    # ------------------------------------------------------------------ the data's attributes

    @property
    def dtype(self) -> torch.dtype:
        return self.data.dtype

    @property
    def device(self) -> torch.device:
        return self.data.device

    @property
    def is_cuda(self) -> bool:
        return self.data.is_cuda

    @property
    def requires_grad(self) -> bool:
        return self.data.requires_grad

    @property
    def is_nested(self) -> bool:
        """Always ``False``: a batch is not a ``torch.nested`` tensor (modules ask first)."""
        return False

    def is_floating_point(self) -> bool:
        return self.data.is_floating_point()

    def is_complex(self) -> bool:
        return self.data.is_complex()

    def get_device(self) -> int:
        return self.data.get_device()

    def is_pinned(self) -> bool:
        return self.data.is_pinned()

    @property
    def grad(self) -> Batch | None:
        grad = self.data.grad
        return None if grad is None else self._with_data(grad)

    @grad.setter
    def grad(self, value: Batch | torch.Tensor | None) -> None:
        # ``x.grad = None`` between steps, as on a tensor; a batch sets its data.
        self.data.grad = value.data if isinstance(value, Batch) else value

    # ------------------------------------------------------------------ conversions

    def to(self, *args: Any, **kwargs: Any) -> Batch:
        """``Tensor.to`` on the data; the layout follows to the new device.  ``x.to(y)`` of
        another batch ``y`` takes ``y``'s dtype and device, as for tensors."""
        args = tuple(a.data if isinstance(a, Batch) else a for a in args)
        return self._with_data(self.data.to(*args, **kwargs))

    def cuda(self, device: Any = None, non_blocking: bool = False) -> Batch:
        return self.to(torch.device("cuda") if device is None else device,
                       non_blocking=non_blocking)

    def cpu(self) -> Batch:
        return self.to("cpu")

    def pin_memory(self) -> Batch:
        """The batch in page-locked memory, for faster, asynchronous copies to an accelerator
        (``DataLoader(pin_memory=True)`` calls this on every batch it loads)."""
        return self._with_data(self.data.pin_memory())

    def detach(self) -> Batch:
        return self._with_data(self.data.detach())

    def detach_(self) -> Batch:
        self.data.detach_()
        return self

    def requires_grad_(self, requires_grad: bool = True) -> Batch:
        self.data.requires_grad_(requires_grad)
        return self

    # ------------------------------------------------------------------ refusals

    def __bool__(self) -> bool:
        what = f"the truth value of a {type(self).__name__} is ambiguous (it may differ " \
            "between examples): use .any() or .all(), or "
        if in_batch_call():  # asked by code @batch did not rewrite (a user trial)
            raise ValueError(
                what + "write the condition in the decorated function, whose if, while, "
                "for, 'a if c else b', and/or/not and comprehensions @batch rewrites: a "
                "builtin (filter, sorted, list.index, a key= function's comparison), or a "
                "helper or generator that is not decorated with @matchbox.batch, asked for "
                "it here")
        raise ValueError(
            what + "decorate the function with @matchbox.batch to branch per example (it "
            "rewrites if, while, for, 'a if c else b' and and/or/not, not the filters of "
            "comprehensions)"
        )

    def _no_single_value(self, *args: Any) -> Any:
        # int(x), float(x), complex(x), x.item(), x.tolist(): a Python value is one value
        # for the whole batch, where each example has its own.
        what = "one scalar per example" if self.dim() == 1 else "one tensor per example"
        raise TypeError(
            f"a {type(self).__name__} holds one value per example, not a single value "
            f"({what}, {self.batch_size} examples), so int(), float(), .item() and .tolist() "
            "have no answer: a Python number would be the same for every example, where the "
            "loop gives each its own. Keep the value a batch (arithmetic, comparisons, torch "
            "ops and indexing x[:, n] take one value per example), write branches and loops "
            "that differ per example in a function decorated with @matchbox.batch, or leave "
            "the batch explicitly: use matchbox.batch_sum / batch_mean for a plain tensor, or "
            "examples() for each example's tensor"
        )

    __float__ = __int__ = __complex__ = item = tolist = _no_single_value

    def __index__(self) -> int:
        raise TypeError(
            f"a {type(self).__name__} holds one value per example, not a single value: a "
            "Python list index, a slice bound or a size must be the same int for every "
            "example (to take each example's own element, index a batch: x[:, i])"
        )

    def __len__(self) -> int:
        raise TypeError(
            f"len() of a {type(self).__name__} is ambiguous: use x.batch_size for the number "
            "of examples (torch.tensor(v) or torch.as_tensor(v) of a batch v, one value per example, "
            "asks for it too: v is already each example's value as a tensor; use it as it is)"
        )

    # Not iterable (``iter(x)`` raises TypeError): iterating would go over dimension
    # 0, the batch; use examples() or unbind(dim).  Declared with None, not a method
    # that raises, so that tools asking ``isinstance(x, Iterable)`` before walking
    # a collection (Lightning's batch-size search) see a batch as one value.
    __iter__ = None

    def __format__(self, spec: str) -> str:
        if spec:  # f"{v:.3f}": Python's own error names no batch
            raise TypeError(
                f"format(): a {type(self).__name__} holds one value per example, and the format "
                f"spec {spec!r} formats one number; format each example's value (for e in "
                "x.examples()), or leave the spec out to print the batch")
        return str(self)

    def __hash__(self) -> int:
        if getattr(self, "_scalar", None) is True and not getattr(self, "dims", None):
            # One Python number per example (a @batch counter, int(x)): the loop hashes
            # each by its value, a dict key or a set member; the batch cannot (a user
            # trial found `d.get(n)` and `n in {1, 2}` silently missing every key).
            raise TypeError(
                f"a {type(self).__name__} of one number per example cannot be a dict key or "
                "a set member (each example has its own key): look it up per example with "
                "a tensor, e.g. torch.tensor(values)[n] for a table of numbers, or compare "
                "with == (n == 1) | (n == 2) for membership")
        return object.__hash__(self)

    # Indexing that a batch type does not register reaches the dispatch, which names
    # the op and the way out (rather than Python's "object is not subscriptable").
    def __getitem__(self, index: Any) -> Any:
        return type(self).__torch_function__(torch.Tensor.__getitem__, None, (self, index), {})

    def __setitem__(self, index: Any, value: Any) -> None:
        type(self).__torch_function__(torch.Tensor.__setitem__, None, (self, index, value), {})

    __getitem__._matchbox_fallback = True  # type: ignore[attr-defined]
    __setitem__._matchbox_fallback = True  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> Any:
        # Only reached for names the class does not define: a Tensor method the batch
        # type does not implement goes to its dispatch (which names it and the way out,
        # or hands it to a batch type among the arguments that has it).
        attribute = getattr(torch.Tensor, name, None)
        if callable(attribute) and not name.startswith("_"):
            dispatch = type(self).__torch_function__

            def unsupported_method(*args: Any, **kwargs: Any) -> Any:
                return dispatch(attribute, None, (self, *args), kwargs)

            return unsupported_method
        raise AttributeError(
            f"'{type(self).__name__}' object has no attribute '{name}'"
            + (" (Tensor attribute not supported for batches)" if attribute is not None else "")
        )


def is_batch(value: Any) -> bool:
    """Whether ``value`` is a batch (of any batch type; a view of a batch is not one)."""
    return isinstance(value, batch_types())


# ---------------------------------------------------------------------------- PyTorch's tools


def declare_to_pytorch_tools(cls: type) -> None:
    """Declare ``cls`` in the three protocols of the module docstring, from its class
    members: ``_tree_fields`` (the attribute names of its dataclass fields),
    ``_tree_flatten`` / ``_tree_unflatten`` (its pytree functions, whose children are
    the attributes ``_tree_children`` in this order: their key paths; a batch may leave
    out the last ones, such as a mask it does not have), ``_tree_dump_context`` /
    ``_tree_load_context`` (optional: the context as JSON for ``torch.export``'s
    files) and ``_safe_globals`` (every class or function its pickle calls, besides
    ``cls``)."""
    _declare_fields(cls, cls._tree_fields)  # type: ignore[attr-defined]
    _register_pytree_node(
        cls, cls._tree_flatten, cls._tree_unflatten,  # type: ignore[attr-defined]
        cls._tree_children,  # type: ignore[attr-defined]
        getattr(cls, "_tree_dump_context", None), getattr(cls, "_tree_load_context", None))
    add_safe_globals([cls, *getattr(cls, "_safe_globals", ())])


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


def pytree_rank_error(batch_type: str, what: str, got: int, expected: int) -> ValueError:
    """The error of an unflatten whose children no longer describe the batch's examples."""
    return ValueError(
        f"{batch_type}: a pytree transform changed the rank of the batch's {what} from {expected} "
        f"to {got}, so they no longer hold the batch's examples. torch.func.vmap does this to a "
        "batch it maps over (in_dims) or returns (out_dims): vmap cannot map over a batch's "
        "examples nor stack batches. A batch already runs every example: call the function "
        "on the batch itself, or vmap over plain tensors and return plain tensors"
    )


def _with_class_first(dispatch: Any) -> Any:
    """``dispatch`` as the function of a ``__torch_function__`` classmethod."""

    def torch_function(cls: type, func: Any, types: Any, args: tuple[Any, ...] = (),
                       kwargs: dict[str, Any] | None = None) -> Any:
        return dispatch(func, types, args, kwargs)

    return torch_function

