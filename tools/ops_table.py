#!/usr/bin/env python3
"""Write docs/ops.md: the operations each batch type supports, read from the registry.

Usage: python tools/ops_table.py [--check]

The table is generated from matchbox-core's one op registry after importing every installed
Matchbox distribution, so it cannot drift from the code; `--check` exits non-zero when the
checked-in docs/ops.md differs from what the registry gives (tests/docs runs it in the `all`
test environment, where every distribution is installed).

The ops found by rule (the pointwise family: PyTorch's `pointwise` tags) differ between torch
releases, so the header records the torch release the table was generated with, and the
comparison is only meaningful with that release installed.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "docs" / "ops.md"
# Importing a distribution registers its handlers; matchbox-core imports matchbox.nn itself.
DISTRIBUTIONS = ["matchbox", "matchbox.nn", "matchbox.packed", "matchbox.control", "matchbox.data"]


GENERATED_WITH = re.compile(r"^Generated with torch (\S+) by ", re.MULTILINE)


def torch_release() -> str:
    """The installed torch's release, without the local build tag (``2.13.0+cpu`` -> ``2.13.0``)."""
    import torch

    return torch.__version__.split("+")[0]


def recorded_torch_release(text: str) -> str | None:
    """The torch release a generated docs/ops.md records in its header."""
    match = GENERATED_WITH.search(text)
    return match.group(1) if match else None


def registered_ops() -> dict[str, dict[str, list[str]]]:
    """batch type -> family -> sorted op names."""
    for module in DISTRIBUTIONS:
        importlib.import_module(module)
    from matchbox import _registry

    tables: dict[str, dict[str, list[str]]] = {}
    for batch_type in sorted(_registry.batch_type_names()):
        families: dict[str, set[str]] = defaultdict(set)
        for entry in _registry.entries(batch_type):
            families[entry.family].add(entry.name)
        tables[batch_type] = {family: sorted(names) for family, names in sorted(families.items())}
    return tables


def render(tables: dict[str, dict[str, list[str]]], convenience: list[str]) -> str:
    lines = [
        "# Supported operations",
        "",
        f"Generated with torch {torch_release()} by `python tools/ops_table.py` from the op "
        "registry; do not edit by hand.",
        "Every listed op equals the per-example loop, values and gradients. An op that is not",
        "listed raises `NotImplementedError` naming it (and the distribution that provides it).",
        "",
    ]
    for batch_type, families in tables.items():
        total = sum(len(names) for names in families.values())
        lines += [f"## {batch_type} ({total} ops)", "", "| family | ops |", "|---|---|"]
        for family, names in families.items():
            lines.append(f"| {family} ({len(names)}) | {', '.join(f'`{n}`' for n in names)} |")
        lines.append("")
    if convenience:
        lines += ["## Matchbox's own methods (batches and plain tensors)", "",
                  ", ".join(f"`{name}`" for name in convenience), ""]
    return "\n".join(lines)


def generate() -> str:
    tables = registered_ops()
    from matchbox import _registry

    return render(tables, _registry.convenience_methods())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="fail if docs/ops.md is not what the registry gives")
    args = parser.parse_args(argv)
    text = generate()
    if args.check:
        recorded = recorded_torch_release(OUTPUT.read_text()) if OUTPUT.exists() else None
        if recorded is not None and recorded != torch_release():
            print(f"{OUTPUT.relative_to(ROOT)} was generated with torch {recorded}, not "
                  f"{torch_release()}; its op sets differ between releases, so it is not "
                  "checked here", file=sys.stderr)
            return 0
        if not OUTPUT.exists() or OUTPUT.read_text() != text:
            print(f"{OUTPUT.relative_to(ROOT)} is out of date: run python tools/ops_table.py",
                  file=sys.stderr)
            return 1
        return 0
    OUTPUT.parent.mkdir(exist_ok=True)
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
