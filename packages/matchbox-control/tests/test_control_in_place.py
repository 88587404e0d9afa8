"""In-place updates under a per-example condition reach the object itself, with gradients.

Inside a region, a batch read from outside is seen through a gradient guard, a
new batch (``runtime.masks.guard``): an in-place method (``z.mul_(3)``,
``acc.add_(xt)``) or augmented assignment applied to it is written through to
the batch the name held, and so to every alias, as Python writes into the
object.  (Without the write-through, the update vanished when gradients were
recorded: found in a user trial.)  Python lists and dicts are shared by every
example: per example only ``append``/``extend`` and ``dict.update`` are
possible; any other write under a batch condition is refused.
"""

from __future__ import annotations

import pytest
import torch
from control_cases import assert_batch_equals_loop, scalars, sequences
from hypothesis import given, settings
from hypothesis import strategies as st

import matchbox
import matchbox.functional as F

DTYPES = [torch.float32, torch.float64]


@matchbox.batch
def scaled_where_positive(x):
    z = x * 1
    if x > 0:
        z.mul_(3)
        z.clamp_(max=5.0)
    return z


@pytest.mark.parametrize("dtype", DTYPES)
def test_an_in_place_method_under_a_branch_keeps_its_effect_with_gradients(dtype):
    assert_batch_equals_loop(scaled_where_positive, scalars([1.0, -1.0, 2.0], dtype))
    assert_batch_equals_loop(scaled_where_positive, scalars([1.0], dtype))


@matchbox.batch
def running_sum(x):
    acc = x.sum(1) * 0
    for xt in x.unbind(1):
        acc.add_(xt * xt)
    return acc


@settings(max_examples=15, deadline=None)
@given(lengths=st.lists(st.integers(0, 4), min_size=1, max_size=4),
       dtype=st.sampled_from(DTYPES))
def test_an_in_place_update_in_a_loop_over_steps_equals_the_loop(lengths, dtype):
    assert_batch_equals_loop(running_sum, sequences(lengths, dtype=dtype))


@matchbox.batch
def nested_regions(x):
    acc = x.sum(1) * 0
    for xt in x.unbind(1):
        if xt.sum() > 0:
            acc.add_(xt)  # two guards deep: written through both
        else:
            acc -= xt
    return acc


@pytest.mark.parametrize("dtype", DTYPES)
def test_an_update_nested_in_two_regions_reaches_the_outer_batch(dtype):
    torch.manual_seed(0)
    assert_batch_equals_loop(nested_regions, sequences([3, 0, 1, 4], dtype=dtype))


@matchbox.batch
def alias_sees_the_update(x):
    z = x * 1
    alias = z
    if x > 0:
        z.add_(1)
    else:
        z += 10  # in place on a tensor, as in Python: the alias sees it too
    return alias


def test_an_alias_sees_an_in_place_update_as_in_python():
    assert_batch_equals_loop(alias_sees_the_update, scalars([1.0, -1.0, 2.0]))


@matchbox.batch
def in_place_in_an_expression(x):
    z = x * 1
    y = x * 0
    if x > 0:
        y = z.mul_(2) + 1
    return y + z


def test_an_in_place_method_inside_an_expression_is_written_through():
    assert_batch_equals_loop(in_place_in_an_expression, scalars([1.0, -1.0, 2.0]))


@matchbox.batch
def kept_steps_twice(x):
    kept = []
    for xt in x.unbind(1):
        if xt.sum() > 0:
            kept.extend([xt, xt * 2])  # each example keeps its own steps
    return F.stack(kept, 1, dynamic=True) if kept else x


@pytest.mark.parametrize("dtype", DTYPES)
def test_list_extend_in_a_branch_is_per_example(dtype):
    torch.manual_seed(1)
    assert_batch_equals_loop(kept_steps_twice, sequences([3, 4, 2], dtype=dtype))


@matchbox.batch
def updated_state(x):
    state = {"h": x * 0, "n": x * 1}
    if x > 0:
        state.update(h=x * 4)
    return state["h"] + state["n"]


def test_dict_update_is_per_example():
    assert_batch_equals_loop(updated_state, scalars([1.0, -1.0, 2.0]))


@pytest.mark.parametrize("write", ["items.pop()", "top = items.pop()", "items.insert(0, x)",
                                   "items.clear()", "state.pop('h')"])
def test_a_shared_container_write_under_a_batch_condition_is_refused(write, tmp_path):
    # Each example would see the list or dict change, also those that do not run
    # the branch: the batch would silently differ from the loop.
    source = (
        "import matchbox\n"
        "@matchbox.batch\n"
        "def f(x):\n"
        "    items = [x, x * 2]\n"
        "    state = {'h': x}\n"
        "    if x > 0:\n"
        f"        {write}\n"
        "    return items[0]\n"
    )
    path = tmp_path / "container_write.py"
    path.write_text(source)
    namespace: dict = {}
    exec(compile(source, str(path), "exec"), namespace)
    _, xb = scalars([1.0, -1.0])
    kind, method = ("dict", "pop") if write.startswith("state") else (
        "list", write.split(".")[1].split("(")[0])
    with pytest.raises(NotImplementedError,
                       match=rf"@batch: {kind}\.{method}\(\) under a per-example condition"):
        namespace["f"](xb)


def test_container_writes_under_a_plain_condition_are_python():
    @matchbox.batch
    def f(x, flag):
        items = [x, x * 2]
        if flag:
            top = items.pop()
            items.insert(0, top)
        return items[0]

    examples, xb = scalars([1.0, -1.0])
    out = f(xb, True)
    assert [e.item() for e in out.examples()] == [2.0, -2.0]


@matchbox.batch
def _write_into_a_row_read_per_example(x, how):
    i = 0
    if x[:, 0, 0] > 0:
        i = 1
    y = x[:, i]                  # a view of x in the loop; a copy in the batch
    if x[:, 0, 1] > 0:
        if how == "in the region":
            y.mul_(0)
        else:
            y.unsqueeze(1).mul_(0)   # a view of that copy
    return x.sum(-1).sum(-1)


def test_an_in_place_op_on_a_row_read_per_example_is_refused_through_a_view_in_a_region():
    # In the loop the write reaches x; the batch's row is a copy, seen in the region through
    # its gradient guard: a view of it is refused there too (a review found it written
    # silently).
    xs = [torch.tensor([[[1.0, 2], [3, 4]]]), torch.tensor([[[-1.0, 2], [3, 4]]])]
    xb = matchbox.MaskedBatch.fromlist([x.clone().requires_grad_() for x in xs], (False, False))
    with pytest.raises(NotImplementedError, match=r"^Tensor\.mul_: the batch was indexed along "
                                                  r"a dynamic dimension at positions that "
                                                  r"differ between examples"):
        _write_into_a_row_read_per_example(xb * 1, "through a view")


def test_an_in_place_op_on_a_row_read_per_example_in_a_region_writes_through():
    # The row itself, seen in the region through its gradient guard: the op is written
    # back into x for the running examples, as the loop's view writes x (core's
    # ops/one_position_writes.write_through).
    xs = [torch.tensor([[[1.0, 2], [3, 4]]]), torch.tensor([[[-1.0, 2], [3, 4]]]),
          torch.tensor([[[1.0, -2], [3, 4]]])]
    assert_batch_equals_loop(lambda x: _write_into_a_row_read_per_example(x * 1, "in the region"),
                             (xs, matchbox.MaskedBatch.fromlist(xs, (False, False))))
