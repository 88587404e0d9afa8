"""The README's example runs as written and its batch equals the loop."""

from __future__ import annotations

import re
from pathlib import Path

import torch

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_example() -> str:
    text = README.read_text()
    section = text[text.index("## Example"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_example_batch_equals_loop():
    namespace: dict = {}
    exec(compile(readme_example(), str(README), "exec"), namespace)  # noqa: S102
    model, examples, h = namespace["model"], namespace["examples"], namespace["h"]
    for x, batched in zip(examples, h.examples()):
        torch.testing.assert_close(batched, model(x))
