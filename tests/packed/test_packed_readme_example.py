"""The matchbox-packed README's example runs as written and equals the loop."""

from __future__ import annotations

import re
from pathlib import Path

import torch

README = Path(__file__).resolve().parents[2] / "packages" / "matchbox-packed" / "README.md"


def readme_example() -> str:
    return re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)


def test_readme_example_equals_loop():
    namespace: dict = {}
    exec(compile(readme_example(), str(README), "exec"), namespace)  # noqa: S102
    xs, lstm, out, h = (namespace[k] for k in ("xs", "lstm", "out", "h"))
    assert [tuple(o.shape) for o in out.examples()] == [(1, n, 64) for n in (3, 7, 0, 5)]
    for b, (x, got) in enumerate(zip(xs, out.examples())):
        if x.size(1) == 0:  # PyTorch refuses an empty sequence; the state stays the initial one
            assert torch.equal(h[:, b], torch.zeros_like(h[:, b]))
            continue
        expected, (h_loop, _) = lstm(x)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(h[:, b : b + 1], h_loop)
    pooled = namespace["pooled"]
    assert pooled.dims == (False,) and tuple(pooled.data.shape) == (4, 64)
