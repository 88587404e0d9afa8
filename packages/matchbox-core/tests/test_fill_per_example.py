"""``x.fill_(v)`` with one value per example (``v`` a 0-d tensor in the loop, such as
``x.sum()``) fills each example with its own value, as the loop does (values and
gradients, NaN padding, empty and one-long examples, a batch of one)."""

from __future__ import annotations

import pytest
import torch
from torch_features import NUMBER_ARGUMENTS_REACH_TORCH_FUNCTION, batch_needs

from matchbox import MaskedBatch
from matchbox.testing import mb_assert

LENGTHS = [(3, 0, 1, 2), (1,), (0,), (4, 4)]


def _batch(lengths, dtype):
    torch.manual_seed(0)
    xs = [torch.randn(1, n, 3, dtype=dtype) for n in lengths]
    return xs, MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))


FILLS = {
    "fill_(sum)": lambda x: (x * 2).fill_(x.sum()) * x,
    "fill_(amax, detached)": lambda x: (x + 1).fill_(x.abs().sum().detach()) + x,
    "fill_ of a slice": lambda x: (x * 1)[:, :, 1:].fill_(x.mean(dim=(1, 2)).sum()),
}


@pytest.mark.parametrize("f", FILLS.values(), ids=FILLS.keys())
@pytest.mark.parametrize("lengths", LENGTHS, ids=str)
def test_fill_with_a_per_example_value_equals_the_loop(f, lengths, dtype):
    xs, xb = _batch(lengths, dtype)
    mb_assert(f, [xs], [xb], len(lengths))


def test_fill_with_a_batch_of_larger_examples_is_refused():
    xs, xb = _batch((3, 1), torch.float64)
    with pytest.raises(RuntimeError, match="fill_ only supports 0-dimension value tensor"):
        (xs[0] * 1).fill_(xs[0])  # the loop refuses it too
    with pytest.raises(ValueError, match=r"Tensor.fill_: the value is a batch of examples of "
                                         r"rank 3; fill_ takes a number or a 0-d tensor per "
                                         r"example \(x.sum\(\), n.item\(\) under @batch\): "
                                         r"reduce or index each example's value to one number "
                                         r"first"):
        (xb * 1).fill_(xb)
    with pytest.raises(ValueError, match=r"Tensor.fill_: the value is a batch of one value per "
                                         r"example, but a \(1,\) tensor in the loop; "):
        (xb * 1).fill_(xb[:, 0, 0])
    ones = [torch.tensor([1.0]), torch.tensor([2.0])]  # (1,) examples: refused in the loop
    with pytest.raises(RuntimeError, match="fill_ only supports 0-dimension value tensor"):
        (xs[0] * 1).fill_(ones[0].reshape(1, 1, 1)[0, 0])
    with pytest.raises(ValueError, match=r"Tensor.fill_: the value is a batch of one value per "
                                         r"example, but a \(1,\) tensor in the loop; "):
        (xb * 1).fill_(MaskedBatch.fromlist(ones, ()))


# ------------------------------------------------------------------ number-only arguments

# softplus and softshrink are C++ functions that check their number arguments before
# __torch_function__ on torch 2.3 (their TypeError names the argument there).
_NUMBERS_REACH = batch_needs(NUMBER_ARGUMENTS_REACH_TORCH_FUNCTION,
                             "hands a batch given as a number argument to Matchbox")

NUMBER_ONLY = {
    "leaky_relu": (lambda x, v: torch.nn.functional.leaky_relu(x, v), "negative_slope"),
    "leaky_relu keyword": (lambda x, v: torch.nn.functional.leaky_relu(x, negative_slope=v),
                           "negative_slope"),
    "leaky_relu in place": (lambda x, v: torch.nn.functional.leaky_relu(x * 1, v, True),
                            "negative_slope"),
    "elu": (lambda x, v: torch.nn.functional.elu(x, alpha=v), "alpha"),
    "celu": (lambda x, v: torch.nn.functional.celu(x, v), "alpha"),
    "softplus": pytest.param((lambda x, v: torch.nn.functional.softplus(x, beta=v), "beta"),
                             marks=_NUMBERS_REACH),
    "hardtanh": (lambda x, v: torch.nn.functional.hardtanh(x, -1.0, v), "max_val"),
    "threshold": (lambda x, v: torch.nn.functional.threshold(x, v, 0.0), "threshold"),
    "softshrink": pytest.param((lambda x, v: torch.nn.functional.softshrink(x, v), "lambd"),
                               marks=_NUMBERS_REACH),
}


@pytest.mark.parametrize("case", NUMBER_ONLY.values(), ids=NUMBER_ONLY.keys())
def test_a_per_example_number_only_argument_is_refused_naming_it(case):
    f, name = case
    xs, xb = _batch((3, 1), torch.float64)
    for x in xs:
        f(x, x.sum().abs().item() + 0.5)  # the loop's value: a number per example
    with pytest.raises(NotImplementedError, match=(
            rf"{name} is a batch \(one value per example, such as x.item\(\) under @batch\), "
            rf"but it must be the same for every example: a number or a plain tensor shared "
            rf"by every example \(only the input may be a batch\); a per-example {name} is "
            rf"not supported: run the examples of each value separately, or pass one value "
            rf"for all")):
        f(xb, xb.sum().abs().detach() + 0.5)
    mb_assert(lambda x: f(x, 0.25), [xs], [xb], 2)  # one number for all: as before
