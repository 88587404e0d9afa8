"""Python's number functions of per-example numbers under ``@batch`` (``x.item()`` gives
one number per example): ``round(v)`` per example, and clear refusals, naming the call and
saying what to write, of ``round(v, n)``, ``divmod``, ``math`` functions and
``torch.tensor([a, b])``; ``y.fill_(v)`` fills each example with its own ``v``."""

from __future__ import annotations

import math

import pytest
import torch
from control_cases import assert_batch_equals_loop, sequences

import matchbox

LENGTHS = [(3, 0, 1, 2), (1,), (0,), (2, 4)]


@matchbox.batch
def rounded(x):
    a = (x.sum() * 3).item()
    return x * round(a) + round(a) / 4


@matchbox.batch
def rounded_under_a_condition(x):
    n = 0
    if x.sum() > 0:
        n = round(x.abs().sum().item() * 2)
    return x * n


@matchbox.batch
def filled(x):
    y = x * 2
    y.fill_(x.sum().item())
    return y * x


@matchbox.batch
def filled_with_a_tensor(x):
    y = x + 1
    if x.sum() > 0:
        y.fill_(x.mean())
    return y


@pytest.mark.parametrize("f", [rounded, rounded_under_a_condition, filled,
                               filled_with_a_tensor])
@pytest.mark.parametrize("lengths", LENGTHS, ids=str)
def test_per_example_numbers_equal_the_loop(f, lengths, dtype):
    assert_batch_equals_loop(f, sequences(lengths, dtype=dtype))


@matchbox.batch
def round_nan(x):
    return x * round((x.sum() / x.sum()).item())


def test_round_of_nan_raises_naming_the_example():
    xs, xb = sequences((2, 0))  # 0 / 0 for example 1
    with pytest.raises(ValueError):
        round_nan(xs[1])  # the loop: round(nan)
    with pytest.raises(ValueError, match=r"round\(\): cannot convert float NaN or infinity to "
                                         r"integer \(examples \[1\]\)"):
        round_nan(xb)


@matchbox.batch
def round_digits(x):
    return x * round(x.sum().item(), 2)


@matchbox.batch
def with_divmod(x):
    q, r = divmod(x.sum().item(), 2.0)
    return x * q + r


@matchbox.batch
def with_math_exp(x):
    return x * math.exp(x.sum().item())


@matchbox.batch
def with_math_comb(x):
    return x * math.comb(int(x.size_as_tensor(1)), 2)


@matchbox.batch
def with_tensor(x):
    t = torch.tensor([x.sum().item(), x.mean().item()], dtype=x.dtype)
    return x * t[0]


@matchbox.batch
def with_nested_tensor(x):
    t = torch.as_tensor([[x.sum().item(), 1.0]])
    return x * t[:, :1]


WHAT = (r"a per-example number \(a batch of one number per example, as x.item\(\), int\(x\) "
        r"and float\(x\) give under @batch\)")


@pytest.mark.parametrize("f, message", [
    (round_digits, r"round\(v, ndigits\) of " + WHAT + r": Python rounds each number's exact "
                   r"decimal value, which torch.round\(v, decimals=n\) only approximates; "
                   r"write torch.round\(v, decimals=n\) where that is meant"),
    (with_divmod, r"divmod\(\) of " + WHAT + r" takes Python numbers; write q, r = v // d, "
                  r"v % d \(floor division and remainder, one value per example\)"),
    (with_math_exp, r"math.exp\(\) of " + WHAT + r" takes a single Python number; write "
                    r"torch.exp\(v\) \(one value per example\)"),
    (with_math_comb, r"math.comb\(\) of " + WHAT + r" takes a single Python number; compute "
                     r"it with torch ops on v"),
    (with_tensor, r"torch.tensor\(\) of a list holding " + WHAT + r": in the loop it is a "
                  r"\(2,\) tensor per example, which a batch cannot hold \(each example keeps "
                  r"a dimension 0 of size one\), and a batch is not a Python number; build "
                  r"each example's tensor from tensors instead, e.g. torch.cat\(\[x.new_full"
                  r"\(\(1, 1\), a\), x.new_full\(\(1, 1\), b\)\], 1\)"),
    (with_nested_tensor, r"torch.as_tensor\(\) of a list holding " + WHAT + r": in the loop "
                         r"it is a \(1, 2\) tensor per example, a batch is not a Python number"),
])
def test_python_number_functions_of_per_example_numbers_are_refused_saying_how(f, message):
    xs, xb = sequences((3, 1))
    for x in xs:
        f(x)  # the loop runs it: each example's numbers are Python numbers
    with pytest.raises(NotImplementedError, match=message):
        f(xb)


@matchbox.batch
def the_suggested_pair(x):
    a, b = x.sum().item(), x.mean().item()
    t = torch.cat([x.new_full((1, 1), a), x.new_full((1, 1), b)], 1)
    return x * t[:, :1] + t[:, 1:]


def test_the_suggested_tensor_of_two_numbers_equals_the_loop(dtype):
    for lengths in [(3, 1, 2), (1,)]:
        assert_batch_equals_loop(the_suggested_pair, sequences(lengths, dtype=dtype))
