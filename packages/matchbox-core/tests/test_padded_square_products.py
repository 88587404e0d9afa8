"""A plain square tensor built at a dynamic dimension's padded size, in a product.

``A = torch.ones(T, T).tril()`` with ``T = x.maxsize(1)`` (a causal sum, ``A @ x``) meets
each example's own first ``n`` columns, but would keep all ``T`` rows for every example,
where the loop (``T`` is each example's own size there) gives ``n``.  Such a product is
refused wherever an example's length differs from the plain tensor's size, naming the
example; with every example of the padded length, and for a plain tensor whose kept
dimension has another size (a prefix, as positional encodings are read), it equals the
loop.  Padding holds NaN.
"""

from __future__ import annotations

import pytest
import torch
from family_cases import batch_of, check


def _causal(x):
    size = x.maxsize(1)
    return torch.ones(size, size, dtype=x.dtype).tril()


SQUARE_PRODUCTS = {
    "A @ x": lambda x: _causal(x) @ x,
    "torch.matmul(A, x)": lambda x: torch.matmul(_causal(x), x),
    "x.transpose(1, 2) @ A": lambda x: x.transpose(1, 2) @ _causal(x),
    "einsum ts,ash->ath": lambda x: torch.einsum("ts,ash->ath", _causal(x), x),
    "einsum ahs,st->aht": lambda x: torch.einsum("ahs,st->aht", x.transpose(1, 2),
                                                 _causal(x)),
}


@pytest.mark.parametrize("name", list(SQUARE_PRODUCTS))
def test_a_square_built_at_the_padded_size_is_refused_naming_the_example(name, dtype):
    _, xb = batch_of([(3, 2), (1, 2), (0, 2), (5, 2)], (True, False), dtype)
    with pytest.raises(ValueError, match=r"a plain tensor of shape \(5, 5\), shared by every "
                                         r"example, meets dimension \d of the batch, which is "
                                         r"dynamic, with size 5, and keeps another dimension "
                                         r"of size 5 in the result; example 0 has 3 there\. "
                                         r"Built at example 0's own size, as the loop builds "
                                         r"it \(x\.maxsize\(\d\) is the longest example's\), it "
                                         r"would be 3 long in both.*x\.causal_mask"):
        SQUARE_PRODUCTS[name](xb)


def test_a_zero_length_example_is_named_too(dtype):
    _, xb = batch_of([(2, 3), (0, 3), (2, 3)], (True, False), dtype)
    with pytest.raises(ValueError, match=r"example 1 has 0 there"):
        _causal(xb) @ xb


@pytest.mark.parametrize("name", list(SQUARE_PRODUCTS))
@pytest.mark.parametrize("shapes", [[(4, 2), (4, 2)], [(1, 3)], [(0, 2), (0, 2)]],
                         ids=["equal-lengths", "batch-of-one", "all-empty"])
def test_a_square_equals_the_loop_where_every_example_has_its_size(name, shapes, dtype):
    examples, xb = batch_of(shapes, (True, False), dtype)
    check(SQUARE_PRODUCTS[name], examples, xb)


def test_a_fixed_square_is_refused_where_the_loop_refuses_the_shorter_examples(dtype):
    mixing = torch.randn(4, 4, dtype=dtype)
    examples, xb = batch_of([(4, 2), (2, 2)], (True, False), dtype)
    with pytest.raises(RuntimeError):
        mixing @ examples[1]
    with pytest.raises(ValueError, match=r"shape \(4, 4\).*example 1 has 2 there.*a tensor "
                                         r"of a fixed size would not fit example 1 in the "
                                         r"loop either"):
        mixing @ xb


# A plain tensor whose other dimension is not the padded size is read as a prefix along
# the dynamic one, as the loop's tensor built at each example's size would be.
PREFIX_PRODUCTS = {
    "ones(2, T) @ x": lambda x: torch.ones(2, x.maxsize(1), dtype=x.dtype) @ x,
    "x.transpose(1, 2) @ positions": lambda x: x.transpose(1, 2) @ torch.arange(
        x.maxsize(1), dtype=x.dtype).unsqueeze(1).expand(-1, 3),
    "einsum ts,ash->ath of (1, T)": lambda x: torch.einsum(
        "ts,ash->ath", torch.arange(x.maxsize(1), dtype=x.dtype).unsqueeze(0), x),
}


@pytest.mark.parametrize("name", list(PREFIX_PRODUCTS))
def test_a_plain_prefix_of_the_padded_size_equals_the_loop(name, dtype):
    examples, xb = batch_of([(3, 2), (1, 2), (0, 2), (5, 2)], (True, False), dtype)
    check(PREFIX_PRODUCTS[name], examples, xb)
