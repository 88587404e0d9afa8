"""Metric and margin losses on batches (``metric_losses.py``): each example's loss equals
the unbatched call on it for every ``reduction=``, values and gradients of every input
(batches, and plain tensors shared by every example).

Padding holds NaN; zero- and one-length examples, a batch of one, float32 and float64.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from loss_values import normal, signs
from torch import nn

from matchbox import MaskedBatch
from matchbox.testing import mb_assert

NAN = float("nan")


def _gaussian_nll_takes_a_float_var() -> bool:
    # torch 2.3 reads var.size() of a float (AttributeError); later releases take it.
    try:
        F.gaussian_nll_loss(torch.zeros(1), torch.zeros(1), 1.0)
    except AttributeError:
        return False
    return True


GAUSSIAN_NLL_TAKES_A_FLOAT_VAR = _gaussian_nll_takes_a_float_var()


def _gaussian_nll_broadcasts_var() -> bool:
    # torch 2.3 takes var of input's shape, or without its last dimension or with size one
    # there, only: a (1, 1, 3) var for (1, 2, 3) inputs raises in the loop itself.
    try:
        F.gaussian_nll_loss(torch.zeros(1, 2, 3), torch.zeros(1, 2, 3), torch.ones(1, 1, 3))
    except ValueError:
        return False
    return True


GAUSSIAN_NLL_BROADCASTS_VAR = _gaussian_nll_broadcasts_var()
REDUCTIONS = ["none", "mean", "sum"]
D = 5  # features


def batch(examples, dims):
    return MaskedBatch.fromlist(examples, dims, padding_value=NAN)


def _zero_one(shape, dtype):
    return torch.randint(0, 2, shape).to(dtype)


# name -> (call(*arguments, reduction), makers of the arguments, dynamic positions allowed)
METRIC_LOSSES = {
    "torch.nn.functional.triplet_margin_loss": [
        (lambda a, p, n, r: F.triplet_margin_loss(a, p, n, reduction=r),
         (normal, normal, normal)),
        (lambda a, p, n, r: F.triplet_margin_loss(a, p, n, 0.5, 1.0, swap=True, reduction=r),
         (normal, normal, normal)),
    ],
    "torch.nn.functional.triplet_margin_with_distance_loss": [
        (lambda a, p, n, r: F.triplet_margin_with_distance_loss(a, p, n, reduction=r),
         (normal, normal, normal)),
        (lambda a, p, n, r: F.triplet_margin_with_distance_loss(
            a, p, n, distance_function=lambda x, y: 1 - F.cosine_similarity(x, y, -1),
            margin=0.3, swap=True, reduction=r), (normal, normal, normal)),
    ],
    "torch.nn.functional.margin_ranking_loss": [
        (lambda x, y, t, r: F.margin_ranking_loss(x, y, t, margin=0.3, reduction=r),
         (normal, normal, signs)),
    ],
    "torch.nn.functional.hinge_embedding_loss": [
        (lambda x, t, r: F.hinge_embedding_loss(x, t, margin=0.5, reduction=r),
         (normal, signs)),
    ],
    "torch.nn.functional.multilabel_soft_margin_loss": [
        (lambda x, t, r: F.multilabel_soft_margin_loss(x, t, reduction=r), (normal, _zero_one)),
    ],
}
# One label or class per example: the target a batch of scalars (dims ()).
PER_EXAMPLE_TARGET = ["torch.nn.functional.cosine_embedding_loss",
                      "torch.nn.functional.multi_margin_loss"]
TESTED = set(METRIC_LOSSES) | set(PER_EXAMPLE_TARGET) | {"torch.nn.functional.gaussian_nll_loss"}

LAYOUTS = {
    # (dims, lengths): examples (1, D), or (1, n, D) with n dynamic
    "features": ((False,), [None] * 4),
    "batch-of-one": ((False,), [None]),
    "positions": ((True, False), [3, 0, 1, 5]),
    "positions-batch-of-one": ((True, False), [2]),
}


def _examples(make, lengths, dtype):
    return [make((1, D) if n is None else (1, n, D), dtype) for n in lengths]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("name", sorted(METRIC_LOSSES))
def test_metric_losses_match_loop(name, layout, reduction, dtype):
    dims, lengths = LAYOUTS[layout]
    for call, makers in METRIC_LOSSES[name]:
        args = [_examples(make, lengths, dtype) for make in makers]
        mb_assert(lambda *xs, call=call: call(*xs, reduction), args,
                  [batch(xs, dims) for xs in args], len(lengths))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_multilabel_soft_margin_over_a_dynamic_class_dimension_and_a_weight(reduction, dtype):
    # Each example's own number of classes divides its sum (the loop's C).
    xs = [torch.randn(1, c, dtype=dtype) for c in (3, 1, 0, 4)]
    ts = [_zero_one((1, c), dtype) for c in (3, 1, 0, 4)]
    mb_assert(lambda x, t: F.multilabel_soft_margin_loss(x, t, reduction=reduction), [xs, ts],
              [batch(xs, (True,)), batch(ts, (True,))], 4)
    xs = [torch.randn(1, D, dtype=dtype) for _ in range(3)]
    ts = [_zero_one((1, D), dtype) for _ in range(3)]
    weight = torch.rand(D, dtype=dtype)
    mb_assert(lambda x, t, w: F.multilabel_soft_margin_loss(x, t, w, reduction=reduction),
              [xs, ts, [weight] * 3], [batch(xs, (False,)), batch(ts, (False,)), weight], 3)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("size", [4, 1])
def test_cosine_embedding_loss_matches_loop(size, reduction, dtype):
    x1 = [torch.randn(1, D, dtype=dtype) for _ in range(size)]
    x2 = [torch.randn(1, D, dtype=dtype) for _ in range(size)]
    ts = [signs((1,), dtype) for _ in range(size)]
    bx1, bx2 = batch(x1, (False,)), batch(x2, (False,))
    mb_assert(lambda a, b, t: F.cosine_embedding_loss(a, b, t, 0.2, reduction=reduction),
              [x1, x2, ts], [bx1, bx2, MaskedBatch.fromlist(ts, ())], size)
    # A plain target (the same label for every example), a shared second input.
    shared = torch.randn(1, D, dtype=dtype)
    for label in (1.0, -1.0):
        target = torch.tensor([label], dtype=dtype)
        mb_assert(lambda a, b, target=target: F.cosine_embedding_loss(a, b, target,
                                                                       reduction=reduction),
                  [x1, [shared] * size], [bx1, shared], size)
    # Features of each example's own size (a dynamic dimension 1).
    v1 = [torch.randn(1, n, dtype=dtype) for n in (3, 0, 1, 5)[:size]]
    v2 = [torch.randn(1, n, dtype=dtype) for n in (3, 0, 1, 5)[:size]]
    mb_assert(lambda a, b, t: F.cosine_embedding_loss(a, b, t, reduction=reduction),
              [v1, v2, ts], [batch(v1, (True,)), batch(v2, (True,)),
                             MaskedBatch.fromlist(ts, ())], size)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("size", [4, 1])
def test_multi_margin_loss_matches_loop(size, p, reduction, dtype):
    xs = [torch.randn(1, D, dtype=dtype) for _ in range(size)]
    ts = [torch.randint(0, D, (1,)) for _ in range(size)]
    weight = torch.rand(D, dtype=dtype)  # torch has no gradient for it
    for w in (None, weight):
        mb_assert(lambda x, t, w=w: F.multi_margin_loss(x, t, p, 0.7, w, reduction=reduction),
                  [xs, ts], [batch(xs, (False,)), MaskedBatch.fromlist(ts, ())], size)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("lengths", [[3, 0, 1, 5], [2]])
def test_gaussian_nll_loss_matches_loop(lengths, full, reduction, dtype):
    size = len(lengths)
    xs = [torch.randn(1, n, 3, dtype=dtype) for n in lengths]
    ts = [torch.randn(1, n, 3, dtype=dtype) for n in lengths]
    variances = {  # heteroscedastic, one per position, size one in the last dimension
        "same": ([torch.rand(1, n, 3, dtype=dtype) for n in lengths], (True, False)),
        "short": ([torch.rand(1, n, dtype=dtype) for n in lengths], (True,)),
        "one": ([torch.rand(1, n, 1, dtype=dtype) for n in lengths], (True, False)),
    }
    variances["same"][0][0][0, 0, 0] = 0.0  # clamped to eps (its gradient flows as torch's)
    xb, tb = batch(xs, (True, False)), batch(ts, (True, False))
    for vs, dims in variances.values():
        mb_assert(lambda x, t, v: F.gaussian_nll_loss(x, t, v, full=full, reduction=reduction),
                  [xs, ts, vs], [xb, tb, batch(vs, dims)], size)
    shared = torch.rand(1, 1, 3, dtype=dtype)  # one variance per feature, for every example
    if GAUSSIAN_NLL_BROADCASTS_VAR:  # (else the loop itself fails: torch 2.3)
        mb_assert(lambda x, t, v: F.gaussian_nll_loss(x, t, v, reduction=reduction),
                  [xs, ts, [shared] * size], [xb, tb, shared], size)
    if GAUSSIAN_NLL_TAKES_A_FLOAT_VAR:  # (else the loop itself fails: torch 2.3)
        mb_assert(lambda x, t: F.gaussian_nll_loss(x, t, 0.7, full=full, reduction=reduction),
                  [xs, ts], [xb, tb], size)


def test_shared_plain_arguments_get_the_loops_gradients(dtype):
    # A negative (a positive, a second input) shared by every example: its gradient sums
    # the examples' own, never the padding's (NaN there).
    lengths = [3, 0, 1, 5]
    anchors = [torch.randn(1, n, D, dtype=dtype) for n in lengths]
    shared = torch.randn(1, 1, D, dtype=dtype)
    targets = [signs((1, n, D), dtype) for n in lengths]
    mb_assert(lambda a, s: F.triplet_margin_loss(a, s, s * 2, reduction="sum"),
              [anchors, [shared] * 4], [batch(anchors, (True, False)), shared], 4)
    mb_assert(lambda a, s: F.triplet_margin_loss(s, a, a.flip(1), reduction="mean"),
              [anchors, [shared] * 4], [batch(anchors, (True, False)), shared], 4)
    mb_assert(lambda a, s, t: F.margin_ranking_loss(a, s, t, reduction="mean"),
              [anchors, [shared] * 4, targets],
              [batch(anchors, (True, False)), shared, batch(targets, (True, False))], 4)


@pytest.mark.parametrize("module, makers, example_dims", [
    (nn.TripletMarginLoss(margin=0.4), (normal, normal, normal), (False,)),
    (nn.MarginRankingLoss(0.1), (normal, normal, signs), (False,)),
    (nn.HingeEmbeddingLoss(), (normal, signs), (False,)),
    (nn.MultiLabelSoftMarginLoss(), (normal, _zero_one), (False,)),
])
def test_loss_modules(module, makers, example_dims, dtype):
    args = [[make((1, D), dtype) for _ in range(3)] for make in makers]
    mb_assert(module, args, [batch(xs, example_dims) for xs in args], 3)


def test_backward_on_the_batch_equals_the_loops_accumulated_gradients():
    xs = [torch.randn(1, n, D, dtype=torch.float64, requires_grad=True) for n in (2, 0, 4)]
    ys = [torch.randn(1, n, D, dtype=torch.float64, requires_grad=True) for n in (2, 0, 4)]
    zs = [torch.randn(1, n, D, dtype=torch.float64) for n in (2, 0, 4)]
    sum(F.triplet_margin_loss(x, y, z) for x, y, z in zip(xs, ys, zs)).backward()
    expected = [t.grad.clone() for t in xs + ys]
    for t in xs + ys:
        t.grad = None
    F.triplet_margin_loss(batch(xs, (True, False)), batch(ys, (True, False)),
                          batch(zs, (True, False))).backward()
    for got, want in zip([t.grad for t in xs + ys], expected):
        torch.testing.assert_close(got, want)


def test_errors_name_the_op():
    x = batch([torch.randn(1, D), torch.randn(1, D)], (False,))
    labels = MaskedBatch.fromlist([torch.tensor([1.0]), torch.tensor([-1.0])], ())
    classes = MaskedBatch.fromlist([torch.tensor([1]), torch.tensor([7])], ())
    with pytest.raises(ValueError, match=r"^torch\.nn\.functional\.triplet_margin_loss: margin "
                                         r"must be greater than 0, got 0"):
        F.triplet_margin_loss(x, x, x, margin=0)
    with pytest.raises(RuntimeError, match=r"^torch\.nn\.functional\.triplet_margin_loss: the "
                                           r"anchor, positive, and negative tensors are expected "
                                           r"to have the same number of dimensions, but got: "
                                           r"anchor 2D, positive 2D, and negative 1D"):
        F.triplet_margin_loss(x, x, torch.randn(D))
    with pytest.raises(ValueError, match=r"^torch\.nn\.functional\.triplet_margin_loss: "
                                         r"reduction='all' is not one of"):
        F.triplet_margin_loss(x, x, x, reduction="all")
    with pytest.raises(RuntimeError, match=r"^torch\.nn\.functional\.cosine_embedding_loss: each "
                                           r"example's target must be one label, \(1,\)"):
        F.cosine_embedding_loss(x, x, x)
    with pytest.raises(RuntimeError, match=r"^torch\.nn\.functional\.cosine_embedding_loss: 1D "
                                           r"target tensor expects 2D input tensors, but found "
                                           r"inputs with 3 and 2 dimensions"):
        F.cosine_embedding_loss(x.unsqueeze(1), x, labels)
    with pytest.raises(RuntimeError, match=r"^torch\.nn\.functional\.margin_ranking_loss: all "
                                           r"input tensors should have the same dimension but "
                                           r"got \(per example\) input1: 2D, input2: 2D, target: "
                                           r"1D"):
        F.margin_ranking_loss(x, x, labels)
    scalars = MaskedBatch(torch.randn(3), None, ())
    with pytest.raises(ValueError, match=r"^torch\.nn\.functional\.multilabel_soft_margin_loss: "
                                         r"the examples are scalars"):
        F.multilabel_soft_margin_loss(scalars, scalars)
    gn = "^torch\\.nn\\.functional\\.gaussian_nll_loss: "
    scales = batch([torch.ones(1, D), -torch.ones(1, D)], (False,))
    with pytest.raises(ValueError, match=gn + r"var has negative entry/entries \(example 1\)"):
        F.gaussian_nll_loss(x, x, scales)
    with pytest.raises(ValueError, match=gn + r"var has negative entry/entries$"):
        F.gaussian_nll_loss(x, x, -1.0)
    with pytest.raises(ValueError, match=gn + r"var is of incorrect size"):
        F.gaussian_nll_loss(x.unsqueeze(1).expand(1, 2, 3, D), x.unsqueeze(1).expand(1, 2, 3, D),
                            torch.ones(1, 1, 1, D))
    mm = "^torch\\.nn\\.functional\\.multi_margin_loss: "
    with pytest.raises(ValueError, match=mm + r"only p == 1 and p == 2 supported"):
        F.multi_margin_loss(x, classes, p=3)
    with pytest.raises(ValueError, match=mm + r"weight must be a one-dimensional plain tensor"):
        F.multi_margin_loss(x, classes, weight=torch.ones(1, D))
    with pytest.raises(TypeError, match=mm + r"the input and the target must both be batches"):
        F.multi_margin_loss(x, torch.tensor([1]))
    with pytest.raises(ValueError, match=mm + r"each example's input must be \(1, C\) with C "
                                              r"static"):
        F.multi_margin_loss(batch([torch.randn(1, 2), torch.randn(1, 3)], (True,)), classes)
    with pytest.raises(ValueError, match=mm + r"each example's target must be one class index"):
        F.multi_margin_loss(x, labels)
    with pytest.raises(IndexError, match=mm + r"target 7 of example 1 is out of range for 5 "
                                              r"classes"):
        F.multi_margin_loss(x, classes)


def margin_where_positive(x, t, s):
    y = x.sum() * 0.0
    if s > 0:
        y = F.multi_margin_loss(x, t)
    return y


def test_an_example_not_running_the_loss_is_not_checked():
    # Example 1 does not take the branch, and its target (9) is out of range: the loop
    # never computes its loss, so the batch must not raise for it (torch's kernel did).
    pytest.importorskip("matchbox.control", reason="@matchbox.batch is matchbox-control's "
                        "(not in the nn environment; the all environment runs this test)")
    import matchbox

    f = matchbox.batch(globals()["margin_where_positive"])
    xs = [torch.randn(1, D, dtype=torch.float64) for _ in range(3)]
    ts = [torch.tensor([1]), torch.tensor([9]), torch.tensor([3])]
    ss = [torch.tensor([1.0]), torch.tensor([-1.0]), torch.tensor([1.0])]
    mb_assert(f, [xs, ts, ss], [batch(xs, (False,)), MaskedBatch.fromlist(ts, ()),
                                MaskedBatch.fromlist(ss, ())], 3)
