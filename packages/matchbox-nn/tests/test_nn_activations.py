"""Every activation of ``torch.nn.functional`` the registry holds equals the loop on batches.

Parametrised over the registry: every ``torch.nn.functional`` name whose
callable is registered in the ``pointwise`` family (core's rule) or the
``activation`` family (``activations.py``) is tested, so a newly registered
activation is tested by default.  Most take only the input; ``ARGUMENTS``
gives the others what they need.  Padding holds NaN.
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

FAMILIES = {id(e.func): e.family for e in _registry.entries()}
ACTIVATIONS = sorted(
    name for name in dir(F)
    if not name.startswith("_") and callable(getattr(F, name))
    and FAMILIES.get(id(getattr(F, name))) in ("pointwise", "activation")
)

CHANNELS = 3
DEFAULT_LAYOUT = ((True, 5), (False, 4))
CHANNEL_LAYOUT = ((False, CHANNELS), (True, 5))  # prelu's channels are dimension 1

# name -> (extra positional arguments, keyword arguments, layout)
ARGUMENTS = {
    "threshold": ((0.1, 20.0), {}, DEFAULT_LAYOUT),
    "threshold_": ((0.1, 20.0), {}, DEFAULT_LAYOUT),
    "hardtanh": ((-0.5, 0.7), {}, DEFAULT_LAYOUT),
    "leaky_relu": ((0.2,), {}, DEFAULT_LAYOUT),
    "elu": ((0.7,), {}, DEFAULT_LAYOUT),
    "celu": ((1.3,), {}, DEFAULT_LAYOUT),
    "softplus": ((2.0, 1.0), {}, DEFAULT_LAYOUT),
    "gelu": ((), {"approximate": "tanh"}, DEFAULT_LAYOUT),
    "rrelu": ((0.1, 0.3, False), {}, DEFAULT_LAYOUT),
    "glu": ((-1,), {}, DEFAULT_LAYOUT),
    "prelu": ((torch.linspace(-0.5, 0.5, CHANNELS),), {}, CHANNEL_LAYOUT),
    "normalize": ((), {"p": 2.0, "dim": 1}, DEFAULT_LAYOUT),
}


def activation(name, dtype):
    """``f(x)`` calling ``F.name`` with its arguments (weights become ``dtype``)."""
    args, kwargs, _ = ARGUMENTS.get(name, ((), {}, DEFAULT_LAYOUT))
    args = tuple(a.to(dtype) if isinstance(a, torch.Tensor) else a for a in args)
    func = getattr(F, name)
    if name.endswith("_"):
        # In place: not on the loop's leaf examples, on a copy as user code would.
        return lambda x: func(x * 1, *args, **kwargs)
    return lambda x: func(x, *args, **kwargs)


def layout(name):
    return ARGUMENTS.get(name, ((), {}, DEFAULT_LAYOUT))[2]


def test_the_registry_holds_the_activations_of_the_contract():
    for name in ("relu", "gelu", "silu", "tanh", "sigmoid", "softplus", "leaky_relu", "elu",
                 "hardtanh", "threshold", "relu6", "celu", "selu", "mish", "hardsigmoid",
                 "rrelu", "glu", "prelu", "normalize", "hardswish", "logsigmoid", "softsign"):
        assert name in ACTIVATIONS


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_matches_loop(name, dtype):
    for batch_size in (1, 4):
        xs, xb = mb_rand(batch_size, *layout(name), dtype=dtype,
                         generator=random.Random(batch_size), min_size=0)
        mb_assert(activation(name, dtype), [xs], [xb], batch_size)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_zero_and_one_length_examples(name, dtype):
    spec = layout(name)
    dynamic = [d for d, _ in spec].index(True) + 1
    examples = []
    for n in (0, 1, 3):
        shape = [size for _, size in spec]
        shape[dynamic - 1] = n
        examples.append(torch.randn(1, *shape, dtype=dtype))
    xb = MaskedBatch.fromlist(examples, tuple(d for d, _ in spec), padding_value=float("nan"))
    mb_assert(activation(name, dtype), [examples], [xb], 3)


@pytest.mark.parametrize("name", ACTIVATIONS)
@given(batch=st.integers(1, 5), max_len=st.integers(0, 6), seed=st.integers(0, 10_000),
       dtype=st.sampled_from([torch.float32, torch.float64]))
def test_hypothesis_shapes(name, batch, max_len, seed, dtype):
    spec = tuple((d, max_len if d else size) for d, size in layout(name))
    xs, xb = mb_rand(batch, *spec, dtype=dtype, generator=random.Random(seed), min_size=0)
    mb_assert(activation(name, dtype), [xs], [xb], batch)


MODULES = [
    lambda: torch.nn.ReLU(), lambda: torch.nn.GELU("tanh"), lambda: torch.nn.SiLU(),
    lambda: torch.nn.Hardtanh(-2.0, 2.0), lambda: torch.nn.Threshold(0.1, 20.0),
    lambda: torch.nn.RReLU().eval(), lambda: torch.nn.CELU(0.5), lambda: torch.nn.SELU(),
    lambda: torch.nn.Mish(), lambda: torch.nn.Softplus(2.0), lambda: torch.nn.LeakyReLU(0.3),
    lambda: torch.nn.ReLU6(), lambda: torch.nn.Hardsigmoid(), lambda: torch.nn.GLU(-1),
    lambda: torch.nn.PReLU(), lambda: torch.nn.PReLU(4), lambda: torch.nn.ELU(inplace=True),
]


@pytest.mark.parametrize("make", MODULES, ids=lambda make: type(make()).__name__)
def test_modules_match_loop(make, dtype):
    module = make().to(dtype)
    # The trailing dim (4) is PReLU(4)'s channel dimension only when it is dimension 1.
    spec = ((False, 4), (True, 5)) if isinstance(module, torch.nn.PReLU) else DEFAULT_LAYOUT
    xs, xb = mb_rand(4, *spec, dtype=dtype, min_size=0)
    if getattr(module, "inplace", False):
        mb_assert(lambda x: module(x * 1), [xs], [xb], 4)
    else:
        mb_assert(module, [xs], [xb], 4)


@pytest.mark.parametrize("dim", [1, 2, -1])
@pytest.mark.parametrize("p", [1.0, 2.0, 3.0, float("inf"), -1.0])
def test_normalize_over_static_and_dynamic_dims(dim, p, dtype):
    # An empty example has no norm of order inf or below 0 (the loop fails):
    # every example has at least one position here.
    xs, xb = mb_rand(4, (True, 5), (False, 3), dtype=dtype, min_size=1)
    if dtype == torch.float32:
        # x / ||x|| is ill-conditioned for entries near 0: its gradient is a
        # difference of terms of size 1/|x| (exactly 0 for a one-element row),
        # and the batch reduces over padded rows, whose vectorised kernel
        # rounds differently from the loop's short rows.  In float32 that
        # rounding shows above the comparison's tolerance for |x| ~ 1e-2, so the
        # float32 case keeps entries away from 0 (float64 takes any value).
        xs = [x.sign() * (x.abs() + 0.5) for x in xs]
        xb = MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))
    mb_assert(lambda x: F.normalize(x, p=p, dim=dim), [xs], [xb], 4)


def test_normalize_of_an_empty_example_over_its_dynamic_dim(dtype):
    examples = [torch.randn(1, n, 3, dtype=dtype) for n in (0, 2)]
    xb = MaskedBatch.fromlist(examples, (True, False), padding_value=float("nan"))
    mb_assert(lambda x: F.normalize(x, dim=1), [examples], [xb], 2)


def test_rrelu_in_training_draws_a_slope_per_position():
    # Random slopes in [lower, upper] for negative inputs, independently per
    # position (the loop's random numbers cannot be reproduced).
    xs, xb = mb_rand(64, (True, 20), (False, 4), min_size=1)
    out = F.rrelu(xb, 0.1, 0.3, training=True)
    for x, y in zip(xs, out.examples()):
        negative = x < 0
        slope = y[negative] / x[negative]
        assert ((slope >= 0.1) & (slope <= 0.3)).all()
        torch.testing.assert_close(y[~negative], x[~negative])
    slopes = (out.data / xb.data)[(xb.data < 0) & xb.mask]
    assert slopes.std() > 0.03  # not one slope for everything


def test_errors():
    xs, xb = mb_rand(2, (True, 4), (False, 2), min_size=0)
    with pytest.raises(ValueError, match=r"torch.nn.functional.glu: dim=1 is dimension 1, "
                                         r"which is dynamic"):
        F.glu(xb, 1)
    with pytest.raises(ValueError, match=r"torch.nn.functional.glu: dimension 0 is the batch "
                                         r"dimension of each example \(size one; dim=0\)"):
        F.glu(xb, 0)
    with pytest.raises(ValueError, match=r"torch.prelu: a weight of 2 channels reads dimension 1 "
                                         r"of each example as the channels, but dimension 1 is "
                                         r"dynamic"):
        F.prelu(xb, torch.rand(2))
    scalars = MaskedBatch(torch.rand(3), None, ())
    with pytest.raises(ValueError, match=r"torch.prelu: a weight of 2 channels needs examples "
                                         r"with a channel dimension"):
        F.prelu(scalars, torch.rand(2))
    with pytest.raises(NotImplementedError, match=r"torch.prelu: weight must be a plain tensor"):
        F.prelu(xb, MaskedBatch(torch.rand(2, 1), None, (False,)))
    with pytest.raises(ValueError, match=r"torch.nn.functional.normalize: dimension 0 is the "
                                         r"batch dimension of each example \(size one; dim=0\)"):
        F.normalize(xb, dim=0)
    with pytest.raises(NotImplementedError, match=r"torch.nn.functional.normalize: out= is not "
                                                  r"supported"):
        F.normalize(xb, dim=1, out=torch.empty(1))


@needs_cuda
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_on_cuda(name):
    dtype = torch.float64
    args, kwargs, spec = ARGUMENTS.get(name, ((), {}, DEFAULT_LAYOUT))
    args = tuple(a.to(dtype).cuda() if isinstance(a, torch.Tensor) else a for a in args)
    func = getattr(F, name)
    xs, xb = mb_rand(4, *spec, dtype=dtype, device="cuda", min_size=0)
    mb_assert(lambda x: func(x * 1, *args, **kwargs), [xs], [xb], 4)
