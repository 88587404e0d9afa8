"""A text corpus on every machine without a download: the Python standard library's source.

The ``.py`` files of the running interpreter's standard library (not
``site-packages``), read in sorted order of their relative paths, so the same
Python gives the same examples on every machine. Each file is tokenised with
the standard ``tokenize`` module; files it rejects (a few test files with
deliberately broken encodings or indentation) are skipped, the same ones every
time. ``max_files`` / ``max_examples`` give small subsets quickly.

Two tasks come ready for the fields:

- ``docstring_pairs``: ``{"docstring": str, "name": str}`` for every function
  or method with a docstring: the docstring's first paragraph (whitespace
  collapsed) and the function's name. Predict the name from the docstring
  (tokenize ``"words"`` and ``"identifier"``).
- ``code_lines``: the token strings of each logical line of code (comments
  and layout tokens left out), for language modelling.
"""

from __future__ import annotations

import ast
import inspect
import os
import sysconfig
import tokenize
from collections.abc import Iterator
from pathlib import Path

_SKIPPED_DIRS = {"site-packages", "dist-packages", "__pycache__"}
_LAYOUT = {tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT,
           tokenize.ENDMARKER, tokenize.ENCODING, tokenize.COMMENT}
_OPENING, _CLOSING = set("([{"), set(")]}")


def stdlib_root() -> Path:
    """The folder of the running interpreter's standard library sources."""
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(max_files: int | None = None) -> list[Path]:
    """The standard library's ``.py`` files, sorted by their path relative to the root."""
    root = stdlib_root()
    files = sorted(_python_files(root), key=lambda path: path.relative_to(root).as_posix())
    if not files:
        raise FileNotFoundError(
            f"no Python source files under {root}: this Python was installed without its "
            "standard library sources"
        )
    return files if max_files is None else files[:max_files]


def _python_files(root: Path) -> Iterator[Path]:
    for folder, subfolders, names in os.walk(root):
        # Pruned here, not filtered afterwards: site-packages can be larger than the rest.
        subfolders[:] = [name for name in subfolders if name not in _SKIPPED_DIRS]
        yield from (Path(folder, name) for name in names if name.endswith(".py"))


def _file_tokens(path: Path) -> list[tokenize.TokenInfo] | None:
    """All tokens of one file, or ``None`` when ``tokenize`` rejects it."""
    try:
        with tokenize.open(path) as file:
            return list(tokenize.generate_tokens(file.readline))
    except (SyntaxError, tokenize.TokenError, UnicodeDecodeError, ValueError):
        return None


def _all_tokens(max_files: int | None) -> Iterator[list[tokenize.TokenInfo]]:
    for path in stdlib_files(max_files):
        tokens = _file_tokens(path)
        if tokens is not None:
            yield tokens


def _take(examples: Iterator, max_examples: int | None) -> list:
    result = []
    for example in examples:
        if max_examples is not None and len(result) >= max_examples:
            break
        result.append(example)
    return result


# ---------------------------------------------------------------------- docstrings


def docstring_pairs(max_files: int | None = None,
                    max_examples: int | None = None) -> list[dict[str, str]]:
    """``{"docstring", "name"}`` pairs for the functions of the standard library."""
    pairs = (pair for tokens in _all_tokens(max_files) for pair in _docstring_pairs(tokens))
    return _take(pairs, max_examples)


def _docstring_pairs(tokens: list[tokenize.TokenInfo]) -> Iterator[dict[str, str]]:
    """Find ``def NAME (...) [-> ...] :`` NEWLINE INDENT STRING NEWLINE in a token stream."""
    for position, token in enumerate(tokens):
        if token.type == tokenize.NAME and token.string == "def":
            name = tokens[position + 1]
            body = _body_start(tokens, position + 2)
            if name.type != tokenize.NAME or body is None:
                continue
            docstring = _docstring_at(tokens, body)
            if docstring:
                yield {"docstring": docstring, "name": name.string}


def _body_start(tokens: list[tokenize.TokenInfo], position: int) -> int | None:
    """The position after the colon that ends a signature (brackets balanced)."""
    depth = 0
    for index in range(position, len(tokens)):
        token = tokens[index]
        if token.type == tokenize.OP:
            if token.string in _OPENING:
                depth += 1
            elif token.string in _CLOSING:
                depth -= 1
            elif token.string == ":" and depth == 0:
                return index + 1
    return None


def _docstring_at(tokens: list[tokenize.TokenInfo], position: int) -> str | None:
    """The cleaned first paragraph of the docstring that opens the body at ``position``."""
    index = position
    if index >= len(tokens) or tokens[index].type != tokenize.NEWLINE:
        return None  # a one-line body (``def f(): ...``) has no docstring of this form
    index += 1
    while index < len(tokens) and tokens[index].type in (tokenize.NL, tokenize.COMMENT):
        index += 1
    if index + 2 >= len(tokens) or tokens[index].type != tokenize.INDENT:
        return None
    string, after = tokens[index + 1], tokens[index + 2]
    if string.type != tokenize.STRING or after.type != tokenize.NEWLINE:
        return None  # not a lone string literal: no docstring
    try:
        value = ast.literal_eval(string.string)
    except (ValueError, SyntaxError):
        return None
    if not isinstance(value, str):
        return None
    paragraph = inspect.cleandoc(value).split("\n\n")[0]
    return " ".join(paragraph.split()) or None


# ---------------------------------------------------------------------- lines


def code_lines(max_files: int | None = None, max_examples: int | None = None) -> list[list[str]]:
    """The token strings of every logical line of code, for language modelling."""
    lines = (line for tokens in _all_tokens(max_files) for line in _logical_lines(tokens))
    return _take(lines, max_examples)


def _logical_lines(tokens: list[tokenize.TokenInfo]) -> Iterator[list[str]]:
    line: list[str] = []
    for token in tokens:
        if token.type == tokenize.NEWLINE:
            if line:
                yield line
            line = []
        elif token.type not in _LAYOUT:
            line.append(token.string)
    if line:
        yield line
