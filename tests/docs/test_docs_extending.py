"""docs/extending.md names what ``matchbox.extending`` holds, and nothing else; its
helpers that name the op in their errors take it first (issue 23: one argument order)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import matchbox.extending as extending

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "extending.md").read_text()


def _section(title: str) -> str:
    start = DOC.index(title)
    end = DOC.find("\n## ", start + 1)
    return DOC[start:] if end == -1 else DOC[start:end]


def test_every_public_name_is_documented():
    section = _section("## What `matchbox.extending` holds")
    named = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)", section))
    assert sorted(set(extending.__all__) - named) == []


def test_the_table_names_only_public_names():
    table = [line for line in _section("## What `matchbox.extending` holds").splitlines()
             if line.startswith("| ") and not line.startswith("| group")]
    names = {n for line in table for n in re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`",
                                                     line.split("|")[2])}
    assert sorted(names - set(extending.__all__)) == []


def test_helpers_that_name_the_op_take_it_first():
    late = []
    for name in extending.__all__:
        value = getattr(extending, name)
        if inspect.isclass(value) or not callable(value):
            continue
        try:
            parameters = list(inspect.signature(value).parameters)
        except (TypeError, ValueError):
            continue
        if "op" in parameters and parameters[0] != "op":
            late.append(f"{name}({', '.join(parameters)})")
    assert late == []


def test_the_shared_batch_type_has_one_spelling():
    assert "SHARED" not in extending.__all__ and not hasattr(extending, "SHARED")
    assert 'batch_type="Batch"' in DOC
