"""``matchbox.compile`` (and eager) of ``amax``/``amin``/``max()``/``min()`` and ``median()`` over a
dynamic dimension: values and gradients equal the loop over examples, with ties, an
example whose real values are all ``-inf`` (``+inf`` for the smallest), real NaN values
and NaN padding.

Eagerly these ops split the gradient over the real ties only (an ``autograd.Function``);
a captured graph holds a Function's forward ops, not its backward, and differentiated
``amax`` over the filled data, whose padding (``-inf``) tied with an example of ``-inf``
scores and took a share of its gradient (``[0.125, 0.125]`` for the loop's
``[0.5, 0.5]``).  The captured form is written so that its own derivative is that
backward.
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
DTYPES = [torch.float32, torch.float64]


def compiled_on_batches(f):
    """``f`` compiled for batches; the loop's plain examples run ``f`` itself."""
    compiled = matchbox.compile(f, backend=BACKEND, fallback="raise")
    return lambda x: (compiled if isinstance(x, MaskedBatch) else f)(x)


OPS = {
    "amax": lambda x: x.amax(1),
    "amin": lambda x: x.amin(1),
    "amax keepdim": lambda x: torch.amax(x, 1, keepdim=True) * 2,
    "amax over two dims": lambda x: x.amax((1, 2)),
    "max()": lambda x: x.max(),
    "min()": lambda x: x.min(),
    "amax of a sum": lambda x: (x + x).amax(1),
    "median()": lambda x: x.median(),
}

# Rows of each example (one column each, as the reproducer's scores; more columns below).
SCORES = {
    "all -inf beside a real example": [[-INF, -INF], [0.5, -1.0, 2.0, 0.25]],
    "all +inf beside a real example": [[INF, INF, INF], [0.5, -1.0]],
    "ties": [[1.0, 1.0, 0.0], [2.0], [-1.0, 3.0, 3.0, 3.0, 3.0]],
    "one example of -inf": [[-INF, -INF, -INF]],
    "one-length examples": [[-INF], [1.0], [INF]],
    "mixed infinities": [[-INF, 1.0, -INF], [INF, -INF], [-INF, -INF, 0.0, 0.0]],
    "a real NaN": [[1.0, math.nan, 2.0], [-INF, -INF], [3.0, 3.0]],
    "NaN ties": [[math.nan, math.nan, 1.0], [0.0, 0.0]],
}


def _examples(rows, dtype, width):
    return [torch.tensor(r, dtype=dtype).reshape(1, -1, 1).expand(1, -1, width).contiguous()
            for r in rows]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("scores", SCORES)
@pytest.mark.parametrize("width", [2])
@pytest.mark.parametrize("dtype", DTYPES)
def test_compiled_extremes_equal_the_loop(op, scores, width, dtype):
    examples = _examples(SCORES[scores], dtype, width)
    batch = MaskedBatch.fromlist(examples, (True, False), padding_value=float("nan"))
    mb_assert(compiled_on_batches(OPS[op]), [examples], [batch], len(examples))


@pytest.mark.parametrize("dtype", DTYPES)
def test_an_example_of_minus_inf_scores_gets_the_loops_gradient_compiled(dtype):
    """The reported case: each real ``-inf`` of example 0 gets half its gradient."""
    x0 = torch.full((1, 2, 1), -INF, dtype=dtype)
    x1 = torch.randn(1, 4, 1, dtype=dtype, generator=torch.Generator().manual_seed(0))
    f = matchbox.compile(lambda x: x.amax(1), backend=BACKEND, fallback="raise")
    xb = MaskedBatch.fromlist([x0, x1], (True, False)).requires_grad_()
    (grad,) = torch.autograd.grad(matchbox.batch_sum(f(xb)), xb.data)
    assert grad[0, :2].flatten().tolist() == [0.5, 0.5]
    assert grad[0, 2:].flatten().tolist() == [0.0, 0.0]


@pytest.mark.parametrize("op", ["max()", "min()", "median()"])
@pytest.mark.parametrize("dynamic", [(True, False), (False, False)])
@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_max_of_everything_with_a_real_nan_shares_the_gradient_over_the_nans(
        op, dynamic, compiled, dtype):
    """``x.max()`` of an example holding NaN: torch splits its gradient over the NaN
    values (``amax``'s is NaN everywhere); the batch did ``amax``'s, eager too, and with
    every dimension static (no padding) as well."""
    rows = [[1.0, math.nan, 2.0], [math.nan, 0.0, math.nan], [3.0, 3.0, -INF]]
    examples = _examples(rows, dtype, 2)
    batch = MaskedBatch.fromlist(examples, dynamic, padding_value=float("nan"))
    f = compiled_on_batches(OPS[op]) if compiled else OPS[op]
    mb_assert(f, [examples], [batch], len(examples))
