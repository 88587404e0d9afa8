"""Comprehensions and generator expressions run per example: over the steps of a
dynamic dimension each example gets its own items, as in the loop over examples
(a ``for`` statement that appends)."""

from __future__ import annotations

import re

import pytest
import torch
from control_cases import (
    assert_batch_equals_loop,
    assert_oracle,
    assert_shared_weight_model_equals_loop,
    scalars,
    sequences,
)
from hypothesis import given
from hypothesis import strategies as st

import matchbox
import matchbox.functional as F
from matchbox import MaskedBatch
from matchbox.control import UnsupportedConstructError

FILE = re.escape(__file__)


@matchbox.batch
def squares_below(n):
    return sum(i * i for i in range(n))


def test_oracle_generator_over_a_per_example_range():
    assert_oracle(squares_below, [0, 1, 3, 4], [0, 0, 5, 14], dtype=torch.int64)


@matchbox.batch
def total_of_steps(x):
    return sum(xt for xt in x.unbind(1))


def test_generator_sum_over_steps_equals_the_loop_not_the_padded_sum():
    # The case: a short example's total must not become padding (which
    # batch_sum then drops): the batch's sum of totals equals the loop's.
    xs, xb = sequences([4, 1, 3, 2], dtype=torch.float64)
    loop = sum(total_of_steps(x).sum() for x in xs)
    assert torch.allclose(matchbox.batch_sum(total_of_steps(xb).sum(-1)), loop)
    assert_batch_equals_loop(total_of_steps, (xs, xb))


@given(lengths=st.lists(st.integers(1, 5), min_size=1, max_size=5))
def test_generator_sum_over_steps(lengths):
    assert_batch_equals_loop(total_of_steps, sequences(lengths))


@matchbox.batch
def stacked_comprehension(x, w):
    return torch.stack([(xt @ w).tanh() for xt in x.unbind(1)], 1)


@matchbox.batch
def dynamic_stacked_comprehension(x, w):
    return F.stack([(xt @ w).tanh() for xt in x.unbind(1)], 1, dynamic=True)


@pytest.mark.parametrize("f", [stacked_comprehension, dynamic_stacked_comprehension])
@pytest.mark.parametrize("lengths", [[3, 1, 2], [1], [2, 2], [4, 1, 1, 3]])
def test_list_comprehension_stacks_each_examples_own_steps(f, lengths, dtype):
    assert_shared_weight_model_equals_loop(f, lengths, dtype)


@given(lengths=st.lists(st.integers(1, 5), min_size=1, max_size=5))
def test_list_comprehension_stack_hypothesis(lengths):
    assert_shared_weight_model_equals_loop(stacked_comprehension, lengths)


@matchbox.batch
def sum_of_list(x):
    ys = [xt * 2 for xt in x.unbind(1)]
    return sum(ys, x.sum(1) * 0)


@pytest.mark.parametrize("lengths", [[0, 2, 1], [3], [0], [1, 4, 0, 2]])
def test_sum_of_a_list_comprehension_with_empty_examples(lengths, dtype):
    assert_batch_equals_loop(sum_of_list, sequences(lengths, dtype=dtype))


@matchbox.batch
def filtered(x):
    return sum((xt for xt in x.unbind(1) if xt.sum() > 0), x.sum(1) * 0)


@given(lengths=st.lists(st.integers(0, 5), min_size=1, max_size=5))
def test_filter_per_example(lengths):
    assert_batch_equals_loop(filtered, sequences(lengths))


@matchbox.batch
def pairs(x, y):
    return sum((a * b for a in x.unbind(1) for b in y.unbind(1)), x.sum(1) * 0)


@pytest.mark.parametrize("lengths", [([2, 0, 3], [1, 2, 2]), ([1], [3]), ([3, 1], [0, 2])])
def test_two_for_clauses(lengths, dtype):
    a, b = lengths
    assert_batch_equals_loop(pairs, sequences(a, dtype=dtype), sequences(b, dtype=dtype))


@matchbox.batch
def inner_depends_on_outer(x):
    # The second clause's iterable is evaluated per step of the first, per example.
    return sum((xt * k for xt in x.unbind(1) for k in range(xt.sum().gt(0).long() + 1)),
               x.sum(1) * 0)


def test_later_iterable_evaluated_per_step(dtype):
    assert_batch_equals_loop(inner_depends_on_outer, sequences([3, 0, 2, 4], dtype=dtype))


@matchbox.batch
def enumerated(x):
    return sum((xt * (i + 1) for i, xt in enumerate(reversed(x.unbind(1)))), x.sum(1) * 0)


@matchbox.batch
def zipped(x, y):
    return sum([a * b for a, b in zip(x.unbind(1), reversed(y.unbind(1)))], x.sum(1) * 0)


@pytest.mark.parametrize("lengths", [[3, 1, 0, 2], [1], [2, 2]])
def test_tuple_targets_with_enumerate_and_zip(lengths, dtype):
    assert_batch_equals_loop(enumerated, sequences(lengths, dtype=dtype))
    other = [max(n - 1, 0) for n in lengths]
    assert_batch_equals_loop(zipped, sequences(lengths, dtype=dtype),
                             sequences(other, dtype=dtype))


@matchbox.batch
def nested_target(x, y):
    return sum((a * b * (i + 1) for i, (a, *rest) in enumerate(zip(x.unbind(1), y.unbind(1)))
                for b in rest), x.sum(1) * 0)


def test_nested_and_starred_targets(dtype):
    assert_batch_equals_loop(nested_target, sequences([3, 1, 2], dtype=dtype),
                             sequences([2, 2, 0], dtype=dtype))


@matchbox.batch
def guarded_reads(n, x):
    # `(x - 1).sqrt()` is NaN where x < 1: the examples with n == 0 never compute
    # it in the loop, and its gradient must not reach their x.
    return sum(((x - 1).sqrt() for _ in range(n)), x * 0)


def test_step_guards_gradients_of_variables_read():
    ns, nb = scalars([0, 2, 0, 1], dtype=torch.int64)
    xs, xb = scalars([0.5, 4.0, -3.0, 2.0])
    assert_batch_equals_loop(guarded_reads, (ns, nb), (xs, xb))


@matchbox.batch
def inside_a_branch(x):
    if x.sum() > 0:
        return F.stack([xt.exp() for xt in x.unbind(1)], 1).sum(1)
    return x.sum(1)


def test_comprehension_inside_a_branch(dtype):
    assert_batch_equals_loop(inside_a_branch, sequences([3, 1, 0, 2, 4], dtype=dtype))


@matchbox.batch
def appends_in_a_comprehension(x):
    items = []
    [items.append(xt * 3) for xt in x.unbind(1)]
    return F.stack(items, 1, dynamic=True)


def test_a_write_in_a_step_is_masked_by_the_step(dtype):
    assert_batch_equals_loop(appends_in_a_comprehension, sequences([3, 1, 2], dtype=dtype))


@matchbox.batch
def plain_comprehensions(t):
    doubled = [v * 2 for v in t]
    squares = {i: i * i for i in range(3)}
    unique = {int(v) for v in t}
    lazy = (v + 1 for v in t)
    return doubled, squares, sorted(unique), list(lazy), sum(v for v in t if v > 0)


def test_with_plain_values_a_comprehension_is_python_itself():
    t = [3, -1, 2]
    assert plain_comprehensions(t) == plain_comprehensions.__wrapped__(t)


def test_a_generator_stays_lazy():
    seen = []

    @matchbox.batch
    def first_positive(values):
        return next(v for v in values if seen.append(v) or v > 0)

    assert first_positive([-2, 5, 7, 9]) == 5
    assert seen == [-2, 5]


@matchbox.batch
def dict_over_steps(x):
    return {i: xt for i, xt in enumerate(x.unbind(1))}


@matchbox.batch
def set_over_steps(x):
    return {xt for xt in x.unbind(1)}


@pytest.mark.parametrize("f, kind", [(dict_over_steps, "dict"), (set_over_steps, "set")])
def test_set_and_dict_comprehensions_over_different_steps_are_refused(f, kind):
    _, xb = sequences([3, 1])
    with pytest.raises(NotImplementedError,
                       match=rf"a {kind} comprehension whose items only some examples have .*"
                             rf"Use a list comprehension"):
        f(xb)


def test_set_and_dict_comprehensions_where_every_example_has_every_item():
    _, xb = sequences([2, 2])
    assert list(dict_over_steps(xb)) == [0, 1]
    assert len(set_over_steps(xb)) == 2


@matchbox.batch
def names_of_steps(x):
    return [f"step {i}" for i, xt in enumerate(x.unbind(1)) if xt.sum() > 0]


def test_items_that_cannot_differ_between_examples_are_refused():
    _, xb = sequences([3, 1])
    with pytest.raises(TypeError, match=r"'an item of a list comprehension' is str 'step .*', "
                                        r"which cannot be given to only some examples"):
        names_of_steps(xb)


def test_walrus_in_a_comprehension_is_refused():
    def f(x):
        return [y := xt for xt in x.unbind(1)], y

    with pytest.raises(UnsupportedConstructError,
                       match=rf"an assignment expression \(:=\) inside a comprehension "
                             rf"\({FILE}, line \d+.*write the loop as a for statement"):
        matchbox.batch(f)


def test_attribute_target_is_refused():
    class Holder:
        pass

    def f(x):
        h = Holder()
        return [h.v for h.v in x.unbind(1)]

    with pytest.raises(UnsupportedConstructError,
                       match=r"a comprehension target that is not a name or a tuple of names"):
        matchbox.batch(f)


def test_source_shows_the_rewritten_comprehension():
    text = "".join(matchbox.control.source(filtered).split())  # astor wraps lines anywhere
    assert "mb__.gen_exp(mb__.comp_for(mb__.unbind(x,1),None,lambdamb__g,xt:" in text
    assert "mb__.comp_if(xt.sum()>0,lambdamb__g:xt)" in text


def test_traceback_points_at_the_comprehension_line():
    def f(x):
        total = x.sum(1)
        return [xt.no_such_method() for xt in x.unbind(1)], total

    g = matchbox.batch(f)
    import inspect

    lines, start = inspect.getsourcelines(f)
    line = start + next(i for i, text in enumerate(lines) if "no_such_method" in text)
    _, xb = sequences([2, 1])
    with pytest.raises(AttributeError) as info:
        g(xb)
    frames = [t for t in info.traceback if t.path.name == "test_control_comprehensions.py"]
    assert frames[-1].lineno + 1 == line


def test_duplicate_names_in_a_target_bind_the_last():
    @matchbox.batch
    def f(pairs_):
        return [a for a, a in pairs_]

    assert f([(1, 2), (3, 4)]) == [2, 4]


def test_a_batch_of_one_example():
    assert_batch_equals_loop(total_of_steps, sequences([3]))
    assert_batch_equals_loop(stacked_comprehension, sequences([2]),
                             ([torch.eye(3, dtype=torch.float64)], torch.eye(3,
                                                                             dtype=torch.float64)))


def test_plain_tensor_equals_the_undecorated_function():
    x = torch.randn(1, 4, 3)
    assert torch.equal(total_of_steps(x), total_of_steps.__wrapped__(x))
    assert isinstance(total_of_steps(MaskedBatch.fromlist([x], (True, False))), MaskedBatch)
