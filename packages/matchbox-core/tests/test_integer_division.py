"""Integer ``//``, ``%``, ``floor_divide``, ``remainder``, ``fmod`` and ``div(...,
rounding_mode=...)`` of batches whose padding holds zeros (``fromlist``'s default for
integer examples): the loop divides by no padding, so neither may the batch.

torch raises a bare ``RuntimeError: ZeroDivisionError`` for an integer division by
zero; the batch raised it for every pair of integer batches of different lengths (a user
trial: ``t // u`` of per-token counts). A zero in a real position still raises, as the
loop does.
"""

from __future__ import annotations

import operator

import pytest
import torch

from matchbox import MaskedBatch
from matchbox.testing import mb_assert

DIVISIONS = {
    "floordiv": operator.floordiv,
    "mod": operator.mod,
    "rfloordiv": lambda a, b: 12 // b,
    "rmod": lambda a, b: 7 % b,
    "floor_divide": torch.floor_divide,
    "remainder": torch.remainder,
    "fmod": torch.fmod,
    "div floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "div trunc": lambda a, b: a.div(b, rounding_mode="trunc"),
    "ifloordiv": lambda a, b: operator.ifloordiv(a.clone(), b),
    "imod": lambda a, b: operator.imod(a.clone(), b),
    "remainder_": lambda a, b: a.clone().remainder_(b),
    "div_ floor": lambda a, b: a.clone().div_(b, rounding_mode="floor"),
    "divisor is the target": lambda a, b: operator.imod(b.clone(), b),
}


def _ids(lengths, low, dtype):
    """Per-example integer sequences ``(1, n)`` in ``[low, 9]`` and their batch, padded
    with zeros (``fromlist``'s default)."""
    g = torch.Generator().manual_seed(sum(lengths) + low)
    examples = [torch.randint(low, 10, (1, n), generator=g, dtype=dtype) for n in lengths]
    batch = MaskedBatch.fromlist(examples, (True,))
    assert (batch.data == 0).any() or len(set(lengths)) == 1
    return examples, batch


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("lengths", [[3, 0, 5, 1], [1], [0], [2, 2], [4, 1, 6]])
@pytest.mark.parametrize("name", list(DIVISIONS))
def test_integer_division_never_divides_by_the_padding(name, lengths, dtype):
    f = DIVISIONS[name]
    a, b = _ids(lengths, 0, dtype), _ids(lengths, 1, dtype)
    mb_assert(f, [a[0], b[0]], [a[1], b[1]], len(lengths))


@pytest.mark.parametrize("lengths", [[3, 0, 5, 1], [2, 2]])
def test_integer_division_by_a_plain_divisor_and_by_a_per_example_count(lengths):
    a = _ids(lengths, 0, torch.int64)
    mb_assert(lambda t: (t + 3) // 2 + t % 4, [a[0]], [a[1]], len(lengths))
    counts = [torch.tensor([n + 1]) for n in lengths]  # one count per example, dims ()
    nb = MaskedBatch.fromlist(counts, ())
    mb_assert(lambda t, n: t // n + 11 % n, [a[0], counts], [a[1], nb], len(lengths))


def test_a_real_zero_divisor_still_raises_as_in_the_loop():
    examples = [torch.tensor([[4, 0]]), torch.tensor([[3]])]
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        examples[0] // examples[0]
    batch = MaskedBatch.fromlist(examples, (True,))
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        batch // batch
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        torch.remainder(batch, batch)


def test_floating_point_division_is_left_as_it_was():
    examples = [torch.tensor([[4.0, 2.5]], requires_grad=True), torch.tensor([[3.0]])]
    batch = MaskedBatch.fromlist([e.detach() for e in examples], (True,))
    assert [e.tolist() for e in (batch // 2).examples()] == [[[2.0, 1.0]], [[1.0]]]
    mb_assert(lambda x: torch.remainder(x * 3, x + 1) + torch.fmod(x, 0.75),
              [examples], [batch], 2)
