"""What a graph freezes that may change between calls is part of its key (issue 21): an
enum member, a dataclass config (its fields), a function kept as an attribute or a global,
the default dtype, deterministic algorithms and float32 matmul precision.  Before, each was
read at the capture and a later change was silently ignored (found by comparing compiled
with eager calls across a change)."""

from __future__ import annotations

import dataclasses
import enum

import pytest
import torch
from torch import nn

import matchbox
from matchbox import MaskedBatch

BACKEND = "aot_eager"


class Mode(enum.Enum):
    DOUBLE = 1
    TRIPLE = 2


@dataclasses.dataclass
class Config:
    scale: float = 1.0
    mode: Mode = Mode.DOUBLE


ACTIVATION = torch.tanh  # read by _by_global_function
CONFIG = Config()  # read by _by_global_config


def _batch(dtype=torch.float64):
    torch.manual_seed(0)
    examples = [torch.randn(1, n, 3, dtype=dtype) for n in (3, 0, 5, 1)]
    return MaskedBatch.fromlist(examples, (True, False), padding_value=float("nan"))


def _assert_equals_eager(compiled, f, xb):
    got, expected = list(compiled(xb).examples()), list(f(xb).examples())
    assert len(got) == len(expected)
    for value, eager in zip(got, expected):
        assert value.dtype == eager.dtype
        torch.testing.assert_close(value, eager)


class Configured(nn.Module):
    def __init__(self):
        super().__init__()
        self.mode = Mode.DOUBLE
        self.config = Config()
        self.activation = torch.tanh

    def forward(self, x):
        y = self.activation(x.sum(1) * self.config.scale)
        return y * (2.0 if self.mode is Mode.DOUBLE else 3.0)


def test_enum_dataclass_and_function_attributes_are_part_of_the_key():
    xb = _batch()
    model = Configured()
    compiled = matchbox.compile(model, backend=BACKEND, fallback="raise")
    _assert_equals_eager(compiled, model, xb)
    model.mode = Mode.TRIPLE
    _assert_equals_eager(compiled, model, xb)
    model.config.scale = 2.0  # a field set in place
    _assert_equals_eager(compiled, model, xb)
    model.config = Config(scale=3.0, mode=Mode.TRIPLE)
    _assert_equals_eager(compiled, model, xb)
    model.activation = torch.sigmoid
    _assert_equals_eager(compiled, model, xb)
    model.mode, model.config, model.activation = Mode.DOUBLE, Config(), torch.tanh
    _assert_equals_eager(compiled, model, xb)  # the first graph again
    assert len(compiled.specializations) == 5


def _by_global_function(x):
    return ACTIVATION(x.sum(1))


def _by_global_config(x):
    return x.sum(1) * CONFIG.scale * (2.0 if CONFIG.mode is Mode.DOUBLE else 3.0)


def test_global_functions_and_dataclasses_are_part_of_the_key():
    global ACTIVATION
    xb = _batch()
    compiled = matchbox.compile(_by_global_function, backend=BACKEND, fallback="raise")
    try:
        _assert_equals_eager(compiled, _by_global_function, xb)
        ACTIVATION = torch.sigmoid
        _assert_equals_eager(compiled, _by_global_function, xb)
    finally:
        ACTIVATION = torch.tanh
    assert len(compiled.specializations) == 2
    compiled = matchbox.compile(_by_global_config, backend=BACKEND, fallback="raise")
    try:
        _assert_equals_eager(compiled, _by_global_config, xb)
        CONFIG.scale = 4.0
        _assert_equals_eager(compiled, _by_global_config, xb)
        CONFIG.mode = Mode.TRIPLE
        _assert_equals_eager(compiled, _by_global_config, xb)
    finally:
        CONFIG.scale, CONFIG.mode = 1.0, Mode.DOUBLE
    assert len(compiled.specializations) == 3


def test_a_dataclass_holding_a_tensor_or_itself_is_not_keyed():
    from matchbox.compiler.state import _MISSING, plain_value

    @dataclasses.dataclass
    class Node:
        value: object = None

    loop = Node()
    loop.value = loop
    assert plain_value(loop) is _MISSING
    assert plain_value(Node(torch.zeros(1))) is _MISSING
    assert plain_value(Node(Mode.TRIPLE)) == (Node, (("value", Mode.TRIPLE),))


def _constant_tensor(x):
    return x.sum(1) + torch.tensor([1.0, 2.0, 3.0])


def test_the_default_dtype_is_part_of_the_key():
    xb = _batch(torch.float32)
    compiled = matchbox.compile(_constant_tensor, backend=BACKEND, fallback="raise")
    _assert_equals_eager(compiled, _constant_tensor, xb)
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:  # the constant is float64 now, and so is the sum
        _assert_equals_eager(compiled, _constant_tensor, xb)
    finally:
        torch.set_default_dtype(before)
    assert len(compiled.specializations) == 2


def _by_settings(x):
    deterministic = 2.0 if torch.are_deterministic_algorithms_enabled() else 1.0
    precise = 3.0 if torch.get_float32_matmul_precision() == "highest" else 5.0
    return x.sum(1) * deterministic * precise


def test_deterministic_algorithms_and_matmul_precision_are_part_of_the_key():
    xb = _batch()
    compiled = matchbox.compile(_by_settings, backend=BACKEND, fallback="raise")
    _assert_equals_eager(compiled, _by_settings, xb)
    deterministic, precision = (torch.are_deterministic_algorithms_enabled(),
                                torch.get_float32_matmul_precision())
    try:
        torch.use_deterministic_algorithms(not deterministic)
        _assert_equals_eager(compiled, _by_settings, xb)
        torch.set_float32_matmul_precision("high" if precision == "highest" else "highest")
        _assert_equals_eager(compiled, _by_settings, xb)
    finally:
        torch.use_deterministic_algorithms(deterministic)
        torch.set_float32_matmul_precision(precision)
    assert len(compiled.specializations) == 3


OFFSET = torch.ones(3, dtype=torch.float64)  # a global tensor, read by _by_global_tensor


def _by_global_tensor(x):
    return x.sum(1) + OFFSET


def test_a_global_or_closed_over_tensor_runs_eagerly_and_sees_each_change():
    global OFFSET
    xb = _batch()
    compiled = matchbox.compile(_by_global_tensor, backend=BACKEND)
    message = (r"runs batch\(B=4, <=8, 3\) eagerly, as it cannot be captured as one graph: "
               r"the call reads a tensor of shape \(3,\) that is not one of its arguments")
    with pytest.warns(UserWarning, match=message):
        _assert_equals_eager(compiled, _by_global_tensor, xb)
    try:
        OFFSET = torch.full((3,), -2.0, dtype=torch.float64)  # reassigned
        _assert_equals_eager(compiled, _by_global_tensor, xb)
        OFFSET.mul_(3.0)  # changed in place
        _assert_equals_eager(compiled, _by_global_tensor, xb)
    finally:
        OFFSET = torch.ones(3, dtype=torch.float64)
    closed = torch.ones(3, dtype=torch.float64)

    def closing(x):
        return x.sum(1) * closed

    compiled = matchbox.compile(closing, backend=BACKEND)
    with pytest.warns(UserWarning, match=message):
        _assert_equals_eager(compiled, closing, xb)
    closed.fill_(5.0)
    _assert_equals_eager(compiled, closing, xb)
