"""A graph freezes the plain values the compiled code reads (a module's attributes, the
globals and closed-over variables of its functions), so they are part of the key: change
one and the next call captures a new graph.  Tuples, lists and dicts of plain values too,
by their items (up to 64): a module's ``self.scales = (1.0, 2.0)``, a global tuple, a list
changed in place; before, only numbers, strings and flags were, and a changed tuple or
list item was silently read as it was at the capture."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import matchbox
from matchbox import MaskedBatch

BACKEND = "aot_eager"
FACTORS = (1.0, 2.0)  # read by a function below
OPTIONS = {"scale": 2.0, "names": ["a", "b"]}


def _batch():
    torch.manual_seed(0)
    examples = [torch.randn(1, n, 3, dtype=torch.float64) for n in (3, 0, 5, 1)]
    return examples, MaskedBatch.fromlist(examples, (True, False), padding_value=float("nan"))


def _assert_equals_eager(compiled, f, xb):
    got, expected = list(compiled(xb).examples()), list(f(xb).examples())
    assert len(got) == len(expected)
    for value, eager in zip(got, expected):
        torch.testing.assert_close(value, eager)


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.scales = (1.0, 2.0)
        self.offsets = [0.5]
        self.table = {"dim": 1}

    def forward(self, x):
        return (x * self.scales[1] + self.offsets[0]).sum(self.table["dim"])


def test_a_modules_tuple_list_and_dict_attributes_are_part_of_the_key():
    _, xb = _batch()
    model = Scaled()
    compiled = matchbox.compile(model, backend=BACKEND, fallback="raise")
    _assert_equals_eager(compiled, model, xb)
    model.scales = (1.0, 5.0)
    _assert_equals_eager(compiled, model, xb)
    model.offsets[0] = -3.0  # changed in place
    _assert_equals_eager(compiled, model, xb)
    model.table["dim"] = 2
    _assert_equals_eager(compiled, model, xb)
    model.offsets[0] = 0.5
    model.scales = (1.0, 2.0)
    model.table["dim"] = 1
    _assert_equals_eager(compiled, model, xb)  # the first graph again
    assert len(compiled.specializations) == 4


def _by_globals(x):
    return x * FACTORS[1] * OPTIONS["scale"] + len(OPTIONS["names"])


def test_global_and_closed_over_containers_of_plain_values_are_part_of_the_key():
    global FACTORS
    _, xb = _batch()
    compiled = matchbox.compile(_by_globals, backend=BACKEND, fallback="raise")
    try:
        _assert_equals_eager(compiled, _by_globals, xb)
        FACTORS = (1.0, -4.0)
        _assert_equals_eager(compiled, _by_globals, xb)
        OPTIONS["scale"] = 0.25
        _assert_equals_eager(compiled, _by_globals, xb)
        OPTIONS["names"].append("c")
        _assert_equals_eager(compiled, _by_globals, xb)
    finally:
        FACTORS = (1.0, 2.0)
        OPTIONS.update(scale=2.0, names=["a", "b"])
    assert len(compiled.specializations) == 4

    weights = [2.0]

    def closing(x):
        return x * weights[0]

    compiled = matchbox.compile(closing, backend=BACKEND, fallback="raise")
    _assert_equals_eager(compiled, closing, xb)
    weights[0] = 7.0
    _assert_equals_eager(compiled, closing, xb)


@pytest.mark.parametrize("value", [[1.0] * 65, (torch.zeros(1),), [object()]])
def test_a_large_container_or_one_holding_other_objects_is_not_keyed(value):
    from matchbox.compiler.state import _MISSING, plain_value

    assert plain_value(value) is _MISSING
    assert plain_value((1, [2.0, "a"], {"k": None})) == (
        "tuple", ((0, 1), (1, ("list", ((0, 2.0), (1, "a")))), (2, ("dict", (("k", None),)))))
