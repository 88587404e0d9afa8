"""group_norm, instance_norm and batch_norm (and their nn modules) on batches.

group_norm and instance_norm normalise each example over its own real positions: the
oracle is the per-example loop (values, input and parameter gradients; NaN padding),
along static and dynamic spatial dimensions.  batch_norm in eval mode is per position:
the loop again.  batch_norm in training mixes the examples, so its oracle is what
Matchbox defines it to be: torch's own batch_norm over the real positions of every
example together (the examples concatenated along their spatial dimension), values,
gradients and running statistics.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from matchbox import MaskedBatch, _registry
from matchbox._masking import EXECUTION_MASK
from matchbox.testing import mb_assert

NAN = float("nan")

# op name -> call(x, weight, bias): the channel norms of the normalization family
# (layer_norm / rms_norm are test_nn_normalization.py's).
CASES = {
    "torch.nn.functional.group_norm": lambda x, w, b: F.group_norm(x, 2, w, b, eps=1e-3),
    "torch.nn.functional.instance_norm": lambda x, w, b: F.instance_norm(x, weight=w, bias=b),
    "torch.nn.functional.batch_norm": lambda x, w, b: F.batch_norm(
        x, torch.zeros(4, dtype=x.dtype), torch.ones(4, dtype=x.dtype), w, b, False),
}
ROWWISE = ("layer_norm", "rms_norm")

REGISTERED = sorted(e.name for e in _registry.entries() if e.family == "normalization"
                    and not any(r in e.name for r in ROWWISE))


def test_every_registered_channel_norm_has_a_case_here():
    missing = [n for n in REGISTERED if n not in CASES]
    assert not missing, f"normalization ops without a test case: {missing}"


def batch_of(shapes, dims, dtype=torch.float64):
    examples = [torch.randn(1, 4, *shape, dtype=dtype) for shape in shapes]
    return examples, MaskedBatch.fromlist(examples, (False, *dims), padding_value=NAN)


# Spatial layouts of (1, 4, *spatial) examples: the channels (4) are static.  Every
# channel has at least 4 positions here: normalising 2 or 3 values is so ill-conditioned
# in float32 that the loop's own gradients differ from float64's by ~1e-4 (beyond
# float32's tolerance), so such short examples are tested in float64 (SHORT, below).
LAYOUTS = {
    "length-dynamic": ((True,), [(5,), (4,), (7,), (6,)]),
    "length-static": ((False,), [(5,), (5,)]),
    "image-dynamic": ((True, True), [(3, 4), (2, 2), (4, 1)]),
    "height-dynamic": ((True, False), [(3, 4), (2, 4), (1, 4)]),
    "cube": ((True, False, True), [(2, 3, 2), (3, 3, 1)]),
    "batch-of-one": ((True,), [(6,)]),
}


@pytest.mark.parametrize("name", REGISTERED)
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
def test_per_example_norms_match_loop(name, layout, affine, dtype):
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    w = torch.randn(4, dtype=dtype) if affine else None
    b = torch.randn(4, dtype=dtype) if affine else None
    mb_assert(lambda x, w, b: CASES[name](x, w, b), [examples, [w] * len(examples),
                                                     [b] * len(examples)],
              [batch, w, b], len(examples))


@pytest.mark.parametrize("groups", [1, 2, 4])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_group_norm_module_matches_loop(groups, layout, dtype):
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    module = nn.GroupNorm(groups, 4, eps=1e-4).to(dtype)
    with torch.no_grad():
        module.weight.normal_()
        module.bias.normal_()
    mb_assert(module, [examples], [batch], len(examples))


@pytest.mark.parametrize("module_type, layout", [
    (nn.InstanceNorm1d, "length-dynamic"), (nn.InstanceNorm2d, "image-dynamic"),
    (nn.InstanceNorm3d, "cube"), (nn.InstanceNorm1d, "batch-of-one"),
])
@pytest.mark.parametrize("affine", [True, False])
def test_instance_norm_modules_match_loop(module_type, layout, affine, dtype):
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    module = module_type(4, affine=affine).to(dtype)
    mb_assert(module, [examples], [batch], len(examples))


@given(st.lists(st.integers(4, 9), min_size=1, max_size=5), st.integers(0, 2**16),
       st.sampled_from([torch.float32, torch.float64]))
def test_group_and_instance_norm_on_random_lengths_match_loop(lengths, seed, dtype):
    g = torch.Generator().manual_seed(seed)
    examples = [torch.randn(1, 4, n, generator=g, dtype=dtype) * 3 + 1 for n in lengths]
    batch = MaskedBatch.fromlist(examples, (False, True), padding_value=NAN)
    mb_assert(lambda x: F.group_norm(x, 2) + F.instance_norm(x), [examples], [batch],
              len(examples))


SHORT = [(2,), (3,), (5,), (2,)]


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_short_examples_match_loop_in_float64(groups):
    examples, batch = batch_of(SHORT, (True,), torch.float64)
    mb_assert(lambda x: F.group_norm(x, groups) + F.instance_norm(x), [examples], [batch],
              len(examples))


def test_empty_examples_normalise_nothing_as_in_the_loop(dtype):
    examples, batch = batch_of([(5,), (0,), (4,)], (True,), dtype)
    mb_assert(lambda x: F.group_norm(x, 2) * 2, [examples], [batch], 3)
    mb_assert(lambda x: F.instance_norm(x), [examples], [batch], 3)


def test_one_value_to_normalise_raises_as_the_loop_does():
    _, batch = batch_of([(3,), (1,)], (True,))
    with pytest.raises(ValueError, match=r"^torch\.nn\.functional\.instance_norm: expected more "
                                         r"than 1 spatial element when training, but example 1 "
                                         r"has 1"):
        F.instance_norm(batch)
    with pytest.raises(ValueError, match=r"^torch\.nn\.functional\.group_norm: expected more "
                                         r"than 1 value per group, but example 1 has 1"):
        F.group_norm(batch, 4)
    F.group_norm(batch, 2)  # two channels per group: two values
    token = EXECUTION_MASK.set(torch.tensor([True, False]))
    try:
        F.instance_norm(batch)  # example 1 does not run this code
    finally:
        EXECUTION_MASK.reset(token)


def test_instance_norm_running_statistics_are_updated_once_for_the_batch(dtype):
    # The loop would update them once per example; the batch updates them once, with
    # the mean of its examples' statistics (unbiased variances), as torch's batched call
    # does: checked against torch on examples of one length, and by hand on others.
    same = [torch.randn(1, 4, 5, dtype=dtype) for _ in range(3)]
    module = nn.InstanceNorm1d(4, track_running_stats=True).to(dtype)
    reference = nn.InstanceNorm1d(4, track_running_stats=True).to(dtype)
    module(MaskedBatch.fromlist(same, (False, True)))
    reference(torch.cat(same, 0))
    torch.testing.assert_close(module.running_mean, reference.running_mean)
    torch.testing.assert_close(module.running_var, reference.running_var)

    examples, batch = batch_of([(3,), (0,), (6,)], (True,), dtype)
    module = nn.InstanceNorm1d(4, track_running_stats=True, momentum=0.3).to(dtype)
    out = module(batch)
    real = [x for x in examples if x.size(2)]
    means = torch.stack([x.mean(2)[0] for x in real]).mean(0)
    variances = torch.stack([x.var(2)[0] for x in real]).mean(0)
    torch.testing.assert_close(module.running_mean, 0.3 * means)
    torch.testing.assert_close(module.running_var, 0.7 + 0.3 * variances)
    for x, y in zip(examples, out.examples()):
        torch.testing.assert_close(y, F.instance_norm(x) if x.size(2) else x)
    module.eval()  # running statistics: the loop exactly
    mb_assert(module, [examples], [batch], 3)


# ---------------------------------------------------------------- batch_norm


def concatenated_batch_norm(examples, running, weight, bias, momentum=0.1, eps=1e-5):
    """The definition: torch's batch_norm over the examples' real positions together (each
    (1, C, *S) flattened to (1, C, n) and concatenated), split back per example."""
    flat = [x.reshape(1, x.size(1), -1) for x in examples]
    out = F.batch_norm(torch.cat(flat, 2), *running, weight, bias, True, momentum, eps)
    parts = out.split([f.size(2) for f in flat], 2)
    return [p.reshape(x.shape) for p, x in zip(parts, examples)]


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("running", [True, False], ids=["running-stats", "no-running-stats"])
def test_batch_norm_in_training_is_over_every_real_position(layout, running, dtype):
    dims, shapes = LAYOUTS[layout]
    examples, _ = batch_of(shapes, dims, dtype)
    leaves = [x.clone().requires_grad_() for x in examples]
    batch = MaskedBatch.fromlist([x.clone().requires_grad_() for x in examples],
                                 (False, *dims), padding_value=NAN)
    weight = torch.randn(4, dtype=dtype, requires_grad=True)
    bias = torch.randn(4, dtype=dtype, requires_grad=True)
    stats = [torch.randn(4, dtype=dtype), torch.rand(4, dtype=dtype) + 0.5]
    ours = [s.clone() for s in stats] if running else [None, None]
    theirs = [s.clone() for s in stats] if running else [None, None]
    out = F.batch_norm(batch, *ours, weight, bias, True, 0.2, 1e-4)
    expected = concatenated_batch_norm(leaves, theirs, weight, bias, 0.2, 1e-4)
    for y, e in zip(out.examples(), expected):
        torch.testing.assert_close(y, e)
    if running:
        torch.testing.assert_close(ours[0], theirs[0])
        torch.testing.assert_close(ours[1], theirs[1])
    # Gradients: of the inputs (real positions), weight and bias, for one weighting.
    cotangents = [torch.randn_like(e) for e in expected]
    ours_grads = torch.autograd.grad(
        sum((y * c).sum() for y, c in zip(out.examples(), cotangents)),
        [batch.data, weight, bias])
    theirs_grads = torch.autograd.grad(
        sum((e * c).sum() for e, c in zip(expected, cotangents)), [*leaves, weight, bias])
    real = [g for g in MaskedBatch._make(ours_grads[0], batch.mask, batch.dims).examples()]
    for a, b in zip(real + list(ours_grads[1:]), theirs_grads):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("module_type, layout", [
    (nn.BatchNorm1d, "length-dynamic"), (nn.BatchNorm2d, "image-dynamic"),
    (nn.BatchNorm3d, "cube"),
])
def test_batch_norm_modules_train_on_the_definition_and_evaluate_as_the_loop(module_type,
                                                                            layout, dtype):
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    module = module_type(4, momentum=None).to(dtype)  # a cumulative average, over two steps
    reference = module_type(4, momentum=None).to(dtype)
    for _ in range(2):
        out = module(batch)
        expected = concatenated_batch_norm(
            examples, [reference.running_mean, reference.running_var], reference.weight,
            reference.bias, momentum=1 / (int(reference.num_batches_tracked) + 1))
        reference.num_batches_tracked += 1
        for y, e in zip(out.examples(), expected):
            torch.testing.assert_close(y, e)
    torch.testing.assert_close(module.running_mean, reference.running_mean)
    torch.testing.assert_close(module.running_var, reference.running_var)
    assert int(module.num_batches_tracked) == 2
    module.eval()
    mb_assert(module, [examples], [batch], len(examples))


def test_batch_norm_of_feature_vectors_is_the_unpadded_batchs():
    # Examples (1, C): no padding; the definition is torch's own call on the stacked rows.
    examples = [torch.randn(1, 4, dtype=torch.float64) for _ in range(5)]
    batch = MaskedBatch.fromlist(examples, (False,))
    ours, theirs = nn.BatchNorm1d(4).double(), nn.BatchNorm1d(4).double()
    torch.testing.assert_close(ours(batch).data, theirs(torch.cat(examples)))
    torch.testing.assert_close(ours.running_var, theirs.running_var)


def test_batch_norm_under_a_per_example_condition_counts_the_running_examples_only():
    examples, batch = batch_of([(3,), (2,), (4,)], (True,))
    token = EXECUTION_MASK.set(torch.tensor([True, False, True]))
    try:
        out = F.batch_norm(batch, None, None, training=True)
    finally:
        EXECUTION_MASK.reset(token)
    expected = concatenated_batch_norm([examples[0], examples[2]], [None, None], None, None)
    examples_out = list(out.examples())
    torch.testing.assert_close(examples_out[0], expected[0])
    torch.testing.assert_close(examples_out[2], expected[1])


def test_batch_norm_of_a_single_real_value_raises():
    _, batch = batch_of([(1,), (0,)], (True,))
    with pytest.raises(ValueError, match=r"^torch\.nn\.functional\.batch_norm: expected more "
                                         r"than 1 value per channel when training, but the "
                                         r"batch has 1 real position"):
        F.batch_norm(batch, None, None, training=True)


def test_channel_norm_errors_name_the_op():
    examples = [torch.randn(1, n, 3) for n in (2, 3)]
    dynamic_channels = MaskedBatch.fromlist(examples, (True, False))
    with pytest.raises(ValueError, match=r"^torch\.nn\.functional\.group_norm: dimension 1 \(the "
                                         r"channels\) is dynamic"):
        F.group_norm(dynamic_channels, 1)
    _, batch = batch_of([(3,), (2,)], (True,))
    with pytest.raises(RuntimeError, match=r"^torch\.nn\.functional\.group_norm: expected the "
                                           r"number of channels \(4\) to be divisible by "
                                           r"num_groups \(3\)"):
        F.group_norm(batch, 3)
    with pytest.raises(NotImplementedError, match=r"^torch\.nn\.functional\.batch_norm: weight "
                                                  r"must be a plain tensor"):
        F.batch_norm(batch, None, None, batch, training=True)


@pytest.mark.parametrize("module_type, layout", [
    (nn.BatchNorm1d, "length-dynamic"), (nn.BatchNorm1d, "length-static"),
    (nn.BatchNorm1d, "batch-of-one"), (nn.BatchNorm2d, "image-dynamic"),
    (nn.BatchNorm3d, "cube"),
])
def test_batch_norm_without_running_statistics_evaluates_as_the_loop(module_type, layout,
                                                                     dtype):
    # track_running_stats=False: the module calls batch_norm with training=True in eval
    # mode too (it has no running statistics).  In the loop each example is a batch of
    # one, normalised with its own statistics; the batch gave every example the whole
    # batch's (the training definition), silently (a user trial).
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    module = module_type(4, track_running_stats=False).to(dtype).eval()
    with torch.no_grad():
        module.weight.uniform_(0.5, 2)
        module.bias.uniform_(-1, 1)
    mb_assert(module, [examples], [batch], len(examples))


def test_batch_norm_without_running_statistics_evaluates_an_empty_example_as_the_loop():
    examples, batch = batch_of([(3,), (0,), (5,)], (True,))
    mb_assert(nn.BatchNorm1d(4, track_running_stats=False).double().eval(), [examples],
              [batch], 3)


def test_batch_norm_without_running_statistics_in_eval_refuses_one_value_as_the_loop():
    module = nn.BatchNorm1d(4, track_running_stats=False).eval()
    with pytest.raises(ValueError, match=r"Expected more than 1 value per channel"):
        module(torch.randn(1, 4))  # the loop, for one (1, C) example
    vectors = MaskedBatch.fromlist([torch.randn(1, 4) for _ in range(3)], (False,))
    with pytest.raises(ValueError, match=r"^torch\.nn\.functional\.batch_norm: expected more "
                                         r"than 1 value per channel when training, but "
                                         r"example 0 has 1 \(PyTorch raises for it alone\)"):
        module(vectors)
    _, batch = batch_of([(3,), (1,)], (True,))
    with pytest.raises(ValueError, match=r"but example 1 has 1 \(PyTorch raises"):
        module(batch)
    module.train()  # training keeps the definition: the batch's statistics together
    assert module(vectors).data.shape == (3, 4)
