"""A captured scan body's splits become copies of slices (``matchbox.compiler.split_views``):
inside a body inductor has no kernel for ``split_copy`` and called ATen for it every step.
The compiled models with chunked gates (the demo's GRU, ``nn.LSTM``, the TreeLSTM) are
checked against eager and the loop in ``tests/examples``; here, the rewrite itself."""

import operator

import pytest
import torch
from torch import fx

from matchbox.compiler.split_views import splits_as_slices

aten = torch.ops.aten


def body_graph(split, sizes, dim):
    """A graph of ``x`` to its three pieces, read by index (one doubled, one changed in
    place)."""
    graph = fx.Graph()
    x = graph.placeholder("x")
    pieces = graph.call_function(split, (x, sizes, dim))
    read = [graph.call_function(operator.getitem, (pieces, i)) for i in range(3)]
    first = graph.call_function(aten.mul.Tensor, (read[0], 2.0))
    graph.call_function(aten.add_.Tensor, (read[1], 1.0))  # in place, as the gates are
    graph.output((first, read[1], read[2]))
    return graph


def outer(body):
    """A graph that calls ``body`` as its submodule, as a scan's graph holds its body."""
    holder = torch.nn.Module()
    holder.body = body
    graph = fx.Graph()
    graph.output(graph.call_module("body", (graph.placeholder("x"),)))
    return fx.GraphModule(holder, graph)


def targets(graph):
    return [n.target for n in graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("split, sizes", [
    (aten.split.Tensor, 2), (aten.unsafe_split.Tensor, 2),
    (aten.split_with_sizes.default, [1, 2, 3]), (aten.unsafe_split_with_sizes.default, [3, 1, 2]),
])
@pytest.mark.parametrize("dim", [1, -1])
def test_a_body_reads_copies_of_slices_with_the_splits_values(split, sizes, dim):
    x = torch.randn(4, 6, dtype=torch.float64)
    body = fx.GraphModule(torch.nn.Module(), body_graph(split, sizes, dim))
    expected = body(x.clone())
    splits_as_slices(outer(body))
    assert split not in targets(body.graph) and operator.getitem not in targets(body.graph)
    assert targets(body.graph).count(aten.clone.default) == 3
    for got, want in zip(body(x.clone()), expected):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_the_graph_outside_the_bodies_keeps_its_splits():
    root = fx.GraphModule(torch.nn.Module(), body_graph(aten.split.Tensor, 2, 1))
    splits_as_slices(root)
    assert aten.split.Tensor in targets(root.graph)


def test_a_split_read_whole_is_kept():
    graph = fx.Graph()
    x = graph.placeholder("x")
    pieces = graph.call_function(aten.split.Tensor, (x, 2, 1))
    graph.output(pieces)  # the list itself, not its pieces by index
    body = fx.GraphModule(torch.nn.Module(), graph)
    splits_as_slices(outer(body))
    assert aten.split.Tensor in targets(body.graph)
