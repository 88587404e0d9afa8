"""The README's example runs as written and its batch equals the loop (values and gradients).

It needs matchbox-nn (``nn.RNNCell`` on batches) and matchbox-control (``@matchbox.batch``),
so it lives with the tests of the `all` environment.
"""

from __future__ import annotations

import linecache
import re
from pathlib import Path

import torch

from matchbox import MaskedBatch
from matchbox.testing import mb_assert

README = Path(__file__).resolve().parents[2] / "README.md"
FILENAME = "<README.md example>"


def readme_example() -> str:
    text = README.read_text()
    section = text[text.index("## Example"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def run_readme_example() -> dict:
    """Execute the snippet the way IPython runs a cell: its source in ``linecache``."""
    source = readme_example()
    linecache.cache[FILENAME] = (len(source), None, source.splitlines(True), FILENAME)
    namespace: dict = {}
    exec(compile(source, FILENAME, "exec"), namespace)  # noqa: S102
    return namespace


def test_readme_example_batch_equals_loop():
    namespace = run_readme_example()
    model, examples, h = namespace["model"], namespace["examples"], namespace["h"]
    assert isinstance(h, MaskedBatch) and h.dims == (False,)
    assert namespace["h_one"].shape == (1, 16)
    for x, batched in zip(examples, h.examples()):
        torch.testing.assert_close(batched, model(x))


def test_readme_model_gradients_equal_the_loop_with_nan_padding():
    model = run_readme_example()["model"].double()
    examples = [torch.randn(1, n, 16, dtype=torch.float64) for n in (3, 7, 1, 0, 5)]
    batch = MaskedBatch.fromlist(examples, (True, False), padding_value=float("nan"))
    mb_assert(model, [examples], [batch], len(examples))
