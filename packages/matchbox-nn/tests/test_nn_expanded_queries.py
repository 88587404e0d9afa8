"""A plain tensor expanded from size one to the batch size (``cls.expand(x.size(0), -1,
-1)``: a ViT's class token, where ``x.size(0)`` is 1 for one example and the batch size
for a batch) as the query of ``nn.MultiheadAttention`` and
``F.scaled_dot_product_attention`` over a batch: the same token for every example, as a
pointwise op and ``torch.cat`` take it (``expanded_row``).  Values and gradients (the
token's too) equal the module called on each example alone; zero-length examples
included (no keys: zeros, on either side, where PyTorch gives them).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch_features import ATTENTION_ROW_WITHOUT_KEYS_GIVES_ZEROS, needs

from matchbox import MaskedBatch
from matchbox.testing import mb_assert

E = 8
# An example without keys: the loop's token reads zeros (torch >= 2.5; older gives NaN).
LENGTHS = [(3, 1, 2), (2,), (4, 2), pytest.param((3, 0, 2), marks=needs(
    ATTENTION_ROW_WITHOUT_KEYS_GIVES_ZEROS, "gives zeros, not NaN, for a query that sees "
    "no key"))]


def sequences(lengths, dtype=torch.float64):
    examples = [torch.randn(1, n, E, dtype=dtype) for n in lengths]
    return examples, MaskedBatch.fromlist(examples, (True, False), padding_value=float("nan"))


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_an_expanded_class_token_queries_a_batch(lengths, dtype):
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(E, 2, batch_first=True).to(dtype)
    cls = torch.randn(1, 1, E, dtype=dtype, requires_grad=True)

    def pooled(x):  # x (1, n, E): (1, 1, E), what the token reads from the sequence
        out, _ = mha(cls.expand(x.size(0), -1, -1), x, x, need_weights=False)
        return out

    examples, batch = sequences(lengths, dtype)
    mb_assert(pooled, [examples], [batch], len(lengths), params=[cls, *mha.parameters()],
              **({"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {}))


@pytest.mark.parametrize("lengths", [(3, 0, 2), (0,), (2, 1)])
def test_a_vit_head_the_token_joined_then_self_attention(lengths):
    torch.manual_seed(1)
    mha = torch.nn.MultiheadAttention(E, 2, batch_first=True).double()
    cls = torch.randn(1, 1, E, dtype=torch.float64, requires_grad=True)

    def vit_head(x):
        h = torch.cat([cls.expand(x.size(0), -1, -1), x], 1)
        out, weights = mha(h, h, h)
        return out[:, 0] + out.mean(1), weights.sum(1)

    examples, batch = sequences(lengths)
    mb_assert(vit_head, [examples], [batch], len(lengths), params=[cls, *mha.parameters()])


@pytest.mark.parametrize("lengths", LENGTHS)
def test_an_expanded_query_in_scaled_dot_product_attention(lengths):
    torch.manual_seed(2)
    cls = torch.randn(1, 1, E, dtype=torch.float64, requires_grad=True)

    def pooled(x):
        return F.scaled_dot_product_attention(cls.expand(x.size(0), -1, -1), x, x)

    examples, batch = sequences(lengths)
    mb_assert(pooled, [examples], [batch], len(lengths), params=[cls])


def test_a_query_with_a_row_per_example_is_refused():
    _, batch = sequences((3, 1, 2))
    rows = torch.randn(3, 1, E, dtype=torch.float64)  # not an expand: one row per example
    mha = torch.nn.MultiheadAttention(E, 2, batch_first=True).double()
    with pytest.raises(ValueError, match=r"query must be a time-major batch .* or a plain "
                       r"\(L, 1, E\) tensor shared by every example \(time-major: a "
                       r"batch-first \(1, L, E\) tensor such as a class token, passed itself "
                       r"or expanded from size 1 with \.expand\(x\.size\(0\), -1, -1\)\); got "
                       r"\(1, 3, 8\)"):
        mha(rows, batch, batch)
    with pytest.raises(ValueError, match=r"query is a plain tensor of shape \(3, 1, 8\); a "
                       r"tensor shared by every example must have at most rank 3 and size 1 "
                       r"in dimension 0 \(or be expanded from size 1 to the batch size there\)"):
        F.scaled_dot_product_attention(rows, batch, batch)
