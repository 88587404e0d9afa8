"""Dropout (every registered form) on batches.

Eval mode and ``p=0`` must equal the loop exactly (values and gradients).  In
training the random numbers cannot be the loop's, so the tests check what the
contract promises instead: one random draw for the whole batch, the keep rate
``1 - p`` over real positions, one scale for every kept value, and masks that
are independent between examples (two identical examples agree on a unit only
as often as independent draws would).  Parametrised over the registry's
``dropout`` family: every registered form needs an entry in FORMS.
"""

from __future__ import annotations

import math
import random

import pytest
import torch
import torch.nn.functional as F

from matchbox import MaskedBatch, _registry
from matchbox.testing import mb_assert, mb_rand

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

ELEMENTWISE = ((True, 6), (False, 3))
CHANNELS_1D = ((False, 3), (True, 6))  # (1, C, L)
CHANNELS_2D = ((False, 3), (True, 4), (False, 5))  # (1, C, H, W)
CHANNELS_3D = ((False, 2), (True, 3), (False, 2), (False, 2))  # (1, C, D, H, W)


def inplace(op):
    # An in-place op cannot write into a leaf that requires grad (the loop's
    # examples are such leaves): write into a copy, as user code would.
    return lambda x, p, train: op(x * 1, p, train)


# op name -> (call(x, p, training), layout, whether a whole channel is one unit)
FORMS = {
    "torch.nn.functional.dropout": (lambda x, p, t: F.dropout(x, p, t), ELEMENTWISE, False),
    "torch.nn.functional.alpha_dropout": (lambda x, p, t: F.alpha_dropout(x, p, t), ELEMENTWISE,
                                          False),
    "torch.nn.functional.dropout1d": (lambda x, p, t: F.dropout1d(x, p, t), CHANNELS_1D, True),
    "torch.nn.functional.dropout2d": (lambda x, p, t: F.dropout2d(x, p, t), CHANNELS_2D, True),
    "torch.nn.functional.dropout3d": (lambda x, p, t: F.dropout3d(x, p, t), CHANNELS_3D, True),
    "torch.nn.functional.feature_alpha_dropout": (
        lambda x, p, t: F.feature_alpha_dropout(x, p, t), CHANNELS_2D, True),
    "torch.dropout": (torch.dropout, ELEMENTWISE, False),
    "torch.dropout_": (inplace(torch.dropout_), ELEMENTWISE, False),
    "torch.alpha_dropout": (torch.alpha_dropout, ELEMENTWISE, False),
    "torch.alpha_dropout_": (inplace(torch.alpha_dropout_), ELEMENTWISE, False),
    "torch.feature_dropout": (torch.feature_dropout, CHANNELS_1D, True),
    "torch.feature_dropout_": (inplace(torch.feature_dropout_), CHANNELS_1D, True),
    "torch.feature_alpha_dropout": (torch.feature_alpha_dropout, CHANNELS_1D, True),
    "torch.feature_alpha_dropout_": (inplace(torch.feature_alpha_dropout_), CHANNELS_1D, True),
}
REGISTERED = sorted(e.name for e in _registry.entries() if e.family == "dropout")


def test_every_registered_form_has_a_call():
    assert set(REGISTERED) <= set(FORMS)


@pytest.mark.parametrize("name", REGISTERED)
@pytest.mark.parametrize("p, training", [(0.4, False), (0.0, True), (1.0, False)],
                         ids=["eval", "p0-train", "p1-eval"])
def test_eval_and_p_zero_match_loop(name, p, training, dtype):
    call, spec, _ = FORMS[name]
    for batch_size in (1, 4):
        xs, xb = mb_rand(batch_size, *spec, dtype=dtype, generator=random.Random(batch_size), min_size=0)
        mb_assert(lambda x: call(x, p, training), [xs], [xb], batch_size)


def test_modules_in_eval_mode_match_loop(dtype):
    examples = [torch.randn(1, n, 3, 4, dtype=dtype) for n in (0, 1, 5)]
    xb = MaskedBatch.fromlist(examples, (True, False, False), padding_value=float("nan"))
    for module in (torch.nn.Dropout(0.5), torch.nn.Dropout2d(0.5), torch.nn.AlphaDropout(0.5),
                   torch.nn.FeatureAlphaDropout(0.5)):
        mb_assert(module.eval(), [examples], [xb], 3)
    xs, xb = mb_rand(3, *CHANNELS_1D, dtype=dtype, min_size=0)  # Dropout1d takes (1, C, L) examples
    mb_assert(torch.nn.Dropout1d(0.5).eval(), [xs], [xb], 3)


def test_eval_mode_returns_the_input_batch_itself():
    xs, xb = mb_rand(3, *ELEMENTWISE, min_size=0)
    assert F.dropout(xb, 0.5, training=False) is xb


def dropped_units(name, out):
    """(batch, units) bools: which real units (elements or channels) were dropped, and
    which units are real.

    The input is all ones, so a kept value is ``scale > 0`` and a dropped one
    is 0 (plain dropout) or alpha dropout's negative constant.
    """
    _, _, channels = FORMS[name]
    real = out.mask.expand_as(out.data)
    dropped = (out.data <= 0) & real
    kept = (out.data > 0) & real
    if channels:
        # Every real element of a dropped channel is dropped, of a kept one kept.
        dropped, kept, real = dropped.flatten(2), kept.flatten(2), real.flatten(2)
        assert not (dropped.any(2) & kept.any(2)).any(), "a channel was partly dropped"
        return dropped.any(2), real.any(2)
    return dropped.flatten(1), real.flatten(1)


def ones_batch(spec, batch_size, lengths=None):
    """A batch of all-ones examples; its mask tells which units are real."""
    sizes = [size for _, size in spec]
    dynamic = [i for i, (d, _) in enumerate(spec) if d][0]
    examples = []
    for b in range(batch_size):
        shape = list(sizes)
        shape[dynamic] = sizes[dynamic] if lengths is None else lengths[b]
        examples.append(torch.ones(1, *shape, dtype=torch.float64))
    return MaskedBatch.fromlist(examples, tuple(d for d, _ in spec), padding_value=float("nan"))


@pytest.mark.parametrize("name", REGISTERED)
def test_training_draws_once_for_the_batch(name):
    call, spec, _ = FORMS[name]
    xb = ones_batch(spec, 8, lengths=[random.Random(b).randint(0, 4) for b in range(8)])
    with torch.autograd.profiler.profile() as prof:
        call(xb, 0.3, True)
    draws = [e.name for e in prof.function_events if e.name == "aten::bernoulli_"]
    assert len(draws) == 1


@pytest.mark.parametrize("name", REGISTERED)
def test_training_keep_rate_and_scale(name):
    call, spec, _ = FORMS[name]
    p = 0.3
    rng = random.Random(1)
    lengths = [rng.randint(0, spec[[d for d, _ in spec].index(True)][1]) for _ in range(1500)]
    xb = ones_batch(spec, len(lengths), lengths)
    out = call(xb, p, True)
    # Real units only: padding is dropped or kept like anything else, unseen.
    values = out.data[out.mask.expand_as(out.data)]
    assert len(values.unique()) == 2, "kept values must share one scale"
    units, real_units = dropped_units(name, out)
    n = int(real_units.sum())
    rate = float(units[real_units].double().mean())
    assert abs(rate - p) < 5 * math.sqrt(p * (1 - p) / n), (rate, n)


@pytest.mark.parametrize("name", REGISTERED)
def test_training_masks_are_independent_between_examples(name):
    # Identical examples: independent masks agree on a unit with probability
    # p^2 + (1-p)^2 and both drop it with probability p^2; a mask shared by the
    # examples would always agree.
    call, spec, _ = FORMS[name]
    p = 0.5
    xb = ones_batch(spec, 2000)
    units, _ = dropped_units(name, call(xb, p, True))
    first, second = units[0::2].double(), units[1::2].double()
    n = first.numel()
    both = float((first * second).mean())
    assert abs(both - p * p) < 5 * math.sqrt(p * p * (1 - p * p) / n), both
    per_example = units.double().mean(1)
    assert per_example.std() > 0  # not one mask for every example


def test_nn_dropout_module_in_training_keeps_real_positions_scaled():
    xs, xb = mb_rand(4, *ELEMENTWISE, min_size=1)
    module = torch.nn.Dropout(0.25).train()
    out = module(xb)
    for x, y in zip(xs, out.examples()):
        kept = y != 0
        torch.testing.assert_close(y[kept], x[kept] / 0.75)


def test_a_plain_input_with_a_batch_elsewhere_is_refused():
    # torch.dropout's arguments after the input are numbers; a batch there
    # can only come through a keyword.
    xs, xb = mb_rand(2, *ELEMENTWISE, min_size=0)
    with pytest.raises(TypeError, match=r"torch.nn.functional.dropout: the input must be the "
                                        r"batch; got Tensor"):
        _registry.lookup(F.dropout)(F.dropout, torch.ones(2), xb)


@needs_cuda
def test_on_cuda():
    xs, xb = mb_rand(4, *ELEMENTWISE, device="cuda", min_size=0)
    mb_assert(lambda x: F.dropout(x, 0.5, training=False), [xs], [xb], 4)
    ones = ones_batch(ELEMENTWISE, 2000).cuda()
    units, _ = dropped_units("torch.nn.functional.dropout", F.dropout(ones, 0.3, True))
    rate = float(units.double().mean())
    assert abs(rate - 0.3) < 5 * (0.3 * 0.7 / units.numel()) ** 0.5
