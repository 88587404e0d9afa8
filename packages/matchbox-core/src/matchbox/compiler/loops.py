"""Loops that stay loops in a captured graph: one step traced once, run by ``scan``.

While :func:`matchbox.compiler.graph.capture` records a call, a loop written in
Python would be unrolled, step after step, into the graph: its size, and the time
``torch.compile`` takes over it, grow with the loop's length.  Where torch has the
``scan`` higher-order op (``torch._higher_order_ops.scan``), a loop whose state is
made of tensors and batches is recorded instead as one ``scan`` node whose body is
the graph of one step (``matchbox-control``'s ``for`` uses :func:`scan_steps`).

How a step becomes a body:

- the first steps run unrolled (*peeled*) until the loop's state keeps its
  structure from one step to the next (which state is a batch, which has a mask,
  shapes, dtypes, ``requires_grad``): the state of a fresh ``h = zeros(...)`` gains
  a mask and a gradient in its first step, and the scan is tried right after it
  (:func:`_settled_after_one`), before a second step is peeled;
- the tensors the last peeled step read that it did not make (parameters, values
  computed before the loop) become the scan's extra inputs: a dispatch mode hands the
  body the scan's own inputs in their place, and refuses a tensor from outside the loop
  that the peeled step did not read (a value cached by an earlier step);
- the step is traced once with ``requires_grad`` as it is in the loop (so that
  Matchbox's gradient guards are in the body, as in every unrolled step), then run by
  ``scan`` without autograd (``torch.compile`` derives the scan's backward pass from
  the body's ops);
- Matchbox's per-example checks and step-bound flags raised inside the body are
  or-ed over the steps and become flags of the graph, as in an unrolled loop;
- what a step emits (the items a ``for`` appends to a list, once a step) becomes the
  scan's per-step output, handed back as one value per step (:func:`scan_steps`) or
  stacked (:func:`scan_stacked`);
- the steps (:mod:`matchbox.compiler.loop_steps`) are a list, or slices along a
  dimension whose number may stay a symbol: then one graph serves every length.

Anything this cannot hold raises :class:`NotStructured`; an error torch raises where
it refuses the scan (its checks of the carries, its trace of the body) is taken the
same way.  The attempt is undone (:mod:`matchbox.compiler.scan_attempt`: the graph's
new nodes, the capture's flags) and the remaining steps are unrolled, saying why in
``capture.unrolled``: a loop is never captured differently from the unrolled loop's
values.

A ``for`` is a scan by default where torch has ``scan``, a ``while`` only with
``MATCHBOX_COMPILE_LOOPS=scan`` (:func:`whiles_too`); ``MATCHBOX_COMPILE_LOOPS=unroll``
unrolls every loop instead (a scan's step runs slower than an unrolled one: the README RNN's
training step at length 16 took 2.6 against 1.3 ms, but compiled in 13 s against 18 s,
and at length 64 in 15 s against 51 s).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map_only

from matchbox import _capture
from matchbox.compiler import grad_mode, loop_state, loop_steps, scan_attempt, scan_hoist
from matchbox.compiler.loop_state import NotStructured

#: How many steps may run unrolled before the loop's state settles.
MAX_PEELED = 3


#: Backends on which a graph holding a ``scan`` was checked against the loop, values and
#: gradients.  Inductor's only under
#: :func:`matchbox.compiler.scan_settings.scan_graph_settings`.
SCAN_BACKENDS = ("inductor", "aot_eager", "aot_eager_decomp_partition", "eager", "fx")

#: The values of ``MATCHBOX_COMPILE_LOOPS``: a ``for`` as a scan (``auto``, the default),
#: every loop as a scan (``scan``), every loop unrolled (``unroll``).
MODES = ("auto", "scan", "unroll")


def mode() -> str:
    """``MATCHBOX_COMPILE_LOOPS``, checked (a misspelt value is refused, not ignored)."""
    value = os.environ.get("MATCHBOX_COMPILE_LOOPS", "auto")
    if value not in MODES:
        raise ValueError(f"MATCHBOX_COMPILE_LOOPS={value!r}: expected one of "
                         f"{', '.join(MODES)} (auto: a for loop as a scan, a while "
                         "unrolled; scan: both as scans; unroll: every loop unrolled)")
    return value


def available() -> bool:
    """Whether torch has ``scan`` and ``MATCHBOX_COMPILE_LOOPS=unroll`` does not turn it off."""
    if mode() == "unroll":
        return False
    return _scan_op() is not None


def whiles_too() -> bool:
    """Whether a ``while`` is captured as a scan too (``MATCHBOX_COMPILE_LOOPS=scan``).

    By default (``auto``) only a ``for`` is: a ``while`` unrolls to its step bound, not
    to the padded length, so its graph does not grow with the data, and as a scan the
    halting ``while``'s compiled training step took 1.4x hand-written eager PyTorch's
    time, against 0.9x unrolled (compiling in 20 s against 30 s)."""
    return mode() == "scan"


def allowed(backend: Any) -> tuple[bool, str | None]:
    """Whether a graph for ``backend`` may hold loops as scans, and if not, why (``None``
    when torch lacks ``scan`` or it is turned off: loops unroll, as before)."""
    if not available():
        return False, None
    if backend not in SCAN_BACKENDS:
        return False, (f"loops are unrolled for backend {backend!r}: a scan was checked "
                       f"only on {', '.join(SCAN_BACKENDS)}")
    return True, None


def enabled() -> bool:
    """Whether the capture in progress may hold loops as scans (not a loop inside the step
    of another: it is unrolled into that step, once for the scan's body)."""
    capture = _capture.capturing()
    if capture is None or capture.in_loop_step:
        return False
    if isinstance(capture.scan_loops, str):  # why not: said once per graph
        if capture.scan_loops not in capture.unrolled:
            capture.unrolled.append(capture.scan_loops)
        return False
    return capture.scan_loops


def _scan_op() -> Any:
    try:
        from torch._higher_order_ops.scan import scan_op
        from torch._higher_order_ops.utils import reenter_make_fx  # noqa: F401
    except ImportError:  # torch 2.3 (the `oldest` environment): loops are unrolled
        return None
    return scan_op


# ---------------------------------------------------------------------- free tensors

class _Record(TorchDispatchMode):
    """Which tensors the ops of a step read that the step did not make."""

    def __init__(self) -> None:
        super().__init__()
        self.made: set[int] = set()
        self.read: dict[int, torch.Tensor] = {}
        self._keep: list[Any] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        for t in tree_leaves((args, kwargs)):
            if isinstance(t, torch.Tensor) and id(t) not in self.made and loop_state.is_fake(t):
                self.read.setdefault(id(t), t)
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.made.add(id(t))
                self._keep.append(t)  # ids stay unique while the step is recorded
        return out


class _Substitute(TorchDispatchMode):
    """Inside the body: the scan's own inputs in place of the tensors read from outside."""

    def __init__(self, mapping: dict[int, torch.Tensor], own: list[torch.Tensor]):
        super().__init__()
        self.mapping = mapping
        self.made = {id(t) for t in own}
        self._keep = list(own)

    def swap(self, t: torch.Tensor) -> torch.Tensor:
        i = id(t)
        if i in self.made:
            return t
        if i in self.mapping:
            return self.mapping[i]
        if loop_state.is_fake(t):
            raise NotStructured("the loop's step reads a tensor made outside the loop that "
                                "its first steps did not read (a value cached by a step)")
        if t.numel() == 1:
            # A real constant (Matchbox's own zero) is made in the body: scan's autograd
            # runs the body on fake tensors, which refuse a real one.
            return torch.full(t.shape, t.item(), dtype=t.dtype, device=t.device)
        raise NotStructured(f"the loop's step reads a constant tensor of shape {tuple(t.shape)}")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        args, kwargs = tree_map_only(torch.Tensor, self.swap, (args, kwargs or {}))
        out = func(*args, **kwargs)
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.made.add(id(t))
                self._keep.append(t)
        return out


# ---------------------------------------------------------------------- the loop

def scan_steps(step: Callable[..., Any], state: tuple[Any, ...], steps: Any,
               constants: tuple[Any, ...] = ()) -> tuple[tuple[Any, ...], list[tuple[Any, ...]]]:
    """The state after ``for s in steps: state = step(s, *state, *constants)``, and what
    each step emitted (nothing for the steps of a scan that emits nothing).

    ``step`` returns the new state (as many values as ``state``) followed by what the step
    emits (the values it appended to a list, say: scan's per-step outputs).  ``steps``:
    each step's input (a tuple of tensors and batches, one structure for every step), as
    a list or :mod:`~matchbox.compiler.loop_steps` steps.
    The first steps run unrolled (peeled) until the state keeps its structure; the rest
    run as one ``scan`` when torch has it, else unrolled.
    """
    state, emitted, scanned = scan_emits(step, state, steps, constants)
    if scanned is not None:
        structure, ys = scanned
        emitted += [loop_state.unflatten(structure, iter(parts))
                    for parts in zip(*(y.unbind(0) for y in ys))]
    return state, emitted


def scan_stacked(step: Callable[..., Any], state: tuple[Any, ...], steps: Any,
                 constants: tuple[Any, ...] = ()) -> tuple[tuple[Any, ...], list[torch.Tensor]]:
    """As :func:`scan_steps` for a step that emits tensors: what the steps emitted comes
    back stacked along a new first dimension, one tensor for each value a step emits (the
    scan's own per-step outputs, not taken apart: their number may be symbolic)."""
    state, emitted, scanned = scan_emits(step, state, steps, constants)
    parts = [[torch.stack(values)] for values in zip(*emitted)]
    if scanned is not None:
        parts = [p + [y] for p, y in zip(parts, scanned[1])] if parts else [[y] for y in scanned[1]]
    return state, [p[0] if len(p) == 1 else torch.cat(p) for p in parts]


def scan_emits(step: Callable[..., Any], state: tuple[Any, ...], steps: Any,
               constants: tuple[Any, ...] = ()
               ) -> tuple[tuple[Any, ...], list[tuple[Any, ...]], Any]:
    """As :func:`scan_steps`: the state after the steps, what the steps run one by one
    emitted, and the scan's ``(structure, per-step outputs)`` when the other steps ran
    as one (else ``None``): the structure of what one step emits, and each of its
    tensors for every scanned step, stacked along a new first dimension."""
    steps = loop_steps.as_steps(steps)
    state = tuple(state)
    n_state = len(state)
    capture = _capture.capturing()
    emitted: list[tuple[Any, ...]] = []
    done = 0
    settled = False
    # A loop inside the step of another (a recurrent module in a scanned for) unrolls
    # into that step: scan has no rule for the step's recording mode.
    may_scan = capture is not None and capture.scan_loops is True and not capture.in_loop_step
    while done < MAX_PEELED and done < steps.length:
        before = _structure_of(state)
        with _Record() as record, _inside_a_step(capture):
            new = tuple(step(steps[done], *state, *constants))
        state = new[:n_state]
        emitted.append(new[n_state:])
        done += 1
        if before is not None and _structure_of(state) == before:
            settled = True
            break
        if done == 1 and may_scan and done < steps.length:
            scanned = _settled_after_one(step, state, steps, constants, record, capture)
            if scanned is not None:
                return scanned[0], emitted, scanned[1]
    if steps.length <= done:
        return state, emitted, None
    if settled and may_scan:
        try:
            with scan_attempt.undone_on_failure(capture):
                final, scanned = _scan(step, state, steps, done, constants, record, capture)
            return final, emitted, scanned
        except NotStructured as error:
            capture.unrolled.append(str(error))
        except Exception as error:  # noqa: BLE001 -- torch refused the scan: unrolled instead
            capture.unrolled.append(scan_attempt.why(error))
    for item in steps.listed(done):
        new = tuple(step(item, *state, *constants))
        state = new[:n_state]
        emitted.append(new[n_state:])
    return state, emitted, None


def _settled_after_one(step: Callable[..., Any], state: tuple[Any, ...], steps: Any,
                       constants: tuple[Any, ...], record: _Record, capture: Any) -> Any:
    """The loop's other steps as one scan right after its first step, whose state changed
    structure (a fresh ``h = zeros(...)`` gains a mask and a gradient), or ``None``.

    Most states settle in that one step, and a second peeled step would be one more copy of
    the step in the graph (its forward and its backward), compiled for nothing.  The
    body's trace checks what the peeled step showed: that the state keeps its structure,
    and that the step reads no tensor from outside the loop that the first step did not
    (which were all made before the loop).  If not, the attempt is undone and says nothing:
    the loop peels another step, as before."""
    try:
        with scan_attempt.undone_on_failure(capture):
            return _scan(step, state, steps, 1, constants, record, capture)
    except Exception:  # noqa: BLE001 -- not settled, or refused: peeled further, tried again
        return None


@contextlib.contextmanager
def _inside_a_step(capture: Any) -> Iterator[None]:
    """The steps recorded or traced for a scan: a loop inside them is unrolled."""
    if capture is None:
        yield
        return
    capture.in_loop_step += 1
    try:
        yield
    finally:
        capture.in_loop_step -= 1


def _structure_of(state: tuple[Any, ...]) -> Any:
    try:
        return loop_state.flatten(state, [])
    except NotStructured:
        return None


def _scan(step: Callable[..., Any], state: tuple[Any, ...], steps: loop_steps.Steps,
          start: int, constants: tuple[Any, ...], record: _Record, capture: Any
          ) -> tuple[tuple[Any, ...], tuple[Any, list[torch.Tensor]]]:
    """The state after the steps from ``start`` on, run as one ``scan``, and the
    structure of what a step emits with the scan's per-step outputs."""
    from torch._higher_order_ops.utils import reenter_make_fx
    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing

    scan_op = _scan_op()
    init: list[torch.Tensor] = []
    structure = loop_state.flatten(state, init)
    item_structure, xs = steps.stacked(start)
    seen = {id(t) for t in init}
    free = [t for i, t in record.read.items() if i not in seen]
    n_init, n_items = len(init), len(xs)
    n_failures, n_overflows = len(capture.failures), len(capture.overflows)
    flags_seen = [False, False]
    nf = [2]  # the flags' carries: none when the body raises no flag (traced again)
    emits: list[Any] = [None]  # the structure of what a step emits (set by the trace)
    device = loop_state.device(init)
    sizes = loop_steps.length_inputs(steps.length, device)

    def body(*leaves: torch.Tensor) -> list[torch.Tensor]:
        # scan's order: the carry, the step's slices, the rest (tensors, then sizes)
        n = n_init + nf[0]
        item_args = list(leaves[n:n + n_items])
        outside = leaves[n + n_items:len(leaves) - len(sizes)]
        mapping = {id(t): inner for t, inner in zip(free, outside)}
        with _Substitute(mapping, list(leaves)) as swap:
            carry = [loop_state.decode(t, like.dtype) for t, like in zip(leaves[:n_init], init)]
            flags = [t > 0 for t in leaves[n_init:n]]
            values = loop_state.unflatten(structure, iter(carry))
            item = loop_state.unflatten(item_structure, iter(item_args))
            new = tuple(step(item, *values, *constants))
            out: list[torch.Tensor] = []
            if loop_state.flatten(new[:len(state)], out) != structure:
                raise NotStructured("the loop's state changes structure from step to step")
            ys: list[torch.Tensor] = []
            emits[0] = loop_state.flatten(new[len(state):], ys)
            out, ys = _owned([swap.swap(t) for t in out], [swap.swap(t) for t in ys], leaves)
            out = [_dense(t) for t in out]
            failures = capture.failures[n_failures:]
            overflows = capture.overflows[n_overflows:]
            del capture.failures[n_failures:], capture.overflows[n_overflows:]
            flags_seen[0] |= bool(failures)
            flags_seen[1] |= bool(overflows)
            if nf[0]:
                flags = [_or(flags[0], failures, swap), _or(flags[1], overflows, swap)]
            elif failures or overflows:
                raise NotStructured("the loop's step raises flags it did not raise before")
            # At least one per-step output: inductor (torch 2.13) failed to compile a
            # scan with none ("getitem is not an OpOverload") without autograd.
            return [loop_state.encode(t) for t in out + flags + ys] + (
                [] if ys else [loop_state.flag(device)])

    def trace() -> torch.fx.GraphModule:
        with disable_proxy_modes_tracing():
            samples = [loop_state.sample(_dense(loop_state.encode(t))) for t in init] + [
                loop_state.flag(device) for _ in range(nf[0])] + [
                loop_state.sample(t[0]) for t in xs] + [
                loop_state.sample(t) for t in free] + sizes
        try:
            with _inside_a_step(capture):
                return reenter_make_fx(body)(*samples)
        finally:
            del capture.failures[n_failures:], capture.overflows[n_overflows:]

    graph = trace()
    if not any(flags_seen):
        # Carries that need no gradient next to ones that do gave inductor's scan
        # backward (torch 2.13, CPU) wrong weight gradients: no flags unless needed.
        nf[0] = 0
        graph = trace()
    graph.graph.eliminate_dead_code()
    free = _drop_unread(graph, free, len(sizes))
    graph.recompile()
    graph, xs, free = _hoisted(graph, n_init + nf[0], xs, free, len(sizes), capture)
    flag_init = [loop_state.flag(device) for _ in range(nf[0])]
    with grad_mode.own_no_grad():
        result = list(scan_op(graph, [_dense(loop_state.encode(t)) for t in init] + flag_init, xs,
                              (*free, *sizes)))
    final = [loop_state.decode(t, like.dtype) for t, like in zip(result[:n_init], init)]
    n_carry = n_init + nf[0]
    ys = [loop_state.decode(t, meta[1])
          for t, meta in zip(result[n_carry:], loop_state.metas(emits[0]))]
    _as_in_the_loop(final, structure)
    _as_in_the_loop(ys, emits[0])
    final = [_dense_gradient(t) for t in final]
    if flags_seen[0]:
        capture.failures.append(result[n_init] > 0)
    if flags_seen[1]:
        capture.overflows.append(result[n_init + 1] > 0)
    capture.scans += 1
    return loop_state.unflatten(structure, iter(final)), (emits[0], ys)


def _as_in_the_loop(outputs: list[torch.Tensor], structure: Any) -> None:
    """Marks the scan's ``outputs`` as needing gradients where the loop's values did: what
    Matchbox's ops decide by (the scan itself runs without autograd)."""
    for t, meta in zip(outputs, loop_state.metas(structure)):
        if meta[3]:
            t.requires_grad_(True)


def _hoisted(graph: torch.fx.GraphModule, n_carry: int, xs: list[torch.Tensor],
             free: list[torch.Tensor], n_sizes: int, capture: Any
             ) -> tuple[torch.fx.GraphModule, list[torch.Tensor], list[torch.Tensor]]:
    """The body with what it computes from its slices alone computed before the scan
    (:mod:`matchbox.compiler.scan_hoist`); the body as it is where ``vmap`` refuses."""
    try:
        with scan_attempt.undone_on_failure(capture):
            return scan_hoist.hoisted(graph, n_carry, xs, free, n_sizes)
    except Exception:  # noqa: BLE001 -- an op vmap has no rule for: nothing is hoisted
        return graph, xs, free


def _drop_unread(graph: torch.fx.GraphModule, free: list[torch.Tensor], n_sizes: int
                 ) -> list[torch.Tensor]:
    """The tensors from outside that the body reads; the others' placeholders removed
    (not those of the ``n_sizes`` sizes after them).

    The last peeled step's own inputs are among those it read from outside, and an extra
    input the body does not read got a wrong gradient from inductor's scan backward
    (torch 2.13, CPU)."""
    placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
    placeholders = placeholders[:len(placeholders) - n_sizes]
    outside = placeholders[len(placeholders) - len(free):] if free else []
    kept = []
    for node, tensor in zip(outside, free):
        if node.users:
            kept.append(tensor)
        else:
            graph.graph.erase_node(node)
    return kept


def _owned(out: list[torch.Tensor], ys: list[torch.Tensor], inputs: tuple[torch.Tensor, ...]
           ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """A body's carries and per-step outputs, none of them an input, a view or another
    output (``scan`` refuses aliases).  Every per-step output is a copy, and so is a
    carry that is also emitted (``states.append(h)``): a value the step's backward needs
    (``tanh``'s output) is a per-step output of the scan's forward too, and inductor
    refused the scan as aliased when it was one of the body's own outputs as well
    (pytorch/pytorch#195977)."""
    emitted = {id(t) for t in ys}
    owned: list[torch.Tensor] = []
    for k, t in enumerate(out + ys):
        if (k >= len(out) or id(t) in emitted or t._is_view()
                or any(t is i for i in (*inputs, *owned))):
            t = t.clone()
        owned.append(t)
    return owned[:len(out)], owned[len(out):]


def _dense_gradient(t: torch.Tensor) -> torch.Tensor:
    """``t``, seen through a flat view and back, so that the gradient reaching the scan's
    backward (its carries' first value) has a fresh tensor's strides: reading one slice of
    a stack of final states (``h[-1]`` of a recurrent module, batch of one) gave it a
    size-one dimension's stride of the stack's, and ``scan`` refused the carries."""
    if t.dim() < 2 or 1 not in t.shape:
        return t
    return t.reshape(-1).view(t.shape)


def _dense(t: torch.Tensor) -> torch.Tensor:
    """``t`` with the strides of a fresh contiguous tensor, for a carry and its first value:
    ``scan`` wants their strides equal, and a loop's state may start as a view (a recurrent
    module's state views, transposed) or come out of a step as one (a chunk of the gates),
    while ``contiguous()`` keeps any stride of a size-one dimension (a batch of one)."""
    strides, step = [], 1
    for size in reversed(t.shape):
        strides.append(step)
        step *= max(size, 1)
    if tuple(reversed(strides)) == t.stride():
        return t
    return t.clone(memory_format=torch.contiguous_format)


def _or(flag: torch.Tensor, new: list[torch.Tensor], swap: _Substitute) -> torch.Tensor:
    if not new:
        return flag.clone()
    return flag | torch.stack([swap.swap(f).to(flag.device) for f in new]).any()


