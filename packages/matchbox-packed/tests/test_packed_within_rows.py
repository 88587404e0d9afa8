"""Ops within each row's static dimensions on a PackedBatch (repeat, tile,
repeat_interleave, roll, tril/triu, diagonal) against the per-example loop, values and
gradients; along the packed dimension, and for the ops PackedBatch does not implement,
NotImplementedError naming the op."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from packed_strategies import examples_of_lengths, packed_examples

from matchbox import _registry
from matchbox.packed import PackedBatch
from matchbox.testing import mb_assert

FAMILIES = ("repeat", "ordering", "matrix")
# op name -> f(x) on examples (1, T, 3, 4); each works within the static dims (2, 3).
CASES = {
    "Tensor.repeat": lambda x: x.repeat(1, 1, 2, 3),
    "torch.tile": lambda x: torch.tile(x, (2, 1)),
    "Tensor.tile": lambda x: x.tile((1, 1, 1, 2)),
    "torch.repeat_interleave": lambda x: torch.repeat_interleave(x, 2, dim=3),
    "Tensor.repeat_interleave": lambda x: x.repeat_interleave(torch.tensor([1, 0, 2]), 2),
    "torch.roll": lambda x: torch.roll(x, (1, -2), (2, 3)),
    "Tensor.roll": lambda x: x.roll(1, -1) + x.roll(2, 0),
    "torch.tril": lambda x: torch.tril(x, 1),
    "Tensor.tril": lambda x: x.tril(),
    "torch.triu": lambda x: torch.triu(x, -1),
    "Tensor.triu": lambda x: x.triu(2),
    "torch.diagonal": lambda x: torch.diagonal(x, 0, 2, 3),
    "Tensor.diagonal": lambda x: x.diagonal(1, -1, -2),
}
REGISTERED = sorted(e.name for e in _registry.entries("PackedBatch") if e.family in FAMILIES)


def test_every_registered_row_op_is_tested_here():
    assert set(REGISTERED) == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("lengths", [[3, 0, 5, 1], [4], [2, 2]])
def test_row_op_equals_loop(name, lengths, dtype):
    xs = examples_of_lengths(lengths, (3, 4), dtype)
    pb = PackedBatch.fromlist(xs)
    result = CASES[name](pb)
    assert isinstance(result, PackedBatch)
    mb_assert(CASES[name], [xs], [pb], len(xs))


@given(packed_examples(static=(3, 4)))
def test_row_ops_on_random_lengths_equal_loop(pair):
    xs, pb = pair
    mb_assert(lambda x: x.roll(1, 2).tril().repeat(1, 1, 1, 2).diagonal(0, 2, 3), [xs], [pb],
              len(xs))


def test_one_hot_of_packed_ids_equals_loop():
    ids = [torch.randint(0, 6, (1, n, 2)) for n in (3, 0, 4)]
    pb = PackedBatch.fromlist(ids)
    assert isinstance(F.one_hot(pb, 6), PackedBatch)
    mb_assert(lambda x: F.one_hot(x, 6), [ids], [pb], 3)
    with pytest.raises(ValueError, match=r"^torch\.nn\.functional\.one_hot: num_classes=-1 "
                                         r"infers the number of classes"):
        F.one_hot(pb)


@pytest.mark.parametrize("f, message", [
    (lambda x: x.repeat(1, 2, 1, 1), r"Tensor\.repeat with factors \[1, 2\] for dimensions 0 "
                                     r"and 1 \(each must be 1\) is not implemented for "
                                     r"PackedBatch"),
    (lambda x: x.repeat(1, 1, 1, 1, 1), r"Tensor\.repeat with 5 factors"),
    (lambda x: x.repeat_interleave(2, 1), r"Tensor\.repeat_interleave along dimension 1 \(the "
                                          r"packed dimension\)"),
    (lambda x: x.repeat_interleave(2), r"Tensor\.repeat_interleave without dim"),
    (lambda x: torch.roll(x, 1, 1), r"torch\.roll along dimension 1 \(the packed dimension\)"),
    (lambda x: x.roll(1), r"Tensor\.roll without dims"),
    (lambda x: x.diagonal(0, 1, 2), r"Tensor\.diagonal along dimension 1"),
])
def test_row_ops_along_the_packed_dimension_name_the_op_and_the_way_out(f, message):
    pb = PackedBatch.fromlist(examples_of_lengths([3, 1], (3, 4)))
    with pytest.raises(NotImplementedError, match=message + r".*as_masked"):
        f(pb)


def test_tril_of_matrices_holding_the_packed_dimension_is_refused():
    pb = PackedBatch.fromlist(examples_of_lengths([3, 1], (3,)))
    with pytest.raises(NotImplementedError, match=r"Tensor\.tril of examples of rank 3 \(their "
                                                  r"matrices, the last two dimensions, include "
                                                  r"the packed dimension\).*as_masked"):
        pb.tril()


@pytest.mark.parametrize("name, f", [
    ("torch.gather", lambda x: torch.gather(x, 2, torch.zeros(1, 1, 1, dtype=torch.long))),
    ("Tensor.scatter_add", lambda x: x.scatter_add(2, torch.zeros(1, 1, 1, dtype=torch.long),
                                                   torch.ones(1, 1, 1))),
    ("Tensor.scatter_", lambda x: x.scatter_(2, torch.zeros(1, 1, 1, dtype=torch.long), 0.0)),
    ("torch.index_select", lambda x: torch.index_select(x, 2, torch.tensor([0]))),
    ("Tensor.take_along_dim", lambda x: x.take_along_dim(torch.zeros(1, 1, 1,
                                                                     dtype=torch.long), 2)),
    ("Tensor.__getitem__", lambda x: x[:, :, torch.tensor([0])]),
    ("torch.median", lambda x: torch.median(x, 2)),
    ("Tensor.mode", lambda x: x.mode(2)),
    ("torch.quantile", lambda x: torch.quantile(x, 0.5, 2)),
    ("torch.nanmean", lambda x: torch.nanmean(x, 2)),
    ("Tensor.kthvalue", lambda x: x.kthvalue(1, 2)),
    ("torch.cdist", lambda x: torch.cdist(x, x)),
    ("torch.nn.functional.group_norm", lambda x: F.group_norm(x, 1)),
    ("torch.nn.functional.batch_norm", lambda x: F.batch_norm(x, None, None, training=True)),
    ("torch.conv3d", lambda x: torch.conv3d(x, torch.ones(1, 1, 1, 1, 1))),
])
def test_ops_packed_batches_do_not_implement_name_the_op(name, f):
    pb = PackedBatch.fromlist(examples_of_lengths([3, 1], (3,), torch.float32))
    with pytest.raises(NotImplementedError, match=re.escape(
            f"{name} is not implemented for PackedBatch") + ".*as_masked"):
        f(pb)
