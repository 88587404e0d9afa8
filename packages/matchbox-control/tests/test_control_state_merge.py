"""``mb__.merge``'s one-frame path for a loop's state (``runtime.state_merge``): the same
answers as ``select_merge``, whose cases it runs inline (a selection, a value kept outside
the region, a value guarded for the region, two dtypes), and a shift-reduce stack machine
(the TreeLSTM's statements, without ``nn``) equal to the loop."""

from __future__ import annotations

import pytest
import torch
from control_cases import assert_batch_equals_loop, sequences

import matchbox
from matchbox import MaskedBatch
from matchbox.control.runtime.select import merge as select_merge
from matchbox.control.runtime.state_merge import merge as state_merge
from matchbox.extending import defer_region_guard, record_equal_outside

W = torch.randn(2, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1),
                requires_grad=True)
SLOTS = torch.arange(4).unsqueeze(0)  # the stack's slots, (1, depth)


@matchbox.batch
def stack_machine(x, w):
    stack = x.new_zeros(1, 4, 2)
    top = 0
    for item in x.unbind(1):
        if top < 2 or (item.sum() > 0 and top < 4):  # shift
            at = (SLOTS == top).unsqueeze(-1)
            stack = torch.where(at, (item @ w).unsqueeze(1), stack)
            top = top + 1
        else:  # reduce the two top items
            parent = torch.tanh((stack[:, top - 2] + stack[:, top - 1]) @ w)
            at = (SLOTS == top - 2).unsqueeze(-1)
            stack = torch.where(at, parent.unsqueeze(1), stack)
            top = top - 1
    return stack[:, 0] * 2 + stack[:, 1]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("lengths", [(7, 0, 1, 5, 9), (1,), (0, 6)])
def test_a_stack_machine_equals_the_loop(lengths, dtype):
    torch.manual_seed(len(lengths))
    w = W.detach().to(dtype).requires_grad_()
    xs, xb = sequences(lengths, size=2, dtype=dtype)  # (NaN padding)
    assert_batch_equals_loop(stack_machine, (xs, xb), ([w] * len(lengths), w), params=[w])


def _state(values, requires_grad=True):
    data = torch.tensor(values, dtype=torch.float64)
    return MaskedBatch(data.requires_grad_(requires_grad), None, (False,))


def _both(mask, outer, make_new, make_old, name="v"):
    """``make_new``/``make_old`` built twice: merged by each path, values and gradients."""
    answers = []
    for merge in (select_merge, state_merge):
        new, old = make_new(), make_old()
        merged = merge(mask, outer, new, old, name)
        leaves = [t for t in (new._data, old._data) if t.requires_grad and t.is_leaf]
        (merged.data * torch.arange(1.0, 3.0, dtype=torch.float64)).sum().backward()
        answers.append((merged.data.detach(), merged._mask, merged._scalar,
                        [t.grad for t in leaves]))
    (data_a, mask_a, scalar_a, grads_a), (data_b, mask_b, scalar_b, grads_b) = answers
    torch.testing.assert_close(data_b, data_a)
    assert (mask_a is None) == (mask_b is None) and scalar_a is scalar_b
    assert len(grads_a) == len(grads_b)
    for a, b in zip(grads_a, grads_b):
        torch.testing.assert_close(b, a)


MASK = torch.tensor([True, False, True])
OUTER = torch.tensor([True, True, True])


def test_a_selection_is_select_merges():
    _both(MASK, OUTER, lambda: _state([[1, 2], [3, 4], [5, 6]]),
          lambda: _state([[7, 8], [9, 10], [11, 12]]))


def test_a_value_guarded_for_the_region_is_select_merges():
    def guarded():
        return defer_region_guard(_state([[1, 2], [3, 4], [5, 6]]), MASK, MASK)
    _both(MASK, OUTER, guarded, lambda: _state([[7, 8], [9, 10], [11, 12]]))


def test_a_value_guarded_for_another_region_is_select_merges():
    other = torch.tensor([False, True, True])

    def guarded():
        return defer_region_guard(_state([[1, 2], [3, 4], [5, 6]]), other, other)
    _both(MASK, OUTER, guarded, lambda: _state([[7, 8], [9, 10], [11, 12]]))


def test_a_value_kept_outside_the_region_is_merged_as_it_is():
    for merge in (select_merge, state_merge):
        old = _state([[7, 8], [9, 10], [11, 12]])
        new = MaskedBatch._make(torch.where(MASK.view(3, 1), old._data * 2, old._data),
                                None, (False,))
        record_equal_outside(new, MASK, old._data, old._data._version, None)
        assert merge(MASK, OUTER, new, old, "v") is new
        assert new._kept_outside[0] is OUTER  # and recorded for the enclosing region


def test_two_dtypes_are_refused_as_select_merges():
    new = MaskedBatch(torch.zeros(3, 2, dtype=torch.int64), None, (False,))
    old = _state([[1, 2], [3, 4], [5, 6]]).float()
    messages = []
    for merge in (select_merge, state_merge):
        with pytest.raises(TypeError, match="'v'") as raised:
            merge(MASK, OUTER, new, old, "v")
        messages.append(str(raised.value))
    assert messages[0] == messages[1]


@pytest.mark.parametrize("reads", [True, False])
def test_a_test_every_running_example_answers_alike_runs_as_the_enclosing_region(reads):
    from matchbox._masking import host_reads
    from matchbox.control.runtime.masks import branch

    outer = torch.tensor([True, False, True])
    same = MaskedBatch(torch.tensor([True, False, True]), None, ())
    split = MaskedBatch(torch.tensor([True, False, False]), None, ())
    with host_reads(reads):
        then, orelse = branch(outer, same)
        if reads:  # read on the host: the side is the enclosing region itself
            assert then is outer and orelse is False
            assert branch(outer, ~same) == (False, outer)
        else:  # not read: both sides run masked, as before
            assert then.tolist() == [True, False, True]
            assert orelse.tolist() == [False, False, False]
        then, orelse = branch(outer, split)
        assert then.tolist() == [True, False, False] and orelse.tolist() == [False, False, True]
