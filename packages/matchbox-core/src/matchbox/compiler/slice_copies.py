"""A slice's copy in a scan's body as a slice that inductor fuses, not an ATen call each
step (:func:`backend`).

Torch derives a scan's backward from its body's joint graph, functionalized with
``remove="mutations_and_views"`` (``torch/_higher_order_ops/partitioner.py``): every view
in the body, forward and backward, becomes its copy.  Inductor's decompositions turn most
of those copies back into a view and a ``clone`` (``permute_copy``, ``t_copy``,
``narrow_copy``, ...), which it fuses into the kernels that read them, but not
``slice_copy``: it has neither a decomposition nor a lowering, so inductor fell back to
ATen for it, at every step of the loop (in the C++ wrapper through the dispatcher,
``aoti_torch_call_dispatcher("aten::slice_copy")``; torch 2.13 warns
"aten.slice_copy.Tensor is missing a c-shim implementation").  A body's slices are
everywhere: the pieces of a ``chunk`` (:mod:`matchbox.compiler.split_views` writes them as
slices), and the backward of every ``cat``.  The TreeLSTM's step made 9 such calls in its
forward and 4 in its backward, each allocating a tensor and copying into it.

Decomposed as ``slice(...).clone()`` (the refs' ``_make_copy_from_view`` form, which
inductor's own table uses for the other view copies), the copy holds the same values and
inductor reads it in the kernel that consumes it.  The decomposition reaches inductor
through its own parameter: a graph holding a scan is compiled by :class:`Inductor`, a
``torch.compile`` backend that calls inductor's ``compile_fx`` with
``decompositions=`` its usual table and this one entry more.  AOTAutograd traces the
graph's forward and backward with that table, the scan's body included (the body is
traced again inside the outer trace, which decomposes it with the outer trace's table);
inductor's table, shared by every ``torch.compile`` in the process, is left as it is.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

aten = torch.ops.aten


def slice_copy(x: torch.Tensor, dim: int = 0, start: Any = None, end: Any = None,
               step: Any = 1) -> torch.Tensor:
    """``aten.slice_copy.Tensor`` as the slice's contiguous copy (the values ATen's gives)."""
    return aten.slice.Tensor(x, dim, start, end, step).clone(
        memory_format=torch.contiguous_format)


class Decompositions(dict):  # type: ignore[type-arg]
    """Inductor's decomposition table ``base`` (one of its two) and :func:`slice_copy`,
    pickled by name.

    Inductor's graph cache keys a graph on the pickled decomposition table it was given
    (``compile_fx`` holds it in its ``get_decomp_fn``); its own table holds functions
    that do not pickle (pybind11's), and the cache refused every graph given one: a
    second process compiled every graph holding a scan again.  Pickled, this table is
    the name of inductor's table it extends and :data:`VERSION` (torch's version and
    inductor's settings are in the key already)."""

    def __init__(self, base: dict[Any, Any]) -> None:
        from torch._inductor import decomposition

        super().__init__(base)
        self[aten.slice_copy.Tensor] = slice_copy
        self.fast_random = base is not decomposition.decompositions

    def __reduce__(self) -> tuple[Any, ...]:
        return _decompositions, (self.fast_random, VERSION)


#: Named in a graph's cache key; a change to :func:`slice_copy` changes it.
VERSION = "matchbox-slice-copies-1"


def _decompositions(fast_random: bool, version: str = VERSION) -> Decompositions:
    """The table :class:`Decompositions` pickles as."""
    from torch._inductor import decomposition

    base = decomposition.fast_random_decomps() if fast_random else decomposition.decompositions
    return Decompositions(base)


#: ``torch.compile``'s options that are not inductor's settings (it takes them out first).
_NOT_CONFIG = ("guard_filter_fn", "use_aoti")


class Inductor:
    """``torch.compile``'s backend for a graph holding a scan: inductor, as
    ``backend="inductor"`` compiles it, with :func:`slice_copy` among its decompositions.

    ``torch.compile`` hands a callable backend its ``mode`` and ``options``; they become
    inductor's ``config_patches`` as for ``backend="inductor"`` (the mode's settings from
    ``torch._inductor.list_mode_options``, then the options).  The decomposition table is
    inductor's own for those settings (``select_decomp_table``, which depends on
    ``fallback_random``), read when the graph compiles."""

    compiler_name = "inductor"

    def __init__(self, dynamic: bool, mode: str | None = None,
                 options: dict[str, Any] | None = None) -> None:
        from torch._inductor import config

        self.dynamic = dynamic
        self.cudagraphs = False
        known = config.get_config_copy()
        for name in self.patches(mode, options):  # refused at once, as torch.compile does
            if name not in known:
                raise RuntimeError(f"Unexpected optimization option {name}, known options "
                                   f"are {list(known)}")

    def patches(self, mode: str | None, options: dict[str, Any] | None) -> dict[str, Any]:
        from torch._inductor import list_mode_options

        modal = list_mode_options(mode, self.dynamic) if mode and mode != "default" else {}
        return {**modal, **{k.replace("-", "_"): v for k, v in (options or {}).items()
                            if k not in _NOT_CONFIG}}

    def __call__(self, graph: torch.fx.GraphModule, inputs: Any, mode: str | None = None,
                 options: dict[str, Any] | None = None) -> Any:
        from torch._inductor import config
        from torch._inductor.compile_fx import compile_fx
        from torch._inductor.decomposition import select_decomp_table

        patches = self.patches(mode, options)
        with config.patch(patches):
            table = Decompositions(select_decomp_table())
            self.cudagraphs = self.cudagraphs or bool(config.triton.cudagraphs)
        return compile_fx(graph, inputs, config_patches=patches, decompositions=table)

    def reset(self) -> None:
        """As ``torch._dynamo.reset()`` resets ``backend="inductor"``'s CUDA graphs."""
        if self.cudagraphs:
            from torch._inductor.cudagraph_trees import reset_cudagraph_trees

            reset_cudagraph_trees()


def available() -> bool:
    """Whether this torch's inductor takes decompositions as a parameter and lacks one for
    ``slice_copy`` (torch 2.13; a torch that lowers ``slice_copy`` itself needs none)."""
    try:
        from torch._inductor import list_mode_options  # noqa: F401
        from torch._inductor.compile_fx import compile_fx
        from torch._inductor.decomposition import select_decomp_table  # noqa: F401
        from torch._inductor.lowering import lowerings
    except ImportError:
        return False
    return (aten.slice_copy.Tensor not in lowerings
            and "decompositions" in inspect.signature(compile_fx).parameters)


def backend(backend: Any, scans: bool, dynamic: bool, mode: str | None = None,
            options: dict[str, Any] | None = None) -> Any:
    """The backend ``torch.compile`` compiles a graph with (given ``mode`` and ``options``):
    :class:`Inductor` for a graph holding a scan under inductor (where this torch needs
    it), else ``backend``."""
    if backend == "inductor" and scans and available() and not (options or {}).get("use_aoti"):
        return Inductor(dynamic, mode, options)
    return backend
