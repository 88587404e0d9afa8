"""The registry's conversion hook: another batch type meets a MaskedBatch in one op.

A minimal stand-in batch type (a real one is matchbox-packed's PackedBatch)
registers its conversion to MaskedBatch; then every way an op can reach
MaskedBatch's dispatch (a torch function with either argument first, an
operator, a generated method, a list argument) converts it first.
"""

from __future__ import annotations

import pytest
import torch

from matchbox import MaskedBatch, _registry
from matchbox.testing import mb_rand


class Stand:
    """Holds a MaskedBatch; converts to it.  Its own dispatch declines every op."""

    def __init__(self, batch):
        self.batch = batch

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001
        return NotImplemented


@pytest.fixture
def registered():
    _registry.register_conversion(Stand, "MaskedBatch", lambda s: s.batch)
    yield
    del _registry.kind_of("MaskedBatch").conversions[Stand]


def _same(result, expected):
    assert isinstance(result, MaskedBatch)
    assert torch.equal(result.mask, expected.mask)
    real = expected.mask.expand_as(expected.data)
    assert torch.equal(result.data[real], expected.data[real])


def test_every_entry_into_maskedbatch_dispatch_converts(registered):
    _, x = mb_rand(3, (True, 4), (False, 2), min_size=0)
    _, y = mb_rand(3, (False, 2), (False, 5), min_size=0)
    stand = Stand(x)
    _same(torch.add(x, stand), x + x)          # __torch_function__, batch first
    _same(x * stand, x * x)                    # pointwise method (operator)
    _same(x.add(stand), x + x)                 # pointwise method, by name
    _same(torch.cat([x, stand], 2), torch.cat([x, x], 2))   # inside a list argument
    _same(x.transpose(1, 2).matmul(Stand(x)), x.transpose(1, 2).matmul(x))  # generated method
    _same(torch.matmul(Stand(x), y), torch.matmul(x, y))  # the other type first: it declines


def test_adopt_returns_the_same_objects_when_nothing_converts(registered):
    _, x = mb_rand(2, (True, 3), min_size=0)
    args, kwargs = (x, [1, 2], 3.0), {"dim": 1}
    assert _registry.adopt("MaskedBatch", args, kwargs) == (args, kwargs)
    assert _registry.adopt("MaskedBatch", args, kwargs)[0] is args
    converted, _ = _registry.adopt("MaskedBatch", (x, (Stand(x), 2)), {})
    assert converted[1] == (x, 2) and isinstance(converted[1], tuple)


def test_without_a_registered_conversion_the_op_fails_as_before():
    _, x = mb_rand(2, (True, 3), min_size=0)
    with pytest.raises(TypeError, match=r"Multiple dispatch failed for 'torch.add'"):
        torch.add(x, Stand(x))


def test_batch_types_lists_the_registered_hosts():
    assert MaskedBatch in _registry.batch_types()
