"""docs/ops.md is what the registry gives (runs in the `all` environment, where every
distribution is installed, so every handler is registered)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_tool():
    spec = importlib.util.spec_from_file_location("ops_table", ROOT / "tools" / "ops_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ops_table_is_up_to_date():
    tool = load_tool()
    expected = tool.generate()
    actual = (ROOT / "docs" / "ops.md").read_text()
    assert actual == expected, "docs/ops.md is out of date: run python tools/ops_table.py"


def test_ops_table_lists_core_and_nn_ops():
    text = load_tool().generate()
    for name in ("`torch.tanh`", "`torch.nn.functional.linear`", "`Tensor.sum`"):
        assert name in text
