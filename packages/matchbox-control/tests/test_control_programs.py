"""Random small programs mixing every construct, batched, against the loop over examples.

Each program is Python source built by hypothesis from a small grammar (assignments,
``if``/``else``, bounded ``while``, ``for`` over ``range``, ``break``, ``continue``,
``return``, ``and``/``or``/``not``, conditional expressions, attribute and subscript
writes), written to a file so that
``@batch`` reads it like any module, and run on a batch of per-example integers.
"""

from __future__ import annotations

import importlib.util
import itertools
import textwrap

import pytest
import torch
from control_cases import per_example, scalars
from hypothesis import given, settings
from hypothesis import strategies as st

import matchbox
from matchbox import MaskedBatch
from matchbox.testing import mb_assert

CONDITIONS = ["a > x", "b % 2 == 0", "x < 2", "a < b or x > 1", "not a > 3",
              "0 < b <= 4", "a == b and x != 3"]
# In-place updates (`+=` on a tensor) only where no other variable can alias the
# tensor: a merge under a per-example condition makes a new batch, so aliasing
# through assignment is not kept (see the package README's limitations).
ASSIGNMENTS = ["a = a + x", "a = a * 2 - b", "b = b + 1", "b = b + x",
               "a = b if x > a else a + 1", "a, b = b, a", "s.v = s.v + a", "s.v += 1",
               "items[1] = items[0] - x", "items[0] += b", "a, items[0] = items[0], a + 0"]

_counter = itertools.count()


def block(depth: int, in_loop: bool) -> st.SearchStrategy[list[str]]:
    simple = st.sampled_from(ASSIGNMENTS).map(lambda s: [s])
    jumps = [st.just(["break"]), st.just(["continue"])] if in_loop else []
    options = [simple, simple, st.just(["return a, b, s.v, items[0], items[1]"])] + jumps
    if depth > 0:
        options += [if_statement(depth - 1, in_loop), while_statement(depth - 1),
                    for_statement(depth - 1)]
    return st.lists(st.one_of(options), min_size=1, max_size=3).map(
        lambda parts: [line for part in parts for line in part])


def indent(lines: list[str]) -> list[str]:
    return ["    " + line for line in lines]


@st.composite
def if_statement(draw, depth: int, in_loop: bool) -> list[str]:
    lines = [f"if {draw(st.sampled_from(CONDITIONS))}:"] + indent(draw(block(depth, in_loop)))
    if draw(st.booleans()):
        lines += ["else:"] + indent(draw(block(depth, in_loop)))
    return lines


@st.composite
def while_statement(draw, depth: int) -> list[str]:
    counter = f"k{next(_counter)}"
    body = [f"{counter} = {counter} + 1"] + draw(block(depth, True))
    return [f"{counter} = 0",
            f"while {counter} < 4 and ({draw(st.sampled_from(CONDITIONS))}):"] + indent(body)


@st.composite
def for_statement(draw, depth: int) -> list[str]:
    bound = draw(st.sampled_from(["3", "x"]))
    return [f"for i in range({bound}):"] + indent(draw(block(depth, True)))


@st.composite
def programs(draw) -> str:
    body = (["a = 0", "b = 1", "s = State()", "items = [0, 0]"] + draw(block(2, False))
            + ["return a, b, s.v, items[0], items[1]"])
    return ("class State:\n    v = 2\n\n\ndef program(x):\n" + "\n".join(indent(body))
            + "\n")


def load(source: str, directory) -> object:
    path = directory / f"program_{next(_counter)}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.program


@settings(max_examples=60)
@given(source=programs(), values=st.lists(st.integers(0, 5), min_size=1, max_size=5))
def test_random_programs_equal_the_loop(tmp_path_factory, source, values):
    program = load(source, tmp_path_factory.mktemp("programs"))
    batched = matchbox.batch(program)
    examples, batch = scalars(values, torch.int64)
    expected = [tuple(int(v) for v in program(x)) for x in examples]
    outputs = [[int(v) for v in per_example(out)] if isinstance(out, matchbox.MaskedBatch)
               else [int(out)] * len(values) for out in batched(batch)]
    assert list(zip(*outputs)) == expected, textwrap.dedent(source)


@matchbox.batch
def _attention_under_conditions(q, k, v):
    scores = q @ k.transpose(1, 2)
    if scores.sum() > 0:
        scores = scores * 2
    else:
        scores = scores - 1
    return torch.softmax(scores, -1) @ v, scores.tanh()


def test_attention_onto_an_empty_source_under_a_per_example_condition():
    # Example 1's scores are (1, 2, 0): empty in part; the merge of the two branches
    # keeps its sizes, and the result equals the loop's.
    pytest.importorskip("matchbox.nn", reason="softmax on batches is in matchbox-nn, which "
                                              "the control environment does not install")
    qs = [torch.randn(1, n, 4, dtype=torch.float64) for n in (3, 2, 0)]
    ks = [torch.randn(1, n, 4, dtype=torch.float64) for n in (2, 0, 3)]
    vs = [torch.randn(1, n, 5, dtype=torch.float64) for n in (2, 0, 3)]
    batches = [MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))
               for xs in (qs, ks, vs)]
    mb_assert(_attention_under_conditions, [qs, ks, vs], batches, 3)
