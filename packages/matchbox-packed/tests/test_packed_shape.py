"""``cat`` of PackedBatches (static dims keep the layout, dim 1 concatenates each example's
steps), against the loop, and its errors; ``transpose(0, 1)``, the time-major view."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from packed_strategies import examples_of_lengths

from matchbox import _registry
from matchbox.nn import TimeMajorBatch
from matchbox.packed import PackedBatch
from matchbox.testing import mb_assert

CALLS = {"torch.cat": torch.cat, "torch.concat": torch.concat,
         "torch.concatenate": torch.concatenate}
# Per example (1, T, F) -> (T, 1, F): the view's own ops are tested in
# packages/matchbox-nn/tests/test_nn_time_major_views.py; here, that each gives it.
TRANSPOSES = {"torch.transpose": lambda x: torch.transpose(x, 0, 1),
              "Tensor.transpose": lambda x: x.transpose(1, 0),
              "torch.swapaxes": lambda x: torch.swapaxes(x, 0, 1),
              "Tensor.swapaxes": lambda x: x.swapaxes(0, -2),
              "torch.swapdims": lambda x: torch.swapdims(x, 1, 0),
              "Tensor.swapdims": lambda x: x.swapdims(0, 1)}


def test_every_registered_op_is_tested_here():
    assert {e.name for e in _registry.entries("PackedBatch")
            if e.family == "shape"} == set(CALLS) | set(TRANSPOSES)


@pytest.mark.parametrize("name", sorted(TRANSPOSES))
def test_transpose_0_1_is_the_time_major_view(name):
    xs = examples_of_lengths([3, 0, 1])
    pb = PackedBatch.fromlist(xs)
    view = TRANSPOSES[name](pb)
    assert isinstance(view, TimeMajorBatch) and view.batch is pb and view.transpose(0, 1) is pb
    mb_assert(lambda x: TRANSPOSES[name](x).tanh().transpose(0, 1), [xs], [pb], 3)


def test_other_transposes_are_not_implemented():
    pb = PackedBatch.fromlist(examples_of_lengths([3, 1], static=(2, 3)))
    with pytest.raises(NotImplementedError, match=r"Tensor.transpose\(1, 2\) is not implemented "
                                                  r"for PackedBatch \(only transpose\(0, 1\), a "
                                                  r"time-major view\); convert .*as_masked"):
        pb.transpose(1, 2)
    with pytest.raises(ValueError, match=r"Tensor.transpose: dimension 0 is the batch dimension "
                                         r"of each example; moving it to position 1 gives a "
                                         r"time-major view only for results of rank 3"):
        pb.transpose(0, 1)


@pytest.mark.parametrize("name", sorted(CALLS))
@given(lengths=st.lists(st.lists(st.integers(0, 4), min_size=3, max_size=3), min_size=1,
                        max_size=3), dim=st.sampled_from([1, 2, -1]))
def test_cat_equals_loop(name, lengths, dim):
    # Parts along dim 1 have their own lengths; along dim 2 they share the first's.
    parts = [examples_of_lengths(ls if dim == 1 else lengths[0]) for ls in lengths]
    batches = [PackedBatch.fromlist(xs) for xs in parts]
    func = CALLS[name]
    mb_assert(lambda *xs: func(list(xs), dim), parts, batches, 3)


def test_cat_along_the_packed_dimension_builds_the_summed_lengths():
    a = PackedBatch.fromlist(examples_of_lengths([2, 0, 1]))
    b = PackedBatch.fromlist(examples_of_lengths([0, 3, 1]))
    result = torch.cat([a, b], 1)
    assert result.layout.lengths.tolist() == [2, 3, 2]
    assert result.batch_sizes.tolist() == [3, 3, 1]


def test_cat_along_a_static_dimension_keeps_the_layout():
    a = PackedBatch.fromlist(examples_of_lengths([2, 0, 1]))
    assert torch.cat([a, a.tanh()], 2).layout is a.layout


def test_errors_name_the_op_and_dimension():
    a = PackedBatch.fromlist(examples_of_lengths([2, 3]))
    with pytest.raises(ValueError, match=r"torch.cat: dimension 0 is the batch dimension of each "
                                         r"example"):
        torch.cat([a, a], 0)
    with pytest.raises(ValueError, match=r"torch.cat: example 0 has length 2 in one argument and 1 "
                                         r"in another"):
        torch.cat([a, PackedBatch.fromlist(examples_of_lengths([1, 3]))], 2)
    with pytest.raises(ValueError, match=r"torch.cat: the batches have different batch sizes"):
        torch.cat([a, PackedBatch.fromlist(examples_of_lengths([1]))], 1)
    with pytest.raises(TypeError, match=r"torch.cat: argument 1 is a Tensor; every argument of a "
                                        r"PackedBatch cat must be a batch"):
        torch.cat([a, torch.zeros(1, 2, 3)], 2)
    with pytest.raises(NotImplementedError, match=r"torch.cat: out= is not supported"):
        torch.cat([a, a], 2, out=torch.zeros(1))
