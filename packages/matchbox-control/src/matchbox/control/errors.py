"""The errors ``@batch`` raises when it rewrites a function (decoration time)."""

from __future__ import annotations


class ConversionError(Exception):
    """``@batch`` could not rewrite a function."""


class UnsupportedConstructError(ConversionError, NotImplementedError):
    """A construct that cannot run per example in SIMT form; names it, the file and the line."""

    def __init__(self, construct: str, filename: str, lineno: int, function: str, advice: str):
        self.construct = construct
        self.filename = filename
        self.lineno = lineno
        self.function = function
        super().__init__(
            f"@batch does not support {construct} ({filename}, line {lineno}, in "
            f"{function}): {advice}"
        )


class SourceNotFoundError(ConversionError, OSError):
    """The source code of the function is not available, so it cannot be rewritten."""
