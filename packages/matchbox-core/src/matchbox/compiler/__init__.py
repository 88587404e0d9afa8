"""``matchbox.compile``: a model written for one example, compiled for batches.

Eager Matchbox pays Python dispatch for every op; a model of many small ops
(an RNN cell stepped over a sequence, a halting ``while``) spends more time in
Python than in its kernels.  ``matchbox.compile`` captures what Matchbox
executes for a call as one graph of plain tensor ops, loops included, and
compiles it with ``torch.compile``::

    model = matchbox.compile(Model(...))          # an nn.Module (or a function)
    h = model(batch)                              # the first call of a shape compiles

Specialisations.  A graph holds for the arguments' structure (which are batches,
their dims, plain Python values), dtypes, devices, ``requires_grad``, grad mode and the
module's ``training`` flag; its batch size and padded sizes are symbols, fixed only where
the code decides from them (``compiler/symbolic.py``; padded sizes are rounded up to a
*bucket*).  A call with no graph runs on one for longer padded sizes when that costs at
most ``reuse`` times its own work (``compiler/reuse.py``).  A graph never depends on mask
or data values (``matchbox._capture``).  Loops: a ``for`` is one ``scan`` node
(``compiler/loops.py``); a ``while`` is unrolled to a step bound (``max_steps``, else the
largest padded size, at least 16, doubled when a call needs more).  A call never returns
a result cut short: each run reports (one sync) whether a loop reached its bound with
examples still in it, or a per-example check failed (the call then runs again eagerly
and raises the check's own error).

What cannot be captured runs eagerly, with a warning naming the reason and the line
(``fallback="raise"`` raises instead): code that reads a value (``.item()``, printing a
batch), ops whose result size depends on the mask, ``PackedBatch`` arguments, a function
reading tensors that are not its arguments.  Gradients are derived by ``torch.compile``
from the recorded ops: values and gradients equal eager Matchbox's up to rounding.
"""

from __future__ import annotations

import functools
import logging
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from matchbox._async_checks import set_async_checks
from matchbox.compiler import graph as _graph
from matchbox.compiler import reuse as reuse_module
from matchbox.compiler import scan_settings, symbolic
from matchbox.compiler.dynamo_skip import hide_from_torch_compile
from matchbox.compiler.graph import CaptureError, Specialization
from matchbox.compiler.recompiles import RECOMPILE_LIMIT, RecompileLimit, check_limit
from matchbox.compiler.state import (
    before_run,
    call_refusing_rebinds,
    copied_because,
    globals_key,
    module_functions,
    module_key,
    restore,
    torch_state_key,
)
from matchbox.compiler.structure import (
    Unsupported,
    aliases,
    check_bucket,
    flatten,
    largest_dynamic_size,
    summarize,
    tensor_key,
    unflatten,
)

__all__ = ["compile", "CompiledFunction", "CompiledModule", "Specialization", "CaptureError", "hide_from_torch_compile"]  # noqa: E501

log = logging.getLogger("matchbox.compile")

#: The smallest step bound of a captured ``while`` when ``max_steps`` is not given.
MIN_STEPS = 16


def compile(model: Any = None, /, *, bucket: int | str | None = 8, max_steps: int | None = None,
            backend: Any = "inductor", mode: str | None = None,
            options: dict[str, Any] | None = None, fallback: str = "warn",
            reuse: float | None = 2.0, warmup: float | str | None = None,
            dynamic: bool = True, recompile_limit: int | None = RECOMPILE_LIMIT) -> Any:
    """Compile ``model`` (an ``nn.Module`` or a function) for batches.

    Returns a :class:`CompiledModule` (an ``nn.Module`` sharing ``model``'s
    parameters) or a :class:`CompiledFunction`; usable as a decorator, with or
    without arguments.

    - ``bucket``: round dynamic padded sizes up to a multiple of this int, to a
      power of two (``"pow2"``), or not at all (``None``).
    - ``max_steps``: the step bound of ``while`` loops (and ranges of per-example
      counts); a call that needs more raises.  ``None``: a bound that grows.
    - ``backend``, ``mode``, ``options``: passed to ``torch.compile`` (on CUDA,
      ``mode="reduce-overhead"`` runs each graph as a CUDA graph); ``backend="fx"``
      runs the captured graph without compiling it.
    - ``fallback``: ``"warn"`` runs what cannot be captured eagerly, with a
      warning; ``"raise"`` raises :class:`CaptureError` instead.
    - ``reuse``: run a call on a graph compiled for longer padded sizes when that costs
      at most ``reuse`` times its own work (``compiler/reuse.py``); ``None``: never.
    - ``warmup``: ``"auto"`` (or seconds) runs a new specialisation eagerly until its
      eager calls cost what a compile does, then compiles; ``None``: at its first call.
    - ``dynamic``: capture the batch size and padded sizes as symbols, so that one graph
      serves every size its code does not fix (``compiler/symbolic.py``); ``False``: a
      graph per size.
    - ``recompile_limit``: how many graphs to capture; a call that needs one more runs
      eagerly, with a warning naming what changed (``compiler/recompiles.py``).
    """
    check_bucket(bucket)
    reuse_module.check_reuse(reuse)
    reuse_module.check_warmup(warmup)
    check_limit(recompile_limit)
    if max_steps is not None and (not isinstance(max_steps, int) or max_steps < 1):
        raise ValueError(f"matchbox.compile: max_steps must be a positive int, got {max_steps!r}")
    if fallback not in ("warn", "raise"):
        raise ValueError(f"matchbox.compile: fallback must be 'warn' or 'raise', got {fallback!r}")
    settings = dict(bucket=bucket, max_steps=max_steps, backend=backend, mode=mode,
                    options=options, fallback=fallback, reuse=reuse, warmup=warmup,
                    dynamic=dynamic, recompile_limit=recompile_limit)
    if model is None:
        return functools.partial(compile, **settings)
    if isinstance(model, type):
        raise TypeError(
            f"matchbox.compile expects an nn.Module or a function, got the class "
            f"{model.__name__}; compile an instance: model = matchbox.compile({model.__name__}"
            "(...))")
    if isinstance(model, nn.Module):
        return CompiledModule(model, **settings)
    if callable(model):
        return CompiledFunction(model, **settings)
    raise TypeError(f"matchbox.compile expects an nn.Module or a function, got "
                    f"{type(model).__name__}")


@dataclass
class _Call:
    """One call of a compiled model, its arguments taken apart (what each step reads)."""

    params: list[torch.Tensor]  # the module's parameters and buffers, in order
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    structure: Any  # the arguments' structure, their tensors replaced by positions
    tensors: list[torch.Tensor]  # the arguments' tensors (batches padded to the bucket)
    key: tuple[Any, ...]  # what a graph is specialised on

    @property
    def inputs(self) -> list[torch.Tensor]:
        """A graph's inputs: the parameters, then the arguments' tensors."""
        return self.params + self.tensors


class _Specializations:
    """The graphs of one compiled model, keyed by what they are specialised on.

    A call ends in one of these outcomes, each a method:

    - its arguments cannot be taken apart (a ``PackedBatch``, a function):
      :meth:`_run_uncaptured`, eager, warned once per reason;
    - its specialisation runs eagerly (the capture or ``torch.compile`` failed):
      :meth:`_run_eagerly`;
    - it changes in place a batch that the graph would get as a padded copy:
      :meth:`_run_eagerly_for_the_copy`, warned once;
    - the graph runs (:meth:`_run_graph`), and then either returns its result, or
      a per-example check failed (:meth:`_rerun_for_the_error`), or a loop reached
      its step bound (:meth:`_run_grown`: compiled again with twice the bound).

    ``graphs`` holds every specialisation, keyed by what it is specialised on (one
    that runs eagerly has its ``eager_reason``); ``uncaptured`` holds, by reason, the
    calls whose arguments could not be taken apart, and (``"recompile_limit"``) those past
    the recompile limit (``compiler/recompiles.py``): they have no key and no graph.
    """

    def __init__(self, run: Callable[..., Any], name: str, *, bucket: Any, max_steps: int | None,
                 backend: Any, mode: str | None, options: dict[str, Any] | None, fallback: str,
                 reuse: float | None, warmup: float | str | None, dynamic: bool,
                 recompile_limit: int | None, module: nn.Module | None = None):
        self.run = run  # run(params, args, kwargs): the eager call
        self.name = name
        self.module = module
        self.bucket = bucket
        self.max_steps = max_steps
        self.backend = backend
        self.mode = mode
        self.options = options
        self.fallback = fallback
        self.reuse = reuse
        self.warmup = reuse_module.Warmup(warmup)
        self.by_guards = symbolic.ByGuards(dynamic and symbolic.available())
        self.limit = RecompileLimit(recompile_limit, name, fallback, module is not None)
        self.graphs: dict[tuple[Any, ...], Specialization] = {}
        self.uncaptured: dict[str, Specialization] = {}

    def specializations(self) -> list[Specialization]:
        """Every specialisation, in the order first captured, then the uncaptured calls."""
        return list(self.graphs.values()) + list(self.uncaptured.values())

    def __call__(self, params: list[torch.Tensor], key_extra: Any, args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> Any:
        tensors: list[torch.Tensor] = []
        try:
            structure = flatten((args, kwargs), tensors, bucket=self.bucket)
        except Unsupported as error:
            return self._run_uncaptured(str(error), params, args, kwargs)
        key = (structure, tensor_key(params), tensor_key(tensors), torch.is_grad_enabled(),
               torch_state_key(), key_extra, aliases(params + tensors))
        call = _Call(params, args, kwargs, structure, tensors, key)
        spec = self.graphs.get(key) or self.by_guards.find(key, call.inputs)
        if spec is None and self.reuse is not None:
            larger = reuse_module.larger_graph(self.graphs, key, self.reuse)
            if larger is not None:
                return self._run_on_larger(*larger, call)
        if spec is None:
            warmup_key = self.by_guards.warmup_key(key)
            if self.warmup.runs_eagerly(warmup_key, self.graphs.values()):
                return self.warmup.run(warmup_key, lambda: self.run(params, args, kwargs))
            if self.limit.reached(self.graphs):  # listed last, with the uncaptured calls
                spec = self.uncaptured.setdefault("recompile_limit", self.limit.refuse(key))
                return self._run_eagerly(spec, call)
            bound = self.max_steps or max(MIN_STEPS, largest_dynamic_size(structure, tensors))
            spec = self._specialize(call, bound)
            spec.warmup_calls = self.warmup.calls.pop(warmup_key, 0)
        return self._run(spec, call)

    def _run_on_larger(self, key: tuple[Any, ...], spec: Specialization, call: _Call) -> Any:
        """``call`` on the graph keyed ``key``, compiled for longer padded sizes (``reuse``)."""
        spec.padded_calls += 1
        tensors = reuse_module.padded(call.structure, call.tensors, key[2])
        return self._run(spec, _Call(call.params, call.args, call.kwargs, call.structure,
                                     tensors, key))

    def _run(self, spec: Specialization, call: _Call) -> Any:
        """``call`` under ``spec``: eagerly when the specialisation or this call needs it,
        else by the graph."""
        if spec.eager_reason is not None:
            return self._run_eagerly(spec, call)
        if spec.mutated or spec.aliased:
            because = copied_because(spec, len(call.params), call.tensors,
                                     (call.args, call.kwargs))
            if because is not None:
                return self._run_eagerly_for_the_copy(spec, call, because)
        return self._run_graph(spec, call)

    def _run_eagerly(self, spec: Specialization, call: _Call) -> Any:
        """A specialisation that cannot be captured (or compiled) runs every call eagerly."""
        spec.calls += 1
        return self.run(call.params, call.args, call.kwargs)

    def _run_eagerly_for_the_copy(self, spec: Specialization, call: _Call, because: str
                                  ) -> Any:
        """This call's batch was padded into a copy, which the graph would change or return
        (``because``: which)."""
        _warn_once(spec, f"matchbox.compile({self.name}): runs a call eagerly: {because}")
        return self.run(call.params, call.args, call.kwargs)

    def _run_graph(self, spec: Specialization, call: _Call) -> Any:
        """The graph's run (its first compiles it), then the outcome its flags say."""
        inputs = call.inputs
        kept = before_run(spec, inputs)
        try:
            outputs = _graph.timed_first_run(spec, inputs)
        except Exception as error:  # noqa: BLE001
            if not spec.first_run_failed(error):
                raise
            restore(kept)
            why = f"torch.compile failed on the captured graph: {_graph.reason(error)}"
            if spec.sizes is not None:  # the same call with its own sizes, as before
                return self._run(self._specialize(call, spec.bound, spec.unrolled_because,
                                                  replaces=spec, static_because=why), call)
            if spec.scans:  # the same call with its loops unrolled, as before scans
                return self._run(self._specialize(call, spec.bound, why, replaces=spec,
                                 static_because=spec.fixed_sizes_because), call)
            self._fall_back(spec, why)
            return self._run_eagerly(spec, call)
        spec.calls += 1
        self._check_updates(spec, inputs, kept)
        if spec.has_flags:
            *outputs, flags = outputs
            failed, overflowed = flags.tolist()  # the one sync of a compiled call
            if failed or overflowed:
                restore(kept)  # the run is discarded: so are its in-place updates
            if failed:
                return self._rerun_for_the_error(call)
            if overflowed:
                return self._run_grown(spec, call)
        result, _ = unflatten(spec.out_structure, list(outputs))
        return result

    def _rerun_for_the_error(self, call: _Call) -> Any:
        """A check failed in the graph: the eager call raises its error (async checks off)."""
        with set_async_checks(False):
            return self.run(call.params, call.args, call.kwargs)

    def _run_grown(self, spec: Specialization, call: _Call) -> Any:
        """A loop reached the graph's step bound: compiled again with twice the bound (the
        new graph replaces the old one), and the call run again."""
        if self.max_steps is not None:
            raise RuntimeError(
                f"matchbox.compile({self.name}): a loop needs more than max_steps="
                f"{self.max_steps} steps for some example; raise max_steps (or leave it None "
                "for a bound that grows as calls need it)")
        log.info("%s: a loop needs more than %d steps; compiling again with %d",
                 self.name, spec.bound, 2 * spec.bound)
        return self._run(self._specialize(call, 2 * spec.bound, replaces=spec), call)

    def _specialize(self, call: _Call, bound: int, unrolled_because: str | None = None,
                    replaces: Specialization | None = None, static_because: str | None = None
                    ) -> Specialization:
        """Capture and compile ``call`` with loops bounded by ``bound`` (eager when it
        cannot be captured), stored under the call's key.

        ``unrolled_because``: why a graph holding loops as scans failed; this one unrolls
        every loop.  A capture that fails after making a scan is tried again unrolled too
        (one that fails before, for a reason of its own, is not captured twice)."""
        params, structure, tensors = call.params, call.structure, call.tensors
        static_because = static_because or self.by_guards.fixed_because(call.key)
        spec = Specialization(summarize(structure, tensors), bound, fixed_sizes_because=static_because,
                              unrolled_because=unrolled_because)
        if unrolled_because is not None:
            spec.unrolled.append(f"every loop, as a graph with scans failed: {unrolled_because}")
        start = time.perf_counter()
        fakes = None if static_because else self.by_guards.fakes(call.key, len(params), call.inputs)
        try:
            graph = _graph.capture(self.run, len(params), structure, params + tensors, bound,
                                   spec, self.module, self.backend,
                                   scans=unrolled_because is None, fakes=fakes)
        except CaptureError as error:
            if fakes is not None:  # with the call's own sizes, as before symbolic ones
                self.by_guards.refused(call.key, str(error))
                return self._specialize(call, bound, unrolled_because, replaces, str(error))
            if unrolled_because is None and spec.scans:
                return self._specialize(call, bound, unrolled_because=str(error),
                                        replaces=replaces, static_because=static_because)
            self._fall_back(spec, str(error))
        else:
            spec.nodes = len(graph.graph.nodes)
            spec.sizes = symbolic.guard_of(fakes)  # None: captured with its own sizes
            if spec.sizes is not None:
                spec.summary = summarize(structure, spec.sizes.shapes(fakes[len(params):]))
            spec.compiled = _graph.compile_graph(graph, self.backend, self.mode, self.options,
                                                 spec.sizes is not None, bool(spec.scans))
            if spec.scans:
                spec.compiled = scan_settings.scan_graph_settings(spec.compiled, self.backend,
                                                                  call.inputs)
            spec.compile_seconds = time.perf_counter() - start
            log.info("%s: captured %s as a graph of %d nodes (loop bound %d)", self.name,
                     spec.summary, spec.nodes, bound)
        self.graphs[call.key] = spec
        self.limit.captured(call.key)
        self.by_guards.drop(replaces)
        if spec.sizes is not None and spec.sizes.free:
            self.by_guards.add(call.key, spec)
        return spec

    def _check_updates(self, spec: Specialization, inputs: list[torch.Tensor],
                       kept: list[tuple[torch.Tensor, int, torch.Tensor | None]]) -> None:
        """Every tensor the call changes in place was changed by the compiled run.

        ``torch.compile`` has dropped such an update (of a 0-d float64 buffer, torch
        2.13 on the CPU): then the specialisation runs eagerly from the next call on,
        and this call raises rather than return with the update lost.
        """
        lost = [i for i, (tensor, version, _) in zip(spec.mutated, kept)
                if tensor._version == version]
        if lost:
            self._fall_back(spec, "torch.compile's graph dropped an in-place update of an "
                                  f"input of shape {tuple(inputs[lost[0]].shape)}")
            raise RuntimeError(
                f"matchbox.compile({self.name}): the compiled graph did not apply the call's "
                f"in-place update of a tensor of shape {tuple(inputs[lost[0]].shape)} and "
                f"dtype {inputs[lost[0]].dtype} (a torch.compile issue); this specialisation "
                "runs eagerly from now on: call again")

    def _fall_back(self, spec: Specialization, reason: str) -> None:
        """``spec`` runs eagerly from now on, with a warning saying why (``fallback="raise"``:
        raises :class:`CaptureError` instead)."""
        if self.fallback == "raise":
            raise CaptureError(f"matchbox.compile({self.name}): cannot capture {spec.summary} "
                               f"as one graph: {reason}")
        _warn(f"matchbox.compile({self.name}): runs {spec.summary} eagerly, as it cannot be "
              f"captured as one graph: {reason}")
        spec.eager_reason = reason

    def _run_uncaptured(self, reason: str, params: list[torch.Tensor], args: tuple[Any, ...],
                        kwargs: dict[str, Any]) -> Any:
        """A call whose arguments cannot be taken apart: eager (warned once per reason)."""
        if self.fallback == "raise":
            raise CaptureError(f"matchbox.compile({self.name}): cannot capture the call: {reason}")
        spec = self.uncaptured.get(reason)
        if spec is None:
            _warn(f"matchbox.compile({self.name}): runs eagerly: {reason}")
            spec = self.uncaptured[reason] = Specialization(
                summary="(arguments not captured)", bound=0, eager_reason=reason)
        spec.calls += 1
        return self.run(params, args, kwargs)


def _warn(message: str) -> None:
    """A warning at the user's line that called the compiled model."""
    filename, line = _graph.user_frame()
    warnings.warn_explicit(message, UserWarning, filename, line)


def _warn_once(spec: Specialization, message: str) -> None:
    if not spec.warned:
        spec.warned = True
        _warn(message)


class CompiledModule(nn.Module):
    """An ``nn.Module`` whose calls run compiled graphs (see :func:`compile`).

    It holds the original module (``_orig_mod``): parameters, buffers, ``.to()``
    and training mode are the original's, and other attributes are looked up on
    it.  Its ``state_dict()`` keys start with ``_orig_mod.``, as those of
    ``torch.compile``'s module do: save and load the original's.
    """

    def __init__(self, module: nn.Module, **settings: Any):
        super().__init__()
        self._orig_mod = module
        names: list[str] = []

        def run(params: list[torch.Tensor], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            if _same_tensors(params, module):
                return module(*args, **kwargs)
            return call_refusing_rebinds(module, names, params, args, kwargs)

        self._names = names  # the current call's parameter and buffer names, in order
        self._graphs = _Specializations(run, type(module).__name__, module=module, **settings)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        module = self._orig_mod
        named = list(module.named_parameters()) + list(module.named_buffers())
        self._names[:] = [n for n, _ in named]
        key = (module_key(module), globals_key(module_functions(module)))
        return self._graphs([t for _, t in named], key, args, kwargs)

    @property
    def specializations(self) -> list[Specialization]:
        """Every graph compiled so far (and every specialisation run eagerly, with why),
        then the calls whose arguments could not be captured, one entry per reason."""
        return self._graphs.specializations()

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["_orig_mod"], name)


class CompiledFunction:
    """A function whose calls run compiled graphs (see :func:`compile`)."""

    def __init__(self, fn: Callable[..., Any], **settings: Any):
        self._fn = fn
        functools.update_wrapper(self, fn)

        def run(params: list[torch.Tensor], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            return fn(*args, **kwargs)

        self._graphs = _Specializations(run, getattr(fn, "__qualname__", repr(fn)), **settings)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if args and isinstance(args[0], nn.Module):
            raise TypeError(
                f"matchbox.compile({self._graphs.name}): called with a module as its first "
                "argument (a method of an nn.Module?); compile the module instead: "
                "model = matchbox.compile(Model(...))")
        return self._graphs([], globals_key([self._fn]), args, kwargs)

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return self
        return functools.partial(self.__call__, instance)

    @property
    def specializations(self) -> list[Specialization]:
        """Every graph compiled so far (and every specialisation run eagerly, with why),
        then the calls whose arguments could not be captured, one entry per reason."""
        return self._graphs.specializations()


def _same_tensors(params: list[torch.Tensor], module: nn.Module) -> bool:
    """Whether ``params`` are the module's own (an eager call needs no functional_call)."""
    own = [p for _, p in module.named_parameters()] + [b for _, b in module.named_buffers()]
    return len(own) == len(params) and all(a is b for a, b in zip(own, params))
