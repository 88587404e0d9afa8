"""What the passes share while they rewrite one function."""

from __future__ import annotations

import dataclasses
from typing import Any

from matchbox.control.errors import UnsupportedConstructError
from matchbox.control.naming import Namer


@dataclasses.dataclass
class Context:
    filename: str
    function: str  # the qualified name, for messages
    namer: Namer = dataclasses.field(default_factory=Namer)

    def unsupported(self, construct: str, node: Any, advice: str) -> UnsupportedConstructError:
        return UnsupportedConstructError(construct, self.filename, getattr(node, "lineno", 0),
                                         self.function, advice)

    def nested(self, name: str) -> Context:
        """The context of a function defined inside this one (same names counter)."""
        return Context(self.filename, f"{self.function}.<locals>.{name}", self.namer)
