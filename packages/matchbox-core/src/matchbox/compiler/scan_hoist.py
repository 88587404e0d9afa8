"""What a scan's body computes from its step's slices alone, computed for every step at
once, before the scan.

A step of an RNN multiplies its input by the input weights (``x_t @ W_ih.T``), which
reads no carry: inside a ``scan`` that is one small product per step, and in the
backward pass one small weight-gradient product per step, where hand-written code (and
cuDNN) multiplies the whole sequence once.  :func:`hoisted` takes such nodes out of the
body: run under ``torch.vmap`` over the stacked steps, their values become more
per-step slices of the scan (a loop-invariant code motion, over the steps).

A node is taken out when every input it has is a step slice, a tensor from outside the
loop, or another such node, and it reads at least one slice.  Not taken out: an op that
draws random numbers (dropout would draw them in another order than the loop) or writes
to an input, a value the body writes to in place (or a value it views), and what reads
no slice (a constant: it stays in the body, where it is cheap).  When ``vmap`` refuses one
of the ops, the body is kept whole.

A transpose of a tensor from outside (a weight's ``w.t()`` in ``h @ w.t()``) is taken out
too, as a contiguous copy made once: in the body, which torch functionalizes with every
view as a copy, it was a copy of the whole weight at every step of the forward, and two
more in the backward (the TreeLSTM's cell: 3 copies of its 320 × 128 weight a step).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx


def hoisted(body: fx.GraphModule, n_carry: int, xs: list[torch.Tensor],
            free: list[torch.Tensor], n_sizes: int
            ) -> tuple[fx.GraphModule, list[torch.Tensor], list[torch.Tensor]]:
    """The body without the nodes computed before the scan, the scan's step slices (the
    slices it still reads, then the computed values, stacked over the steps) and the
    tensors from outside it still reads.  ``body``'s inputs: ``n_carry`` carries, one per
    slice of ``xs``, one per tensor of ``free``, then ``n_sizes`` sizes."""
    placeholders = [n for n in body.graph.nodes if n.op == "placeholder"]
    carries = placeholders[:n_carry]
    items = placeholders[n_carry:n_carry + len(xs)]
    outside = placeholders[n_carry + len(xs):len(placeholders) - n_sizes]
    sizes = placeholders[len(placeholders) - n_sizes:]
    varying, invariant = _hoistable(body.graph, items, outside)
    frontier = [n for n in body.graph.nodes if n in varying and n.op == "call_function"
                and any(u not in varying for u in n.users)]
    output = next(n for n in body.graph.nodes if n.op == "output")
    still_read = _needed(output, set(frontier))
    transposed = [n for n in body.graph.nodes if n in still_read and n.target in _REORDERS
                  and n.all_input_nodes and all(i in outside for i in n.all_input_nodes)]
    if not frontier and not transposed:
        return body, xs, free
    values = _computed(body, frontier, varying, invariant, items, outside, xs, free)
    copies = _transposed_copies(transposed, outside, free)
    kept_body, used = _without(body, frontier, transposed, carries, items, outside, sizes)
    kept_xs = [x for p, x in zip(items, xs) if p in used]
    kept_free = [t for p, t in zip(outside, free) if p in used]
    return kept_body, kept_xs + [v.contiguous() for v in values], kept_free + copies


#: Views that reorder a tensor's dimensions.  Torch's scan functionalizes its body's
#: joint graph with every view as a copy, so a weight's transpose in the body (``h @
#: w.t()``) was a copy of the whole weight at every step, and its backward's products
#: (``grad @ w.t().t()``, the weight's gradient transposed back) two more.
_REORDERS = (torch.ops.aten.t.default, torch.ops.aten.permute.default,
             torch.ops.aten.transpose.int)


def _transposed_copies(transposed: list[fx.Node], outside: list[fx.Node],
                       free: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each of the ``transposed`` views of the tensors from outside, computed once before
    the scan as a contiguous copy (a new input of the body, in place of the view)."""
    tensors = dict(zip(outside, free))
    return [n.target(*fx.map_arg(n.args, tensors.__getitem__),
                     **fx.map_arg(n.kwargs, tensors.__getitem__)).contiguous()
            for n in transposed]


def _hoistable(graph: fx.Graph, items: list[fx.Node], outside: list[fx.Node]
               ) -> tuple[set[fx.Node], set[fx.Node]]:
    """The nodes that read step slices (``varying``) and those that read none
    (``invariant``), of those whose every input is one or the other."""
    varying, invariant = set(items), set(outside)
    written = _written(graph)
    for node in graph.nodes:
        if node.op == "get_attr":
            invariant.add(node)
            continue
        if node.op != "call_function" or not _pure(node.target) or node in written:
            continue
        inputs = node.all_input_nodes
        if all(i in varying or i in invariant for i in inputs):
            (varying if any(i in varying for i in inputs) else invariant).add(node)
    return varying, invariant


def _written(graph: fx.Graph) -> set[fx.Node]:
    """The nodes whose values an op of the body writes to in place, and, through views,
    the values those are views of: taken out of the body, they would be the scan's input
    slices, written to (``bernoulli_`` fills dropout's ``empty_like``)."""
    stack: list[fx.Node] = []
    for node in graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        for k, argument in enumerate(node.target._schema.arguments):
            if argument.alias_info is not None and argument.alias_info.is_write:
                value = node.args[k] if k < len(node.args) else node.kwargs.get(argument.name)
                fx.map_arg(value, stack.append)
    written: set[fx.Node] = set()
    while stack:
        node = stack.pop()
        if node in written:
            continue
        written.add(node)
        if _is_view(node):
            stack.extend(node.all_input_nodes)
    return written


def _is_view(node: fx.Node) -> bool:
    target = node.target
    return (node.op == "call_function" and isinstance(target, torch._ops.OpOverload)
            and any(r.alias_info is not None for r in target._schema.returns))


def _pure(target: Any) -> bool:
    """An ATen op that neither draws random numbers nor writes to an input."""
    if not isinstance(target, torch._ops.OpOverload):
        return False
    if torch.Tag.nondeterministic_seeded in target.tags:
        return False
    return not target._schema.is_mutable


def _computed(body: fx.GraphModule, frontier: list[fx.Node], varying: set[fx.Node],
              invariant: set[fx.Node], items: list[fx.Node], outside: list[fx.Node],
              xs: list[torch.Tensor], free: list[torch.Tensor]) -> list[torch.Tensor]:
    """The ``frontier`` nodes' values for every step: their graph, vmapped over ``xs``."""
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for p in items + outside:
        env[p] = graph.placeholder(p.name)
    for node in body.graph.nodes:
        if node.op != "placeholder" and (node in varying or node in invariant):
            env[node] = graph.node_copy(node, env.__getitem__)
    graph.output([env[n] for n in frontier])
    graph.eliminate_dead_code()
    step = fx.GraphModule(body, graph)
    in_dims = (0,) * len(items) + (None,) * len(outside)
    return list(torch.vmap(step, in_dims=in_dims)(*xs, *free))


def _without(body: fx.GraphModule, frontier: list[fx.Node], transposed: list[fx.Node],
             carries: list[fx.Node], items: list[fx.Node], outside: list[fx.Node],
             sizes: list[fx.Node]) -> tuple[fx.GraphModule, set[fx.Node]]:
    """The body reading the ``frontier`` values as slices and the ``transposed`` ones as
    inputs from outside (after the others), and which of its old inputs it still reads."""
    output = next(n for n in body.graph.nodes if n.op == "output")
    needed = _needed(output, {*frontier, *transposed})
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}

    def placeholder(node: fx.Node, name: str) -> None:
        env[node] = graph.placeholder(name)
        env[node].meta = dict(node.meta)

    for p in carries:
        placeholder(p, p.name)
    for p in items:
        if p in needed:
            placeholder(p, p.name)
    for k, node in enumerate(frontier):
        placeholder(node, f"hoisted_{k}")
    for p in outside:
        if p in needed:
            placeholder(p, p.name)
    for k, node in enumerate(transposed):
        placeholder(node, f"transposed_{k}")
    for p in sizes:  # read by no node: they stay, for the scan's own use (see loops)
        placeholder(p, p.name)
    hoisted = {env[n] for n in (*frontier, *transposed)}
    for node in body.graph.nodes:
        if node.op == "output":
            # A value computed before the scan, handed back as it is, would alias the
            # body's input, which scan refuses: a copy.
            graph.output(fx.map_arg(node.args[0], lambda n: _copied(graph, env[n], hoisted)))
        elif node.op != "placeholder" and node in needed and node not in env:
            env[node] = graph.node_copy(node, env.__getitem__)
    return fx.GraphModule(body, graph), needed


def _copied(graph: fx.Graph, node: fx.Node, hoisted: set[fx.Node]) -> fx.Node:
    if node not in hoisted:
        return node
    copy = graph.call_function(torch.ops.aten.clone.default, (node,))
    copy.meta = dict(node.meta)
    return copy


def _needed(output: fx.Node, frontier: set[fx.Node]) -> set[fx.Node]:
    """The nodes the output reads, through nodes other than the ``frontier`` ones."""
    needed: set[fx.Node] = set()
    stack = [output]
    while stack:
        node = stack.pop()
        if node in needed:
            continue
        needed.add(node)
        if node not in frontier:
            stack.extend(node.all_input_nodes)
    return needed
