"""Matrix products of ``MaskedBatch`` against the per-example loop.

A weight's gradient sums over every row of the batch, so this is where padding
leaks most easily: padding holds NaN, and parameter gradients are compared
exactly with the loop's.
"""

from __future__ import annotations

import re

import pytest
import torch
from family_cases import batch_of
from hypothesis import given
from hypothesis import strategies as st
from strategies import example_lists

import matchbox
from matchbox import MaskedBatch
from matchbox._registry import entries
from matchbox.testing import mb_assert


def weight(*shape, dtype=torch.float64):
    return torch.randn(*shape, dtype=dtype, requires_grad=True)


def check(f, args, params=()):
    """``args``: (examples, batch) pairs, one per argument of ``f``."""
    mb_assert(f, [xs for xs, _ in args], [xb for _, xb in args], len(args[0][0]),
              params=list(params))


# Rows of a dynamic length (0 and 1 included), feature dims static.
ROWS = [(3, 4), (0, 4), (1, 4), (5, 4)]


# ---------------------------------------------------------------- batch and weight


@pytest.mark.parametrize(
    "product",
    [
        pytest.param(lambda x, w: x @ w, id="@"),
        pytest.param(lambda x, w: torch.matmul(x, w), id="torch.matmul"),
        pytest.param(lambda x, w: x.matmul(w), id="x.matmul"),
    ],
)
def test_batch_times_matrix_weight_matches_loop(product, dtype):
    w = weight(4, 5, dtype=dtype)
    check(lambda x: product(x, w), [batch_of(ROWS, (True, False), dtype)], [w])


def test_batch_times_vector_weight_matches_loop(dtype):
    v = weight(4, dtype=dtype)
    check(lambda x: x @ v, [batch_of(ROWS, (True, False), dtype)], [v])
    # Examples of rank 2 times a vector: one scalar per example.
    check(lambda x: x @ v, [batch_of([(4,), (4,)], (False,), dtype)], [v])


def test_weight_on_the_left_matches_loop(dtype):
    # Columns of a dynamic length: (1, 4, n) examples.
    args = [batch_of([(4, 3), (4, 0), (4, 1)], (False, True), dtype)]
    w = weight(5, 4, dtype=dtype)
    v = weight(4, dtype=dtype)
    check(lambda x: w @ x, args, [w])
    check(lambda x: torch.matmul(w, x), args, [w])
    check(lambda x: x.__rmatmul__(w), args, [w])
    check(lambda x: v @ x, args, [v])


def test_higher_rank_examples_times_weight_match_loop(dtype):
    # (1, heads, n, 4) examples: the weight broadcasts over heads and rows.
    args = [batch_of([(2, 3, 4), (2, 1, 4), (2, 4, 4)], (False, True, False), dtype)]
    w = weight(4, 3, dtype=dtype)
    check(lambda x: x @ w, args, [w])
    w3 = weight(2, 4, 3, dtype=dtype)  # one matrix per head
    check(lambda x: x @ w3, args, [w3])
    w4 = weight(1, 2, 4, 3, dtype=dtype)  # with each example's own size-one dim
    check(lambda x: x @ w4, args, [w4])


def test_weight_gradient_ignores_nan_gradients_arriving_at_padding(dtype):
    # x.sum(2) is NaN in padding rows, so the product's padding rows receive
    # 0 * NaN = NaN gradients; the weight's gradient sums over rows and must
    # only see the real ones.
    w = weight(4, 5, dtype=dtype)
    check(lambda x: (x @ w) * x.sum(2, keepdim=True), [batch_of(ROWS, (True, False), dtype)],
          [w])
    check(lambda x: ((x @ w) * x.sum(2, keepdim=True)).sum(1),
          [batch_of(ROWS, (True, False), dtype)], [w])


def test_two_layers_with_a_nonlinearity_match_loop(dtype):
    w1, w2 = weight(4, 6, dtype=dtype), weight(6, 2, dtype=dtype)
    check(lambda x: ((x @ w1).tanh() @ w2).mean(1), [batch_of(ROWS, (True, False), dtype)],
          [w1, w2])


# ---------------------------------------------------------------- batch and batch


def _attention_inputs(query_lengths, key_lengths, dtype, d=4, e=3):
    q = batch_of([(n, d) for n in query_lengths], (True, False), dtype)
    k = batch_of([(m, d) for m in key_lengths], (True, False), dtype)
    v = batch_of([(m, e) for m in key_lengths], (True, False), dtype)
    return [q, k, v]


def test_attention_like_products_with_dynamic_query_and_key_lengths(dtype):
    # The scores have two dynamic dims, which cannot hold an empty extent, so
    # every length is at least one here (see MaskedBatch.fromlist).
    args = _attention_inputs([3, 1, 5, 2], [2, 4, 1, 2], dtype)
    check(lambda q, k: q @ k.transpose(1, 2), args[:2])
    check(lambda q, k, v: (q @ k.transpose(1, 2)) @ v, args)
    check(lambda q, k, v: torch.bmm(torch.bmm(q, k.transpose(1, 2)).tanh(), v), args)
    check(lambda q, k, v: torch.matmul(q, k.transpose(-1, -2)).exp() @ v, args)


def test_self_attention_with_projection_weights_matches_loop(dtype):
    wq, wk, wv = weight(4, 4, dtype=dtype), weight(4, 4, dtype=dtype), weight(4, 2, dtype=dtype)

    def attend(x):
        scores = (x @ wq) @ (x @ wk).transpose(1, 2)
        return (scores.tanh() @ (x @ wv)).sum(1)

    check(attend, [batch_of([(3, 4), (1, 4), (5, 4)], (True, False), dtype)], [wq, wk, wv])


def test_contraction_over_a_dynamic_dim_matches_loop(dtype):
    # (1, 3, n) @ (1, n, 2): the dynamic dim is summed away; an example of
    # length 0 gives zeros, which are real values like any other.
    lengths = [4, 0, 1, 2]
    xs = batch_of([(3, n) for n in lengths], (False, True), dtype)
    ys = batch_of([(n, 2) for n in lengths], (True, False), dtype)
    w = weight(2, 5, dtype=dtype)
    check(lambda x, y: x @ y, [xs, ys])
    check(lambda x, y: (x @ y + 1) @ w, [xs, ys], [w])
    check(lambda x, y: torch.einsum("bin,bnj->bij", x, y) + 1, [xs, ys])


def test_result_of_an_empty_contraction_is_real_in_batch_sum(dtype):
    lengths = [2, 0]
    xs, xb = batch_of([(3, n) for n in lengths], (False, True), dtype)
    ys, yb = batch_of([(n, 2) for n in lengths], (True, False), dtype)
    expected = sum((x @ y + 1).sum() for x, y in zip(xs, ys))
    torch.testing.assert_close(matchbox.batch_sum(xb @ yb + 1), expected)
    torch.testing.assert_close(
        matchbox.batch_sum(torch.einsum("bin,bnj->", xb, yb) + 1),
        sum(torch.einsum("bin,bnj->", x, y) + 1 for x, y in zip(xs, ys)))


def test_products_of_batches_of_one_example_match_loop(dtype):
    w = weight(4, 2, dtype=dtype)
    check(lambda x: x @ w, [batch_of([(3, 4)], (True, False), dtype)], [w])
    check(lambda q, k, v: (q @ k.transpose(1, 2)) @ v, _attention_inputs([2], [3], dtype))


# ---------------------------------------------------------------- mm, bmm


def test_mm_of_rank_two_examples_matches_loop(dtype):
    w = weight(4, 3, dtype=dtype)
    args = [batch_of([(4,), (4,), (4,)], (False,), dtype)]
    check(lambda x: torch.mm(x, w), args, [w])
    check(lambda x: x.mm(w), args, [w])


def test_bmm_with_batches_and_weights_matches_loop(dtype):
    w = weight(1, 4, 2, dtype=dtype)
    check(lambda x: torch.bmm(x, w), [batch_of(ROWS, (True, False), dtype)], [w])
    check(lambda x: x.bmm(w), [batch_of(ROWS, (True, False), dtype)], [w])


@pytest.mark.parametrize(
    "f, message",
    [
        pytest.param(lambda x, w: torch.mm(x, w),
                     r"^torch.mm: argument 0 has examples of rank 3, expected 2$", id="mm"),
        pytest.param(lambda x, w: x.mm(w),
                     r"^Tensor.mm: argument 0 has examples of rank 3, expected 2$", id="x.mm"),
        pytest.param(lambda x, w: torch.bmm(x, w),
                     r"^torch.bmm: argument 1 has examples of rank 2, expected 3$", id="bmm"),
        pytest.param(lambda x, w: torch.bmm(x.unsqueeze(1), w.unsqueeze(0)),
                     r"^torch.bmm: argument 0 has examples of rank 4, expected 3$", id="bmm-4d"),
    ],
)
def test_mm_and_bmm_check_the_rank_of_examples(f, message):
    _, batch = batch_of([(3, 4), (1, 4)], (True, False))
    with pytest.raises(ValueError, match=message):
        f(batch, torch.randn(4, 2, dtype=torch.float64))


# ---------------------------------------------------------------- einsum


def test_einsum_batch_with_weight_matches_loop(dtype):
    args = [batch_of(ROWS, (True, False), dtype)]
    w = weight(4, 5, dtype=dtype)
    v = weight(4, dtype=dtype)
    check(lambda x: torch.einsum("bij,jk->bik", x, w), args, [w])
    check(lambda x: torch.einsum("bij,j->bi", x, v), args, [v])
    check(lambda x: torch.einsum("kj,bij->bik", w.t(), x), args, [w])  # weight first
    check(lambda x: torch.einsum("b i j , j k -> b k i", x, w), args, [w])  # spaces, transposed


def test_einsum_batch_with_batch_matches_loop(dtype):
    args = _attention_inputs([3, 1, 5, 2], [2, 4, 1, 2], dtype)
    check(lambda q, k: torch.einsum("bid,bjd->bij", q, k), args[:2])
    check(lambda q, k, v: torch.einsum("bij,bjd->bid",
                                       torch.einsum("bid,bjd->bij", q, k).tanh(), v), args)


def test_einsum_contracting_a_dynamic_letter_matches_loop(dtype):
    # Sum over the dynamic rows (length 0 included): a static (1, 4, 4) Gram matrix.
    args = [batch_of(ROWS, (True, False), dtype)]
    w = weight(4, dtype=dtype)
    check(lambda x: torch.einsum("bni,bnj->bij", x, x), args)
    check(lambda x: torch.einsum("bni,bnj,j->bi", x, x, w), args, [w])
    check(lambda x: torch.einsum("bni->bi", x), args)


def test_einsum_implicit_output_matches_loop(dtype):
    # Without '->' the output is the letters used once, in alphabetical order.
    args = [batch_of(ROWS, (True, False), dtype)]
    w = weight(4, 5, dtype=dtype)
    check(lambda x: torch.einsum("bij,jk", x, w), args, [w])
    check(lambda x: torch.einsum("bij", x), args)


def test_einsum_list_of_operands_form_matches_loop(dtype):
    args = [batch_of(ROWS, (True, False), dtype)]
    w = weight(4, 5, dtype=dtype)
    check(lambda x: torch.einsum("bij,jk->bik", [x, w]), args, [w])
    check(lambda x: torch.einsum("bij,jk->bik", (x, w)), args, [w])


def test_einsum_of_examples_of_equal_lengths_matches_loop(dtype):
    # Equal lengths (and batch size one) give batches without a mask.
    w = weight(4, dtype=dtype)
    for shapes in ([(3, 4), (3, 4)], [(5, 4)], [(1, 4)]):
        args = [batch_of(shapes, (True, False), dtype)]
        check(lambda x: torch.einsum("btd,d->bt", x, w), args, [w])
        check(lambda x: torch.einsum("bt,btd->bd", torch.einsum("btd,d->bt", x, w).tanh(),
                                     x), args, [w])


def test_einsum_weight_gradient_ignores_nan_gradients_at_padding(dtype):
    w = weight(4, 5, dtype=dtype)
    check(lambda x: torch.einsum("bij,jk->bik", x, w) * x.sum(2, keepdim=True),
          [batch_of(ROWS, (True, False), dtype)], [w])


@pytest.mark.parametrize(
    "f, error, message",
    [
        pytest.param(lambda x: torch.einsum("bii->bi", x.transpose(1, 2) @ x), NotImplementedError,
                     r"^torch.einsum: repeated indices within one batch operand \('bii'\) are "
                     r"not supported$", id="repeated"),
        pytest.param(lambda x: torch.einsum("bij,jk->bik", x), ValueError,
                     r"^torch.einsum: the equation has 2 operands, got 1$", id="operand-count"),
        pytest.param(lambda x: torch.einsum("bij,bkj", x, x), ValueError,
                     r"^torch.einsum: label 'b' of operand 'bij' is dimension 0 of each example "
                     r"\(size one\) and must be the first label of the output, but the output "
                     r"is 'ik'; implicit mode \(no '->'\) sums the labels that appear more than "
                     r"once, 'b' among them: write the output explicitly, e.g. '->b...'$",
                     id="implicit-sums-example-dim"),
        pytest.param(lambda x: torch.einsum("bij->ib", x), ValueError,
                     r"^torch.einsum: label 'b' of operand 'bij' is dimension 0 of each example "
                     r"\(size one\) and must be the first label of the output, but the output "
                     r"is 'ib'$", id="example-dim-moved"),
    ],
)
def test_einsum_errors(f, error, message):
    _, batch = batch_of([(3, 4), (1, 4)], (True, False), torch.float32)
    with pytest.raises(error, match=message):
        f(batch)


# ---------------------------------------------------------------- errors


def test_products_of_rank_one_examples_raise():
    # Examples of shape (1,), e.g. per-example losses: no matrix dimension.
    scalars = MaskedBatch.fromlist([torch.randn(1), torch.randn(1)], ())
    with pytest.raises(ValueError, match=r"^torch.matmul: examples of rank 1 are not supported; "
                                         r"each example needs at least rank 2 \(its size-one "
                                         r"dimension 0 and a vector dimension\)$"):
        torch.matmul(scalars, torch.randn(1))
    with pytest.raises(ValueError, match=r"^Tensor.__matmul__: examples of rank 1"):
        scalars @ torch.randn(1, 3)


def test_weight_that_would_add_leading_dims_raises():
    # Per example, (1, n, 4) @ (2, 4, 5) gives (2, n, 5): not an example any more.
    _, batch = batch_of([(3, 4), (1, 4)], (True, False))
    with pytest.raises(ValueError, match=r"^Tensor.__matmul__: the per-example result would not "
                                         r"keep dimension 0 of size one \(batched result shape "
                                         r"\(2, 2, 3, 5\)\); a plain tensor argument must not "
                                         r"add leading dimensions$"):
        batch @ torch.randn(2, 4, 5, dtype=torch.float64)


def test_every_registered_linalg_op_is_covered_here():
    tested = {"matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "einsum",
              "tensordot",  # test_tensordot.py
              "addmm", "addmv", "baddbmm",  # test_linalg_adds.py
              "dot", "vdot", "outer", "ger", "mv", "kron", "cross", "linalg_cross",
              "linalg_vecdot", "linalg_matmul",  # test_vector_products.py
              "vander", "linalg_vander"}  # test_vanders.py
    registered = {getattr(e.func, "__name__", e.name) for e in entries() if e.family == "linalg"}
    assert registered <= tested, sorted(registered - tested)


# ---------------------------------------------------------------- hypothesis


@given(example_lists(dims=(True, False)), st.integers(1, 4))
def test_random_batches_times_weight_match_loop(case, out_features):
    examples, batch = case
    w = torch.randn(batch.data.size(2), out_features, dtype=batch.dtype, requires_grad=True)
    mb_assert(lambda x: (x @ w).tanh() @ w.t(), [examples], [batch], len(examples), params=[w])


@given(st.data())
def test_random_attention_products_match_loop(data):
    batch_size = data.draw(st.integers(1, 4))
    dtype = data.draw(st.sampled_from([torch.float32, torch.float64]))
    query_lengths = data.draw(st.lists(st.integers(1, 5), min_size=batch_size,
                                       max_size=batch_size))
    key_lengths = data.draw(st.lists(st.integers(1, 5), min_size=batch_size,
                                     max_size=batch_size))
    args = _attention_inputs(query_lengths, key_lengths, dtype)
    check(lambda q, k, v: torch.einsum("bij,bjd->bid", (q @ k.transpose(1, 2)).tanh(), v), args)


@given(st.lists(st.integers(0, 5), min_size=1, max_size=4))
def test_random_contractions_over_dynamic_dims_match_loop(lengths):
    xs = batch_of([(3, n) for n in lengths], (False, True))
    ys = batch_of([(n, 2) for n in lengths], (True, False))
    w = weight(2, 2)
    check(lambda x, y: (x @ y).exp() @ w, [xs, ys], [w])


def assert_contraction_refused(lengths, other_lengths):
    """``x.transpose(1, 2) @ y`` over dynamic dimension 1, where example 0 has length 3 in
    ``x`` and 2 in ``y``, is refused as the loop would refuse it."""
    x = MaskedBatch.fromlist([torch.randn(1, n, 4) for n in lengths], (True, False))
    y = MaskedBatch.fromlist([torch.randn(1, n, 4) for n in other_lengths], (True, False))
    with pytest.raises(ValueError, match=r"Tensor.__matmul__: example 0 has size 3 in one "
                                         r"argument and 2 in another along dynamic dimension"):
        x.transpose(1, 2) @ y


def test_contraction_over_examples_of_different_lengths_is_refused():
    assert_contraction_refused([3, 2], [2, 3])


def test_contraction_with_a_batch_without_padding_checks_its_lengths():
    assert_contraction_refused([3, 3], [2, 2])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_scores_onto_an_empty_key_sequence_equal_the_loop(dtype):
    # Example 1 has no keys: its scores are (1, 1, 0), empty in part, and the product with
    # its (1, 0, 3) values is (1, 1, 3) of zeros, as in the loop; gradients free of NaN.
    qs = [torch.randn(1, n, 4, dtype=dtype) for n in (2, 1, 3)]
    ks = [torch.randn(1, n, 4, dtype=dtype) for n in (2, 0, 1)]
    vs = [torch.randn(1, n, 3, dtype=dtype) for n in (2, 0, 1)]
    q, k, v = (MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))
               for xs in (qs, ks, vs))
    scores = q @ k.transpose(1, 2)
    assert [tuple(e.shape) for e in scores.examples()] == [(1, 2, 2), (1, 1, 0), (1, 3, 1)]
    mb_assert(lambda q, k: q @ k.transpose(1, 2), [qs, ks], [q, k], 3)
    mb_assert(lambda q, k, v: (q @ k.transpose(1, 2)).tanh() @ v, [qs, ks, vs], [q, k, v], 3)
    mb_assert(lambda q, k, v: torch.bmm(torch.bmm(q, k.transpose(1, 2)), v),
              [qs, ks, vs], [q, k, v], 3)
    mb_assert(lambda q, k, v: torch.einsum("bqk,bkd->bqd",
                                           torch.einsum("bqd,bkd->bqk", q, k), v),
              [qs, ks, vs], [q, k, v], 3)


def test_self_attention_scores_of_an_empty_sequence_equal_the_loop():
    # Empty in every dynamic dimension: the scores (1, 0, 0) are held by an all-false mask,
    # and attention over them gives the loop's empty result.
    xs = [torch.randn(1, n, 4, dtype=torch.float64) for n in (2, 0, 3)]
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))
    mb_assert(lambda x: x @ x.transpose(1, 2), [xs], [xb], 3)
    mb_assert(lambda x: (x @ x.transpose(1, 2)).tanh() @ x, [xs], [xb], 3)


def test_contraction_when_every_example_is_empty():
    # Scores of empty sequences, every example (1, 2, 0, 0), with explicit masks: the
    # lengths along the contracted dimension are 0, not lost to the other empty one.
    scores = MaskedBatch(torch.zeros(2, 2, 0, 0), torch.zeros(2, 1, 0, 0, dtype=torch.bool),
                         (False, True, True))
    values = MaskedBatch(torch.zeros(2, 2, 0, 3), torch.zeros(2, 1, 0, 1, dtype=torch.bool),
                         (False, True, False))
    out = scores @ values
    assert [tuple(y.shape) for y in out.examples()] == [(1, 2, 0, 3)] * 2


# ---------------------------------------------------------------- dynamic beside static


CONTRACTIONS = [
    pytest.param(lambda k, v: k.transpose(1, 2) @ v, id="kT@v"),
    pytest.param(lambda k, v: torch.bmm(k.transpose(1, 2), v), id="bmm"),
    pytest.param(lambda k, v: torch.einsum("btd,bte->bde", k, v), id="einsum"),
    pytest.param(lambda k, v: v.transpose(1, 2) @ k, id="static@dynamic"),
]


@pytest.mark.parametrize("f", CONTRACTIONS)
@pytest.mark.parametrize("lengths, example, size", [([3, 2], 1, 2), ([5, 3], 0, 5),
                                                    ([3, 1], 1, 1), ([0, 3], 0, 0)])
def test_contraction_over_a_dim_dynamic_in_one_and_static_in_the_other_checks_lengths(
        f, lengths, example, size):
    # The loop raises for the example whose length is not the static size; the
    # batch used to contract over that example's real rows only.
    k = MaskedBatch.fromlist([torch.randn(1, n, 4) for n in lengths], (True, False))
    v = MaskedBatch.fromlist([torch.randn(1, 3, 6) for _ in lengths], (False, False))
    with pytest.raises(ValueError, match=rf"example {example} has size {size} in one argument "
                                         rf"and 3 in another along (dimension \d|index 't'), "
                                         rf"dynamic in the first and static in the second"):
        f(k, v)


@pytest.mark.parametrize("f", CONTRACTIONS + [
    pytest.param(lambda k, v: torch.einsum("btd,btd->bt", k, v[..., :4]), id="einsum-kept"),
    pytest.param(lambda k, v: k.unsqueeze(-1) @ v[..., :4].unsqueeze(-2), id="broadcast-dim"),
])
def test_contraction_beside_a_static_size_equal_to_every_length_matches_loop(f, dtype):
    ks, kb = batch_of([(3, 4)] * 3, (True, False), dtype)
    vs, vb = batch_of([(3, 6)] * 3, (False, False), dtype)
    check(f, [(ks, kb), (vs, vb)])
    # Padded past the longest example (x[:, :-1] keeps the padded size 4).
    ls, lb = batch_of([(4, 4)] * 3, (True, False), dtype)
    check(lambda k, v: f(k[:, :-1], v), [(ls, lb), (vs, vb)])


@pytest.mark.parametrize("f, shapes", [
    pytest.param(lambda a, b: a @ b, "(1, 3, 2) by (1, 3, 3)", id="@"),
    pytest.param(lambda a, b: torch.bmm(a, b), "(1, 3, 2) by (1, 3, 3)", id="bmm"),
    pytest.param(lambda a, b: a @ torch.randn(3, 5), r"(1, 3, 2) by (3, 5)", id="weight"),
    pytest.param(lambda a, b: torch.randn(4, 2) @ b, r"(4, 2) by (1, 3, 3)", id="weight-left"),
    pytest.param(lambda a, b: a @ torch.randn(3), r"(1, 3, 2) by (3,)", id="vector"),
])
def test_mismatched_static_inner_sizes_name_the_per_example_shapes(f, shapes):
    # torch's own error shows the batched, flattened shapes ("6x2 and 3x3").
    a = MaskedBatch.fromlist([torch.randn(1, 3, 2)] * 2, (False, False))
    b = MaskedBatch.fromlist([torch.randn(1, 3, 3)] * 2, (False, False))
    with pytest.raises(ValueError, match=rf"each example multiplies shape {re.escape(shapes)}, "
                                         rf"but the contracted dimension has size 2 in the "
                                         rf"first and 3 in the second"):
        f(a, b)


def test_mismatched_sizes_in_front_of_the_matrices_and_plain_contractions_are_clear():
    h = MaskedBatch.fromlist([torch.randn(1, 4, 3, 2)] * 2, (False, False, False))
    g = MaskedBatch.fromlist([torch.randn(1, 3, 2, 5)] * 2, (False, False, False))
    with pytest.raises(ValueError, match=r"Tensor.__matmul__: each example multiplies shape "
                                         r"\(1, 4, 3, 2\) by \(1, 3, 2, 5\), whose dimension 1 "
                                         r"\(in front of the matrices\) has size 4 in the first "
                                         r"and 3 in the second; they do not broadcast"):
        h @ g
    x = MaskedBatch.fromlist([torch.randn(1, 3, 4), torch.randn(1, 3, 2)], (False, True))
    with pytest.raises(ValueError, match=r"shape \(1, 3, \*\) by \(3, 5\); the contracted "
                                         r"dimension is dynamic in the batch, so a plain tensor "
                                         r"shared by every example must span its padded size 4 "
                                         r"there, not 3"):
        x @ torch.randn(3, 5)


def test_einsum_checks_every_index_across_its_operands():
    a = MaskedBatch.fromlist([torch.randn(1, 3, 2)] * 2, (False, False))
    b = MaskedBatch.fromlist([torch.randn(1, 3, 3)] * 2, (False, False))
    with pytest.raises(ValueError, match=r"torch.einsum: index 'j' has size 2 in operand 0 and "
                                         r"3 in operand 1, the same in every example; they do "
                                         r"not broadcast"):
        torch.einsum("bij,bjk->bik", a, b)
    # Dynamic in both operands: the lengths must agree, as for matmul.
    k = MaskedBatch.fromlist([torch.randn(1, n, 4) for n in (3, 2)], (True, False))
    v = MaskedBatch.fromlist([torch.randn(1, n, 6) for n in (3, 3)], (True, False))
    with pytest.raises(ValueError, match=r"torch.einsum: example 1 has size 2 in one argument "
                                         r"and 3 in another along dynamic dimension 1"):
        torch.einsum("btd,bte->bde", k, v)
    with pytest.raises(ValueError, match=r"index 't' is dynamic in the batch operands; plain "
                                         r"operand 1, shared by every example, has size 2 there, "
                                         r"which must be 1 or span the padded size 3"):
        torch.einsum("btd,te->bde", k, torch.randn(2, 6))
