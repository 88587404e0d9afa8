"""Named tokenizers for fields: a field's ``tokenize`` is a callable or one of these names.

| name          | splits                                                        | example                               |
|---------------|---------------------------------------------------------------|---------------------------------------|
| ``"split"``   | on runs of whitespace (``str.split``)                         | ``"a  b\\tc"`` → ``a b c``             |
| ``"words"``   | into words and single punctuation marks                       | ``"Don't stop."`` → ``Don ' t stop .`` |
| ``"chars"``   | into characters                                               | ``"ab c"`` → ``a b ␠ c``               |
| ``"identifier"`` | a Python identifier into its lower-case parts              | ``"getHTTPResponse_code"`` → ``get http response code`` |
| ``"python"``  | Python source into token strings (the standard ``tokenize``)  | ``"f(x)"`` → ``f ( x )``               |

Every tokenizer keeps every non-space character of its input: nothing is dropped
silently. Lower-casing is the field's ``lower`` option, not the tokenizer's, except
for ``"identifier"``, whose parts are case-free words by design.
"""

from __future__ import annotations

import io
import re
import tokenize as _tokenize
import unicodedata
from collections.abc import Callable

Tokenizer = Callable[[str], list[str]]

_WORDS = re.compile(r"\w+|[^\w\s]", re.UNICODE)
# Parts of a run, over its characters' kinds (U upper case, L lower case or a letter
# without case, D digit): an upper-case run not followed by lower case (an
# acronym), a capitalised or lower-case word, or a number.
_KIND_PARTS = re.compile(r"U+(?!L)|U?L+|D+")
# Token types that carry layout, not text.
_LAYOUT = {
    _tokenize.ENCODING, _tokenize.NEWLINE, _tokenize.NL, _tokenize.INDENT,
    _tokenize.DEDENT, _tokenize.ENDMARKER,
}


def split(text: str) -> list[str]:
    """Split on runs of whitespace."""
    return text.split()


def words(text: str) -> list[str]:
    """Words (runs of letters, digits, underscores) and single punctuation marks."""
    return _WORDS.findall(text)


def chars(text: str) -> list[str]:
    """One token per character, spaces included."""
    return list(text)


def identifier(name: str) -> list[str]:
    """The lower-case parts of a snake_case or camelCase identifier, in any script
    (``"größeBerechnen"`` → ``größe berechnen``)."""
    parts = []
    for run in _identifier_runs(name):
        kinds, kind = [], "L"
        for c in run:
            # A combining mark (an accent, a vowel sign) belongs to the letter before it.
            if unicodedata.category(c)[0] != "M":
                kind = "D" if c.isdigit() else "U" if c.isupper() else "L"
            kinds.append(kind)
        parts += [run[m.start():m.end()].lower() for m in _KIND_PARTS.finditer("".join(kinds))]
    return parts


def _identifier_runs(name: str) -> list[str]:
    """The runs of letters, marks and digits of any script, between underscores and
    other separators."""
    runs, run = [], []
    for c in name:
        if unicodedata.category(c)[0] in "LMN":
            run.append(c)
        elif run:
            runs.append("".join(run))
            run = []
    if run:
        runs.append("".join(run))
    return runs


def python(source: str) -> list[str]:
    """The token strings of Python source, without layout tokens (newlines, indents)."""
    tokens = _tokenize.generate_tokens(io.StringIO(source).readline)
    return [token.string for token in tokens if token.type not in _LAYOUT]


TOKENIZERS: dict[str, Tokenizer] = {
    "split": split,
    "words": words,
    "chars": chars,
    "identifier": identifier,
    "python": python,
}


def get_tokenizer(tokenize: str | Tokenizer | None) -> Tokenizer:
    """The tokenizer a field's ``tokenize`` argument names (or the callable itself).

    ``None`` is ``"split"``, as in torchtext's ``Field``.
    """
    if tokenize is None:
        tokenize = "split"
    if callable(tokenize):
        return tokenize
    if isinstance(tokenize, str) and tokenize in TOKENIZERS:
        return TOKENIZERS[tokenize]
    raise ValueError(
        f"tokenize must be a callable or one of {sorted(TOKENIZERS)}, got {tokenize!r}"
    )
