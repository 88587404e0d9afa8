"""``torch.*`` spellings of the metric losses (ATen's, which ``F.*`` calls, ``reduction``
an int: 0 'none', 1 'mean', 2 'sum') and ``F.multilabel_margin_loss`` on batches: each
example's loss equals the unbatched call on it, values and gradients.

Padding holds NaN; zero- and one-length examples, a batch of one, float32 and float64.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from loss_values import normal, signs

from matchbox import MaskedBatch
from matchbox.testing import mb_assert

NAN = float("nan")
D = 5
# torch.* spellings, their F.* twins' cases; reduction as ATen's number.
SPELLINGS = {
    "torch.triplet_margin_loss": [
        (lambda a, p, n, r: torch.triplet_margin_loss(a, p, n, reduction=r),
         (normal, normal, normal)),
        (lambda a, p, n, r: torch.triplet_margin_loss(a, p, n, 0.5, 1.0, 1e-3, True, r),
         (normal, normal, normal)),
    ],
    "torch.margin_ranking_loss": [
        (lambda x, y, t, r: torch.margin_ranking_loss(x, y, t, 0.3, r), (normal, normal, signs)),
    ],
    "torch.hinge_embedding_loss": [
        (lambda x, t, r: torch.hinge_embedding_loss(x, t, margin=0.5, reduction=r),
         (normal, signs)),
        (lambda x, t, r: torch.hinge_embedding_loss(x, t, 1.0, r), (normal, signs)),
    ],
}
TESTED = set(SPELLINGS) | {"torch.cosine_embedding_loss",
                           "torch.nn.functional.multilabel_margin_loss"}
LAYOUTS = {
    # (dims, lengths): examples (1, D), or (1, n, D) with n dynamic
    "features": ((False,), [None] * 4),
    "batch-of-one": ((False,), [None]),
    "positions": ((True, False), [3, 0, 1, 5]),
    "positions-batch-of-one": ((True, False), [2]),
}


def batch(examples, dims):
    return MaskedBatch.fromlist(examples, dims, padding_value=NAN)


def _examples(make, lengths, dtype):
    return [make((1, D) if n is None else (1, n, D), dtype) for n in lengths]


@pytest.mark.parametrize("reduction", [0, 1, 2])
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("name", sorted(SPELLINGS))
def test_torch_spellings_match_loop(name, layout, reduction, dtype):
    dims, lengths = LAYOUTS[layout]
    for call, makers in SPELLINGS[name]:
        args = [_examples(make, lengths, dtype) for make in makers]
        mb_assert(lambda *xs, call=call: call(*xs, reduction), args,
                  [batch(xs, dims) for xs in args], len(lengths))


@pytest.mark.parametrize("reduction", [0, 1, 2])
@pytest.mark.parametrize("size", [4, 1])
def test_torch_cosine_embedding_loss_matches_loop(size, reduction, dtype):
    x1 = [torch.randn(1, D, dtype=dtype) for _ in range(size)]
    x2 = [torch.randn(1, D, dtype=dtype) for _ in range(size)]
    ts = [signs((1,), dtype) for _ in range(size)]
    mb_assert(lambda a, b, t: torch.cosine_embedding_loss(a, b, t, 0.2, reduction),
              [x1, x2, ts], [batch(x1, (False,)), batch(x2, (False,)),
                             MaskedBatch.fromlist(ts, ())], size)
    # Features of each example's own size, the empty one included.
    v1 = [torch.randn(1, n, dtype=dtype) for n in (3, 0, 1, 5)[:size]]
    v2 = [torch.randn(1, n, dtype=dtype) for n in (3, 0, 1, 5)[:size]]
    mb_assert(lambda a, b, t: torch.cosine_embedding_loss(a, b, t, reduction=reduction),
              [v1, v2, ts], [batch(v1, (True,)), batch(v2, (True,)),
                             MaskedBatch.fromlist(ts, ())], size)


def test_torch_spellings_equal_their_functional_twins():
    xs = [torch.randn(1, n, D, dtype=torch.float64) for n in (2, 0, 3)]
    ys = [torch.randn(1, n, D, dtype=torch.float64) for n in (2, 0, 3)]
    xb, yb = batch(xs, (True, False)), batch(ys, (True, False))
    for name, reduction in (("none", 0), ("mean", 1), ("sum", 2)):
        torch.testing.assert_close(
            torch.triplet_margin_loss(xb, yb, xb * 2, reduction=reduction).data,
            F.triplet_margin_loss(xb, yb, xb * 2, reduction=name).data, equal_nan=True)


def _labels(classes, count):
    """A (1, C) target: `count` distinct labels, then -1, then anything in range."""
    labels = torch.randperm(classes)[:count]
    tail = torch.randint(-1, classes, (classes - count,))
    if count < classes:
        tail[0] = -1
    return torch.cat([labels, tail]).unsqueeze(0)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("counts", [[2, 0, 5, 1], [3]])
def test_multilabel_margin_loss_matches_loop(counts, reduction, dtype):
    size = len(counts)
    xs = [torch.randn(1, D, dtype=dtype) for _ in range(size)]
    ts = [_labels(D, c) for c in counts]
    mb_assert(lambda x, t: F.multilabel_margin_loss(x, t, reduction=reduction), [xs, ts],
              [batch(xs, (False,)), MaskedBatch.fromlist(ts, (False,))], size)
    mb_assert(lambda x, t: torch.nn.MultiLabelMarginLoss(reduction=reduction)(x, t), [xs, ts],
              [batch(xs, (False,)), MaskedBatch.fromlist(ts, (False,))], size)


def test_errors_name_the_op():
    x = batch([torch.randn(1, D), torch.randn(1, D)], (False,))
    labels = MaskedBatch.fromlist([torch.tensor([1.0]), torch.tensor([-1.0])], ())
    for call in (lambda: torch.cosine_embedding_loss(x, x, labels, 0.0, 3),
                 lambda: torch.margin_ranking_loss(x, x, x, reduction=-1)):
        with pytest.raises(ValueError, match=r"^torch\.(cosine_embedding|margin_ranking)_loss: "
                                             r"reduction must be 0 \('none'\), 1 \('mean'\) or "
                                             r"2 \('sum'\)"):
            call()
    with pytest.raises(ValueError, match=r"^torch\.triplet_margin_loss: margin must be greater "
                                         r"than 0, got 0"):
        torch.triplet_margin_loss(x, x, x, margin=0.0)
    with pytest.raises(RuntimeError, match=r"^torch\.cosine_embedding_loss: each example's "
                                           r"target must be one label"):
        torch.cosine_embedding_loss(x, x, x)
    ml = "^torch\\.nn\\.functional\\.multilabel_margin_loss: "
    t = MaskedBatch.fromlist([torch.tensor([[0, -1, 0, 0, 0]]), torch.tensor([[4, 7, -1, 0, 0]])],
                             (False,))
    with pytest.raises(IndexError, match=ml + r"the target of example 1 holds a class index out "
                                              r"of range \[-1, 5\)"):
        F.multilabel_margin_loss(x, t)
    with pytest.raises(TypeError, match=ml + r"the input and the target must both be batches"):
        F.multilabel_margin_loss(x, torch.zeros(1, D, dtype=torch.long))
    ragged = batch([torch.randn(1, 2), torch.randn(1, 3)], (True,))
    ragged_t = MaskedBatch.fromlist([torch.tensor([[0, -1]]), torch.tensor([[1, 2, -1]])],
                                    (True,))
    with pytest.raises(ValueError, match=ml + r"each example's input and target must be \(1, C\) "
                                              r"with C static .* pad the classes to one C"):
        F.multilabel_margin_loss(ragged, ragged_t)
    with pytest.raises(ValueError, match=ml + r"each example's target must hold class indices"):
        F.multilabel_margin_loss(x, x)


def multilabel_margin_where_positive(x, t, s):
    y = x.sum() * 0.0
    if s > 0:
        y = F.multilabel_margin_loss(x, t)
    return y


def test_an_example_not_running_multilabel_margin_is_not_checked():
    # Example 1 does not take the branch, and its target (9) is out of range: the loop
    # never computes its loss, so the batch must not raise for it.
    pytest.importorskip("matchbox.control", reason="@matchbox.batch is matchbox-control's "
                        "(not in the nn environment; the all environment runs this test)")
    import matchbox

    f = matchbox.batch(globals()["multilabel_margin_where_positive"])
    xs = [torch.randn(1, D, dtype=torch.float64) for _ in range(3)]
    ts = [torch.tensor([[1, -1, 0, 0, 0]]), torch.tensor([[9, 0, -1, 0, 0]]),
          torch.tensor([[3, 0, 2, -1, 0]])]
    ss = [torch.tensor([1.0]), torch.tensor([-1.0]), torch.tensor([1.0])]
    mb_assert(f, [xs, ts, ss], [batch(xs, (False,)), MaskedBatch.fromlist(ts, (False,)),
                                MaskedBatch.fromlist(ss, ())], 3)
