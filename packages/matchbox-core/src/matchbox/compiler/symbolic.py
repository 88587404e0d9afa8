"""Graphs that hold for any batch size and any padded size the code does not fix.

A graph captured on fake tensors with concrete sizes holds for those sizes only, so a
training run compiled a graph for every batch size (the last, smaller batch of an epoch
included) and every padded-size bucket.  Here a call is instead captured with its
batches' sizes *symbolic* (``make_fx(tracing_mode="symbolic")`` over fake tensors from
one ``ShapeEnv``): the batch size and each dynamic dimension's padded size are symbols,
every other size (parameters, plain tensor arguments, a batch's static dimensions) is
the call's own.  What the code decides from a size (``range(x.size(1))``, an ``if`` on
the batch size, an ``unbind`` whose items a loop steps through) becomes a *guard* of the
shape environment; the graph holds for every call whose sizes pass its guards
(:class:`SizeGuard`), and is compiled once with ``torch.compile(dynamic=True)``.

So a graph whose code reads no size (a transformer layer) serves every batch size and
length; a loop over a dynamic dimension, which steps through that many items, fixes the
padded size (one graph per bucket, as before) but not the batch size.  Sizes 0 and 1 are
always fixed (PyTorch's shape environment specialises them).

A call that cannot be captured with symbolic sizes, or whose graph ``torch.compile``
cannot compile with them, is captured again with its concrete sizes, as before.
"""

from __future__ import annotations

from typing import Any

import torch

from matchbox.compiler.structure import Structure, roles


def available() -> bool:
    """Whether this torch can capture with symbolic sizes and check a graph's guards."""
    try:
        from torch.fx.experimental.symbolic_shapes import (  # noqa: F401
            DimDynamic,
            ShapeEnv,
            StatelessSymbolicContext,
        )
    except ImportError:
        return False
    return hasattr(ShapeEnv, "evaluate_guards_expression") and hasattr(
        ShapeEnv, "produce_guards_expression")


def fake_inputs(structure: Structure, n_params: int, inputs: list[torch.Tensor]
                ) -> list[torch.Tensor]:
    """Fake copies of a graph's ``inputs`` (the parameters first, then the arguments'
    tensors, as ``structure`` flattens them), the batch size and padded sizes symbolic.

    Duck sizing is off: two sizes that happen to be equal (a batch of 16 examples padded
    to 16 steps) are two symbols, not one."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import (
        DimDynamic,
        ShapeEnv,
        StatelessSymbolicContext,
    )

    mode = FakeTensorMode(allow_non_fake_inputs=True,
                          shape_env=ShapeEnv(duck_shape=False))
    dynamic = [()] * n_params + [_dynamic_dims(role) for role in roles(structure)]
    fakes = []
    for tensor, dims in zip(inputs, dynamic):
        sizes = [DimDynamic.DYNAMIC if d in dims else DimDynamic.STATIC
                 for d in range(tensor.dim())]
        fakes.append(mode.from_tensor(
            tensor, symbolic_context=StatelessSymbolicContext(dynamic_sizes=sizes)))
    return fakes


def _dynamic_dims(role: tuple[str, tuple[bool, ...]]) -> tuple[int, ...]:
    """The dimensions of an argument's tensor that are symbolic: a batch's data and mask
    have the batch size first, then the padded sizes of its dynamic dimensions; its
    lengths (examples × dynamic dimensions) the batch size.  A plain tensor keeps its
    sizes."""
    kind, dims = role
    if kind in ("data", "mask"):
        return (0, *(i + 1 for i, d in enumerate(dims) if d))
    if kind == "lengths":
        return (0,)
    return ()


def guard_of(fakes: list[torch.Tensor] | None) -> SizeGuard | None:
    """The sizes a graph captured on ``fakes`` holds for (``None``: it was captured with
    the call's own sizes).  Its ``free`` sizes may be none: the code fixed them all (the
    graph, which may still read sizes as symbols, is compiled as one of symbolic sizes)."""
    return None if fakes is None else SizeGuard(fakes)


class SizeGuard:
    """Which sizes a graph captured with symbolic sizes holds for: its shape environment's
    guards over the graph's inputs, static sizes included (made after the capture)."""

    def __init__(self, fakes: list[torch.Tensor]):
        self.shape_env = fakes[0].fake_mode.shape_env
        #: The guards, as Python over the inputs ``t0``, ``t1``, ... (``None``: none).
        self.code = self.shape_env.produce_guards_expression(fakes, ignore_static=False)
        self.free = sorted({str(s) for f in fakes for size in f.shape
                            for s in self._expr(size).free_symbols})

    def _expr(self, size: Any) -> Any:
        import sympy

        if not isinstance(size, torch.SymInt):
            return sympy.Integer(size)
        return self.shape_env.replace(size.node.expr)

    def accepts(self, inputs: list[torch.Tensor]) -> bool:
        """Whether the graph holds for a call with these inputs (their sizes)."""
        if self.code is None:
            return True
        return bool(self.shape_env.evaluate_guards_expression(self.code, inputs))

    def shapes(self, fakes: list[torch.Tensor]) -> list[Any]:
        """The inputs' shapes for a summary, a free size as ``*``."""
        return [_Shape(tuple(int(e) if e.is_number else "*"
                             for e in map(self._expr, f.shape))) for f in fakes]


class _Shape:
    """A shape with a ``*`` for each size a graph holds for any value of."""

    def __init__(self, shape: tuple[Any, ...]):
        self.shape = shape

    def size(self, dim: int) -> Any:
        return self.shape[dim]


def without_sizes(key: tuple[Any, ...]) -> tuple[Any, ...]:
    """A specialisation's key (structure, parameters, argument tensors, grad mode, ...)
    with the argument tensors' sizes left out: what graphs found by guards share."""
    structure, params, tensors, *rest = key
    return (structure, params, tuple((len(shape), *other) for shape, *other in tensors),
            *rest)


class ByGuards:
    """The graphs captured with symbolic sizes, each found by its guards, and which graph
    each key (each combination of sizes) was found to run on."""

    def __init__(self, dynamic: bool) -> None:
        self.dynamic = dynamic  # (False: every graph is captured with its call's own sizes)
        self.graphs: dict[tuple[Any, ...], list[Any]] = {}
        self.served: dict[tuple[Any, ...], Any] = {}
        #: Keys (sizes left out) whose capture failed with symbolic sizes, and why: captured
        #: with their own sizes from then on, not tried twice at every new size.
        self.fixed: dict[tuple[Any, ...], str] = {}

    def fakes(self, key: tuple[Any, ...], n_params: int, inputs: list[torch.Tensor]
              ) -> list[torch.Tensor] | None:
        """The inputs to capture the call keyed ``key`` on (:func:`fake_inputs`), or ``None``
        to capture it with its own sizes."""
        if not self.dynamic or without_sizes(key) in self.fixed:
            return None
        return fake_inputs(key[0], n_params, inputs)

    def refused(self, key: tuple[Any, ...], why: str) -> None:
        """A capture with symbolic sizes failed for ``key``'s arguments, for ``why``."""
        self.fixed[without_sizes(key)] = why

    def fixed_because(self, key: tuple[Any, ...]) -> str | None:
        """Why a call keyed ``key`` is captured with its own sizes (an earlier call of the
        same arguments failed with symbolic ones), or ``None``."""
        why = self.fixed.get(without_sizes(key))
        return None if why is None else f"as for an earlier call of these arguments: {why}"

    def warmup_key(self, key: tuple[Any, ...]) -> tuple[Any, ...]:
        """What the eager calls before compiling ``key`` count against (``warmup=``): its
        arguments without their sizes while the graph to come is to serve every size (none
        of them captured yet, none refused symbolic sizes), else ``key`` itself, size by
        size, as for graphs of fixed sizes."""
        shared = without_sizes(key)
        if self.dynamic and shared not in self.fixed and not self.graphs.get(shared):
            return shared
        return key

    def find(self, key: tuple[Any, ...], inputs: list[torch.Tensor]) -> Any:
        """The graph that holds for ``key``'s sizes (the newest first), or ``None``."""
        spec = self.served.get(key)
        if spec is None:
            spec = next((s for s in self.graphs.get(without_sizes(key), ())
                         if s.sizes.accepts(inputs)), None)
            if spec is not None:
                self.served[key] = spec
        return spec

    def add(self, key: tuple[Any, ...], spec: Any) -> None:
        """``spec``, captured with symbolic sizes for ``key``, found before the others."""
        self.graphs.setdefault(without_sizes(key), []).insert(0, spec)
        self.served[key] = spec

    def drop(self, spec: Any) -> None:
        """``spec`` found no more: a graph replaced by another (a loop's bound grown, a
        graph ``torch.compile`` could not compile with symbolic sizes)."""
        if spec is None:
            return
        for listed in self.graphs.values():
            listed[:] = [s for s in listed if s is not spec]
        self.served = {k: s for k, s in self.served.items() if s is not spec}
