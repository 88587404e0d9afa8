"""Liveness: which variables hold a value that later code may read.

It runs after ``break``, ``continue`` and ``return`` have been lowered to
flags, so the code is structured (no jumps) and the analysis follows the
syntax: a block is read backwards, a loop iterates to a fixed point.  It
decides which variables a region must merge (those it assigns that are live
after it: for a loop, live at its head, which is the loop-carried state plus
what is read after the loop) and which it reads from outside (its upward-exposed
reads).  Names a nested function or lambda reads are live everywhere (a
closure may run at any time); with ``locals()``, ``eval`` and the like, every
local is.

Annotations: ``LIVE_OUT`` on each ``if`` (live after it), ``LIVE_HEAD`` on each
loop (live at the head of every iteration).
"""

from __future__ import annotations

from typing import Any

import gast

from matchbox.control import anno
from matchbox.control.analysis import names

LIVE_OUT = "live_out"
LIVE_HEAD = "live_head"


def analyze(function: Any) -> None:
    """Annotate the compound statements of ``function``'s body."""
    always = names.captured(function)
    if names.uses_dynamic_scope(function):
        always |= names.local_names(function)
    _Liveness(always, annotate=True).block(function.body, set())


def upward_exposed(statements: list[Any]) -> set[str]:
    """Names ``statements`` may read before assigning them (their inputs)."""
    return _Liveness(set(), annotate=False).block(statements, set())


class _Liveness:
    def __init__(self, always: set[str], annotate: bool):
        self.always = always
        self.annotate = annotate

    def block(self, statements: list[Any], live_out: set[str]) -> set[str]:
        live = set(live_out)
        for statement in reversed(statements):
            live = self.statement(statement, live)
        return live

    def _note(self, node: Any, key: str, live: set[str]) -> None:
        if self.annotate:
            anno.set_(node, key, frozenset(live))

    def statement(self, node: Any, live_out: set[str]) -> set[str]:
        out = live_out | self.always
        if isinstance(node, gast.If):
            self._note(node, LIVE_OUT, out)
            return (names.reads(node.test) | self.block(node.body, out)
                    | self.block(node.orelse, out))
        if isinstance(node, gast.While):
            after = self.block(node.orelse, out)
            head = names.reads(node.test) | after
            while True:
                new = head | self.block(node.body, head)
                if new == head:
                    break
                head = new
            self._note(node, LIVE_HEAD, head)
            return head
        if isinstance(node, gast.For):
            after = self.block(node.orelse, out)
            # The break/return flags of the extra test are read at every step.
            extra = anno.get(node, anno.EXTRA_TEST)
            head = set(after) | (names.reads(extra) if extra is not None else set())
            target_writes = names.writes(node.target)
            while True:
                body_in = self.block(node.body, head)
                new = head | (body_in - target_writes) | names.reads(node.target)
                if new == head:
                    break
                head = new
            self._note(node, LIVE_HEAD, head)
            return names.reads(node.iter) | head
        if isinstance(node, gast.With):
            inner = self.block(node.body, out)
            bound: set[str] = set()
            read: set[str] = set()
            for item in node.items:
                read |= names.reads(item.context_expr)
                if item.optional_vars is not None:
                    bound |= names.writes(item.optional_vars)
                    read |= names.reads(item.optional_vars)
            return read | (inner - bound)
        if isinstance(node, gast.Try):
            # Conservative: anything the statement reads, and nothing killed.
            every = names.reads(node) | out
            for block in [node.body, node.orelse, node.finalbody,
                          *[h.body for h in node.handlers]]:
                self.block(block, every)
            return every
        read = names.reads(node)
        if isinstance(node, gast.AugAssign) and isinstance(node.target, gast.Name):
            read.add(node.target.id)
        return (out - names.writes(node)) | read
