"""How many steps of a scanned ``for`` a captured graph runs before its scan (*peeled*).

A loop's state usually settles in its first step (a fresh ``h = zeros(...)`` gains a mask
and a gradient): the scan then starts at the second step, and the graph holds one copy of
the step outside the scan, not two (``matchbox/compiler/loops.py``, ``_settled_after_one``;
each copy is compiled, forward and backward).  A state that takes more steps to settle
still becomes one scan after them.  ``backend="fx"``: the captured graph itself, counted.
"""

from __future__ import annotations

import pytest
import torch
from control_cases import assert_batch_equals_loop, scans_expected, sequences

import matchbox
import matchbox.compiler.graph

# matchbox.compile over loops: not run by tox's `oldest` (tox.ini, marker compiled_loops).
pytestmark = pytest.mark.compiled_loops

# An empty example, a one-long one, lengths past the peeled steps; a batch of one.
LENGTHS = [[5, 0, 1, 3, 9], [4]]


@matchbox.batch
def rnn(x, w):
    h = x.new_zeros(x.size(0), x.size(-1))
    for xt in x.unbind(1):
        h = (xt @ w + h).tanh()
    return h


@matchbox.batch
def delayed(x, w):
    # `b` takes `a`'s value of the step before: it becomes a batch one step after `a`.
    a = x.new_zeros(x.size(0), x.size(-1))
    b = x.new_zeros(x.size(0), x.size(-1))
    for xt in x.unbind(1):
        b = a
        a = (xt @ w + a).tanh()
    return a + b


def outside_the_scan(graphs, target) -> int:
    """How many ``target`` ops the graph (one) holds outside its scans' bodies."""
    [graph] = graphs
    return sum(1 for n in graph.graph.nodes if n.target is target)


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("f, peeled", [(rnn, 1), (delayed, 3)])
def test_a_scan_starts_once_the_state_settles(f, peeled, lengths, dtype, monkeypatch):
    graphs = []
    compile_graph = matchbox.compiler.graph.compile_graph

    def kept(graph, *args, **kwargs):
        graphs.append(graph)
        return compile_graph(graph, *args, **kwargs)

    monkeypatch.setattr(matchbox.compiler.graph, "compile_graph", kept)
    compiled = matchbox.compile(f, backend="fx")

    def run(*args):
        return compiled(*args) if isinstance(args[0], matchbox.MaskedBatch) else f(*args)

    w = torch.randn(3, 3, dtype=dtype)
    assert_batch_equals_loop(run, sequences(lengths, dtype=dtype), ([w] * len(lengths), w))
    assert [s.scans for s in compiled.specializations] == [scans_expected()]
    assert [s.unrolled for s in compiled.specializations] == [[]]
    if scans_expected():  # (unrolled where torch has no scan)
        assert outside_the_scan(graphs, torch.ops.aten.tanh.default) == peeled
