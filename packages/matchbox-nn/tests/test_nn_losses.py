"""Losses on batches: each example's loss equals the unbatched call on it, for every
``reduction=``, values and gradients; ``loss.backward()`` on the batch equals the loop's
accumulated gradients.

Parametrised over the registry's ``loss`` family: every registered loss needs an
entry in ELEMENTWISE or CLASS_LOSSES below.  Padding holds NaN in inputs and
garbage in integer targets.
"""

from __future__ import annotations

import inspect
import random

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from loss_values import normal, signs
from test_nn_metric_loss_spellings import TESTED as SPELLINGS_TESTED
from test_nn_metric_losses import TESTED as METRIC_TESTED

from matchbox import MaskedBatch, _registry
from matchbox.testing import mb_assert

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

NAN = float("nan")
C = 4  # classes
REGISTERED = sorted(e.name for e in _registry.entries() if e.family == "loss")
HAS_LOSS_WEIGHT = "weight" in inspect.signature(F.mse_loss).parameters  # torch >= 2.6


def batch(examples, dims, padding=None):
    """NaN padding for floats, a garbage id for integers."""
    if padding is None:
        padding = NAN if examples[0].is_floating_point() else 10**6
    return MaskedBatch.fromlist(examples, dims, padding_value=padding)


# ---------------------------------------------------------------------------- elementwise


def _probabilities(shape, dtype):
    return torch.rand(shape, dtype=dtype)


def _counts(shape, dtype):
    return torch.randint(0, 5, shape).to(dtype)


# name -> (call(input, target, reduction), target maker, reductions)
ELEMENTWISE = {
    "torch.nn.functional.mse_loss": (lambda x, t, r: F.mse_loss(x, t, reduction=r), normal),
    "torch.nn.functional.l1_loss": (lambda x, t, r: F.l1_loss(x, t, reduction=r), normal),
    "torch.nn.functional.smooth_l1_loss": (
        lambda x, t, r: F.smooth_l1_loss(x, t, reduction=r, beta=0.5), normal),
    "torch.nn.functional.huber_loss": (
        lambda x, t, r: F.huber_loss(x, t, reduction=r, delta=0.5), normal),
    "torch.nn.functional.binary_cross_entropy": (
        lambda x, t, r: F.binary_cross_entropy(torch.sigmoid(x), t, reduction=r),
        _probabilities),
    "torch.nn.functional.binary_cross_entropy_with_logits": (
        lambda x, t, r: F.binary_cross_entropy_with_logits(x, t, reduction=r), _probabilities),
    "torch.nn.functional.kl_div": (
        lambda x, t, r: F.kl_div(F.log_softmax(x, -1), t, reduction=r), _probabilities),
    "torch.nn.functional.poisson_nll_loss": (
        lambda x, t, r: F.poisson_nll_loss(x, t.detach(), reduction=r), _counts),
    "torch.nn.functional.soft_margin_loss": (
        lambda x, t, r: F.soft_margin_loss(x, t.detach(), reduction=r), signs),
}
CLASS_LOSSES = ["torch.nn.functional.cross_entropy", "torch.nn.functional.nll_loss"]


def test_every_registered_loss_is_tested():
    # ctc_loss is test_nn_ctc_loss.py's, the metric losses test_nn_metric_losses.py's and
    # test_nn_metric_loss_spellings.py's.
    assert set(REGISTERED) == set(ELEMENTWISE) | set(CLASS_LOSSES) | METRIC_TESTED | \
        SPELLINGS_TESTED | {"torch.nn.functional.ctc_loss"}


def reductions(name):
    return ["none", "sum", "mean"] + (["batchmean"] if name.endswith("kl_div") else [])


def elementwise_data(name, lengths, dtype, features=3):
    _, make_target = ELEMENTWISE[name]
    xs = [torch.randn(1, n, features, dtype=dtype) for n in lengths]
    ts = [make_target((1, n, features), dtype) for n in lengths]
    return xs, ts, batch(xs, (True, False)), batch(ts, (True, False))


# kl_div's loop warns about 'mean' on every call (PyTorch's own deprecation notice).
pytestmark = pytest.mark.filterwarnings("ignore:reduction. 'mean' divides the total loss")


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_elementwise_matches_loop(name, dtype):
    call, _ = ELEMENTWISE[name]
    for lengths in ([0, 1, 3, 5], [2], [0]):
        xs, ts, xb, tb = elementwise_data(name, lengths, dtype)
        for reduction in reductions(name):
            mb_assert(lambda x, t, r=reduction: call(x, t, r), [xs, ts], [xb, tb], len(lengths))


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
@given(batch_size=st.integers(1, 5), max_len=st.integers(0, 6), features=st.integers(1, 4),
       seed=st.integers(0, 10_000), dtype=st.sampled_from([torch.float32, torch.float64]),
       reduction=st.sampled_from(["none", "sum", "mean"]))
def test_elementwise_hypothesis(name, batch_size, max_len, features, seed, dtype, reduction):
    rng = random.Random(seed)
    lengths = [rng.randint(0, max_len) for _ in range(batch_size)]
    xs, ts, xb, tb = elementwise_data(name, lengths, dtype, features)
    call, _ = ELEMENTWISE[name]
    mb_assert(lambda x, t: call(x, t, reduction), [xs, ts], [xb, tb], batch_size)


@pytest.mark.filterwarnings("ignore:Using a target size")  # the loop broadcasts too
def test_elementwise_with_a_shared_target_tensor(dtype):
    # A plain target is the same for every example (broadcast like a weight).
    xs = [torch.randn(1, n, 3, dtype=dtype) for n in (0, 2, 4)]
    target = torch.randn(3, dtype=dtype)
    for reduction in ("none", "sum", "mean"):
        mb_assert(lambda x, t, r=reduction: F.mse_loss(x, t, reduction=r), [xs, [target] * 3],
                  [batch(xs, (True, False)), target], 3)


@pytest.mark.filterwarnings("ignore:Using a target size")
def test_nan_gradient_at_padding_never_reaches_a_shared_argument(dtype):
    # 'none' then a product with a NaN-padded batch: the gradient arriving at
    # the loss's padding is NaN (0 * NaN); the shared target must not see it.
    xs = [torch.randn(1, n, 3, dtype=dtype) for n in (0, 2, 4)]
    zs = [torch.randn(1, n, 3, dtype=dtype) for n in (0, 2, 4)]
    target = torch.randn(3, dtype=dtype)

    def f(x, z, t):
        return (F.mse_loss(x, t, reduction="none") * z).sum(1).sum(1)

    mb_assert(f, [xs, zs, [target] * 3],
              [batch(xs, (True, False)), batch(zs, (True, False)), target], 3)


def test_kl_div_with_log_target(dtype):
    xs, ts, xb, tb = elementwise_data("torch.nn.functional.kl_div", [0, 1, 4], dtype)
    for reduction in ("none", "sum", "mean", "batchmean"):
        mb_assert(lambda x, t, r=reduction: F.kl_div(F.log_softmax(x, -1), t.log(), reduction=r,
                                                     log_target=True),
                  [xs, ts], [xb, tb], 3)


def test_bce_with_logits_weight_and_pos_weight(dtype):
    xs, ts, xb, tb = elementwise_data(
        "torch.nn.functional.binary_cross_entropy_with_logits", [0, 1, 4], dtype)
    # PyTorch has no derivative for weight and pos_weight: constants.
    weight, pos_weight = torch.rand(3, dtype=dtype), torch.rand(3, dtype=dtype) * 3
    # Per-position weights as a batch of the input's layout (NaN padding).
    ws = [torch.rand(1, x.size(1), 3, dtype=dtype) for x in xs]
    for reduction in ("none", "sum", "mean"):
        mb_assert(lambda x, t, r=reduction: F.binary_cross_entropy_with_logits(
            x, t, weight, reduction=r, pos_weight=pos_weight), [xs, ts], [xb, tb], 3)
        mb_assert(lambda x, t, w, r=reduction: F.binary_cross_entropy_with_logits(
            x, t, w.detach(), reduction=r), [xs, ts, ws], [xb, tb, batch(ws, (True, False))], 3)


def test_bce_with_weight(dtype):
    xs, ts, xb, tb = elementwise_data("torch.nn.functional.binary_cross_entropy", [0, 1, 4],
                                      dtype)
    weight = torch.rand(3, dtype=dtype)
    for reduction in ("none", "sum", "mean"):
        # PyTorch has no derivative for binary_cross_entropy's weight: a constant.
        mb_assert(lambda x, t, r=reduction: F.binary_cross_entropy(
            torch.sigmoid(x), t, weight, reduction=r), [xs, ts], [xb, tb], 3)


@pytest.mark.skipif(not HAS_LOSS_WEIGHT, reason="weight= of mse/l1/huber needs torch >= 2.6")
@pytest.mark.parametrize("loss", [F.mse_loss, F.l1_loss, F.huber_loss])
def test_mse_l1_huber_weight(loss, dtype):
    # mse/l1 'mean' divide by the summed weight, huber's by the count.
    xs, ts, xb, tb = elementwise_data("torch.nn.functional.mse_loss", [0, 1, 4], dtype)
    ws = [torch.rand(1, x.size(1), 3, dtype=dtype) for x in xs]
    for reduction in ("none", "sum", "mean"):
        mb_assert(lambda x, t, w, r=reduction: loss(x, t, reduction=r, weight=w),
                  [xs, ts, ws], [xb, tb, batch(ws, (True, False))], 3)


@pytest.mark.filterwarnings("ignore:size_average and reduce args will be deprecated")
def test_legacy_size_average_and_reduce(dtype):
    xs, ts, xb, tb = elementwise_data("torch.nn.functional.mse_loss", [0, 2, 3], dtype)
    for size_average, reduce in ((False, None), (None, False), (True, True)):
        mb_assert(lambda x, t, s=size_average, r=reduce: F.mse_loss(x, t, s, r), [xs, ts],
                  [xb, tb], 3)


@pytest.mark.parametrize("module", [torch.nn.MSELoss(), torch.nn.L1Loss(reduction="sum"),
                                    torch.nn.SmoothL1Loss(), torch.nn.HuberLoss(delta=2.0),
                                    torch.nn.BCEWithLogitsLoss(), torch.nn.KLDivLoss(reduction="batchmean")],
                         ids=lambda m: type(m).__name__)
def test_elementwise_modules(module, dtype):
    xs, ts, xb, tb = elementwise_data("torch.nn.functional.binary_cross_entropy", [0, 1, 4],
                                      dtype)
    mb_assert(module, [xs, ts], [xb, tb], 3)


# ---------------------------------------------------------------------------- classes


def class_loss(name, **kwargs):
    """cross_entropy(logits, ...) or nll_loss(log_softmax(logits), ...)."""
    if name.endswith("cross_entropy"):
        return lambda x, t: F.cross_entropy(x, t, **kwargs)
    return lambda x, t: F.nll_loss(F.log_softmax(x, 1), t, **kwargs)


def sequence_data(lengths, dtype, *, ignore=(), target_padding=10**6, ignore_index=-100):
    """Sequence labelling: logits (1, C, T), targets (1, T); ``ignore`` = (example, step)."""
    g = torch.Generator().manual_seed(len(lengths))
    xs = [torch.randn(1, C, n, dtype=dtype, generator=g) for n in lengths]
    ts = [torch.randint(0, C, (1, n), generator=g) for n in lengths]
    for example, step in ignore:
        ts[example][0, step] = ignore_index
    return xs, ts, batch(xs, (False, True)), batch(ts, (True,), padding=target_padding)


def single_data(n, dtype):
    """Classification: logits (1, C) and a target (1,) per example."""
    xs = [torch.randn(1, C, dtype=dtype) for _ in range(n)]
    ts = [torch.randint(0, C, (1,)) for _ in range(n)]
    return xs, ts, batch(xs, (False,)), batch(ts, ())


CLASS_OPTIONS = [
    {}, {"ignore_index": 2}, {"weight": "w"}, {"label_smoothing": 0.2},
    {"weight": "w", "label_smoothing": 0.1, "ignore_index": 1},
]


def options(option, dtype):
    kwargs = dict(option)
    if kwargs.get("weight") == "w":
        kwargs["weight"] = torch.linspace(0.5, 2.0, C, dtype=dtype)
    return kwargs


# nll_loss has no label_smoothing.
CLASS_CASES = [pytest.param(name, option, id=f"{name.rsplit('.', 1)[1]}-{option}")
               for name in CLASS_LOSSES for option in CLASS_OPTIONS
               if not (name.endswith("nll_loss") and "label_smoothing" in option)]


@pytest.mark.parametrize("name, option", CLASS_CASES)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_sequence_labelling_matches_loop(name, option, reduction, dtype):
    kwargs = options(option, dtype)
    f = class_loss(name, reduction=reduction, **kwargs)
    for lengths, ignore in (([0, 1, 3, 5], [(2, 1), (3, 0), (3, 4)]), ([2], []), ([0], [])):
        xs, ts, xb, tb = sequence_data(lengths, dtype, ignore=ignore,
                                       ignore_index=kwargs.get("ignore_index", -100))
        mb_assert(f, [xs, ts], [xb, tb], len(lengths))


@pytest.mark.filterwarnings("ignore:size_average and reduce args will be deprecated")
@pytest.mark.parametrize("name", CLASS_LOSSES)
@pytest.mark.parametrize("size_average, reduce", [(None, False), (False, None), (True, True),
                                                   (False, True)])
def test_class_losses_take_the_legacy_size_average_and_reduce(name, size_average, reduce,
                                                              dtype):
    # F.cross_entropy(logits, targets, reduce=False): the original Matchbox's spelling of
    # per-position losses, which PyTorch 2 still accepts.
    f = class_loss(name, size_average=size_average, reduce=reduce)
    for lengths in ([0, 1, 3, 5], [2], [1]):
        xs, ts, xb, tb = sequence_data(lengths, dtype, ignore=[(len(lengths) - 1, 0)])
        mb_assert(f, [xs, ts], [xb, tb], len(lengths))
    out = f(xb, tb)
    assert out.dims == ((True,) if reduce is False else ())


@pytest.mark.parametrize("name, option", CLASS_CASES)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_one_target_per_example_matches_loop(name, option, reduction, dtype):
    kwargs = options(option, dtype)
    for n in (1, 5):
        xs, ts, xb, tb = single_data(n, dtype)
        mb_assert(class_loss(name, reduction=reduction, **kwargs), [xs, ts], [xb, tb], n)


@pytest.mark.parametrize("name, label_smoothing", [
    ("torch.nn.functional.cross_entropy", 0.0), ("torch.nn.functional.cross_entropy", 0.3),
    ("torch.nn.functional.nll_loss", 0.0)])
def test_every_target_ignored_gives_what_pytorch_gives(name, label_smoothing, dtype):
    # 'mean' over no counted target is 0/0: PyTorch gives NaN per example, with
    # zero gradients; the other examples are unaffected.
    kwargs = {"label_smoothing": label_smoothing} if label_smoothing else {}
    xs, ts, xb, tb = sequence_data([3, 2, 4], dtype, ignore=[(0, 0), (0, 1), (0, 2)])
    loss = class_loss(name, **kwargs)
    mb_assert(loss, [xs, ts], [xb, tb], 3)
    assert torch.isnan(loss(xb, tb).data[0]) and not torch.isnan(loss(xb, tb).data[1:]).any()


def test_probability_targets(dtype):
    lengths = [0, 1, 3]
    xs = [torch.randn(1, C, n, dtype=dtype) for n in lengths]
    ps = [torch.softmax(torch.randn(1, C, n, dtype=dtype), 1) for n in lengths]
    xb, pb = batch(xs, (False, True)), batch(ps, (False, True))
    weight = torch.rand(C, dtype=dtype)
    for reduction in ("none", "sum", "mean"):
        for kwargs in ({}, {"label_smoothing": 0.2}, {"weight": weight}):
            mb_assert(lambda x, p, r=reduction, k=kwargs: F.cross_entropy(x, p, reduction=r, **k),
                      [xs, ps], [xb, pb], 3)


@pytest.mark.parametrize("name", CLASS_LOSSES)
def test_dynamic_class_dimension(name, dtype):
    # A pointer network: each example chooses among its own candidates.
    counts = [1, 3, 5, 2]
    xs = [torch.randn(1, n, dtype=dtype) for n in counts]
    ts = [torch.randint(0, n, (1,)) for n in counts]
    xb, tb = batch(xs, (True,)), batch(ts, ())
    for reduction in ("none", "sum", "mean"):
        mb_assert(class_loss(name, reduction=reduction), [xs, ts], [xb, tb], 4)
    # Candidates over positions: logits (1, K, T) with K dynamic, targets (1, T).
    xs = [torch.randn(1, k, 2, dtype=dtype) for k in counts]
    ts = [torch.randint(0, k, (1, 2)) for k in counts]
    mb_assert(class_loss(name), [xs, ts], [batch(xs, (True, False)), batch(ts, (False,))], 4)


@given(batch_size=st.integers(1, 5), max_len=st.integers(0, 6), seed=st.integers(0, 10_000),
       dtype=st.sampled_from([torch.float32, torch.float64]),
       reduction=st.sampled_from(["none", "sum", "mean"]),
       name=st.sampled_from(CLASS_LOSSES))
def test_class_losses_hypothesis(batch_size, max_len, seed, dtype, reduction, name):
    rng = random.Random(seed)
    lengths = [rng.randint(0, max_len) for _ in range(batch_size)]
    ignore = [(b, s) for b, n in enumerate(lengths) for s in range(n) if rng.random() < 0.2]
    xs, ts, xb, tb = sequence_data(lengths, dtype, ignore=ignore,
                                   target_padding=rng.choice([-1, 0, 10**9]))
    mb_assert(class_loss(name, reduction=reduction), [xs, ts], [xb, tb], batch_size)


@pytest.mark.parametrize("module", [torch.nn.CrossEntropyLoss(), torch.nn.NLLLoss(),
                                    torch.nn.CrossEntropyLoss(reduction="sum",
                                                              label_smoothing=0.1)],
                         ids=lambda m: type(m).__name__)
def test_class_modules(module, dtype):
    xs, ts, xb, tb = sequence_data([0, 2, 5], dtype, ignore=[(1, 0)])
    mb_assert(module, [xs, ts], [xb, tb], 3)


def test_backward_on_the_batch_equals_the_loops_accumulated_gradients():
    # loss.backward() on a batch of per-example losses (dims == ()), with a
    # shared model: the gradients are those of the loop's backward() calls.
    torch.manual_seed(1)
    model = torch.nn.Linear(3, C).double()
    xs = [torch.randn(1, n, 3, dtype=torch.float64) for n in (0, 2, 4, 1)]
    ts = [torch.randint(0, C, (1, n)) for n in (0, 2, 4, 1)]
    for x, t in zip(xs, ts):
        F.cross_entropy(model(x).transpose(1, 2), t, label_smoothing=0.1).backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    # The empty example's mean is NaN (0/0) in both; it has no position, so it
    # sends no gradient anywhere (in the loop as in the batch).
    loss = F.cross_entropy(model(batch(xs, (True, False))).transpose(1, 2),
                           batch(ts, (True,), padding=-7), label_smoothing=0.1)
    assert loss.dims == ()
    loss.backward()
    for got, want in zip([p.grad for p in model.parameters()], expected):
        torch.testing.assert_close(got, want)


# ---------------------------------------------------------------------------- errors


def test_errors():
    xs, ts, xb, tb = sequence_data([1, 3], torch.float64)
    with pytest.raises(ValueError, match=r"torch.nn.functional.cross_entropy: reduction='avg' is "
                                         r"not one of \['none', 'mean', 'sum'\]"):
        F.cross_entropy(xb, tb, reduction="avg")
    with pytest.raises(ValueError, match=r"torch.nn.functional.mse_loss: reduction='batchmean'"):
        F.mse_loss(xb, xb, reduction="batchmean")
    with pytest.raises(TypeError, match=r"torch.nn.functional.cross_entropy: the target must be "
                                        r"a MaskedBatch \(one target per example\)"):
        F.cross_entropy(xb, torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"torch.nn.functional.nll_loss: class-index targets must "
                                         r"have the input's layout without the class dimension "
                                         r"\(dims \(True,\)\); got dims \(False,\)"):
        F.nll_loss(xb, batch([torch.zeros(1, 2, dtype=torch.long)] * 2, (False,)))
    swapped = batch([ts[1], ts[0]], (True,))
    with pytest.raises(ValueError, match=r"torch.nn.functional.cross_entropy: example 0 has size "
                                         r"1 in one argument and 3 in another"):
        F.cross_entropy(xb, swapped)
    with pytest.raises(TypeError, match=r"torch.nn.functional.nll_loss: the target must hold "
                                        r"class indices"):
        F.nll_loss(xb, xb)
    with pytest.raises(ValueError, match=r"torch.nn.functional.cross_entropy: class-probability "
                                         r"targets must have the input's layout \(dims "
                                         r"\(False, True\)\); got dims \(True, False\)"):
        F.cross_entropy(xb, xb.transpose(1, 2))
    scalars = MaskedBatch(torch.randn(2), None, ())
    with pytest.raises(ValueError, match=r"torch.nn.functional.cross_entropy: each example's "
                                         r"input must have a class dimension"):
        F.cross_entropy(scalars, scalars)
    with pytest.raises(TypeError, match=r"torch.nn.functional.mse_loss: the input or the target "
                                        r"must be a MaskedBatch"):
        _registry.lookup(F.mse_loss)(F.mse_loss, torch.ones(2), torch.ones(2))


def test_a_plain_input_with_a_batch_target_says_why_it_is_plain():
    # Logits computed from plain tensors only (or from a batch's .data) are a plain
    # (B, C) tensor: the message says so and what to use instead.
    labels = batch([torch.tensor([1]), torch.tensor([2])], ())
    with pytest.raises(TypeError, match=r"torch.nn.functional.cross_entropy: the input must be the "
                                        r"batch; got Tensor of shape \(2, 4\): a plain "
                                        r"tensor is the same for every example \(values computed "
                                        r"from plain tensors only, or from a batch's .data, .* "
                                        r"compute them from the batch itself\)"):
        F.cross_entropy(torch.randn(2, C), labels)


def test_dynamic_class_dimension_errors():
    xs = [torch.randn(1, n) for n in (2, 4)]
    xb = batch(xs, (True,))
    tb = batch([torch.tensor([1]), torch.tensor([3])], ())
    with pytest.raises(NotImplementedError, match=r"torch.nn.functional.cross_entropy: weight is "
                                                  r"not supported with a dynamic class dimension"):
        F.cross_entropy(xb, tb, torch.ones(4))
    with pytest.raises(NotImplementedError, match=r"torch.nn.functional.cross_entropy: "
                                                  r"label_smoothing is not supported with a "
                                                  r"dynamic class dimension"):
        F.cross_entropy(xb, tb, label_smoothing=0.1)
    with pytest.raises(NotImplementedError, match=r"torch.nn.functional.cross_entropy: "
                                                  r"class-probability targets over a dynamic "
                                                  r"class dimension"):
        F.cross_entropy(xb, xb)
    # Example 0 has 2 classes: target 2 is out of range for it (not for the padded 4).
    bad = batch([torch.tensor([2]), torch.tensor([3])], ())
    with pytest.raises(IndexError, match=r"torch.nn.functional.cross_entropy: target 2 is out of "
                                         r"bounds for example 0, which has 2 classes"):
        F.cross_entropy(xb, bad)


@needs_cuda
def test_on_cuda():
    xs, ts, xb, tb = sequence_data([0, 2, 5], torch.float64, ignore=[(1, 0)])
    xs, ts, xb, tb = [x.cuda() for x in xs], [t.cuda() for t in ts], xb.cuda(), tb.cuda()
    for reduction in ("none", "sum", "mean"):
        mb_assert(lambda x, t, r=reduction: F.cross_entropy(x, t, reduction=r,
                                                            label_smoothing=0.1),
                  [xs, ts], [xb, tb], 3)
    ys = [torch.rand_like(x) for x in xs]
    mb_assert(lambda x, y: F.binary_cross_entropy_with_logits(x, y), [xs, ys],
              [xb, batch(ys, (False, True))], 3)
