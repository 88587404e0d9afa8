"""What a scan's forward pass saves for its backward (``matchbox.compiler.scan_partition``,
opt-in with ``MATCHBOX_SCAN_RECOMPUTE=1``): a weight the body reads transposed (an RNN cell's ``h @ w_hh.t()``) is saved once, not as a
copy of it for every step.  Torch 2.13's scan autograd stacked ``t(t(w_hh))`` over the
steps (its partitioner saved the copy, closer to the backward than ``w_hh``): a
``(steps, H, H)`` buffer written by the forward and read by the backward.

Pinned: the per-step values the partition keeps (none of the weight's size, for
``aot_eager``'s joint graph and inductor's, whose decompositions make the copy a
``permute`` and a ``clone``), and the values and gradients, against the per-example loop
with NaN padding.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch import fx

import matchbox
import matchbox.functional as F
from matchbox import MaskedBatch
from matchbox.compiler import loops, scan_partition

# Graphs holding a scan: torch 2.3 (tox's `oldest`) has none, and no such partitioner.
pytestmark = pytest.mark.compiled_loops
pytest.importorskip("torch._higher_order_ops.partitioner")
from torch._functorch.partitioners import CheckpointPolicy  # noqa: E402


@pytest.fixture(autouse=True)
def _opted_in(monkeypatch):
    """The marking wraps a method of torch's internals: opt-in (MATCHBOX_SCAN_RECOMPUTE=1)."""
    monkeypatch.setenv("MATCHBOX_SCAN_RECOMPUTE", "1")
from torch._higher_order_ops.partitioner import HopJointGraph  # noqa: E402

aten = torch.ops.aten
HIDDEN, INPUT = 5, 3


def rnn(x, w_ih, w_hh, b):
    """The README RNN's cell by hand, its loop a scan: an example whose sequence has ended
    keeps its state (``F.update``)."""
    h = x.new_zeros(x.size(0), HIDDEN)
    steps = list(x.unbind(1))
    (h,), _ = loops.scan_stacked(
        lambda xt, h: (F.update(h, torch.tanh(xt @ w_ih.t() + h @ w_hh.t() + b)),), (h,), steps)
    return h


@contextlib.contextmanager
def kept_per_step(monkeypatch):
    """The shapes of the values each scan partition made while compiling keeps per step (the
    forward's outputs for the backward that are not inputs of the body: ``scan`` stacks
    them), and of those it saves once (the body's inputs), one pair per partition."""
    scan_partition.settings()  # matchbox's marking installed first, then recorded around
    partitions = []
    original = HopJointGraph.partition

    def recorded(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        outputs = next(iter(result.fw_gm.graph.find_nodes(op="output"))).args[0]
        saved = outputs[result.n_fw_outputs:]
        partitions.append((
            [tuple(n.meta["val"].shape) for n in saved
             if n.op != "placeholder" and isinstance(n.meta["val"], torch.Tensor)],
            [tuple(n.meta["val"].shape) for n in saved
             if n.op == "placeholder" and isinstance(n.meta["val"], torch.Tensor)]))
        return result

    monkeypatch.setattr(HopJointGraph, "partition", recorded)
    # Compiled from scratch, not taken from inductor's caches (no partition runs then).
    with torch._functorch.config.patch(enable_autograd_cache=False), \
            torch._inductor.config.patch(fx_graph_cache=False):
        yield partitions


def parameters(dtype):
    torch.manual_seed(0)
    return [torch.randn(*shape, dtype=dtype, requires_grad=True)
            for shape in ((HIDDEN, INPUT), (HIDDEN, HIDDEN), (HIDDEN,))]


def examples_of(lengths, dtype):
    torch.manual_seed(len(lengths))
    return [torch.randn(1, n, INPUT, dtype=dtype, requires_grad=True) for n in lengths]


def assert_equals_the_loop(compiled, lengths, dtype):
    weights = parameters(dtype)
    examples = examples_of(lengths, dtype)
    xb = MaskedBatch.fromlist(examples, (True, False), padding_value=float("nan"))
    out = compiled(xb, *weights)
    loop = [rnn(x, *weights) for x in examples]
    for b, (got, want) in enumerate(zip(out.examples(), loop)):
        torch.testing.assert_close(got, want, msg=lambda m, b=b: f"example {b}: {m}")
    got = torch.autograd.grad(matchbox.batch_sum(out * out), [xb.data, *weights])
    want = torch.autograd.grad(sum((lo * lo).sum() for lo in loop), [*examples, *weights],
                               allow_unused=True, materialize_grads=True)  # a step-less example
    for name, g, w in zip(("w_ih", "w_hh", "b"), got[1:], want[len(examples):]):
        torch.testing.assert_close(g, w, msg=lambda m, name=name: f"{name}: {m}")
    for b, (x, g) in enumerate(zip(examples, want)):
        torch.testing.assert_close(got[0][b:b + 1, :x.size(1)], g,
                                   msg=lambda m, b=b: f"input of example {b}: {m}")


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_transposed_weight_is_saved_once_not_for_every_step(monkeypatch, backend):
    compiled = matchbox.compile(rnn, backend=backend)
    with kept_per_step(monkeypatch) as partitions:
        assert_equals_the_loop(compiled, [6, 0, 1, 4], torch.float64)
    assert [s.scans for s in compiled.specializations] == [1]
    assert partitions, "the scan's backward was not partitioned"
    for per_step, once in partitions:
        assert (HIDDEN, HIDDEN) not in per_step  # was t(t(w_hh)), stacked over the steps
        assert (HIDDEN, HIDDEN) in once  # w_hh itself
        assert all(shape[-1] in (HIDDEN, 1) for shape in per_step), per_step


@pytest.mark.parametrize("lengths", [[5, 2, 0, 3], [4], [1, 1]])
def test_values_and_gradients_equal_the_loop(lengths, dtype):
    compiled = matchbox.compile(rnn, backend="aot_eager")
    assert_equals_the_loop(compiled, lengths, dtype)
    # The padded length a bucket's (8): one scan after the steps peeled, even for [1, 1].
    assert [s.scans for s in compiled.specializations] == [1]


# ---------------------------------------------------------------------- the marking

def joint_graph():
    """A joint graph as scan's autograd partitions one: forward inputs ``primals_*``, the
    gradients of its outputs ``tangents_*``, views as copies."""
    graph = fx.Graph()

    def placeholder(name, *shape):
        node = graph.placeholder(name)
        node.meta["val"] = torch.empty(*shape)
        return node

    def call(target, *args):
        node = graph.call_function(target, args)
        node.meta["val"] = target(*[a.meta["val"] if isinstance(a, fx.Node) else a
                                    for a in args])
        return node

    h, w, g = placeholder("primals_0", 2, 4), placeholder("primals_1", 4, 4), \
        placeholder("tangents_0", 2, 4)
    nodes = {
        "t": call(aten.t_copy.default, w),
        "permuted": call(aten.permute.default, w, [1, 0]),
        "row": call(aten.select_copy.int, w, 0, 1),  # smaller than w: w is not saved instead
        "g_t": call(aten.t_copy.default, g),  # of a gradient: the backward's own
    }
    nodes["contiguous"] = call(aten.clone.default, nodes["permuted"])
    nodes["t_t"] = call(aten.t_copy.default, nodes["t"])
    nodes["mm"] = call(aten.mm.default, h, nodes["t"])
    nodes["mm_t"] = call(aten.t_copy.default, nodes["mm"])  # of a product: computed
    nodes["grad"] = call(aten.mm.default, g, nodes["t_t"])
    graph.output((nodes["mm"], nodes["grad"], nodes["row"], nodes["g_t"], nodes["mm_t"]))
    return graph, nodes


def test_copies_of_the_inputs_are_recomputed_and_nothing_else():
    graph, nodes = joint_graph()
    marked = scan_partition.mark_invariant_copies(graph)
    assert {n.name for n in marked} == {nodes[k].name for k in ("t", "permuted", "contiguous",
                                                                 "t_t")}
    for node in marked:
        assert node.meta["recompute"] == CheckpointPolicy.MUST_RECOMPUTE
    for key in ("row", "g_t", "mm", "mm_t", "grad"):
        assert "recompute" not in nodes[key].meta, key


def test_graphs_compiled_without_a_scan_are_not_marked(monkeypatch):
    # Marked only while this thread compiles a graph holding a scan.
    scan_partition.settings()
    graph, _ = joint_graph()
    seen = []
    monkeypatch.setattr(scan_partition, "mark_invariant_copies", seen.append)
    joint = HopJointGraph.__new__(HopJointGraph)
    joint.joint_gm = fx.GraphModule(torch.nn.Module(), graph)
    with pytest.raises(TypeError):
        joint.partition()  # the original's own arguments missing: it was called
    assert seen == []


def test_off_by_default_torch_is_left_as_it_is(monkeypatch):
    monkeypatch.delenv("MATCHBOX_SCAN_RECOMPUTE")
    assert scan_partition.settings() == [] and not scan_partition.wanted()
