"""index_add, index_copy and index_fill (and their in-place forms) on batches against the
per-example loop, values and gradients.  Padding holds NaN: padding written into a real
position, or a gradient reaching it, shows up as a mismatch."""

from __future__ import annotations

import pytest
import torch
from family_cases import LAYOUTS, batch_of, check
from hypothesis import given
from hypothesis import strategies as st
from strategies import example_lists

from matchbox import MaskedBatch
from matchbox.testing import mb_assert

NAN = float("nan")


def _source_like(batch, examples, d, count, dtype):
    """A batch source of each example's shape, ``count`` long along ``d``."""
    sources = []
    for x in examples:
        shape = list(x.shape)
        shape[d] = count
        sources.append(torch.randn(*shape, dtype=dtype))
    return sources, MaskedBatch.fromlist(sources, batch.dims, padding_value=NAN)


# f(x, source, index, dim); the layouts with a static dimension (2 or 1)
STATIC = [name for name, (dims, _) in LAYOUTS.items() if False in dims]
WRITES = {
    "index_add": lambda x, s, i, d: torch.index_add(x, d, i, s),
    "index_add-alpha": lambda x, s, i, d: x.index_add(d, i, s, alpha=-2),
    "index_add_": lambda x, s, i, d: (x * 1).index_add_(d, i, s),
    "index_copy": lambda x, s, i, d: torch.index_copy(x, d, i, s),
    "index_copy_": lambda x, s, i, d: (x + 0).index_copy_(d, i, s) * x,
}


@pytest.mark.parametrize("name", list(WRITES))
@pytest.mark.parametrize("layout", STATIC)
def test_index_add_and_copy_along_a_static_dimension_match_loop(name, layout, dtype):
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    d = dims.index(False) + 1
    index = torch.tensor([1, 0]) if name.startswith("index_copy") else torch.tensor([1, 1, 0])
    sources, source = _source_like(batch, examples, d, index.numel(), dtype)
    mb_assert(lambda x, s: WRITES[name](x, s, index, d), [examples, sources],
              [batch, source], len(examples))


@pytest.mark.parametrize("name", list(WRITES))
def test_index_add_and_copy_along_a_dynamic_dimension_match_loop(name, dtype):
    # every example at least 2 long: the index's positions are inside each
    examples, batch = batch_of([(3, 2), (2, 2), (5, 2)], (True, False), dtype)
    index = torch.tensor([1, 0]) if name.startswith("index_copy") else torch.tensor([1, 1, -0])
    plain = torch.randn(1, index.numel(), 2, dtype=dtype, requires_grad=True)
    check(lambda x: WRITES[name](x, plain, index, 1), examples, batch, params=[plain])


def test_index_add_along_dimension_0_matches_loop(dtype):
    examples, batch = batch_of([(3, 2), (0, 2), (1, 2)], (True, False), dtype)
    check(lambda x: x.index_add(0, torch.tensor([0]), x * 3), examples, batch)
    check(lambda x: torch.index_copy(x * 1, -3, torch.tensor(0), x.exp()), examples, batch)


FILLS = {
    "number": lambda x, i, d: x.index_fill(d, i, 2.5),
    "int": lambda x, i, d: torch.index_fill(x, d, i, -1),
    "0-d tensor": lambda x, i, d: x.index_fill(d, i, torch.tensor(0.5, dtype=x.dtype)),
    "per-example value": lambda x, i, d: x.index_fill(d, i, x.detach().sum()),
    "in place": lambda x, i, d: (x * 1).index_fill_(d, i, 7),
}


@pytest.mark.parametrize("name", list(FILLS))
@pytest.mark.parametrize("layout", STATIC)
def test_index_fill_matches_loop(name, layout, dtype):
    # along the static dimension, negative positions included
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    d = dims.index(False) + 1
    check(lambda x: FILLS[name](x, torch.tensor([-1, 0]), d), examples, batch)
    check(lambda x: FILLS[name](x, torch.tensor([0]), 0), examples, batch)


@pytest.mark.parametrize("name", list(FILLS))
def test_index_fill_along_a_dynamic_dimension_counts_from_each_examples_end(name, dtype):
    examples, batch = batch_of([(3, 2), (1, 2), (4, 2)], (True, False), dtype)
    check(lambda x: FILLS[name](x, torch.tensor([-1]), 1), examples, batch)
    check(lambda x: FILLS[name](x, torch.tensor([0, -1, 0]), 1), examples, batch)


def test_index_fill_with_a_value_in_the_graph_matches_loop(dtype):
    value = torch.tensor(1.5, dtype=dtype, requires_grad=True)
    examples, batch = batch_of([(3, 2), (1, 2), (2, 2)], (True, False), dtype)
    # (torch's own backward to a value in the graph fails for negative positions, the
    # loop's: the positions here are not negative)
    check(lambda x: x.index_fill(1, torch.tensor([0]), value), examples, batch,
          params=[value])
    check(lambda x: x.index_fill(1, torch.tensor([0, 0]), x.sum()), examples, batch)
    check(lambda x: (x * 1).index_fill_(2, torch.tensor([1]), x.mean()), examples, batch)


@given(example_lists(dims=(True, False), min_length=1), st.data())
def test_index_writes_of_hypothesis_shapes_match_loop(case, data):
    examples, batch = case
    shortest = min(x.size(1) for x in examples)
    positions = data.draw(st.lists(st.integers(-shortest, shortest - 1), min_size=1,
                                   max_size=4))
    index = torch.tensor(positions)
    check(lambda x: x.index_fill(1, index, 0.25), examples, batch)
    nonnegative = index.remainder(shortest)
    plain = torch.randn(1, len(positions), batch.data.size(2), dtype=batch.dtype)
    check(lambda x: x.index_add(1, nonnegative, plain), examples, batch)


def test_index_writes_refuse_an_index_outside_an_example_naming_it():
    _, batch = batch_of([(3, 2), (1, 2)], (True, False))
    with pytest.raises(IndexError, match=r"^Tensor\.index_add: index 2 is out of range for "
                                         r"example 1, which has size 1 in dimension 1"):
        batch.index_add(1, torch.tensor([2]), torch.ones(1, 1, 2, dtype=torch.float64))
    with pytest.raises(IndexError, match=r"^torch\.index_copy: index -1 is out of range for "
                                         r"example 0"):
        torch.index_copy(batch, 1, torch.tensor([-1]), torch.ones(1, 1, 2,
                                                                   dtype=torch.float64))
    with pytest.raises(IndexError, match=r"^Tensor\.index_fill_: index -2 is out of range for "
                                         r"example 1, which has size 1 in dimension 1"):
        batch.index_fill_(1, torch.tensor([-2]), 0)
    with pytest.raises(IndexError, match=r"^Tensor\.index_fill: index 2 is out of range for "
                                         r"example 0, which has size 2 in dimension 2"):
        batch.index_fill(2, torch.tensor([2]), 0)


def test_index_writes_refuse_bad_arguments_naming_the_op():
    _, batch = batch_of([(3, 2), (1, 2)], (True, False))
    _, wrong = batch_of([(2, 1), (1, 1)], (True, False))
    ones = torch.ones(1, 1, 2, dtype=torch.float64)
    index = torch.tensor([0])
    with pytest.raises(RuntimeError, match=r"^Tensor\.index_add: example 0 has size 2 in "
                                           r"dimension 1 of the source but the input's size is "
                                           r"3; the source must match the input"):
        batch.index_add(2, index, wrong)
    with pytest.raises(RuntimeError, match=r"^Tensor\.index_add: the source has size 2 in "
                                           r"dimension 2 but the index's length is 1"):
        batch.index_add(2, index, batch)
    with pytest.raises(RuntimeError, match=r"^torch\.index_copy: example 0 has size 2 in "
                                           r"dimension 1 of the source but the index's length "
                                           r"is 1"):
        torch.index_copy(batch, 1, index, torch.ones(1, 2, 2, dtype=torch.float64))
    with pytest.raises(RuntimeError, match=r"^Tensor\.index_add: the source \(rank 2\) and "
                                           r"the input \(rank 3\)"):
        batch.index_add(1, index, batch.sum(1))
    with pytest.raises(RuntimeError, match=r"^Tensor\.index_add: the index has 2 positions "
                                           r"along dimension 0"):
        batch.index_add(0, torch.tensor([0, 0]), batch)
    with pytest.raises(NotImplementedError, match=r"^Tensor\.index_add: an index that differs "
                                                  r"between examples \(a batch\)"):
        batch.index_add(1, MaskedBatch(torch.tensor([[0], [0]]), None, (False,)), ones)
    with pytest.raises(IndexError, match=r"^torch\.index_fill: the index must be a 1-D tensor "
                                         r"of positions, got torch\.Size\(\[1, 1\]\)"):
        torch.index_fill(batch, 1, torch.tensor([[0]]), 0)
    with pytest.raises(RuntimeError, match=r"^Tensor\.index_copy: the index must hold int32 or "
                                           r"int64, got torch\.float32"):
        batch.index_copy(1, torch.tensor([0.0]), ones)
    with pytest.raises(ValueError, match=r"^torch\.index_add: the input must be the batch"):
        torch.index_add(torch.zeros(1, 3, 2), 1, index, batch)
    with pytest.raises(RuntimeError, match=r"^Tensor\.index_fill: only supports a "
                                           r"0-dimensional value tensor, but got tensor with 1"):
        batch.index_fill(1, index, torch.ones(1))
    with pytest.raises(RuntimeError, match=r"^Tensor\.index_fill: value must be one number per "
                                           r"example \(dims \(\)\), got examples of dims "
                                           r"\(False,\)"):
        batch.index_fill(1, index, batch.sum(1))
    with pytest.raises(NotImplementedError, match=r"^torch\.index_add: out= is not supported"):
        torch.index_add(batch, 1, index, ones, out=torch.empty(0))
