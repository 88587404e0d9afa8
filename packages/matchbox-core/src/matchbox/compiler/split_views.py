"""The splits in a captured scan's body written as copies of slices
(:func:`splits_as_slices`).

``torch.chunk`` and the decompositions of ``nn.GRUCell``/``nn.LSTMCell`` (their gates'
``unsafe_chunk``) capture as ``split`` nodes.  Inside a ``scan``'s body, which
AOTAutograd functionalizes into copies of views, a split becomes ``split_copy``, for
which inductor has no kernel: it calls ATen for it at every step, and in the C++ wrapper
(:mod:`matchbox.compiler.scan_settings`) through Python, which made the demo's GRU
language model slower compiled in C++ than in Python.  A copy of a slice per piece holds
the same values as ``split_copy``'s piece (a copy too: the decompositions write to their
pieces in place, which on a view of the gates would change what autograd saved), and
inductor fuses it into the kernels that read it.  The graph outside the bodies keeps its
splits, which inductor lowers to views.
"""

from __future__ import annotations

import operator
from itertools import accumulate

import torch
from torch import fx

aten = torch.ops.aten

_BY_SIZE = (aten.split.Tensor, aten.unsafe_split.Tensor)
_BY_SIZES = (aten.split_with_sizes.default, aten.unsafe_split_with_sizes.default)


def splits_as_slices(graph: fx.GraphModule) -> None:
    """Rewrite, in the graphs in ``graph`` (a scan's body), every split whose pieces are
    read only by index into a copy of a slice per piece read (sizes known when captured)."""
    for module in graph.modules():
        if module is not graph and isinstance(module, fx.GraphModule) and _rewrite(module.graph):
            module.recompile()


def _rewrite(graph: fx.Graph) -> bool:
    changed = False
    for node in list(graph.nodes):
        bounds = _piece_bounds(node)
        if bounds is None:
            continue
        source, dim = node.args[0], _dim(node)
        for user in list(node.users):
            start, end = bounds(user.args[1])
            with graph.inserting_before(user):
                view = graph.call_function(aten.slice.Tensor, (source, dim, start, end))
                piece = graph.call_function(aten.clone.default, (view,))
            piece.meta = dict(user.meta)
            user.replace_all_uses_with(piece)
            graph.erase_node(user)
        graph.erase_node(node)
        changed = True
    return changed


def _piece_bounds(node: fx.Node):  # noqa: ANN202 -- a function of a piece's index
    """``index -> (start, end)`` of a split ``node`` whose every user reads a piece by a
    constant index; ``None`` for any other node (or sizes that are symbols)."""
    if node.op != "call_function" or node.target not in (*_BY_SIZE, *_BY_SIZES):
        return None
    if not node.users or any(u.op != "call_function" or u.target is not operator.getitem
                             or type(u.args[1]) is not int or u.args[1] < 0 for u in node.users):
        return None
    sizes = node.args[1] if len(node.args) > 1 else node.kwargs.get("split_size")
    if node.target in _BY_SIZE:
        if type(sizes) is not int or sizes <= 0:
            return None
        return lambda i: (i * sizes, (i + 1) * sizes)  # the last piece's end clamps
    if not isinstance(sizes, (list, tuple)) or any(type(s) is not int for s in sizes):
        return None
    ends = list(accumulate(sizes))
    return lambda i: (ends[i] - sizes[i], ends[i])


def _dim(node: fx.Node) -> int:
    return node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)
