"""The matchbox-packed README's example runs as written and equals the loop."""

from __future__ import annotations

import re
from pathlib import Path

import torch

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_example() -> str:
    return re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)


def test_readme_example_equals_loop():
    namespace: dict = {}
    exec(compile(readme_example(), str(README), "exec"), namespace)  # noqa: S102
    xs, lstm, out, h = (namespace[k] for k in ("xs", "lstm", "out", "h"))
    fc, logits = namespace["fc"], namespace["logits"]
    assert [tuple(o.shape) for o in out.examples()] == [(1, n, 64) for n in (3, 7, 0, 5)]
    for x, got, state, scores in zip(xs, out.examples(), h.examples(), logits.examples()):
        if x.size(1) == 0:  # PyTorch refuses an empty sequence; the state stays the initial one
            assert torch.equal(state, torch.zeros(4, 1, 32))
            continue
        expected, (h_loop, _) = lstm(x)   # h_loop: (4, 1, 32), as each example of h
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(state, h_loop)
        torch.testing.assert_close(scores, fc(torch.cat([h_loop[-2], h_loop[-1]], 1)))
    pooled = namespace["pooled"]
    assert pooled.dims == (False,) and tuple(pooled.data.shape) == (4, 64)
