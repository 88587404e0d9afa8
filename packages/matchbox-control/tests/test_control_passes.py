"""Each pass of ``@batch``'s rewriting, on its own (as AutoGraph tests each converter).

The passes run in a fixed order (``converters/__init__.py`` says why), so a pass is
tested on what the passes before it leave: :func:`rewritten_through` runs the checks
and the passes up to and including the one named, and each test states what that
pass must leave behind (the constructs it lowers are gone) and what it must not
touch yet (the constructs a later pass lowers are still there).  The other control
tests check the whole rewriting against the loop over examples.
"""

from __future__ import annotations

import copy
from collections import Counter

import gast

from matchbox.control import parsing
from matchbox.control.context import Context
from matchbox.control.converters import PASSES, checks, try_statements

BUILTINS_OF_EXAMPLES = {"sum", "max", "min", "any", "all", "len"}


def model(x, items, obj):
    """Every construct a pass lowers, once: jumps, and/or/not, a conditional
    expression, a generator, builtins over items, if/while/for, an augmented
    attribute assignment and a method call in a region."""
    total = 0
    for xt in x.unbind(1):
        if xt.sum() > 0 and total < 3:
            continue
        if not xt.max() < 5:
            break
        total = total + 1 if xt.min() < 0 else total
        obj.count += 1
        items.append(xt)
    s = sum(t for t in items)
    while total < 10:
        total = total + 1
        if total > 7:
            return s
    return len(items)


def rewritten_through(pass_module: str):
    """``model``'s def after the checks and the passes up to ``pass_module``."""
    node, filename = parsing.function_def(model)
    node = copy.deepcopy(node)
    node.decorator_list = []
    ctx = Context(filename, "model")
    checks.check(node, ctx)
    for transform in PASSES:
        transform(node, ctx)
        if transform.__module__.rsplit(".", 1)[1] == pass_module:
            return node
    raise AssertionError(f"no pass {pass_module}")


def kinds(node) -> Counter:
    return Counter(type(n).__name__ for n in gast.walk(node))


def is_not_false(test) -> bool:
    """``name is not False``: how a rewritten ``if``/``while`` asks whether any
    example runs its body."""
    return (isinstance(test, gast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], gast.IsNot)
            and isinstance(test.comparators[0], gast.Constant)
            and test.comparators[0].value is False)


def runtime_call(node) -> bool:
    return (isinstance(node, gast.Call) and isinstance(node.func, gast.Attribute)
            and isinstance(node.func.value, gast.Name) and node.func.value.id == "mb__")


def asks_the_runtime(test) -> bool:
    """A rewritten ``if``/``while`` test: whether any example runs the body, or
    (``not mb__.still_running(...)``, a ``for`` loop's exit) whether any still does, or
    whether a loop is captured as a scan (``mb__.scan_while_capturing(mask)``)."""
    return is_not_false(test) or (isinstance(test, gast.UnaryOp)
                                  and isinstance(test.op, gast.Not)
                                  and runtime_call(test.operand)) or (
        runtime_call(test) and test.func.attr in ("scan_capturing", "scan_while_capturing"))


def plain_builtin_calls(node) -> set[str]:
    return {n.func.id for n in gast.walk(node)
            if isinstance(n, gast.Call) and isinstance(n.func, gast.Name)
            and n.func.id in BUILTINS_OF_EXAMPLES}


def test_the_passes_run_in_the_documented_order():
    assert [t.__module__.rsplit(".", 1)[1] for t in PASSES] == [
        "break_statements", "continue_statements", "return_statements", "expressions",
        "comprehensions", "builtin_calls", "control_flow", "assignments", "try_statements"]


def test_try_statements_makes_each_except_clause_ask_first():
    source = (
        "def f(x):\n"
        "    try:\n"
        "        y = x + 1\n"
        "    except (IndexError, ValueError):\n"
        "        y = x\n"
        "    except KeyError as e:\n"
        "        raise e\n"
        "    return y\n")
    node = gast.parse(source).body[0]
    try_statements.transform(node, None)
    handlers = node.body[0].handlers
    assert [gast.unparse(h.body[0]).strip() for h in handlers] == ["mb__.refuse_caught()"] * 2


def test_break_statements_lowers_break_only():
    node = rewritten_through("break_statements")
    assert kinds(node)["Break"] == 0
    assert kinds(node)["Continue"] == 1  # the next pass's


def test_continue_statements_lowers_continue_only():
    node = rewritten_through("continue_statements")
    assert kinds(node)["Continue"] == 0
    assert kinds(node)["Return"] == 2  # the next pass's


def test_return_statements_leaves_one_return_at_the_end():
    node = rewritten_through("return_statements")
    returns = [n for n in gast.walk(node) if isinstance(n, gast.Return)]
    assert returns == [node.body[-1]]
    assert kinds(node)["BoolOp"] == 1  # `and` is the next pass's


def test_expressions_lowers_and_or_not_and_conditional_expressions():
    node = rewritten_through("expressions")
    found = kinds(node)
    assert found["BoolOp"] == 0 and found["IfExp"] == 0
    assert not any(isinstance(n, gast.UnaryOp) and isinstance(n.op, gast.Not)
                   for n in gast.walk(node))
    assert found["GeneratorExp"] == 1  # the next pass's


def test_comprehensions_lowers_the_generator():
    node = rewritten_through("comprehensions")
    found = kinds(node)
    assert found["GeneratorExp"] == 0 and found["ListComp"] == 0
    assert plain_builtin_calls(node) == {"sum", "len"}  # the next pass's


def test_builtin_calls_routes_builtins_through_the_runtime():
    node = rewritten_through("builtin_calls")
    assert plain_builtin_calls(node) == set()
    assert kinds(node)["If"] > 0 and kinds(node)["While"] == 1  # the next pass's


def test_control_flow_makes_every_branch_and_loop_ask_for_running_examples():
    node = rewritten_through("control_flow")
    for n in gast.walk(node):
        if isinstance(n, (gast.If, gast.While)):
            assert asks_the_runtime(n.test), gast.dump(n.test)
        if isinstance(n, gast.For):
            assert n.iter.func.attr == "for_steps"
    augmented = [n for n in gast.walk(node) if isinstance(n, gast.AugAssign)]
    assert [type(n.target).__name__ for n in augmented] == ["Attribute"]  # the next pass's


def test_assignments_masks_writes_that_outlive_a_region():
    node = rewritten_through("assignments")
    assert kinds(node)["AugAssign"] == 0
    calls = {n.func.attr for n in gast.walk(node) if runtime_call(n)}
    assert {"aug_attr", "call_method"} <= calls
