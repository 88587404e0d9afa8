"""matchbox-core has no import cycle (issue 23 §3): no two of its modules import each
other, directly or through others, counting function-local imports.

``tools/import_cycles.py`` reads the sources with ``ast``; run it to see a cycle's loop.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def load_tool():
    spec = importlib.util.spec_from_file_location(
        "import_cycles", ROOT / "tools" / "import_cycles.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_core_has_no_import_cycle():
    tool = load_tool()
    edges = tool.graph()
    assert "matchbox.masked_batch" in edges
    found = tool.cycles(edges)
    assert found == [], "import cycles in matchbox-core (python tools/import_cycles.py): " + \
        "; ".join(" -> ".join(tool.loop(edges, c)) for c in found)


def test_the_tool_counts_function_local_imports_and_packages(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from pkg import a\n")
    (package / "a.py").write_text("def f():\n    from pkg.b import g\n    return g\n")
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import c\n"
        "from pkg.sub.x import y\n")
    (package / "c.py").write_text("from pkg import b\n")
    # Importing pkg.sub.x runs pkg/sub/__init__.py, which imports pkg.a.
    (package / "sub" / "__init__.py").write_text("from pkg.sub import x\nfrom pkg import a\n")
    (package / "sub" / "x.py").write_text("y = 1\n")
    tool = load_tool()
    edges = tool.graph(tmp_path, "pkg")
    assert edges["pkg.b"] == {"pkg.sub", "pkg.sub.x"}  # not c: TYPE_CHECKING only
    assert edges["pkg.sub"] == {"pkg.a", "pkg.sub.x"}
    assert edges["pkg.sub.x"] == set()  # importing x runs pkg.sub, which contains it
    assert tool.cycles(edges) == [["pkg.a", "pkg.b", "pkg.sub"]]
