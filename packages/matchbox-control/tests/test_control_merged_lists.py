"""A list whose items only some examples have, once *merged* (assigned under a
per-example ``if``, or carried by a loop that examples leave at different steps),
still holds each example's own items: ``len``, ``items[-1]``, slices, ``+``, ``+=``,
``sum`` and ``torch.stack`` see exactly what the loop over examples sees (issue 24
§1, §2).  What cannot hold each example's own items (a list of rows that only some
examples have) is refused, naming the list and the line."""

from __future__ import annotations

import importlib.util
import itertools
import textwrap

import pytest
import torch
from control_cases import assert_batch_equals_loop, per_example, sequences
from hypothesis import example, given, settings
from hypothesis import strategies as st

import matchbox
from matchbox import MaskedBatch


def counting(lengths, dtype=torch.float64):
    """Sequences ``1, 2, ..., n`` (one feature) and their batch, NaN padding."""
    xs = [torch.arange(1, n + 1, dtype=dtype).reshape(1, n, 1) for n in lengths]
    return xs, MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))


def per_example_values(result):
    return [e.reshape(-1).tolist() for e in result.examples()]


# ---------------------------------------------------------------------- the three


@matchbox.batch
def last_of_a_branch_list(x):
    steps = x.unbind(1)
    if x.sum() > 4:
        items = [s * 2 for s in steps]
    else:
        items = [s for s in steps]
    return items[-1], len(items), torch.stack(items, 1)


def test_a_list_assigned_under_a_per_example_if_keeps_each_examples_items():
    # The if-case: the loop gives [6, 3, 8] (not [6, 0, 0]).
    xs = [torch.tensor(v, dtype=torch.float64).reshape(1, -1, 1)
          for v in ([1.0, 2.0, 3.0], [3.0], [1.0, 4.0])]  # sums 6, 3, 5
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))
    loop = [last_of_a_branch_list(x)[0].item() for x in xs]
    assert loop == [6, 3, 8]
    last, count, stacked = last_of_a_branch_list(xb)
    assert per_example(last) == [6, 3, 8]
    assert per_example(count) == [3, 1, 2]
    assert per_example_values(stacked) == [[2, 4, 6], [3], [2, 8]]
    assert_batch_equals_loop(last_of_a_branch_list, (xs, xb))


@matchbox.batch
def sliding_window(x):
    window = []
    for v in x.unbind(1):
        window.append(v)
        window = window[-2:]
    return sum(window, x.sum(1) * 0), len(window) + x.sum(1) * 0


def test_a_sliding_window_holds_each_examples_last_two_steps(dtype):
    # The loop: the sum of the last two steps (5 for 1, 2, 3; not 6), len 2 (not 3).
    xs, xb = counting([1, 3, 2, 4], dtype)
    total, count = sliding_window(xb)
    assert per_example(total) == [1, 5, 3, 7]
    assert per_example(count) == [1, 2, 2, 2]
    assert_batch_equals_loop(sliding_window, sequences([1, 3, 0, 2, 4], dtype=dtype))


@matchbox.batch
def the_window_itself(x):
    window = []
    for v in x.unbind(1):
        window.append(v)
        window = window[-2:]
    return window


def test_a_window_carried_by_a_loop_does_not_grow_with_the_loop():
    # Positions that no example has are dropped (by the slice, and by the merge of a
    # list of two lengths): the batched list holds two items, not one per step.
    _, xb = sequences([5, 40, 3, 17])
    assert len(the_window_itself(xb)) == 2


@matchbox.batch
def soft_dtw(x, y):
    """Soft dynamic time warping, its table kept as Python lists of rows."""
    gamma = 0.5
    prev = []
    for i, xi in enumerate(x.unbind(1)):
        row = []
        for j, yj in enumerate(y.unbind(1)):
            d = (xi - yj).pow(2).sum(-1)
            if i == 0 and j == 0:
                r = d
            elif i == 0:
                r = d + row[j - 1]
            elif j == 0:
                r = d + prev[j]
            else:
                options = torch.stack([prev[j - 1], prev[j], row[j - 1]], -1)
                r = d - gamma * torch.logsumexp(-options / gamma, -1)
            row.append(r)
        prev = row
    return prev[-1]


def soft_dtw_pairs(lengths_x, lengths_y, dtype):
    xs = [torch.randn(1, n, 2, dtype=dtype) for n in lengths_x]
    ys = [torch.randn(1, n, 2, dtype=dtype) for n in lengths_y]
    batch = (MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan")),
             MaskedBatch.fromlist(ys, (True, False), padding_value=float("nan")))
    return (xs, batch[0]), (ys, batch[1])


@pytest.mark.parametrize("lengths_x, lengths_y", [
    ([3, 1, 4, 2, 2, 5], [2, 3, 1, 4, 2, 3]),   # six examples, as in the issue
    ([2], [3]),                                 # one example
    ([1, 1], [1, 2]),
])
def test_a_dynamic_programming_table_kept_as_lists_of_rows(lengths_x, lengths_y, dtype):
    assert_batch_equals_loop(soft_dtw, *soft_dtw_pairs(lengths_x, lengths_y, dtype))


@matchbox.batch
def soft_dtw_whole_table(x, y):
    table = []
    for i, xi in enumerate(x.unbind(1)):
        row = []
        for j, yj in enumerate(y.unbind(1)):
            d = (xi - yj).pow(2).sum(-1)
            r = d if i == 0 else d + table[i - 1][j]
            row.append(r)
        table.append(row)
    return table[-1][-1]


def test_a_table_of_rows_only_some_examples_have_is_refused_naming_the_line():
    x, y = soft_dtw_pairs([3, 1, 2], [2, 2, 3], torch.float64)
    line = soft_dtw_whole_table.__wrapped__.__code__.co_firstlineno + 9
    with pytest.raises(TypeError, match=(
            r"the appended value is a list, an item of a list that only some examples have "
            rf"\(.*test_control_merged_lists.py, line {line}\).*Keep the row you need in a "
            r"variable of its own \(prev = row\), or stack each row into a tensor first")):
        soft_dtw_whole_table(x[1], y[1])


# ---------------------------------------------------------------------- §2: lengths differ


@matchbox.batch
def nested_last(x):
    last = [x.sum(1)]
    for v in x.unbind(1):
        if v.sum() > 0:
            last = [v, v * 2]
        else:
            last = last + [v]
    return torch.stack(last, 1), last[-1] * len(last)


def test_a_merged_list_whose_length_differs_between_examples(dtype):
    # Before: "'last' is a list of 2 items for the examples that ran this code and a
    # list of 3 items for the others".
    assert_batch_equals_loop(nested_last, sequences([3, 1, 0, 4, 2], dtype=dtype))


@matchbox.batch
def grown_by_plus(x):
    row = []
    for v in x.unbind(1):
        row = row + [v * 2]
    first = row[:1] + [x.sum(1)]
    return sum(row, x.sum(1) * 0), len(row) + x.sum(1) * 0, first[0], torch.stack(first, 1)


def test_row_plus_a_one_item_list_in_a_loop_is_an_append(dtype):
    xs, xb = counting([1, 3, 2, 0])
    total, count, _, _ = grown_by_plus(xb)
    assert per_example(total) == [2, 12, 6, 0]
    assert per_example(count) == [1, 3, 2, 0]
    assert_batch_equals_loop(grown_by_plus, sequences([1, 3, 2, 4], dtype=dtype))


@matchbox.batch
def plus_equals_and_concatenation(x):
    evens, odds = [], []
    for i, v in enumerate(x.unbind(1)):
        if i % 2 == 0:
            evens += [v]
        else:
            odds = odds + [v * 3]
    both = evens + odds
    return torch.stack(both, 1), both[-1], len(both) + x.sum(1) * 0


def test_plus_equals_and_concatenation_of_per_example_lists(dtype):
    assert_batch_equals_loop(plus_equals_and_concatenation, sequences([1, 3, 4, 2], dtype=dtype))
    assert_batch_equals_loop(plus_equals_and_concatenation, sequences([2], dtype=dtype))


@matchbox.batch
def extended_under_a_condition(x):
    items = []
    for v in x.unbind(1):
        items.append(v)
    out = []
    if x.sum() > 1.5:
        out.extend(items)
    else:
        out += items[:1]
    return len(out) + x.sum(1) * 0, sum(out, x.sum(1) * 0), torch.stack(out, 1)


def test_extending_under_a_condition_by_a_list_only_some_examples_have(dtype):
    # The items extended keep their own record (an example without an item does not
    # get it from the extend): the loop gives lengths [3, 1, 2], not [3, 3, 3].
    xs = [torch.ones(1, n, 1, dtype=dtype) * (k + 1) for k, n in enumerate((3, 1, 2))]
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))
    count, total, _ = extended_under_a_condition(xb)
    assert per_example(count) == [3, 1, 2]
    assert per_example(total) == [3, 2, 6]
    assert_batch_equals_loop(extended_under_a_condition, (xs, xb))


@matchbox.batch
def while_loop_list(x):
    items = [x.sum(1)]
    k = 0
    while k < 4 and items[-1].sum() < 6:
        items = items + [items[-1] + x.sum(1) + 1]
        k = k + 1
    return torch.stack(items, 1), len(items) + x.sum(1) * 0


def test_a_list_carried_by_a_while_loop_that_examples_leave_at_different_steps(dtype):
    assert_batch_equals_loop(while_loop_list, sequences([0, 1, 3, 2], size=1, dtype=dtype))


@matchbox.batch
def steps_in_one_branch(x):
    if x.sum() < -0.85:
        steps = x.unbind(1)
    else:
        steps = (x.sum(1),)
    return steps[-1], len(steps) + x.sum(1) * 0, torch.stack(steps, 1)


def test_the_steps_of_unbind_assigned_in_a_branch_stay_each_examples_own(dtype):
    # Examples 0 and 3 (sums -2.3 and -0.9) take the steps, 1 and 2 the one item.
    assert_batch_equals_loop(steps_in_one_branch, sequences([3, 1, 0, 2], dtype=dtype))


def test_items_that_cannot_hold_padding_are_refused_naming_the_list():
    @matchbox.batch
    def f(x):
        names = []
        for _ in x.unbind(1):
            names = names + ["step"]
        return len(names)

    # The item refused is the first appended under a mask: step 1 on the CPU, which reads
    # that every example takes step 0; step 0 where no mask is read (an accelerator).
    _, xb = sequences([2, 1])
    with pytest.raises(TypeError, match=r"names\[[01]\] is a str, an item of the list 'names' "
                                        r"that only some examples have \(.*, line \d+\)"):
        f(xb)


@matchbox.batch
def unpacked(x):
    items = []
    for v in x.unbind(1):
        if v.sum() > 0:
            items.append(v)
    a, b = items
    first, *rest = items
    *init, last = items
    return a - 2 * b, first * len(rest), torch.stack(rest + init, 1), last


def test_unpacking_gives_each_example_its_own_items(dtype):
    # The positive steps are at positions 0 and 2, 1 and 2, 0 and 1: Python's own
    # unpacking of the batched list would give padding to examples 0 and 1.
    values = ([1.0, -1.0, 2.0], [-1.0, 3.0, 4.0], [5.0, 6.0])
    xs = [torch.tensor(v, dtype=dtype).reshape(1, -1, 1) for v in values]
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))
    assert per_example(unpacked(xb)[0]) == [-3.0, -5.0, -7.0]
    assert_batch_equals_loop(unpacked, (xs, xb))


def test_unpacking_a_list_of_the_wrong_length_raises_naming_the_examples():
    @matchbox.batch
    def f(x):
        items = []
        for v in x.unbind(1):
            items.append(v)
        a, b = items
        return a + b

    xs, xb = sequences([2, 1, 3, 2])
    with pytest.raises(ValueError, match=r"cannot unpack a list whose items only some examples "
                                         r"have: examples \[1, 2\] have \[1, 3\] items, 2 "
                                         r"expected"):
        f(xb)
    with pytest.raises(ValueError):
        f(xs[1])  # the loop raises there too


@matchbox.batch
def by_truth(x):
    items = []
    for v in x.unbind(1):
        if v.sum() > 0:
            items.append(v)
    total = x.sum(1) * 0
    if items:
        total = total + items[-1]
    if not items:
        total = total - 1
    while items:
        items = items[1:]
        total = total + 2
    return total + (1 if items else 3)


def test_the_truth_of_a_list_is_each_examples_own(dtype):
    # `if items:` was Python's truth of the batched list: true for every example once
    # some example had an item (an example with an empty list read items[-1]).
    values = ([1.0, -1.0, 2.0], [-1.0], [3.0, 4.0], [])
    xs = [torch.tensor(v, dtype=dtype).reshape(1, -1, 1) for v in values]
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))
    assert per_example(by_truth(xb)) == [9.0, 2.0, 11.0, 2.0]
    assert_batch_equals_loop(by_truth, (xs, xb))


def test_a_per_example_list_as_an_operand_of_and_is_refused_saying_what_to_write():
    @matchbox.batch
    def f(x):
        items = []
        for v in x.unbind(1):
            items.append(v)
        return items and items[-1]

    _, xb = sequences([2, 1, 3])
    with pytest.raises(TypeError, match=r"a list whose items only some examples have as an "
                                        r"operand of 'and' or 'or' \(.*, line \d+\).*"
                                        r"len\(items\) > 0 and"):
        f(xb)


# ---------------------------------------------------------------------- drawn programs

_counter = itertools.count()

CONDITIONS = ["v.sum() > 0", "x.sum() > 1", "len(lst) < 3", "v.sum() < 0.5"]
STATEMENTS = [
    ["lst.append(v * 2)"], ["lst = lst + [v + 1]"], ["lst += [v - 1]"],
    ["lst = lst[-2:]"], ["lst = lst[1:]"], ["lst = lst[:3]"], ["lst = lst[::-1]"],
    ["lst = [u * 2 for u in lst]"], ["lst = lst + lst[:1]"],
    ["if len(lst) > 0:", "    v = v + lst[-1]"],
    ["if len(lst) == 2:", "    a, b = lst", "    v = v + a - b"],
    ["if len(lst) > 0:", "    *init, last = lst", "    v = sum(init, v) * 0.5 + last"],
    ["if lst:", "    v = v * 0.5 + lst[0]"], ["v = v + (2 if not lst else 1)"],
]


def indent(lines):
    return ["    " + line for line in lines]


def block(depth):
    simple = st.sampled_from(STATEMENTS)
    options = [simple, simple]
    if depth > 0:
        options += [if_statement(depth - 1), for_statement(depth - 1),
                    while_statement(depth - 1)]
    return st.lists(st.one_of(options), min_size=1, max_size=3).map(
        lambda parts: [line for part in parts for line in part])


@st.composite
def if_statement(draw, depth):
    lines = [f"if {draw(st.sampled_from(CONDITIONS))}:"] + indent(draw(block(depth)))
    if draw(st.booleans()):
        lines += ["else:"] + indent(draw(block(depth)))
    return lines


@st.composite
def for_statement(draw, depth):
    return ["for v in x.unbind(1):"] + indent(draw(block(depth)))


@st.composite
def while_statement(draw, depth):
    counter = f"k{next(_counter)}"
    body = [f"{counter} = {counter} + 1", f"v = v * 0.5 + {counter}"] + draw(block(depth))
    return [f"{counter} = 0", f"while {counter} < 3 and ({draw(st.sampled_from(CONDITIONS))}):"
            ] + indent(body)


@st.composite
def programs(draw):
    start = draw(st.sampled_from(["lst = []", "lst = [x.sum(1)]"]))
    body = (["zero = x.sum(1) * 0", "v = x.sum(1)", start] + draw(block(2))
            + ["padded = lst + [zero]",
               "return (len(lst) + zero, sum(lst, zero), torch.stack(padded, 1), "
               "padded[-1], padded[0], padded[len(padded) - 1])"])
    return "import torch\n\n\ndef program(x):\n" + "\n".join(indent(body)) + "\n"


def load(source, directory):
    path = directory / f"list_program_{next(_counter)}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.program


# Every statement once, in a loop that examples leave at different steps, under a
# per-example if: always tried, on zero- and one-length examples and a batch of one.
_EVERY_STATEMENT = "import torch\n\n\ndef program(x):\n" + "\n".join(indent(
    ["zero = x.sum(1) * 0", "v = x.sum(1)", "lst = [x.sum(1)]", "for v in x.unbind(1):"]
    + indent(["if v.sum() > 0:"] + indent([line for lines in STATEMENTS for line in lines]))
    + ["padded = lst + [zero]",
       "return len(lst) + zero, sum(lst, zero), torch.stack(padded, 1), padded[-1]"])) + "\n"


@settings(max_examples=30)
@given(source=programs(), lengths=st.lists(st.integers(0, 4), min_size=1, max_size=4),
       dtype=st.sampled_from([torch.float32, torch.float64]))
@example(source=_EVERY_STATEMENT, lengths=[0, 1, 3, 2], dtype=torch.float32)
@example(source=_EVERY_STATEMENT, lengths=[1], dtype=torch.float64)
@example(source=_EVERY_STATEMENT, lengths=[0], dtype=torch.float64)
def test_drawn_list_programs_equal_the_loop(tmp_path_factory, source, lengths, dtype):
    program = matchbox.batch(load(source, tmp_path_factory.mktemp("lists")))
    torch.manual_seed(len(source))
    try:
        assert_batch_equals_loop(program, sequences(lengths, size=2, dtype=dtype))
    except AssertionError as error:
        raise AssertionError(f"{error}\n{textwrap.dedent(source)}") from None
