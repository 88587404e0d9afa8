"""``self.layers[k](h)`` with a per-example int ``k``: each example runs its own module,
as an ``if k == 0: ... elif k == 1: ...`` chain would (values and gradients, parameters
included, equal the loop's); out-of-range indices raise as in the loop, and the chosen
module can only be called.  The modules use core ops only (no matchbox-nn)."""

from __future__ import annotations

import pytest
import torch
from control_cases import assert_batch_equals_loop, sequences
from torch import nn

import matchbox

LENGTHS = [(3, 0, 1, 2), (1,), (0,), (2, 4, 1)]


class Affine(nn.Module):
    def __init__(self, seed):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.w = nn.Parameter(torch.randn(3, generator=g, dtype=torch.float64))
        self.b = nn.Parameter(torch.randn(3, generator=g, dtype=torch.float64))

    def forward(self, h, scale=1.0):
        return torch.tanh(h * self.w + self.b) * scale


class Chooser(nn.Module):
    def __init__(self, container="ModuleList", how="comparisons"):
        super().__init__()
        modules = [Affine(i) for i in range(3)]
        self.layers = nn.ModuleList(modules) if container == "ModuleList" else (
            nn.Sequential(*modules))
        self.as_list = container == "list"
        self.how = how

    @matchbox.batch
    def forward(self, x):
        layers = list(self.layers) if self.as_list else self.layers
        if self.how == "comparisons":
            k = int(x.sum() > 0) + int(x.sum() > 1)
        elif self.how == "negative":
            k = -1 - int(x.sum() > 0)
        else:  # a counter, and a choice made under a per-example condition
            k = 0
            for _ in range(x.size_as_tensor(1)):
                k = (k + 1) % 3
            if x.sum() > 0:
                return layers[k](x, scale=2.0) + x
        return layers[k](x)


def _cast(model, dtype):
    return model.to(dtype)


@pytest.mark.parametrize("container", ["ModuleList", "Sequential", "list"])
@pytest.mark.parametrize("how", ["comparisons", "negative", "counter"])
@pytest.mark.parametrize("lengths", LENGTHS, ids=str)
def test_each_example_runs_its_own_module(container, how, lengths, dtype):
    torch.manual_seed(0)
    model = _cast(Chooser(container, how), dtype)
    assert_batch_equals_loop(model, sequences(lengths, dtype=dtype))


class OutOfRange(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Affine(0), Affine(1)])

    @matchbox.batch
    def forward(self, x):
        k = x.size_as_tensor(1)  # 3 for example 0: out of range
        return self.layers[k](x)


def test_an_index_out_of_range_raises_as_in_the_loop():
    model = OutOfRange()
    xs, xb = sequences((3, 1))
    with pytest.raises(IndexError):
        model(xs[0])
    with pytest.raises(IndexError, match=r"index 3 is out of range for example 0: the list of "
                                         r"modules has 2 \(.*test_control_module_choice.py, "
                                         r"line \d+\)"):
        model(xb)


class ReadsAttribute(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Affine(0), Affine(1)])

    @matchbox.batch
    def forward(self, x):
        k = int(x.sum() > 0)
        return x * self.layers[k].w


class FloatIndex(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Affine(0), Affine(1)])

    @matchbox.batch
    def forward(self, x):
        return self.layers[x.sum().detach()](x)


def test_a_chosen_module_can_only_be_called():
    xs, xb = sequences((3, 1))
    ReadsAttribute()(xs[0])  # the loop reads its own module's weight
    with pytest.raises(AttributeError, match=r"@batch: 'w' of a module chosen by a per-example "
                                             r"index \(.*line \d+\): each example has its own "
                                             r"module, so it can only be called \(layers\[k\]"
                                             r"\(h\)\); read attributes of each module "
                                             r"\(layers\[0\].w\) instead"):
        ReadsAttribute()(xb)
    with pytest.raises(TypeError, match=r"@batch: ModuleList indices must be integers, one per "
                                        r"example; got a batch of torch.float64"):
        FloatIndex()(xb)
