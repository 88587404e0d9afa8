"""Constructs ``@batch`` cannot run per example are refused when the function is
decorated, with an error naming the construct, the file and the line."""

from __future__ import annotations

import re

import pytest

import matchbox
from matchbox.control import UnsupportedConstructError

FILE = re.escape(__file__)


def line_of(fn, text):
    """The line number in this file of the first line of ``fn`` containing ``text``."""
    import inspect

    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def assert_refused_at(fn, text, message, after=""):
    """``@batch`` refuses ``fn`` with ``message`` followed by where: this file and the line
    of ``fn`` containing ``text`` (then ``after``, a pattern)."""
    line = line_of(fn, text)
    with pytest.raises(UnsupportedConstructError,
                       match=rf"{message} \({FILE}, line {line}{after}"):
        matchbox.batch(fn)


def test_yield_is_refused():
    def gen(x):
        if x > 0:
            yield x

    assert_refused_at(gen, "yield x", r"@batch does not support yield \(a generator function\)",
                      after=r", in .*gen\)")


def test_try_around_control_flow_is_refused():
    def f(x):
        try:
            if x > 0:
                x = x + 1
        except ValueError:
            pass
        return x

    assert_refused_at(f, "try:", r"does not support a try statement around "
                                 r"if/while/for/break/continue/return",
                      after=r", in .*\): an exception raised for one example")


def test_try_without_control_flow_is_allowed():
    @matchbox.batch
    def f(x):
        try:
            y = int(x)
        except ValueError:
            y = -1
        return y

    assert f("3") == 3 and f("no") == -1


def test_global_write_under_control_flow_is_refused():
    def f(x):
        global COUNTER
        if x > 0:
            COUNTER = 1
        return x

    assert_refused_at(f, "COUNTER = 1", r"does not support a write to the global/nonlocal "
                                        r"variable 'COUNTER' inside if/while/for")


def test_nonlocal_is_refused():
    total = 0

    def f(x):
        nonlocal total
        while x > 0:
            total = total + 1
            x = x - 1
        return x

    assert_refused_at(f, "nonlocal total", r"@batch does not support nonlocal total",
                      after=r", in .*f\): .*return the new value")


def test_nonlocal_in_a_nested_function_is_refused():
    # Called under a per-example `if`, add() rebound acc for every example; called in a
    # loop's steps, the rebinding was lost: silent wrong answers, refused at decoration.
    def f(x):
        acc = x * 0

        def add(v):
            nonlocal acc
            acc = acc + v

        if x.sum() > 0:
            add(x)
        return acc

    assert_refused_at(f, "nonlocal acc", r"@batch does not support nonlocal acc",
                      after=r", in .*f\.<locals>\.add\): .*return the new value and assign "
                            r"it where the variable lives \(acc = add\(acc, v\)")


def test_a_nested_function_returning_the_value_equals_the_loop():
    # What the refusal of nonlocal says to write instead.
    import torch

    from matchbox import MaskedBatch

    def f(x):
        acc = x * 0

        def add(acc, v):
            return acc + v

        if x.sum() > 0:
            acc = add(acc, x)
        return acc

    xs = [torch.ones(1, 3), -torch.ones(1, 3), torch.full((1, 3), 2.0)]
    out = matchbox.batch(f)(MaskedBatch.fromlist(xs, (False,)))
    assert [e.tolist() for e in out.examples()] == [f(x).tolist() for x in xs]


def test_del_under_control_flow_is_refused():
    def f(x):
        y = x
        if x > 0:
            del y
        return x

    assert_refused_at(f, "del y",
                      r"does not support del of a local variable inside if/while/for")


def test_async_function_is_refused():
    async def f(x):
        return x

    with pytest.raises(UnsupportedConstructError, match=r"does not support an async function"):
        matchbox.batch(f)


def test_match_statement_is_refused():
    def f(x):
        match x:
            case 0:
                return 1
        return x

    assert_refused_at(f, "match x:", r"does not support the match statement")


def test_walrus_in_a_lazy_operand_is_refused():
    def f(x):
        if x > 0 and (y := x * 2) > 1:
            x = y
        return x

    assert_refused_at(f, "(y := x * 2)",
                      r"an assignment expression \(:=\) in a later operand of and/or")


def test_reserved_names_are_refused():
    def f(mb__x):
        return mb__x

    with pytest.raises(UnsupportedConstructError, match=r"the name 'mb__x'.*reserved"):
        matchbox.batch(f)


def test_lambda_is_refused():
    with pytest.raises(TypeError, match=r"@batch cannot rewrite a lambda .*write it with def"):
        matchbox.batch(lambda x: x)


def test_non_function_is_refused():
    with pytest.raises(TypeError, match=r"@batch expects a function, a method or a class, "
                                        r"got int"):
        matchbox.batch(3)


def test_wrapped_function_without_its_decorator_in_the_source_is_refused():
    import functools

    def f(x):
        return x

    wrapped = functools.lru_cache(f)
    with pytest.raises(TypeError, match=r"is wrapped by a decorator that is not written on its "
                                        r"def.*put @batch closest to the def"):
        matchbox.batch(wrapped)


def test_more_nested_branches_than_python_allows_are_refused_saying_what_to_write(tmp_path,
                                                                                   monkeypatch):
    # 22 cases, each returning: each branch after a return runs inside the one before it
    # (a `with` block each), past CPython's 20 nested blocks (a user trial: it raised
    # "SyntaxError: too many statically nested blocks" at the user's line, unexplained).
    source = "def dispatch(x, k):\n" + "".join(
        f"    if k == {i}:\n        return x * {i}\n" for i in range(22)) + "    return x\n"
    (tmp_path / "many_cases.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    import many_cases

    with pytest.raises(UnsupportedConstructError,
                       match=r"@batch does not support this many nested branches \(.*"
                             r"many_cases\.py, line \d+, in dispatch\): .*Python allows 20 "
                             r"nested blocks\. Split the function"):
        matchbox.batch(many_cases.dispatch)
