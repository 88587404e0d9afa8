"""layer_norm / rms_norm (every registered form) and nn.LayerNorm / nn.RMSNorm equal the loop.

Values and gradients of the input, of shared weight/bias arguments and of
module parameters; padding holds NaN.  Parametrised over the registry's
``normalization`` family: every registered form must have a call below.
"""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from matchbox import MaskedBatch, _registry
from matchbox.testing import mb_assert, mb_rand

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

HAS_RMS_NORM = hasattr(F, "rms_norm")
needs_rms_norm = pytest.mark.skipif(not HAS_RMS_NORM, reason="F.rms_norm needs torch >= 2.4")

# op name -> call(x, normalized_shape, weight, bias); rms_norm has no bias.
CALLS = {
    "torch.nn.functional.layer_norm": lambda x, s, w, b: F.layer_norm(x, s, w, b, eps=1e-4),
    "torch.layer_norm": lambda x, s, w, b: torch.layer_norm(x, s, w, b),
    "torch.nn.functional.rms_norm": lambda x, s, w, b: F.rms_norm(x, s, w),
    "torch.rms_norm": lambda x, s, w, b: torch.rms_norm(x, s, w, 1e-6),
}
# group_norm, instance_norm and batch_norm are test_nn_channel_norms.py's.
REGISTERED = sorted(e.name for e in _registry.entries() if e.family == "normalization"
                    and ("layer_norm" in e.name or "rms_norm" in e.name))

# (dims, sizes) and how many trailing (static) dims are normalised.
LAYOUTS = [
    ("dynamic-static", ((True, 5), (False, 3)), 1),
    ("dynamic-static-static", ((True, 4), (False, 2), (False, 3)), 2),
    ("static-dynamic-static", ((False, 2), (True, 4), (False, 3)), 1),
    ("two-dynamic-static", ((True, 3), (True, 4), (False, 3)), 1),
    ("all-static", ((False, 3), (False, 4)), 2),
]


def test_every_registered_form_has_a_call():
    assert set(REGISTERED) <= set(CALLS)


def weights(spec, trailing, dtype, affine):
    shape = [size for _, size in spec[len(spec) - trailing:]]
    if not affine:
        return shape, None, None
    return shape, torch.randn(shape, dtype=dtype), torch.randn(shape, dtype=dtype)


@pytest.mark.parametrize("name", REGISTERED)
@pytest.mark.parametrize("layout, spec, trailing", LAYOUTS, ids=[lay[0] for lay in LAYOUTS])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
def test_matches_loop(name, layout, spec, trailing, affine, dtype):
    call = CALLS[name]
    min_size = 1 if sum(d for d, _ in spec) > 1 else 0
    for batch_size in (1, 4):
        xs, xb = mb_rand(batch_size, *spec, dtype=dtype, min_size=min_size,
                         generator=random.Random(batch_size))
        shape, w, b = weights(spec, trailing, dtype, affine)
        mb_assert(lambda x, w, b, shape=shape: call(x, shape, w, b), [xs, [w] * batch_size,
                                                         [b] * batch_size], [xb, w, b],
                  batch_size)


@pytest.mark.parametrize("name", REGISTERED)
@given(batch=st.integers(1, 5), max_len=st.integers(0, 6), features=st.integers(1, 5),
       seed=st.integers(0, 10_000), dtype=st.sampled_from([torch.float32, torch.float64]))
def test_hypothesis_shapes(name, batch, max_len, features, seed, dtype):
    xs, xb = mb_rand(batch, (True, max_len), (False, features), dtype=dtype,
                     generator=random.Random(seed), min_size=0)
    w, b = torch.randn(features, dtype=dtype), torch.randn(features, dtype=dtype)
    mb_assert(lambda x, w, b: CALLS[name](x, [features], w, b),
              [xs, [w] * batch, [b] * batch], [xb, w, b], batch)


def test_layer_norm_modules(dtype):
    examples = [torch.randn(1, n, 2, 3, dtype=dtype) for n in (0, 1, 4)]
    xb = MaskedBatch.fromlist(examples, (True, False, False), padding_value=float("nan"))
    for module in (torch.nn.LayerNorm(3), torch.nn.LayerNorm([2, 3]),
                   torch.nn.LayerNorm(3, elementwise_affine=False),
                   torch.nn.LayerNorm(3, bias=False)):
        module = module.to(dtype)
        if module.weight is not None:  # not the default ones and zeros
            torch.nn.init.normal_(module.weight)
        mb_assert(module, [examples], [xb], 3)


@needs_rms_norm
def test_rms_norm_modules(dtype):
    examples = [torch.randn(1, n, 3, dtype=dtype) for n in (0, 1, 4)]
    xb = MaskedBatch.fromlist(examples, (True, False), padding_value=float("nan"))
    for module in (torch.nn.RMSNorm(3), torch.nn.RMSNorm(3, eps=1e-3),
                   torch.nn.RMSNorm(3, elementwise_affine=False)):
        module = module.to(dtype)
        if module.weight is not None:
            torch.nn.init.normal_(module.weight)
        mb_assert(module, [examples], [xb], 3)


def test_padding_never_reaches_parameter_gradients():
    # All-NaN padding rows; the weight's gradient must stay finite.
    examples = [torch.randn(1, n, 4) for n in (1, 6)]
    xb = MaskedBatch.fromlist(examples, (True, False), padding_value=float("nan"))
    layer = torch.nn.LayerNorm(4)
    layer(xb).sum(1).sum(1).backward()
    assert layer.weight.grad.isfinite().all() and layer.bias.grad.isfinite().all()


def test_without_padding_takes_the_data_as_is(dtype):
    examples = [torch.randn(1, 3, 4, dtype=dtype) for _ in range(3)]
    xb = MaskedBatch.fromlist(examples, (True, False))
    assert xb._mask is None
    mb_assert(torch.nn.LayerNorm(4).to(dtype), [examples], [xb], 3)


@pytest.mark.parametrize("name", REGISTERED)
def test_normalising_a_dynamic_dim_is_refused(name):
    xs, xb = mb_rand(2, (False, 2), (True, 3), min_size=0)
    with pytest.raises(ValueError, match=rf"{name}: normalized_shape \[3\] covers dimension 2, "
                                         r"which is dynamic"):
        CALLS[name](xb, [3], None, None)


@pytest.mark.parametrize("name", REGISTERED)
def test_normalising_dimension_zero_is_refused(name):
    xs, xb = mb_rand(2, (False, 3), min_size=0)
    with pytest.raises(ValueError, match=rf"{name}: normalized_shape \[1, 3\] would cover "
                                         r"dimension 0 of each example, its batch dimension"):
        CALLS[name](xb, [1, 3], None, None)


def test_a_batched_weight_is_refused():
    xs, xb = mb_rand(2, (True, 3), (False, 2), min_size=0)
    wb = MaskedBatch.fromlist([torch.rand(1, 2), torch.rand(1, 2)], (False,))
    with pytest.raises(NotImplementedError, match=r"torch.nn.functional.layer_norm: weight must "
                                                  r"be a plain tensor shared by every example"):
        F.layer_norm(xb, [2], wb)


@needs_cuda
def test_on_cuda():
    xs, xb = mb_rand(4, (True, 5), (False, 3), device="cuda", min_size=0)
    mb_assert(torch.nn.LayerNorm(3).double().cuda(), [xs], [xb], 4)
    if HAS_RMS_NORM:
        mb_assert(torch.nn.RMSNorm(3).double().cuda(), [xs], [xb], 4)
