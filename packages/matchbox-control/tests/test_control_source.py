"""Where ``@batch`` works: files, nested scopes, IPython/Jupyter cells (source in
linecache); ``source()``; tracebacks and ``inspect`` point at the user's code; a
clear error where there is no source."""

from __future__ import annotations

import inspect
import linecache
import traceback

import pytest
import torch
from control_cases import scalars

import matchbox
from matchbox import MaskedBatch
from matchbox.control import SourceNotFoundError, source


@matchbox.batch
def fails_in_a_branch(x):
    if x > 0:
        x = x * 2
        raise RuntimeError("boom")  # the line the traceback must show
    return x


def test_traceback_points_at_the_users_file_and_line():
    _, xb = scalars([1.0, -1.0])
    with pytest.raises(RuntimeError) as info:
        fails_in_a_branch(xb)
    frame = traceback.extract_tb(info.value.__traceback__)[-1]
    lines, start = inspect.getsourcelines(fails_in_a_branch.__wrapped__)
    expected = start + next(i for i, line in enumerate(lines) if "boom" in line)
    assert frame.filename == __file__
    assert frame.lineno == expected
    assert frame.line == 'raise RuntimeError("boom")  # the line the traceback must show'
    assert frame.name == "fails_in_a_branch"


@matchbox.batch
def failing_headers(x, which):
    y = x * 2
    z = y
    if which == "if" and y.sum(-1) > 0:  # a vector per example: the condition raises
        z = y
    elif which == "elif" and y.sum(-1) < 0:  # here too
        z = -y
    else:
        z = y * 0
    while which == "while" and y.sum(-1) > 5:  # and here
        y = y - 1
    return z


@pytest.mark.parametrize("which", ["if", "elif", "while"])
def test_a_failing_condition_is_reported_at_its_own_line(which):
    # The runtime calls the rewritten code makes for a statement carry the
    # statement's first line (they carried its whole extent, and CPython 3.11
    # reported a call spanning lines at its last: the end of the else block).
    lines, start = inspect.getsourcelines(failing_headers.__wrapped__)
    marker = f'{which} which == "{which}"'
    expected = start + next(i for i, line in enumerate(lines) if marker in line)
    xb = MaskedBatch.fromlist([torch.randn(1, 2, 3), torch.randn(1, 1, 3)], (True, False))
    with pytest.raises(ValueError, match="must hold one truth value per example") as info:
        failing_headers(xb, which)
    frame = [f for f in traceback.extract_tb(info.value.__traceback__)
             if f.filename == __file__][-1]
    assert frame.lineno == expected
    assert frame.line.startswith(marker)


def test_inspect_shows_the_users_source():
    assert inspect.getsource(fails_in_a_branch) == inspect.getsource(
        fails_in_a_branch.__wrapped__)
    assert inspect.getsourcefile(fails_in_a_branch) == __file__


def test_source_returns_the_rewritten_code():
    text = source(fails_in_a_branch)
    assert text.startswith("def fails_in_a_branch(x):")
    assert "mb__.branch(mb__mask, x > 0)" in text
    assert "with mb__.masked(" in text
    compile(text, "<rewritten>", "exec")  # valid Python


def test_source_of_an_undecorated_function():
    def f(x):
        while x > 0:
            x = x - 1
        return x

    assert "mb__.loop_mask" in source(f)


def test_function_in_a_nested_scope():
    def outer(scale):
        @matchbox.batch
        def inner(x):
            return x * scale if x > 0 else x
        return inner

    f = outer(3.0)
    _, xb = scalars([-1.0, 2.0])
    assert [e.item() for e in f(xb).examples()] == [-1.0, 6.0]


CELL = '''
import matchbox

@matchbox.batch
def cell_function(x):
    if x > 0:
        x = x + 1
    return x
'''


def test_ipython_cell_source_from_linecache():
    # IPython/Jupyter register each cell's source in linecache under the cell's
    # filename and compile the cell with it; a function defined there can be read.
    filename = "<ipython-input-7-0123456789ab>"
    linecache.cache[filename] = (len(CELL), None, CELL.splitlines(True), filename)
    try:
        namespace: dict = {}
        exec(compile(CELL, filename, "exec"), namespace)  # noqa: S102
        f = namespace["cell_function"]
        _, xb = scalars([-1.0, 2.0])
        assert [e.item() for e in f(xb).examples()] == [-1.0, 3.0]
        assert f(torch.tensor(5.0)) == torch.tensor(6.0)
    finally:
        del linecache.cache[filename]


def test_no_source_gives_a_clear_error():
    namespace: dict = {}
    exec(compile("def typed_in(x):\n    return x\n", "<stdin>", "exec"), namespace)  # noqa: S102
    with pytest.raises(SourceNotFoundError,
                       match=r"@batch cannot rewrite typed_in: its source code is not available "
                             r"\('<stdin>' is neither a file nor a linecache entry\)\. This "
                             r"happens for functions typed into the plain interactive "
                             r"interpreter or created by exec\(\) of a string\. Define the "
                             r"function in a file or in an IPython/Jupyter cell"):
        matchbox.batch(namespace["typed_in"])


def test_exec_of_a_string_without_a_file():
    namespace: dict = {}
    exec("def made(x):\n    return x\n", namespace)  # noqa: S102
    with pytest.raises(SourceNotFoundError, match=r"'<string>' is neither a file nor a "
                                                  r"linecache entry.*linecache\.cache\[filename\]"):
        matchbox.batch(namespace["made"])
