"""A compiled result that aliases an argument, or another result, behaves as eagerly.

Eagerly ``return x`` (or a view, ``x[:, :, :2]``) shares the argument's data: a write into
one is seen in the other.  A call whose batch is padded to the bucket gives the graph a
copy, and its result was a view of that copy, silently not of the argument (found by a
user trial; documented, not refused).  Such a call now runs eagerly, with a warning; with
``bucket=None`` (no copy) the graph runs and its result is a view of the argument.  Two
results that alias each other (``y, y`` or ``y, y[..., :2]``) stay aliased."""

from __future__ import annotations

import warnings

import pytest
import torch

import matchbox
from matchbox import MaskedBatch

BACKEND = "aot_eager"


def _batch(dtype):
    torch.manual_seed(0)
    examples = [torch.randn(1, n, 3, dtype=dtype) for n in (3, 0, 5, 1)]
    return MaskedBatch.fromlist(examples, (True, False), padding_value=float("nan"))


def _identity(x):
    return x


def _view(x):
    return x[:, :, :2]


def _examples(value):
    return [e.clone() for e in value.examples()]


ALIASED = (r"matchbox.compile\((_identity|_view)\): runs a call eagerly: its result is a "
           r"batch argument or a view of one \(return x, x\[:, :2\]\), and the graph would "
           r"get the argument padded to the bucket \(a copy: the result would not share the "
           r"argument's data, as it does eagerly\); compile with bucket=None, or return a "
           r"copy \(x.clone\(\)\)")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("fn", [_identity, _view], ids=["identity", "view"])
@pytest.mark.parametrize("bucket", [8, None])
def test_a_result_that_is_an_argument_shares_its_data_as_eagerly(fn, bucket, dtype):
    compiled = matchbox.compile(fn, backend=BACKEND, bucket=bucket)
    eager_x, x = _batch(dtype), _batch(dtype)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = compiled(x)
        compiled(x)
    warned = [str(w.message) for w in caught if "runs a call eagerly" in str(w.message)]
    assert len(warned) == (1 if bucket else 0)  # warned once
    if bucket:
        import re
        assert re.fullmatch(ALIASED, warned[0])
    expected = fn(eager_x)
    for a, b in zip(got.examples(), expected.examples()):
        torch.testing.assert_close(a, b)
    got.data.mul_(-2.0)  # written through the result: the argument sees it
    expected.data.mul_(-2.0)
    for a, b in zip(_examples(x), _examples(eager_x)):
        torch.testing.assert_close(a, b, equal_nan=True)
    assert compiled.specializations[0].calls == (0 if bucket else 2)


def _twice(x):
    y = x * 2
    return y, y


def _with_view(x):
    y = x * 2
    return y, y[:, :, :2]


@pytest.mark.parametrize("fn", [_twice, _with_view], ids=["twice", "view"])
@pytest.mark.parametrize("bucket", [8, None])
def test_results_that_alias_each_other_stay_aliased(fn, bucket):
    compiled = matchbox.compile(fn, backend=BACKEND, bucket=bucket, fallback="raise")
    x = _batch(torch.float64)
    got, expected = compiled(x), fn(x)
    got[0].data.add_(1.0)  # the second result sees the write, as eagerly
    expected[0].data.add_(1.0)
    for a, b in zip(got[1].examples(), expected[1].examples()):
        torch.testing.assert_close(a, b)
    assert compiled.specializations[0].calls == 1


def test_a_plain_tensor_argument_returned_is_still_the_argument():
    compiled = matchbox.compile(lambda x, t: (x.sum(1), t[:2]), backend=BACKEND,
                                fallback="raise")
    t = torch.ones(3, dtype=torch.float64)
    _, view = compiled(_batch(torch.float64), t)
    view.add_(4.0)
    assert t.tolist() == [5.0, 5.0, 1.0]
    assert compiled.specializations[0].calls == 1
