"""``matchbox.compile`` of modules: the Python state a graph depends on, and what it cannot
replay (found by trying it as a user would; each of these was silently wrong before).

Graphs run with ``backend="aot_eager"`` (PyTorch's kernels, the backward pass derived
as inductor's is), which keeps the tests quick.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import matchbox
from matchbox import MaskedBatch

BACKEND = "aot_eager"


def batch(lengths=(3, 1, 5), size=3, dtype=torch.float64):
    torch.manual_seed(1)
    return MaskedBatch.fromlist([torch.randn(1, n, size, dtype=dtype) for n in lengths],
                                (True, False), padding_value=float("nan"))


def same(a, b):
    return all(torch.allclose(x, y) for x, y in zip(a.examples(), b.examples()))


def test_batch_norm_in_training_runs_eagerly_rather_than_count_padding():
    class Norm(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm1d(3).double()

        def forward(self, x):
            return self.bn(x.transpose(1, 2)).transpose(1, 2).sum(1)

    eager, model = Norm(), Norm()
    compiled = matchbox.compile(model, backend=BACKEND)
    with pytest.warns(UserWarning, match=r"batch_norm in training\): how many rows are real "
                                         r"depends on the mask's values \(at .*test_nn_compile"):
        out = compiled(batch())
    assert same(out, eager(batch()))
    torch.testing.assert_close(model.bn.running_mean, eager.bn.running_mean)


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3).double()
        self.drop = nn.Dropout(0.5)
        self.temperature = 1.0

    def forward(self, x):
        return self.drop(self.lin(x) / self.temperature).sum(1)


def test_a_submodule_put_in_eval_mode_and_an_attribute_change_are_seen():
    model = Scaled()
    compiled = matchbox.compile(model, backend=BACKEND)
    compiled(batch())
    model.drop.eval()  # the top module stays in training
    assert same(compiled(batch()), model(batch()))
    model.temperature = 4.0
    model.eval()
    assert same(compiled(batch()), model(batch()))
    assert len(compiled.specializations) == 3


def test_parameters_whose_order_changes_reach_the_right_layers():
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(3, 3).double()
            self.b = nn.Linear(3, 3).double()

        def forward(self, x):
            return self.b(self.a(x).relu()).sum(1)

    model = Two()
    compiled = matchbox.compile(model, backend=BACKEND)
    compiled(batch())
    a = model.a
    del model.a
    model.a = a  # now named after b: same count and shapes, another order
    assert same(compiled(batch()), model(batch()))


def test_forward_hooks_and_attributes_set_in_forward_run_eagerly():
    class Keeps(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3).double()

        def forward(self, x):
            self.last = self.lin(x)
            return self.last.sum(1)

    model = Keeps()
    compiled = matchbox.compile(model, backend=BACKEND)
    with pytest.warns(UserWarning, match=r"the call sets self.last: a graph cannot replay what a "
                                         r"call does to Python objects"):
        compiled(batch())
    assert isinstance(model.last.data, torch.Tensor)
    assert not isinstance(model.last.data, torch._subclasses.FakeTensor)
    seen = []
    model.lin.register_forward_hook(lambda *_: seen.append(1))
    compiled = matchbox.compile(model, backend=BACKEND)
    with pytest.warns(UserWarning, match="lin has forward hooks: a graph runs no hooks"):
        compiled(batch())
        compiled(batch())
    assert len(seen) == 2


def test_a_dropped_update_of_a_buffer_is_refused_not_lost():
    class Counter(nn.Module):
        def __init__(self, dtype):
            super().__init__()
            self.register_buffer("seen", torch.zeros((), dtype=dtype))

        def forward(self, x):
            self.seen += 1
            return x.sum(1)

    for dtype in (torch.float32, torch.float64):
        model = Counter(dtype)
        compiled = matchbox.compile(model, backend=BACKEND)
        try:
            compiled(batch())
        except RuntimeError as error:  # torch.compile dropped it (0-d float64, torch 2.13)
            assert "did not apply the call's in-place update" in str(error)
            model.seen.zero_()
            compiled(batch())  # runs eagerly now
        compiled(batch())
        assert model.seen.item() == 2.0, dtype


def test_an_argument_changed_in_place_is_changed_whatever_the_bucket():
    def doubles(x):
        x.mul_(2)
        return x.sum(1)

    compiled = matchbox.compile(doubles, backend=BACKEND)
    for lengths in ((8, 2, 8), (5, 2, 3)):  # padded size 8: no copy; 5: padded to 8, a copy
        eager, argument = batch(lengths), batch(lengths)
        doubles(eager)
        compiled(argument)
        assert same(argument, eager)


def test_softmax_attention_with_dropout_in_eval_equals_eager():
    class Attend(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = nn.Linear(3, 3).double()

        def forward(self, x):
            scores = self.q(x) @ x.transpose(1, 2)
            return (F.softmax(scores, -1) @ x).sum(1)

    model = Attend()
    compiled = matchbox.compile(model, backend=BACKEND, fallback="raise")
    xb = batch((4, 0, 2))
    assert same(compiled(xb), model(xb))


def pointer_batches(lengths=(4, 2, 3), targets=(3, 1, 0)):
    torch.manual_seed(2)
    scores = MaskedBatch.fromlist([torch.randn(1, n, dtype=torch.float64) for n in lengths],
                                  (True,), padding_value=float("nan"))
    target = MaskedBatch.fromlist([torch.tensor([t]) for t in targets], ())
    return scores, target


def test_cross_entropy_over_a_dynamic_class_dimension_is_captured_with_its_target_check():
    # A pointer network's loss: each example's own number of classes. Its per-example
    # target check fell back to eager ("if bad.any()"); it is a graph output now.
    def loss(scores, target):
        return F.cross_entropy(scores, target)

    compiled = matchbox.compile(loss, backend=BACKEND, fallback="raise")
    scores, target = pointer_batches()
    assert same(compiled(scores, target), loss(scores, target))
    assert compiled.specializations[0].eager_reason is None
    # A target past its own example's classes: the check fails in the graph, and the
    # call runs again eagerly, raising the check's own error.
    scores, target = pointer_batches(targets=(3, 2, 0))
    with pytest.raises(IndexError, match=r"target 2 is out of bounds for example 1, which has "
                                         r"2 classes \(dynamic dimension 1\)"):
        compiled(scores, target)


def test_adaptive_pooling_with_its_empty_example_check_is_captured():
    def pooled(x):
        return F.adaptive_avg_pool1d(x.transpose(1, 2), 2).sum(-1)

    compiled = matchbox.compile(pooled, backend=BACKEND, fallback="raise")
    x = batch()
    assert same(compiled(x), pooled(x))
    with pytest.raises(ValueError, match=r"example 1 has size 0 in dynamic dimension 2"):
        compiled(batch((3, 0, 5)))
