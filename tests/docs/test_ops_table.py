"""docs/ops.md is what the registry gives (runs in the `all` environment, where every
distribution is installed, so every handler is registered).

The pointwise family is found from PyTorch's op tags, which differ between torch releases
(and some ops, such as F.rms_norm, exist only in later ones):
the comparison runs only with the release docs/ops.md records in its header (the one CI
tests), and is skipped, saying so, on the others (the `oldest` environment's torch 2.3)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_tool():
    spec = importlib.util.spec_from_file_location("ops_table", ROOT / "tools" / "ops_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ops_table_is_up_to_date():
    tool = load_tool()
    actual = (ROOT / "docs" / "ops.md").read_text()
    recorded = tool.recorded_torch_release(actual)
    assert recorded is not None, "docs/ops.md records no torch release: run tools/ops_table.py"
    if recorded != tool.torch_release():
        pytest.skip(f"docs/ops.md was generated with torch {recorded}; with torch "
                    f"{tool.torch_release()} the registry holds other ops (PyTorch's pointwise "
                    "tags and its set of ops differ between releases)")
    expected = tool.generate()
    assert actual == expected, "docs/ops.md is out of date: run python tools/ops_table.py"


def test_ops_table_records_the_torch_it_was_generated_with():
    tool = load_tool()
    assert tool.recorded_torch_release(tool.generate()) == tool.torch_release()


def test_ops_table_lists_core_and_nn_ops():
    text = load_tool().generate()
    for name in ("`torch.tanh`", "`torch.nn.functional.linear`", "`Tensor.sum`"):
        assert name in text
