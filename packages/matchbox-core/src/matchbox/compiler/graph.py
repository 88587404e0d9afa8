"""Capturing one call as a graph of plain tensor ops, and compiling that graph.

The call runs once under ``make_fx`` on fake tensors (which hold shapes, not
values) with Matchbox in capture mode (``matchbox._capture``): every op a
batch op dispatches to is recorded, loops are unrolled (steps where no example
runs still execute, masked), and checks become outputs of the graph.  Because
fake tensors hold no values, anything that would read one (``.tolist()``,
``.item()``, an index whose size depends on the mask) fails the capture
loudly, so a captured graph never depends on values it did not see.

The graph is then compiled with ``torch.compile`` (inductor by default),
which derives its backward pass: gradients are those of the recorded ops,
as in eager mode.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from matchbox import _capture, _masking
from matchbox.compiler import grad_mode, precompiled, slice_copies, split_views
from matchbox.compiler.state import watch_effects
from matchbox.compiler.structure import Structure, flatten, roles, unflatten


class CaptureError(RuntimeError):
    """A call that cannot be captured as one graph (it runs eagerly instead)."""


@dataclass
class Specialization:
    """One graph: the arguments it is specialised on, and how it has run."""

    summary: str
    bound: int
    compiled: Callable[..., Any] | None = None
    out_structure: Structure | None = None
    has_flags: bool = False
    #: Seconds spent capturing the graph and compiling it (its first run included, and its
    #: first backward pass, which compiles the backward graph).
    compile_seconds: float = 0.0
    calls: int = 0
    #: Calls of shorter batches run on this graph, padded to its sizes
    #: (``matchbox.compiler.reuse``); counted in ``calls`` too.
    padded_calls: int = 0
    #: Calls run eagerly before this graph compiled (``warmup=``), not counted in ``calls``.
    warmup_calls: int = 0
    #: Why this specialisation runs eagerly (``None``: it runs the compiled graph).
    eager_reason: str | None = None
    nodes: int = 0
    #: Positions, among the graph's inputs, of the tensors the call changes in place
    #: (a buffer's running statistics, an argument).
    mutated: tuple[int, ...] = ()
    #: Positions, among the graph's inputs, of the batch data and plain tensors that a
    #: result is, or is a view of (``return x``, ``x[:, :2]``).
    aliased: tuple[int, ...] = ()
    warned: bool = False
    #: How many loops the graph holds as one ``scan`` node each (``matchbox.compiler.loops``),
    #: and why the loops unrolled instead were (a loop that may not be a scan says nothing).
    scans: int = 0
    unrolled: list[str] = field(default_factory=list)
    #: The sizes the graph holds for, when captured with symbolic sizes
    #: (``matchbox.compiler.symbolic.SizeGuard``; ``None``: captured with its own sizes).
    sizes: Any = None
    #: Why the graph holds for its own sizes only, when capturing or compiling it with
    #: symbolic sizes failed (``None``: it did not, or ``dynamic=False``).
    fixed_sizes_because: str | None = None
    #: Why every loop of the graph is unrolled: a graph of the same call holding scans
    #: failed (``None``: loops are scans where they may be).  A graph that fails to compile
    #: is tried again giving up what it gave up and one thing more (its symbolic sizes,
    #: then its scans), so one that fails every way runs eagerly.
    unrolled_because: str | None = None
    _first_run: bool = field(default=True, repr=False)

    def first_run_failed(self, error: BaseException) -> bool:
        """Whether ``error``, raised by a run, came from compiling the graph (its first
        run): then the specialisation runs eagerly instead (see :func:`timed_first_run`)."""
        return self._first_run


# Matchbox's own constants, which a graph may hold (they are never written to).
_KNOWN_CONSTANTS = (_masking._ZERO,)


def capture(call: Callable[..., Any], n_params: int, structure: Structure,
            inputs: list[torch.Tensor], bound: int, spec: Specialization,
            module: torch.nn.Module | None = None, backend: Any = "inductor",
            scans: bool = True, fakes: list[torch.Tensor] | None = None) -> torch.fx.GraphModule:
    """The graph of ``call(params, args, kwargs)`` on ``inputs`` (the parameters first).

    ``module``: the module whose attributes the call must leave alone
    (:func:`matchbox.compiler.state.watch_effects`); ``scans``: whether loops may be
    captured as scans (where the backend allows it); ``fakes``: ``inputs`` as fake tensors
    with symbolic sizes (``compiler/symbolic.py``), to capture with those (else the
    inputs' own sizes).

    Records the result's structure and whether the graph returns flags in
    ``spec``; raises :class:`CaptureError` saying why a call cannot be captured.
    """
    from torch.fx.experimental.proxy_tensor import make_fx

    from matchbox.compiler import hooks, loops

    scan_loops, why_not = loops.allowed(backend) if scans else (False, None)

    def flat(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        params = list(tensors[:n_params])
        (args, kwargs), _ = unflatten(structure, list(tensors), n_params)
        versions = [t._version for t in tensors]
        batches = [(b, b._mask) for b in _batches_in((args, kwargs))]
        state = _capture.Capture(bound)
        state.scan_loops = scan_loops or why_not or False
        token = _capture.begin(state)
        try:
            with watch_effects(module), grad_mode.capture_grad_mode(), hooks.HooksRefused():
                result = call(params, args, kwargs)
        finally:
            _capture.end(token)
            spec.scans = state.scans  # also when the capture fails: after a scan, or not
        if any(b._mask is not mask for b, mask in batches):
            raise _capture.NotCapturable(
                "the call changes a batch argument's mask in place (an in-place op with an "
                "argument that is padding where the batch is real): a graph returns tensors, "
                "not the argument's new mask")
        spec.unrolled += state.unrolled
        spec.mutated = tuple(i for i, (t, v) in enumerate(zip(tensors, versions))
                             if t._version != v)
        outputs: list[torch.Tensor] = []
        spec.out_structure = flatten(result, outputs, what="result")
        spec.aliased = _aliased(tensors, outputs, n_params, structure)
        flags = state.flags()
        spec.has_flags = flags is not None
        return tuple(outputs) + ((flags,) if flags is not None else ())

    try:
        mode = "fake" if fakes is None else "symbolic"
        graph = make_fx(flat, tracing_mode=mode, _allow_non_fake_inputs=True)(
            *(inputs if fakes is None else fakes))
    except Exception as error:  # noqa: BLE001 -- every failure to capture falls back to eager
        raise CaptureError(reason(error)) from error
    _refuse_external_tensors(graph)
    if spec.scans:
        # Dead nodes (autograd's detaches of the values a scan reads) made torch.compile
        # see the scan's inputs as aliased; in-place updates are impure and stay.
        graph.graph.eliminate_dead_code()
        graph.recompile()
        split_views.splits_as_slices(graph)
    return graph


def _aliased(inputs: tuple[torch.Tensor, ...], outputs: list[torch.Tensor], n_params: int,
             structure: Structure) -> tuple[int, ...]:
    """The positions of the inputs, batch data or plain tensors (not masks, which a graph
    makes for a batch without one), whose storage a result shares."""
    from torch.multiprocessing.reductions import StorageWeakRef

    kinds = [("param", ())] * n_params + roles(structure)
    storages = {StorageWeakRef(t.untyped_storage()): i for i, t in enumerate(inputs)
                if kinds[i][0] in ("data", "plain")}
    found = {storages.get(StorageWeakRef(t.untyped_storage())) for t in outputs}
    return tuple(sorted(i for i in found if i is not None))


def _batches_in(value: Any) -> list[Any]:
    from matchbox.masked_batch import MaskedBatch

    if type(value) is MaskedBatch:
        return [value]
    if type(value) in (tuple, list):
        return [b for v in value for b in _batches_in(v)]
    if type(value) is dict:
        return [b for v in value.values() for b in _batches_in(v)]
    return []


def compile_graph(graph: torch.fx.GraphModule, backend: Any, mode: str | None,
                  options: dict[str, Any] | None, dynamic: bool = False,
                  scans: bool = False) -> Callable[..., Any]:
    """``graph`` compiled by ``torch.compile`` (no guards on values; ``dynamic``: a graph
    captured with symbolic sizes, compiled once for all of them; ``scans``: a graph holding
    a scan, which inductor compiles with :mod:`matchbox.compiler.slice_copies`'s
    decomposition)."""
    if backend == "fx":  # the captured graph as it is, run by PyTorch op by op
        return graph
    kwargs: dict[str, Any] = {"fullgraph": True, "dynamic": dynamic}
    if mode is not None:
        kwargs["mode"] = mode
    elif backend == "inductor":
        # An unrolled loop of pointwise steps (`while x < t: x = x * x + 1`) made inductor's
        # CPU fusion inline ever longer chains (pytorch/pytorch#192498: compiling did not
        # end); the GPU's smaller threshold keeps each fused body short on the CPU too.
        options = {"realize_opcount_threshold": 30, **(options or {})}
    if options is not None:
        kwargs["options"] = options
    kwargs["backend"] = slice_copies.backend(backend, scans, dynamic, mode, options)
    compiled = torch.compile(graph, **kwargs)
    if precompiled.wanted(backend, mode):  # MATCHBOX_PRECOMPILE=1: saved whole, to load
        compiled = precompiled.precompiled(graph, kwargs["backend"], options, dynamic, compiled)
    return _without_duck_sizing(compiled) if dynamic else compiled


def _without_duck_sizing(compiled: Callable[..., Any]) -> Callable[..., Any]:
    """``compiled`` (symbolic sizes) run with TorchDynamo's *duck sizing* off.

    With it on, input sizes equal at the first call share one symbol: a batch of 32 padded
    to 32 steps with 32 features made the batch size and the length the features' static
    32, and every other size compiled again (about 10 s each).  Dynamo makes its shape
    environment when it compiles, at a call, so every call runs under the setting."""
    from torch.fx.experimental import _config

    if not hasattr(_config, "use_duck_shape"):  # (torch 2.3: recompiles as it does)
        return compiled
    return with_settings(compiled, [(_config, "use_duck_shape", False)])


def with_settings(compiled: Callable[..., Any], settings: list[tuple[Any, str, Any]]
                  ) -> Callable[..., Any]:
    """``compiled`` run with each ``(config module, name, value)`` of ``settings`` set, and
    the values before restored after (a compilation at a call sees them).

    Set and restored by hand, as ``config.patch`` would: making a patch builds a class,
    about 50 µs a call for one setting, against about 20 for a scan graph's three.  Reentrant (the
    values before are the call's own), and in each thread its own where torch keeps a
    config's values per context (torch 2.13), as ``patch`` is."""

    def run(*inputs: torch.Tensor) -> Any:
        before = [getattr(config, name) for config, name, _ in settings]
        for config, name, value in settings:
            setattr(config, name, value)
        try:
            return compiled(*inputs)
        finally:
            for (config, name, _), value in zip(settings, before):
                setattr(config, name, value)

    return run


def timed_first_run(spec: Specialization, inputs: list[torch.Tensor]) -> Any:
    """Run ``spec``'s compiled graph; its first run (the compilation) counts as compile time."""
    if not spec._first_run:
        return spec.compiled(*inputs)
    start = time.perf_counter()
    result = spec.compiled(*inputs)
    spec.compile_seconds += time.perf_counter() - start
    spec._first_run = False
    _time_first_backward(spec, inputs, result)
    return result


def _time_first_backward(spec: Specialization, inputs: list[torch.Tensor], outputs: Any) -> None:
    """AOTAutograd compiles a graph's backward pass at its first backward, after the call:
    that counts as compile time too (from the gradient reaching one of the graph's outputs
    to one of its inputs' gradients; the backward's first run included).  (A graph holding
    a scan compiles its backward with the forward under inductor, ``scan_settings``: then
    this times the backward's first run only.)"""
    outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    out = next((t for t in outputs if isinstance(t, torch.Tensor) and t.requires_grad), None)
    first = next((t for t in inputs if t.requires_grad), None)
    if out is None or first is None:
        return
    started: list[float] = []

    def begin(grad: torch.Tensor) -> None:
        started.append(time.perf_counter())
        handles[0].remove()

    def end(grad: torch.Tensor) -> None:
        if started:  # (a backward that did not start at this graph's output: not timed)
            spec.compile_seconds += time.perf_counter() - started[0]
        handles[1].remove()

    handles = [out.register_hook(begin), first.register_hook(end)]


def _refuse_external_tensors(graph: torch.fx.GraphModule) -> None:
    """A tensor read from outside (a global, a closed-over parameter, a module attribute
    that is not a parameter or buffer) would be frozen into the graph: a later change
    to it, an optimiser step, would not be seen.  Such captures are refused."""
    for node in graph.graph.nodes:
        if node.op != "get_attr":
            continue
        value = getattr(graph, node.target, None)
        if not isinstance(value, torch.Tensor) or any(value is c for c in _KNOWN_CONSTANTS):
            continue
        if node.users and all(user.target is torch.ops.aten.lift_fresh_copy.default
                              for user in node.users):
            continue  # a tensor made inside the call (torch.tensor(...)): a fresh copy
        what = "a parameter" if value.requires_grad else "a tensor"
        raise CaptureError(
            f"the call reads {what} of shape {tuple(value.shape)} that is not one of its "
            "arguments (a global, a closed-over module's parameter, or a module attribute "
            "that is not a registered parameter or buffer); its value would be frozen into "
            "the graph: compile the module itself (matchbox.compile(module)), pass the tensor "
            "as an argument, or register it as a buffer")


def reason(error: BaseException) -> str:
    """Why a capture failed, with the line of user code it failed at (else Matchbox's)."""
    text = _first_line(error)
    # torch.compile's BackendCompilerFailed says only "backend='inductor' raised:" on its
    # first line; what failed is the exception it wraps.
    inner = getattr(error, "inner_exception", None)
    if isinstance(inner, BaseException):
        text += f" {_first_line(inner)}"
    where = _innermost_frame(error)
    return text + (f" (at {where})" if where else "")


def _first_line(error: BaseException) -> str:
    message = str(error).strip()
    return f"{type(error).__name__}: {message.splitlines()[0] if message else ''}"


def _innermost_frame(error: BaseException) -> str | None:
    """The innermost frame of the user's code in ``error``'s traceback, then of Matchbox's.

    Both are named when the failure is inside Matchbox: the user's line says which call,
    Matchbox's says which op could not be captured (packing that reads lengths, say).
    """
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if not f.filename.startswith((_TORCH_DIR, _STDLIB_DIR))
              and "matchbox/compiler" not in f.filename]
    user = [i for i, f in enumerate(frames) if not _is_matchbox(f.filename)]
    chosen = [frames[user[-1]]] if user else []
    inside = frames[user[-1] + 1:] if user else frames
    chosen += inside[-1:]
    return "; ".join(f"{f.filename}:{f.lineno}, in {f.name}" for f in chosen) or None


def user_frame() -> tuple[str, int]:
    """The file and line of the innermost caller outside Matchbox and torch (for warnings)."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith((_TORCH_DIR, _STDLIB_DIR)) and not _is_matchbox(name):
            return name, frame.f_lineno
        frame = frame.f_back
    return "<unknown>", 0


_TORCH_DIR = os.path.dirname(torch.__file__)
_STDLIB_DIR = os.path.dirname(os.__file__)
_MATCHBOX_DIRS: tuple[str, ...] = ()


def _is_matchbox(filename: str) -> bool:
    global _MATCHBOX_DIRS
    if not _MATCHBOX_DIRS:
        import matchbox

        _MATCHBOX_DIRS = tuple(os.path.join(p, "") for p in matchbox.__path__)
    return filename.startswith(_MATCHBOX_DIRS)
