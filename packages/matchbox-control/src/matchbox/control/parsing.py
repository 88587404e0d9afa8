"""Finding the source of a function: the file or notebook cell it was defined in.

The source comes from ``linecache``, which holds the lines of files and of
IPython/Jupyter cells (IPython registers each cell there under its own
filename).  The whole file (or cell) is parsed, once, and the function's
``def`` is found by name and first line, so the tree keeps the real line and
column numbers: the rewritten code is compiled with them and the user's
filename, and tracebacks point at the user's own lines.
"""

from __future__ import annotations

import hashlib
import linecache
from typing import Any

import gast

from matchbox.control.errors import SourceNotFoundError

# (filename, hash of the text) -> parsed module
_TREES: dict[tuple[str, str], Any] = {}


def _no_source(fn: Any, filename: str) -> SourceNotFoundError:
    return SourceNotFoundError(
        f"@batch cannot rewrite {fn.__qualname__}: its source code is not available "
        f"({filename!r} is neither a file nor a linecache entry). This happens for functions "
        "typed into the plain interactive interpreter or created by exec() of a string. "
        "Define the function in a file or in an IPython/Jupyter cell (which keep their "
        "source), or, for exec(), compile the string with a filename and register its "
        "lines: linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)"
    )


def function_def(fn: Any) -> tuple[Any, str]:
    """The gast ``FunctionDef`` of ``fn`` (shared: copy before changing) and its filename."""
    code = fn.__code__
    filename = code.co_filename
    if code.co_name == "<lambda>":
        raise TypeError(
            f"@batch cannot rewrite a lambda ({filename}, line {code.co_firstlineno}); "
            "write it with def"
        )
    linecache.checkcache(filename)
    lines = linecache.getlines(filename, fn.__globals__)
    if not lines:
        raise _no_source(fn, filename)
    tree = _parse(filename, lines)
    for node in gast.walk(tree):
        if (isinstance(node, (gast.FunctionDef, gast.AsyncFunctionDef))
                and node.name == code.co_name and _first_line(node) == code.co_firstlineno):
            return node, filename
    raise SourceNotFoundError(
        f"@batch cannot rewrite {fn.__qualname__}: no definition of {code.co_name} starts at "
        f"line {code.co_firstlineno} of {filename} (was the file changed after it was "
        "imported?)"
    )


def _first_line(node: Any) -> int:
    return node.decorator_list[0].lineno if node.decorator_list else node.lineno


def _parse(filename: str, lines: list[str]) -> Any:
    text = "".join(lines)
    key = (filename, hashlib.sha1(text.encode()).hexdigest())
    tree = _TREES.get(key)
    if tree is None:
        tree = _TREES[key] = gast.parse(text)
    return tree
