"""PyTorch's generic tools see a PackedBatch: pytree, dataclass fields, torch.load, torch.func,
torch.export (as packages/matchbox-core/tests/test_core_pytorch_tools.py for MaskedBatch)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.utils._pytree as pytree
from packed_strategies import examples_of_lengths
from round_trips import export_reloaded, exports, saved
from torch.nn.parallel.distributed import _find_tensors
from torch.nn.utils.rnn import pack_sequence
from torch_features import SAFE_GLOBALS, needs

import matchbox
from matchbox.packed import PackedBatch


def _same_batch(a, b):
    assert type(a) is PackedBatch
    assert a.layout.same_as(b.layout) and torch.equal(a.layout.lengths, b.layout.lengths)
    assert torch.equal(a.data, b.data)


def test_pytree_child_is_the_rows_and_the_layout_the_context():
    pb = PackedBatch.fromlist(examples_of_lengths([2, 0, 3]))
    leaves, spec = pytree.tree_flatten(pb)
    assert leaves == [pb.data]  # the index tensors are not values a transform may change
    back = pytree.tree_unflatten(leaves, spec)
    assert back.layout is pb.layout  # the same layout object: its device caches are kept
    # Specs compare by layout value (torch.export checks a call's inputs against its own).
    other = PackedBatch.fromlist(examples_of_lengths([2, 0, 3]))
    assert pytree.tree_structure(other) == spec
    assert pytree.tree_structure(PackedBatch.fromlist(examples_of_lengths([3, 0, 2]))) != spec


def test_a_transform_that_changes_the_rank_is_refused():
    pb = PackedBatch.fromlist(examples_of_lengths([2, 3]))
    with pytest.raises(ValueError, match=r"PackedBatch: a pytree transform changed the rank of "
                                         r"the batch's rows from 2 to 1"):
        pytree.tree_map(lambda t: t[0], pb)


def test_tools_that_walk_dataclasses_find_the_rows_and_the_number_of_examples_first():
    pb = PackedBatch.fromlist(examples_of_lengths([2, 0, 3]))
    names = [f.name for f in dataclasses.fields(pb)]
    assert names == ["sorted_indices", "unsorted_indices", "data", "batch_sizes"]
    assert getattr(pb, names[0]).size(0) == 3  # a batch-size search meets the examples first
    assert any(t is pb.data for t in _find_tensors([pb]))  # DDP's search of a forward's output
    # The fields are the constructor's arguments: dataclasses.replace rebuilds the batch
    # (as FSDP does with the tensors of its modules' inputs).
    doubled = dataclasses.replace(pb, data=pb.data * 2)
    assert doubled.layout.same_as(pb.layout) and torch.equal(doubled.data, pb.data * 2)


def _batches():
    tied = examples_of_lengths([2, 3, 2, 3])
    # From a PackedSequence: ties in another order than fromlist's stable sort.
    sequence = pack_sequence([x[0] for x in tied], enforce_sorted=False)
    return [PackedBatch.fromlist(examples_of_lengths([2, 0, 3])),
            PackedBatch.from_packed_sequence(sequence)]


def test_torch_load_round_trip():
    for pb in _batches():
        _same_batch(torch.load(saved(pb), weights_only=False), pb)


@needs(SAFE_GLOBALS, "has torch.serialization.add_safe_globals (2.4)")
def test_torch_load_weights_only_round_trip():
    for pb in _batches():
        _same_batch(torch.load(saved({"x": [pb]}), weights_only=True)["x"][0], pb)


def test_func_grad_of_a_packed_batch_equals_the_loop():
    xs = examples_of_lengths([2, 0, 3])
    pb = PackedBatch.fromlist(xs)
    grad = torch.func.grad(lambda b: matchbox.batch_sum(b.tanh().sum(1).sum(1)))(pb)
    assert type(grad) is PackedBatch
    for x, g in zip(xs, grad.examples()):
        torch.testing.assert_close(g, 1 - x.tanh() ** 2)


def test_vmap_over_a_packed_batch_is_refused():
    pb = PackedBatch.fromlist(examples_of_lengths([2, 3]))
    with pytest.raises(ValueError, match=r"torch.func.vmap does this to a batch it maps over"):
        torch.func.vmap(lambda b: b.tanh())(pb)


class _Scaled(torch.nn.Module):
    def forward(self, x):
        return (x * 2).tanh().sum(1)


@needs(exports(_Scaled(), PackedBatch.fromlist(examples_of_lengths([2, 1]))), "exports (and saves) a function of a PackedBatch: "
       "torch.export traces Matchbox's ops and serialises the batch's tree spec")
def test_export_of_a_packed_batch_is_specialised_to_its_layout():
    xs, ys = examples_of_lengths([2, 0, 3]), examples_of_lengths([2, 0, 3])
    exported = torch.export.export(_Scaled(), (PackedBatch.fromlist(xs),))
    for program in (exported, export_reloaded(exported)):
        out = program.module()(PackedBatch.fromlist(ys))  # same lengths, other values
        for y, got in zip(ys, out.examples()):
            torch.testing.assert_close(got, _Scaled()(y))
    with pytest.raises(ValueError, match=r"exported input tree spec"):
        exported.module()(PackedBatch.fromlist(examples_of_lengths([3, 0, 2])))


def test_profiler_labels_name_the_batch_type_and_the_family():
    from torch.profiler import ProfilerActivity, profile

    xs = examples_of_lengths([2, 0, 3])
    pb = PackedBatch.fromlist(xs)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        results = [pb.tanh(), torch.tanh(pb), pb * pb, pb.sum(1)]
    names = [e.name for e in prof.events() if e.name.startswith("matchbox.")]
    assert names == ["matchbox.PackedBatch.pointwise"] * 3 + ["matchbox.PackedBatch.reduction"]
    for x, got in zip(xs, results[0].examples()):
        torch.testing.assert_close(got, x.tanh())
