"""The example in packages/matchbox-data/README.md runs as written (on a smaller subset)."""

from __future__ import annotations

import re
from pathlib import Path

from matchbox import MaskedBatch

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_runs():
    block = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    assert "max_files=100" in block
    namespace: dict = {}
    exec(block.replace("max_files=100", "max_files=10").replace("    ...", "    pass"),
         namespace)
    assert isinstance(namespace["docs"], MaskedBatch) and namespace["docs"].dims == (True,)
    assert isinstance(namespace["names"], MaskedBatch)
