"""A key added to a dict under a per-example condition records the examples that added it
(``runtime.dict_keys``): what reads the dict's keys (``len(d)``, ``k in d``, ``d.keys()``,
``for k in d``, ``list(d)``, ``if d:``) is refused where a running example lacks one (the
key counted for every example, silently).  A key every running example writes (both sides of
an ``if``), a key given a value first where every example runs, and ``d[k]`` reads stay per
example."""

from __future__ import annotations

import collections
import operator

import pytest
import torch
from control_cases import assert_batch_equals_loop, sequences

import matchbox


@matchbox.batch
def reads_a_key_added_under_a_condition(x, how):
    d = collections.defaultdict(int) if how == "defaultdict" else {"n": x.sum(1)}
    if x.sum() > 0:
        if how == "update":
            d.update(pos=x.sum(1))
        elif how == "setitem":
            operator.setitem(d, "pos", x.sum(1))
        else:
            d["pos"] = x.sum(1)
    if how in ("len", "update", "setitem", "defaultdict"):
        return x.sum(1) * len(d)
    if how == "in":
        return x.sum(1) * ("pos" in d)
    if how == "not in":
        return x.sum(1) * ("pos" not in d)
    if how == "keys":
        return x.sum(1) * len(list(d.keys()))
    if how == "items":
        return sum(v for _, v in d.items())
    if how == "values":
        return sum(d.values())
    if how == "for":
        total = x.sum(1) * 0
        for k in d:
            total = total + d[k]
        return total
    if how == "comprehension":
        return sum([d[k] for k in d])
    if how == "list":
        return x.sum(1) * len(list(d))
    if how == "sorted":
        return x.sum(1) * len(sorted(d))
    if how == "copy":
        return x.sum(1) * len(d.copy())
    if how == "truth":
        d = {}
        if x.sum() > 0:
            d["pos"] = x.sum(1)
        return x.sum(1) if d else x.sum(1) * 0
    raise AssertionError(how)


READS = {"len": r"len\(\)", "update": r"len\(\)", "setitem": r"len\(\)",
         "defaultdict": r"len\(\)", "in": "k in d", "not in": "k in d",
         "keys": r"dict\.keys\(\)", "items": r"dict\.items\(\)",
         "values": r"dict\.values\(\)", "for": "a loop over a dict",
         "comprehension": "a loop over a dict", "list": r"list\(\)",
         "sorted": r"sorted\(\)", "copy": r"dict\.copy\(\)", "truth": "a truth test"}


@pytest.mark.parametrize("how", READS)
def test_reading_the_keys_of_a_key_only_some_examples_added_is_refused(how):
    torch.manual_seed(0)
    xs, xb = sequences((2, 4, 1, 3))
    while len({bool(x.sum() > 0) for x in xs}) < 2:  # both sides of the condition taken
        xs, xb = sequences((2, 4, 1, 3))
    with pytest.raises(NotImplementedError, match=(
            rf"@batch: {READS[how]} \(.*test_control_dict_keys\.py, line \d+\) of a dict whose "
            r"keys 'pos' \(.*test_control_dict_keys\.py, line \d+\) only some examples added "
            r"\(under a per-example condition\): a Python dict is shared by every example, .* "
            r"Give each key a value first where every example runs")):
        reads_a_key_added_under_a_condition(xb, how)


@matchbox.batch
def counts_the_steps_in_a_dict(x):
    d = {}
    for t, s in enumerate(x.unbind(1)):
        d[t] = s
    return x.sum(1) * len(d)


def test_a_key_per_step_only_some_examples_have_is_refused_where_read():
    _, xb = sequences((2, 4, 1))
    # (On an accelerator each step runs under a mask, read only for the error: key 0, which
    # every example added, is named too.)
    with pytest.raises(NotImplementedError, match=r"len\(\) .* of a dict whose keys (0 \(.*\), )?"
                                                  r"1 \(.*\), 2 \(.*\), 3 \(.*\) only some "
                                                  r"examples"):
        counts_the_steps_in_a_dict(xb)


@matchbox.batch
def reads_a_key_only_some_examples_added(x):
    d = {"n": x.sum(1)}
    if x.sum() > 0:
        d["n"] = d["n"] * 2
    else:
        d["neg"] = x.sum(1).tanh()
    return d["n"] + d.get("n") + d["n"].sum() * 0


def test_reading_an_item_of_a_dict_with_a_partial_key_equals_the_loop(dtype):
    # (d["neg"] itself would be padding for the examples without it, where the loop raises
    # KeyError: a variable assigned in one branch is read so too.)
    torch.manual_seed(3)
    assert_batch_equals_loop(reads_a_key_only_some_examples_added,
                             sequences((2, 4, 1, 3), dtype=dtype))


# Legitimate dicts: filled where every example runs, written per example afterwards,
# read per example, made by a decorated helper called under a condition, and keys that
# every running example adds.

@matchbox.batch
def writes_a_key_given_a_value_first(x):
    d = {"pos": x.sum(1) * 0, "n": 0}
    if x.sum() > 0:
        d["pos"] = x.sum(1).tanh()
        d["n"] = d["n"] + 1
    return (d["pos"] + d["n"]) * len(d) * ("pos" in d)


@matchbox.batch
def fills_a_dict_per_step_for_every_example(x):
    d = {}
    for t in range(3):
        d[t] = x.sum(1) * t
    if x.sum() > 0:
        d[1] = d[1] * 2
    return sum(d.values()) * len(d.items())


@matchbox.batch
def named_states(x):
    out = {}
    out["h"] = x.sum(1) * 2
    out["n"] = len(out)
    return out


@matchbox.batch
def calls_a_dict_helper_under_a_condition(x):
    y = x.sum(1)
    if x.sum() > 0:
        states = named_states(x)
        y = states["h"] * states["n"]
    return y


@matchbox.batch
def adds_a_key_in_a_loop_over_steps(x):
    d = {"last": x.sum(1) * 0}
    for s in x.unbind(1):
        d["last"] = s
    return d["last"] * len(d)


@pytest.mark.parametrize("f", [writes_a_key_given_a_value_first,
                               fills_a_dict_per_step_for_every_example,
                               calls_a_dict_helper_under_a_condition,
                               adds_a_key_in_a_loop_over_steps])
@pytest.mark.parametrize("lengths", [(2, 4, 1, 3), (0, 2, 1), (3,)])
def test_dicts_every_example_has_equal_the_loop(f, lengths, dtype):
    torch.manual_seed(1)
    assert_batch_equals_loop(f, sequences(lengths, dtype=dtype))


@matchbox.batch
def writes_a_key_in_both_sides(x):
    d = {}
    if x.sum() > 0:
        d["h"] = x.sum(1).tanh()
    else:
        d["h"] = x.sum(1) * 2
    return d["h"] * len(d) * ("h" in d) + sum(d.values())


@pytest.mark.parametrize("lengths", [(3, 3), (2,)])
def test_a_key_every_running_example_adds_is_not_refused(lengths, dtype):
    torch.manual_seed(2)
    assert_batch_equals_loop(counts_the_steps_in_a_dict, sequences(lengths, dtype=dtype))


@pytest.mark.parametrize("lengths", [(2, 4, 1, 3), (0, 1), (1,)])
def test_a_key_written_in_both_sides_equals_the_loop(lengths, dtype):
    torch.manual_seed(4)
    assert_batch_equals_loop(writes_a_key_in_both_sides, sequences(lengths, dtype=dtype))


@matchbox.batch
def gets_a_key_only_some_examples_added(x):
    d = {"n": x.sum(1)}
    if x.sum() > 0:
        d["pos"] = x.sum(1) * 2
    return d.get("pos", x.sum(1) * 0)


def test_get_of_a_key_only_some_examples_added_is_refused():
    # In the loop the examples without the key get the default; the batch's one dict would
    # give them its value's padding, silently.
    torch.manual_seed(0)
    xs, xb = sequences((2, 4, 1, 3))
    while len({bool(x.sum() > 0) for x in xs}) < 2:  # both sides of the condition taken
        xs, xb = sequences((2, 4, 1, 3))
    with pytest.raises(NotImplementedError, match=(
            r"@batch: dict\.get\(\) \(.*test_control_dict_keys\.py, line \d+\) of a dict whose "
            r"keys 'pos' \(.*\) only some examples added")):
        gets_a_key_only_some_examples_added(xb)


@matchbox.batch
def gets_a_key_every_running_example_added(x):
    d = {"n": x.sum(1)}
    if x.sum() > 0:
        d["pos"] = x.sum(1) * 2
        return d.get("pos", x.sum(1) * 0) + d.get("missing", x.sum(1) * 0)
    return d.get("n") + d.get("neg", x.sum(1) * 3)


def test_get_of_a_key_every_running_example_has_equals_the_loop(dtype):
    torch.manual_seed(1)
    assert_batch_equals_loop(gets_a_key_every_running_example_added,
                             sequences((2, 4, 0, 1, 3), dtype=dtype))


# The outermost call's return value: outside @batch the dict is a plain one, whose keys
# code reads for every example (its records end with the call).

@matchbox.batch
def returns_a_key_only_some_examples_added(x, how):
    out = {"y": x.sum(1)}
    if x.sum() > 0:
        out["aux"] = x.sum(1) * 2
    if how == "dict":
        return out
    if how == "tuple":
        return x.sum(1), [out]
    return {"outputs": out}


def _has_aux(x):  # the loop's answer to "aux" in f(x), per example
    return bool(x.sum() > 0)


@pytest.mark.parametrize("how", ["dict", "tuple", "nested"])
def test_returning_a_dict_with_a_key_only_some_examples_added_is_refused(how):
    # The loop's dicts differ in their keys ("aux" in out is each example's own); the one
    # dict the call returned had "aux" for every example, silently.
    torch.manual_seed(0)
    xs, xb = sequences((2, 4, 0, 1, 3))
    while len({_has_aux(x) for x in xs}) < 2:  # both sides of the condition taken
        xs, xb = sequences((2, 4, 0, 1, 3))
    loop = [returns_a_key_only_some_examples_added(x, how) for x in xs]
    found = [out if how == "dict" else out[1][0] if how == "tuple" else out["outputs"]
             for out in loop]
    assert ["aux" in out for out in found] == [_has_aux(x) for x in xs]
    with pytest.raises(NotImplementedError, match=(
            r"@batch: a return from the outermost @batch call \(.*test_control_dict_keys\.py, "
            r"line \d+\) of a dict whose keys 'aux' \(.*test_control_dict_keys\.py, line \d+\) "
            r"only some examples added \(under a per-example condition\): .* \(code outside "
            r"@batch reads it as one plain dict for every example, with the keys of all of "
            r"them\)\. Give each key a value first where every example runs")):
        returns_a_key_only_some_examples_added(xb, how)


@matchbox.batch
def completes_a_helpers_dict(x):
    d = returns_a_key_only_some_examples_added(x, "dict")  # nested: not refused there
    d["aux"] = x.sum(1) * 3  # every example has it now
    return d


@pytest.mark.parametrize("lengths", [(2, 4, 0, 1, 3), (1,)])
def test_a_returned_dict_every_example_completed_equals_the_loop(lengths, dtype):
    torch.manual_seed(5)
    xs, xb = sequences(lengths, dtype=dtype)
    out = completes_a_helpers_dict(xb)
    assert sorted(out) == ["aux", "y"]
    for key in out:
        assert_batch_equals_loop(lambda x, key=key: completes_a_helpers_dict(x)[key],
                                 (xs, xb))
