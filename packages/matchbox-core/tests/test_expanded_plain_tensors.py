"""A plain tensor expanded from size one to the batch size in dimension 0 (stride 0:
``cls.expand(x.size(0), -1, -1)``, where ``x.size(0)`` is 1 for one example and the batch
size for a batch) is the same for every example: its one row.  Pointwise ops took it so;
list ops (``torch.cat``, ``torch.stack``), ``expand_as`` and gather's inputs refused it
(a review: a ViT's class token, ``torch.cat([cls.expand(x.size(0), -1, -1), x], 1)``).
They share pointwise's rule (``matchbox._layout.expanded_row``).  A plain tensor with
the batch size in dimension 0 that is not such an expand (stride not 0) cannot be told
from one holding a row per example, and is still refused.
"""

from __future__ import annotations

import pytest
import torch

from matchbox import MaskedBatch
from matchbox.testing import mb_assert

DTYPES = [torch.float32, torch.float64]
LENGTHS = [(3,), (3, 0, 2), (2, 1), (0,)]
H = 4


def sequences(lengths, dtype):
    examples = [torch.randn(1, n, H, dtype=dtype) for n in lengths]
    return examples, MaskedBatch.fromlist(examples, (True, False), padding_value=float("nan"))


def token(dtype):
    return torch.randn(1, 1, H, dtype=dtype, requires_grad=True)


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_class_token_expanded_to_the_batch_size_is_concatenated(lengths, dtype):
    torch.manual_seed(0)
    cls = token(dtype)

    def with_class_token(x):  # x (1, n, H): (1, n + 1, H), the token first
        return torch.cat([cls.expand(x.size(0), -1, -1), x], 1)

    examples, batch = sequences(lengths, dtype)
    mb_assert(with_class_token, [examples], [batch], len(lengths), params=[cls])


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_an_expanded_token_after_the_sequence_and_its_sum(lengths, dtype):
    torch.manual_seed(1)
    cls = token(dtype)

    def appended(x):
        joined = torch.concat((x * 2, cls.expand(x.size(0), 1, H)), dim=1)
        return joined.sum(1) + joined.mean(1)

    examples, batch = sequences(lengths, dtype)
    mb_assert(appended, [examples], [batch], len(lengths), params=[cls])


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_an_expanded_state_is_stacked_and_concatenated_along_a_static_dimension(lengths, dtype):
    torch.manual_seed(2)
    h0 = torch.randn(1, H, dtype=dtype, requires_grad=True)

    def summary(x):  # x.sum(1) (1, H) beside the shared start state
        s = x.sum(1)
        start = h0.expand(x.size(0), -1)
        return torch.stack([s, start], 1) * 3, torch.cat([start, s.tanh()], -1)

    examples, batch = sequences(lengths, dtype)
    mb_assert(summary, [examples], [batch], len(lengths), params=[h0])


@pytest.mark.parametrize("lengths", LENGTHS)
def test_an_expanded_token_expands_as_a_batch(lengths):
    torch.manual_seed(3)
    cls = token(torch.float64)

    def broadcast(x):
        return cls.expand(x.size(0), -1, -1).expand_as(x) * x

    examples, batch = sequences(lengths, torch.float64)
    mb_assert(broadcast, [examples], [batch], len(lengths), params=[cls])


@pytest.mark.parametrize("lengths", LENGTHS)
def test_an_expanded_table_is_gathered_from(lengths):
    torch.manual_seed(4)
    table = torch.randn(1, 5, H, dtype=torch.float64, requires_grad=True)
    examples = [torch.randint(0, 5, (1, n, H)) for n in lengths]
    batch = MaskedBatch.fromlist(examples, (True, False))

    def lookup(idx):
        return torch.gather(table.expand(idx.size(0), -1, -1), 1, idx)

    mb_assert(lookup, [examples], [batch], len(lengths), params=[table])


def test_a_plain_tensor_with_a_row_per_example_is_still_refused_in_a_list():
    _, batch = sequences((3, 0, 2), torch.float32)
    rows = torch.randn(3, 1, H)  # not an expand: three rows, not one shared
    with pytest.raises(ValueError, match=r"torch\.cat: a plain tensor in the list must look "
                       r"like one example \(rank 3, size 1 in dimension 0, or expanded from "
                       r"size 1 to the batch size there\); got shape \(3, 1, 4\)"):
        torch.cat([rows, batch], 1)
    with pytest.raises(ValueError, match=r"torch\.stack: a plain tensor in the list must "
                       r"look like one example .* got shape \(3, 4\)"):
        torch.stack([batch.sum(1), torch.randn(3, H)], 1)
    with pytest.raises(ValueError, match=r"expand_as: the plain tensor of shape \(3, 1, 4\) "
                       r".* or expanded from size 1 to the batch size there\)"):
        rows.expand_as(batch)
    with pytest.raises(ValueError, match=r"gather: a plain input is the same for every "
                       r"example .* or expanded from size 1 to the batch size there; got "
                       r"shape \(3, 5, 4\)"):
        torch.gather(torch.randn(3, 5, H), 1, batch.long())


def test_an_expand_of_another_size_is_refused():
    _, batch = sequences((3, 0, 2), torch.float32)
    cls = torch.randn(1, 1, H)
    with pytest.raises(ValueError, match=r"torch\.cat: a plain tensor in the list must look "
                       r"like one example .* got shape \(2, 1, 4\)"):
        torch.cat([cls.expand(2, -1, -1), batch], 1)
