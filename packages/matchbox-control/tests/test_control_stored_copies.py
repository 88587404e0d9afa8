"""A batch stored in a list, a dict or an attribute under a per-example condition, then
updated in place.

In the loop over examples the stored item *is* the tensor: a later in-place update
(``h.mul_(10)``, ``h += 1``, ``h[:, 0] = v``, ``torch.relu_(h)``) reaches it.  Under
``@batch`` such a store holds a copy for the examples that ran it (a dict item or an
attribute is merged with the old one; a list item is a copy where ``h`` requires grad, seen
through the region's gradient guard), which the update missed: a silent wrong answer (a
user trial; the README's limitations listed it).  The update is now refused
(``runtime.copies``).  Where the stored item shares the data written, the store ran for
every example, a copy was stored on purpose (``h.clone()``), or the update runs for none
of the examples that stored, the batch equals the loop, as before.
"""

from __future__ import annotations

import linecache
import types

import pytest
import torch
from control_cases import assert_batch_equals_loop, sequences

import matchbox
from matchbox import MaskedBatch
from matchbox._masking import host_reads
from matchbox.extending import call_state


def rows(grad: bool = True, values=((0.2, 1.0, 0.9), (-0.2, -1.0, 0.1), (0.7, -0.4, 0.3))):
    """Per-example rows ``(1, 3)`` and their batch; the first and the last have a positive
    sum (they take ``if x.sum() > 0``)."""
    examples = [torch.tensor([v], dtype=torch.float64, requires_grad=grad) for v in values]
    return examples, MaskedBatch.fromlist(examples, (False,))


_sources = iter(range(10**6))


def decorated(source: str):
    """The ``@matchbox.batch`` function ``f`` of ``source`` (its lines registered, so that
    ``@batch`` reads them)."""
    filename = f"<stored-copies-{next(_sources)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"matchbox": matchbox, "torch": torch, "Box": types.SimpleNamespace}
    exec(compile(source, filename, "exec"), namespace)
    return namespace["f"]


# How each container is made, written under the condition, read, and named by the error.
STORES = {
    "list": ("items = [x * 0]", "items.append(h)", "items[-1]", "a list item"),
    "dict": ("items = {'a': x * 0}", "items['a'] = h", "items['a']", r"the item \['a'\]"),
    "attribute": ("items = Box(a=x * 0)", "items.a = h", "items.a", r"the attribute \.a"),
}
# Each in-place update, and how the error names it (after the condition, every example
# runs it: core's dispatch sees it; in a branch, core writes the running examples).
UPDATES = {
    "h.mul_(10)": r"the in-place update Tensor\.mul_\(\)",
    "h += 1": r"the in-place update (Tensor\.__iadd__\(\)|of 'h')",
    "h[:, 0] = h[:, 1] * 3": r"the in-place write x\[:, 0\] = value",
    "torch.relu_(h)": r"the in-place update torch\.relu_\(\)",
    "torch.clamp_(h, max=0.5)": r"the in-place update torch\.clamp_\(\)",
    "h.copy_(h * 2)": r"the in-place update Tensor\.copy_\(\)",
}


def stored_then_updated(store: str, update: str, where: str):
    init, write, read, _ = STORES[store]
    if where == "after the condition":
        body = f"    if x.sum() > 0:\n        {write}\n    {update}\n"
    else:  # a branch that examples which stored take too
        body = f"    if x.sum() > 0:\n        {write}\n    if x[:, 0] > 0.5:\n        {update}\n"
    return decorated(f"@matchbox.batch\ndef f(x):\n    h = x * 1.0\n    {init}\n{body}"
                     f"    return {read} + h\n")


@pytest.mark.parametrize("where", ["after the condition", "in a later branch"])
@pytest.mark.parametrize("update", sorted(UPDATES))
@pytest.mark.parametrize("store", sorted(STORES))
def test_an_in_place_update_of_a_batch_stored_as_a_copy_is_refused(store, update, where):
    # Before, the item kept the old values for the examples that stored it, where the
    # loop's item (the tensor itself) sees the update.
    f = stored_then_updated(store, update, where)
    _, xb = rows()
    what = STORES[store][3]
    with pytest.raises(NotImplementedError,
                       match=rf"^@batch: {UPDATES[update]} would not reach {what} stored "
                             r"under a per-example condition \(<stored-copies-\d+>, line 6\), "
                             r"which holds a copy of the batch updated: .*Write the update "
                             r"out of place \(h = h \* 10.*store h\.clone\(\)"):
        f(xb)


@pytest.mark.parametrize("store", ["dict", "attribute"])
def test_a_dict_item_or_attribute_is_refused_without_gradients_too(store):
    # A dict item or an attribute is merged with the old one (a where): a copy always.
    f = stored_then_updated(store, "h.mul_(10)", "after the condition")
    _, xb = rows(grad=False)
    with pytest.raises(NotImplementedError, match=r"would not reach .* holds a copy"):
        f(xb)


@matchbox.batch
def replaced_item_updated(x):
    g = x * 1.0
    h = x * 2.0
    state = {"a": g}  # every example: the item is g itself
    if x.sum() > 0:
        state["a"] = h  # the others keep g, here as a copy of it
    g.mul_(10)
    return state["a"] + 0


def test_an_update_of_the_item_replaced_under_a_condition_is_refused():
    # In the loop the examples that do not take the branch hold g itself in the dict.
    _, xb = rows(grad=False)
    with pytest.raises(NotImplementedError, match=r"Tensor\.mul_\(\) would not reach the item "
                                                  r"\['a'\] stored under a per-example"):
        replaced_item_updated(xb)


@matchbox.batch
def kept_steps_updated(x):
    h = x.sum(1) * 0
    kept = [h * 0]
    for xt in x.unbind(1):
        if xt.sum() > 0:
            kept.append(h)  # in the loop every item is h, which each step updates
        h.add_(xt)
    return kept[-1] + 0


def test_an_update_in_a_loop_of_an_appended_state_is_refused():
    values = [torch.tensor([[[0.5], [0.2]]], dtype=torch.float64, requires_grad=True),
              torch.tensor([[[-0.5], [0.3], [0.4]]], dtype=torch.float64, requires_grad=True)]
    xb = MaskedBatch.fromlist(values, (True, False))
    with pytest.raises(NotImplementedError, match=r"Tensor\.add_\(\) would not reach a list item"):
        kept_steps_updated(xb)


def scale(t):  # undecorated: its in-place op is core's
    t.mul_(3)


@matchbox.batch
def updated_by_a_helper(x):
    h = x * 1.0
    state = {"a": x * 0}
    if x.sum() > 0:
        state["a"] = h
    scale(h)
    return state["a"] + 0


def test_an_update_in_an_undecorated_helper_is_refused():
    _, xb = rows()
    with pytest.raises(NotImplementedError, match=r"Tensor\.mul_\(\) would not reach the item"):
        updated_by_a_helper(xb)


def test_the_refusal_is_raised_where_checks_are_deferred():
    # With host reads off (an accelerator's way) the check is read when the call ends.
    f = stored_then_updated("dict", "h.mul_(10)", "in a later branch")
    _, xb = rows()
    with host_reads(False), pytest.raises(NotImplementedError, match=r"would not reach"):
        f(xb)


# ------------------------------------------------------------------ what equals the loop


@matchbox.batch
def stored_for_every_example(x):
    h = x * 1.0
    items, state = [], {"a": x * 0}
    items.append(h)  # no per-example condition: the item is h itself
    state["a"] = h
    h.mul_(10)
    return items[-1] + state["a"]


@matchbox.batch
def a_clone_stored(x):
    h = x * 1.0
    items, state = [x * 0], {"a": x * 0}
    if x.sum() > 0:
        items.append(h.clone())  # a copy on purpose: the loop's item misses the update too
        state["a"] = h.clone()
    h.mul_(10)
    return items[-1] + state["a"] + h


@matchbox.batch
def another_batch_updated(x):
    h = x * 1.0
    g = x * 2.0
    items, state = [x * 0], {"a": x * 0}
    if x.sum() > 0:
        items.append(h)
        state["a"] = h
    g.mul_(10)
    g += 1
    return items[-1] + state["a"] + g


@matchbox.batch
def updated_in_the_storing_branch(x):
    h = x * 1.0
    items = [x * 0]
    if x.sum() > 0:
        items.append(h)
        h.mul_(10)  # the item is the region's h (its guard's data): it sees the update
    return items[-1] + h


@matchbox.batch
def updated_where_none_stored(x):
    h = x * 1.0
    state = {"a": x * 0}
    if x.sum() > 0:
        state["a"] = h
    else:
        h.mul_(10)  # none of these examples stored h
    return state["a"] + h


@matchbox.batch
def stored_after_the_update(x):
    h = x * 1.0
    state = {"a": x * 0}
    h.mul_(10)
    if x.sum() > 0:
        state["a"] = h
    return state["a"] + h


@matchbox.batch
def updated_out_of_place(x):
    h = x * 1.0
    items, state = [x * 0], {"a": x * 0}
    if x.sum() > 0:
        items.append(h)
        state["a"] = h
    h = h * 10  # a new tensor: the loop's items keep the old values too
    return items[-1] + state["a"] + h


@matchbox.batch
def appended_without_gradients(x):
    h = x * 1.0
    items = [x * 0]
    if x.sum() > 0:
        items.append(h)  # without a gradient guard the item is a view of h's data
    h.mul_(10)
    return items[-1] + h


VALID = {
    "stored for every example": (stored_for_every_example, True),
    "a clone stored": (a_clone_stored, True),
    "another batch updated": (another_batch_updated, True),
    "updated in the storing branch": (updated_in_the_storing_branch, True),
    "updated where none stored": (updated_where_none_stored, True),
    "stored after the update": (stored_after_the_update, True),
    "updated out of place": (updated_out_of_place, True),
    "appended without gradients": (appended_without_gradients, False),
}


@pytest.mark.parametrize("case", sorted(VALID))
def test_a_store_the_update_reaches_or_need_not_equals_the_loop(case):
    f, grad = VALID[case]
    assert_batch_equals_loop(f, rows(grad), check_grad=grad)


@matchbox.batch
def stored_argument(x, state):
    if x.sum() > 0:
        state["x"] = x  # a copy of the argument, for the examples with a positive sum
    return x * 1


@matchbox.batch
def doubled_in_place(x):
    x.mul_(2)
    return x


def test_the_record_of_a_copy_ends_with_its_call():
    _, xb = rows(grad=False)
    state = {"x": xb * 0}
    stored_argument(xb, state)  # the copy lives on in state
    assert call_state() is None
    doubled_in_place(xb)  # another call: its update is not the first call's
    xb.mul_(2)  # nor one outside any call
    assert torch.equal(xb.data, rows(grad=False)[1].data * 4)


@matchbox.batch
def previous_state(x):
    h = x.sum(1) * 0
    prev = h * 0
    for xt in x.unbind(1):
        prev = h  # merged again after the update: in every step prev is h, as in the loop
        h += xt
    return prev + h


def test_a_variable_assigned_then_updated_in_each_step_equals_the_loop():
    # Why a variable merged under a per-example condition is not recorded: a refusal
    # at h += xt would refuse this loop, which equals the loop over examples.
    assert_batch_equals_loop(previous_state, sequences([2, 3, 1]))
