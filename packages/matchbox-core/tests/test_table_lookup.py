"""A plain tensor indexed by a batch (``W[prev, cur]``, ``W[tags]``, ``W.index_select(0, i)``):
a weight shared by every example, each example reading its own rows (a CRF's transition
scores).  The oracle is the loop: the same expression on each example's own index tensors,
values and the gradient of the table.  Index padding holds a huge value: it is never read.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from matchbox import MaskedBatch
from matchbox.testing import mb_assert

HUGE = 10**6


def tables(dtype=torch.float64, k=4):
    torch.manual_seed(0)
    return torch.randn(k, k, 3, dtype=dtype, requires_grad=True)


def tag_sequences(lengths, k=4, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(-k, k, (1, n), generator=g) for n in lengths]


def batch(tags):
    return MaskedBatch.fromlist(tags, (True,), padding_value=HUGE)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("lengths", [(3, 1, 5), (2,)])
def test_one_index_per_example_and_a_second_index_equal_the_loop(lengths, dtype):
    table = tables(dtype)

    def scores(tags):
        prev, cur = tags[:, 0], tags[:, -1]  # one int per example
        own = table.index_select(0, cur.remainder(4))  # index_select counts from 0 only
        return table[prev, cur] * 2 + table[prev].sum(1) + own[:, 1]

    tags = tag_sequences(lengths)
    mb_assert(scores, [tags], [batch(tags)], len(tags), params=[table])


@pytest.mark.parametrize("lengths", [(3, 0, 5), (1,), (0, 2)])
def test_a_batch_of_index_tensors_equals_the_loop_empty_examples_included(lengths):
    table = tables()
    tags = tag_sequences(lengths)
    mb_assert(lambda t: table[t].tanh(), [tags], [batch(tags)], len(tags), params=[table])


@settings(max_examples=15, deadline=None)
@given(lengths=st.lists(st.integers(0, 6), min_size=1, max_size=5), k=st.integers(1, 5))
def test_lookups_equal_the_loop_at_any_lengths(lengths, k):
    table = tables(k=k)
    tags = tag_sequences(lengths, k=k)
    mb_assert(lambda t: table[t] * table[t].sin(), [tags], [batch(tags)], len(tags),
              params=[table])


def test_an_index_out_of_range_raises_naming_the_example():
    table = tables()
    tags = batch([torch.tensor([[1, 2]]), torch.tensor([[0, 7]])])
    with pytest.raises(IndexError, match=r"Tensor.__getitem__: index 7 is out of range for "
                                         r"example 1, which has size 4 in dimension 0"):
        table[tags]
    with pytest.raises(IndexError, match=r"index -5 is out of range for example 0"):
        table[batch([torch.tensor([[-5]]), torch.tensor([[0]])])[:, 0]]
    with pytest.raises(IndexError, match=r"Tensor.index_select: index -1 is out of range for "
                                         r"example 1, which has size 4 in dimension 0"):
        table.index_select(0, batch([torch.tensor([[2]]), torch.tensor([[-1]])])[:, 0])


def test_what_a_lookup_does_not_take_is_refused_saying_what_to_write():
    table = tables()
    tags = batch(tag_sequences((2, 3)))
    with pytest.raises(IndexError, match=r"Tensor.__getitem__: a plain tensor of shape "
                                         r"\(4, 4, 3\) indexed with a batch takes the batch as "
                                         r"its first index, holding integers"):
        table[:, tags[:, 0]]
    with pytest.raises(IndexError, match=r"holding integers"):
        table[tags.double()]
    with pytest.raises(NotImplementedError, match=r"a plain tensor indexed by a batch of index "
                                                  r"tensors takes no further index in the same "
                                                  r"subscript .*W.view\(-1\)\[a \* W.size\(1\) "
                                                  r"\+ b\]"):
        table[tags, 0]
    # (a user trial: this gave each example (1, 3) where the loop gives (3,))
    with pytest.raises(NotImplementedError, match=r"one int per example and a tensor index in "
                                                  r"the same subscript .* write W\[i\]\[:, idx\]"):
        table[tags[:, 0], torch.tensor([1, 3, 0])]
    with pytest.raises(NotImplementedError, match=r"one int per example and a tensor index"):
        table[tags[:, 0], [1, 3, 0]]
