"""A dict's keys that only some examples have (``runtime.keys``).

In the loop each example has its own dict; in a batch one dict holds every example's
keys.  A key first written under a per-example condition is only the running examples':
a user trial found it counted for every example in ``len(d)``, ``k in d`` and the dict's
loops.  Its value records its examples, and the reads of the key set are per example
(``len``, ``in``, ``for``, ``if d``, ``d.get``), or refused where one Python object
would have to hold each example's own keys (``list(d)``)."""

from __future__ import annotations

import pytest
from control_cases import assert_batch_equals_loop, sequences

import matchbox


@matchbox.batch
def reads_keys_added_per_example(x, how):
    d, e = {"all": x.sum(1) * 0}, {}
    for xt in x.unbind(1):
        if xt.sum() > 0:
            d["pos"] = xt
            e["pos"] = xt
    out = x.sum(1) * 0
    if how == "len":
        out = out + len(d) + len(d.keys()) * 10 + len(e.items()) * 100
    elif how == "in":
        if "pos" in d:
            out = out + d["pos"]
    elif how == "not in":
        if "pos" not in d:
            out = out + 1
    elif how == "for":
        for k in d:
            out = out + len(k)
    elif how == "keys":
        for k in d.keys():
            out = out + len(k)
    elif how == "items":
        for k, v in d.items():
            out = out + v + len(k)
    elif how == "values":
        out = out + sum(d.values())
    elif how == "comprehension":
        out = out + sum([len(k) for k in d])
    elif how == "truth":
        if e:
            out = out + 1
        if not e:
            out = out + 10
    elif how == "get":
        out = out + d.get("pos", out + 5)
    return out


READS = ["len", "in", "not in", "for", "keys", "items", "values", "comprehension", "truth",
         "get"]


@pytest.mark.parametrize("how", READS)
def test_a_key_added_under_a_condition_is_read_per_example(how, dtype):
    assert_batch_equals_loop(lambda x: reads_keys_added_per_example(x, how),
                             sequences([4, 0, 1, 6, 2], dtype=dtype))


@matchbox.batch
def lists_keys_added_per_example(x, how):
    d = {"all": x.sum(1) * 0}
    for xt in x.unbind(1):
        if xt.sum() > 0:
            d["pos"] = xt
    if how == "list":
        return x.sum(1) * 0 + len(list(d))
    if how == "sorted":
        return x.sum(1) * 0 + len(sorted(d.keys()))
    return x.sum(1) * 0 + d.get("pos")


@pytest.mark.parametrize("how, what", [("list", r"list\(\) of a dict's keys"),
                                       ("sorted", r"sorted\(\) of a dict's keys"),
                                       ("get", r"d.get\('pos'\) of a key only some examples "
                                               r"have \(the others would get None\)")])
def test_a_dict_whose_keys_differ_read_as_one_object_is_refused(how, what):
    _, xb = sequences([4, 0, 1, 6])
    xb.data[:, :, 0] = 1.0  # a positive step: every example with steps adds 'pos'
    with pytest.raises(NotImplementedError,
                       match=rf"@batch: {what} \(.*\): a key added under a per-example "
                             r"condition is only the examples' that ran it"):
        lists_keys_added_per_example(xb, how)


@matchbox.batch
def keys_written_in_both_sides(x, how):
    d = {}
    for xt in x.unbind(1):
        step = {}  # a dict made in the step
        if xt.sum() > 0:
            d["last"] = xt
            step["h"] = xt * 2
        else:
            d["last"] = -xt
            step["h"] = xt
        d["h"] = step["h"] + len(step)
    if how == "list":
        return x.sum(1) * 0 + len(list(d)) + len(sorted(d.keys())) * 10
    return x.sum(1) * 0 + len(d) + ("last" in d) * 10 + (1 if d else 0) * 100


def test_keys_every_example_with_steps_writes_equal_the_loop(dtype):
    # Both sides of an `if`, in a dict made in the step: every example that runs the loop
    # has the key (a review found a write-time refusal refusing such keys), and the
    # example without steps has none (the batch counted the keys for it too).
    assert_batch_equals_loop(lambda x: keys_written_in_both_sides(x, "len"),
                             sequences([4, 0, 1, 6], dtype=dtype))
    # Every example has them: the keys as one list are every example's.
    assert_batch_equals_loop(lambda x: keys_written_in_both_sides(x, "list"),
                             sequences([4, 1, 6], dtype=dtype))


@matchbox.batch
def key_made_every_examples_again(x):
    d = {}
    for xt in x.unbind(1):
        if xt.sum() > 0:
            d["pos"] = xt
    d["pos"] = x.sum(1)  # where every example runs: every example's key
    return x.sum(1) * 0 + len(d) + len(list(d)) * 10


def test_a_key_written_where_every_example_runs_is_every_examples(dtype):
    assert_batch_equals_loop(key_made_every_examples_again, sequences([4, 0, 1, 6], dtype=dtype))
