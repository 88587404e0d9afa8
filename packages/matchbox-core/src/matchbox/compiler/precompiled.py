"""A compiled graph saved whole, so that a second process skips TorchDynamo (opt-in).

With ``MATCHBOX_PRECOMPILE=1``, a graph ``matchbox.compile`` captured is compiled under
inductor through PyTorch's ahead-of-time precompile (``torch.compile(...).aot_compile``,
torch 2.10 and later), and what it makes -- TorchDynamo's guards and bytecode, the
forward and backward kernels -- is saved in inductor's cache folder.  A later process
that captures the same graph loads it instead of tracing it again: inductor's own caches
already spare the kernels' compilation, not TorchDynamo's trace of the graph, about
2 s of a warm start for the README RNN (benchmarks/RESULTS.md, issue 21).

A saved graph is found by a key made of everything the compiled code depends on: the
graph's code and its submodules' (a scan's body), the inputs' dtypes, devices,
``requires_grad``, ranks (and sizes, for a graph captured with its own sizes), the grad
mode, autocast, the compile options and torch's version.  The graph module itself, whose
constants the compiled code reads, is handed to it at load time; TorchDynamo's guards on
the inputs' sizes are kept, and a call they refuse runs ``torch.compile``'s graph
instead.  Anything that fails here (a graph that cannot be saved, a file that cannot be
loaded) falls back to ``torch.compile`` as without this setting.

Experimental, as PyTorch's API is: off by default.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable
from typing import Any

import torch

log = logging.getLogger("matchbox.compile")

#: Keys of the graphs this process loaded from the cache (read by tests).
LOADED: list[str] = []


def wanted(backend: Any, mode: str | None) -> bool:
    """Whether graphs compiled with ``backend`` and ``mode`` are precompiled."""
    return (os.environ.get("MATCHBOX_PRECOMPILE") == "1" and backend == "inductor"
            and mode is None and hasattr(torch.compiler, "load_compiled_function"))


def precompiled(graph: torch.fx.GraphModule, backend: Any, options: dict[str, Any] | None,
                dynamic: bool, fallback: Callable[..., Any]) -> Callable[..., Any]:
    """``graph``, compiled by ``backend`` at its first call by precompiling (or loaded, where
    saved); ``fallback`` (``torch.compile``'s graph) runs the calls the saved guards refuse,
    and every call where precompiling failed."""
    state: dict[str, Any] = {}

    def run(*inputs: torch.Tensor) -> Any:
        fn = state.get("fn")
        if fn is None:
            fn = state["fn"] = (_loaded_or_compiled(graph, backend, options, dynamic, inputs)
                                or fallback)
        if fn is fallback or not fn.guard_check(*inputs):
            return fallback(*inputs)
        return fn(*inputs)

    return run


def _loaded_or_compiled(graph: torch.fx.GraphModule, backend: Any,
                        options: dict[str, Any] | None, dynamic: bool,
                        inputs: tuple[torch.Tensor, ...]) -> Any:
    key = _key(graph, options, dynamic, inputs)
    path = os.path.join(_folder(), f"{key}.pt2")
    try:
        if os.path.exists(path):
            fn = _load(path, graph)
            LOADED.append(key)
        else:
            fn = torch.compile(_caller(graph), backend=backend, fullgraph=True,
                               dynamic=dynamic, options=options).aot_compile((inputs, {}))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fn.save_compiled_function(path, external_data={"graph": graph})
    except Exception as error:  # noqa: BLE001 -- torch.compile then compiles it, as without
        log.info("matchbox.compile: a graph was not precompiled (%s: %s); torch.compile "
                 "compiles it", type(error).__name__, error)
        return None
    fn.disable_guard_check()  # run checks them first (a refused call takes the fallback)
    return fn


def _load(path: str, graph: torch.fx.GraphModule) -> Any:
    from torch._guards import TracingContext, tracing
    from torch._subclasses.fake_tensor import FakeTensorMode

    # Loading rebuilds the guards' sources, and one kind (an import's) records a guard on
    # the current trace as it is made (torch 2.13): an empty trace takes it.
    with open(path, "rb") as file, tracing(TracingContext(FakeTensorMode())):
        return torch.compiler.load_compiled_function(
            file, f_globals=_caller(graph).__globals__, external_data={"graph": graph})


def _caller(graph: torch.fx.GraphModule) -> Callable[..., Any]:
    """The function precompiled for ``graph``, which it reads as a global: precompiling
    leaves out guards on globals, where a guard on a graph module (an instance of a class
    of its own) could not be saved.  Made from source of its own: TorchDynamo does not
    trace functions in Matchbox's files."""
    namespace = {"graph": graph}
    exec(compile(_CALLER, "<matchbox.compile: a precompiled graph>", "exec"), namespace)  # noqa: S102
    return namespace["call_graph"]


_CALLER = "def call_graph(*inputs):\n    return graph(*inputs)\n"


def _key(graph: torch.fx.GraphModule, options: dict[str, Any] | None, dynamic: bool,
         inputs: tuple[torch.Tensor, ...]) -> str:
    parts = [torch.__version__, repr(dynamic), repr(sorted((options or {}).items())),
             repr(torch.is_grad_enabled()), repr(torch.is_autocast_enabled())]
    parts += [f"{name}:{getattr(module, 'code', type(module).__name__)}"
              for name, module in graph.named_modules()]
    parts += [f"{t.dtype}/{t.device}/{t.requires_grad}/{t.dim() if dynamic else tuple(t.shape)}"
              for t in inputs]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def _folder() -> str:
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return os.path.join(cache_dir(), "matchbox-precompiled")
