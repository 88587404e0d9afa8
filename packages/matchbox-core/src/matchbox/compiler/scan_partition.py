"""What a scan's forward pass saves for its backward: a loop-invariant weight once, not a
copy of it for every step (:func:`settings`).

Torch 2.13 derives a scan's backward from its body (``torch/_higher_order_ops/scan.py``,
``scan_autograd``): the body's joint graph (forward and backward of one step) is traced
and functionalized with ``remove="mutations_and_views"``, so each view in it becomes a copy
(``W.t()`` is ``aten.t_copy(W)``), then AOTAutograd's min-cut partitioner picks the values
the backward reads.  A value that is one of the scan's inputs read by every step (an
additional input: a weight) is saved once; any other value is a per-step output, stacked
over the steps.  An RNN cell's ``h @ W.t()`` has the backward ``grad @ W.t().t()``, the
``t_copy(t_copy(W))`` of the joint graph: the partitioner, which prices a value by its size
and by how close it is to the backward (``1.1 ** distance``) and knows nothing of the
stacking, saves that copy rather than ``W`` (a step further from the backward).  So the
forward wrote the whole weight every step into a ``(steps, H, H)`` buffer, reversed it
for the backward and read it there: for the README RNN at hidden size 256, a 14 MB buffer
for 56 steps, and a compiled training step slower than eager.

Marked ``MUST_RECOMPUTE`` (the partitioner's own checkpoint policy, which it honours by
computing the value again in the backward from what it reads), a copy of such a view is
never saved: its input is, once if that is an additional input.  Marked here: every node
of the joint graph that is a view's copy (``torch.Tag.view_copy``) of the step's inputs
or of other such copies, not smaller than what it copies (saving its input then costs no
more bytes, even for a carry, which is saved every step).  Values are unchanged: the
backward computes the same copy from the same tensor.

Torch has no option or hook for this, so :func:`settings` swaps ``HopJointGraph.partition``
(used by scan's autograd only) for a version that marks those nodes first, for the calls of
a graph holding a scan (a flag of the calling thread: another thread's compilations are
untouched).  That wraps a method of torch's internals, which Matchbox otherwise never
does (it changes no torch function's behaviour), so it is opt-in, experimental and off by
default: ``MATCHBOX_SCAN_RECOMPUTE=1`` turns it on.  The lasting fix is upstream (the
partitioner of a scan's joint graph could price a per-step output by the steps it is
stacked over, or take a recompute policy), see docs/compile.md.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import torch


class _Flag(threading.local):
    """Whether this thread compiles a graph holding a scan (set by :func:`settings`)."""

    on = False


_FLAG = _Flag()


def available() -> bool:
    """Whether this torch's scan autograd partitions its joint graph where it can be marked
    (torch 2.13 does; 2.3 has no scan)."""
    try:
        from torch._functorch.partitioners import CheckpointPolicy  # noqa: F401
        from torch._higher_order_ops.partitioner import HopJointGraph
    except ImportError:
        return False
    return callable(getattr(HopJointGraph, "partition", None)) and hasattr(torch.Tag, "view_copy")


def wanted() -> bool:
    """Whether the user opted in (``MATCHBOX_SCAN_RECOMPUTE=1``) and this torch can do it."""
    return os.environ.get("MATCHBOX_SCAN_RECOMPUTE") == "1" and available()


def settings() -> list[tuple[Any, str, Any]]:
    """The ``(object, name, value)`` settings under which a graph holding a scan compiles
    with its loop-invariant copies recomputed (none unless :func:`wanted`)."""
    if not wanted():
        return []
    _install()
    return [(_FLAG, "on", True)]


def _install() -> None:
    """``HopJointGraph.partition`` marking first where this thread's flag is on (wrapped
    again if something has put another function in its place since)."""
    from torch._higher_order_ops.partitioner import HopJointGraph

    original = HopJointGraph.partition
    if getattr(original, "_matchbox_marks", False):
        return

    def partition(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _FLAG.on:
            mark_invariant_copies(self.joint_gm.graph)
        return original(self, *args, **kwargs)

    partition.__wrapped__ = original  # type: ignore[attr-defined]
    partition._matchbox_marks = True  # type: ignore[attr-defined]
    HopJointGraph.partition = partition


def mark_invariant_copies(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    """Marks ``MUST_RECOMPUTE`` each view's copy in ``graph`` (a joint graph) that copies
    its forward inputs (``primals_*``) or other such copies, and is not smaller than what
    it copies; returns them."""
    from torch._functorch.partitioners import CheckpointPolicy

    marked: set[torch.fx.Node] = set()
    for node in graph.nodes:
        if node.op != "call_function" or not _rearranges(node):
            continue
        inputs = node.all_input_nodes
        if not inputs or not all(_is_primal(n) or n in marked for n in inputs):
            continue
        if not all(_not_smaller(node, n) for n in inputs):
            continue
        if node.meta.get("recompute") is None:
            node.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
        marked.add(node)
    return [n for n in graph.nodes if n in marked]


def _rearranges(node: torch.fx.Node) -> bool:
    """Whether ``node`` only views or copies its input's elements: a view, a view's copy
    (what functionalization makes of a view), a clone (what inductor's decompositions make
    of a view's copy: ``t_copy`` is ``permute`` then ``clone``)."""
    target = node.target
    return (getattr(target, "is_view", False) or target in _COPIES
            or torch.Tag.view_copy in getattr(target, "tags", ()))


_COPIES = (torch.ops.aten.clone.default, torch.ops.aten.alias.default,
           torch.ops.aten._unsafe_view.default)


def _is_primal(node: torch.fx.Node) -> bool:
    return node.op == "placeholder" and str(node.target).startswith("primals")


def _not_smaller(node: torch.fx.Node, source: torch.fx.Node) -> bool:
    """Whether ``node``'s tensor is known to hold at least as many elements as ``source``'s
    (a symbolic size is compared without adding a guard; unknown counts as smaller)."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    value, base = node.meta.get("val"), source.meta.get("val")
    if not isinstance(value, torch.Tensor):
        return False
    if not isinstance(base, torch.Tensor):
        return True  # a size read from a symbol: nothing to save instead
    return statically_known_true(value.numel() >= base.numel())
