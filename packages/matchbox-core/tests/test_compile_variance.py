"""``matchbox.compile`` (and eager) of ``var``/``std`` over a dynamic dimension: values and
gradients equal the loop over examples with ``inf`` and NaN among an example's values,
examples too short for the correction, empty and one-length examples and NaN padding.

Eagerly these ops have torch's own backward (an ``autograd.Function``); a captured graph
holds a Function's forward ops, not its backward, and differentiated the forward also
through the mean: an example holding ``inf`` got NaN at every position (the loop: ``-inf``
beside the ``inf``'s NaN), and ``n < correction`` NaN for the loop's ``±inf``.  The
captured form is written so that its own derivative is that backward.
"""

from __future__ import annotations

import math

import pytest
import torch

import matchbox
from matchbox import MaskedBatch
from matchbox.testing import mb_assert

BACKEND = "aot_eager"
INF = math.inf
NAN = math.nan
DTYPES = [torch.float32, torch.float64]


def compiled_on_batches(f):
    """``f`` compiled for batches; the loop's plain examples run ``f`` itself."""
    compiled = matchbox.compile(f, backend=BACKEND, fallback="raise")
    return lambda x: (compiled if isinstance(x, MaskedBatch) else f)(x)


OPS = {
    "var": lambda x: x.var(1),
    "std": lambda x: x.std(1),
    "var()": lambda x: x.var(),
    "std()": lambda x: x.std(),
    "var correction=0": lambda x: torch.var(x, 1, correction=0),
    "var correction=2": lambda x: x.var(1, correction=2),
    "var() correction=3": lambda x: x.var(correction=3),
    "std keepdim over two dims": lambda x: x.std((1, 2), keepdim=True) * 2,
}

ROWS = {
    "infinities and NaN": [[1.0, INF, 2.0], [INF], [-INF, 1.0], [INF, -INF, 0.0], [INF, INF],
                           [1.0, NAN, 2.0], [NAN], [0.5, -1.0, 2.0]],
    "short and empty examples": [[3.0], [], [0.5, -1.0], [2.0, 2.0], [1.0, 2.0, 4.0, 8.0]],
    "batch of one": [[-1.0, INF, 4.0]],
}


def _examples(rows, dtype, width):
    return [torch.tensor(r, dtype=dtype).reshape(1, -1, 1) * torch.arange(1.0, width + 1)
            .to(dtype) for r in rows]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_variance_equals_the_loop(op, rows, compiled, dtype):
    examples = _examples(ROWS[rows], dtype, 2)
    batch = MaskedBatch.fromlist(examples, (True, False), padding_value=float("nan"))
    f = compiled_on_batches(OPS[op]) if compiled else OPS[op]
    mb_assert(f, [examples], [batch], len(examples))


@pytest.mark.parametrize("dtype", DTYPES)
def test_an_example_holding_inf_gets_the_loops_gradient_compiled(dtype):
    """The known case: ``-inf`` beside the ``inf`` (whose own is NaN), not NaN everywhere."""
    x0 = torch.tensor([[1.0, INF, 2.0]], dtype=dtype)
    x1 = torch.tensor([[0.5, -1.0]], dtype=dtype)
    f = matchbox.compile(lambda x: x.var(1), backend=BACKEND, fallback="raise")
    xb = MaskedBatch.fromlist([x0, x1], (True,), padding_value=NAN).requires_grad_()
    (grad,) = torch.autograd.grad(matchbox.batch_sum(f(xb)), xb.data)
    assert grad[0].tolist()[0] == -INF and math.isnan(grad[0].tolist()[1])
    assert grad[0].tolist()[2] == -INF
    assert grad[1, :2].tolist() == [1.5, -1.5]


def test_var_without_dim_of_one_inf_gets_nan_as_torch_gives():
    """``var(x)`` at ``n <= correction``: torch's gradient is NaN where ``x == mean`` (``inf``
    is its own mean), inf elsewhere; eager tested ``x - mean == 0`` (NaN there) and gave inf."""
    x = torch.tensor([[INF], [2.0]], dtype=torch.float64)
    for f in (lambda b: b.var(), matchbox.compile(lambda b: b.var(), backend=BACKEND,
                                                    fallback="raise")):
        xb = MaskedBatch.fromlist([x[:1].T, x[1:].T], (True,)).requires_grad_()
        (grad,) = torch.autograd.grad(matchbox.batch_sum(f(xb)), xb.data)
        assert math.isnan(grad[0, 0]) and math.isnan(grad[1, 0])
