"""A third party extends Matchbox as docs/extending.md says: a distribution of one module
(tests/support/out_of_tree) registers the batched op its own layer needs through
``matchbox.extending`` and declares it under the ``matchbox.ops`` entry point.

It is really installed (built with poetry-core into a folder of its own) and used from a
fresh interpreter, where nothing but ``import matchbox`` imports it: the entry point is
what makes the op work, and the layer on a batch equals the loop over its examples, values
and gradients (NaN padding, an empty example, float32 and float64).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

DISTRIBUTION = Path(__file__).resolve().parents[3] / "tests" / "support" / "out_of_tree"

USE = """
import torch
import matchbox
from matchbox import MaskedBatch
from matchbox.testing import mb_assert
import matchbox_inner

assert "matchbox_inner" in __import__("sys").modules  # imported by `import matchbox`
for dtype in (torch.float32, torch.float64):
    torch.manual_seed(0)
    layer = matchbox_inner.InnerScorer(4).to(dtype)
    for lengths in ([3, 0, 1, 5], [2]):
        xs = [torch.rand(1, n, 4, dtype=dtype) for n in lengths]
        xb = MaskedBatch.fromlist(xs, (True, False))
        mb_assert(layer, [xs], [xb], len(xs))
print("equal to the loop")
"""

WITHOUT = """
import torch
from matchbox import MaskedBatch
xb = MaskedBatch.fromlist([torch.rand(1, 2, 4)], (True, False))
try:
    torch.inner(xb, torch.rand(4))
except NotImplementedError as exc:
    print("refused:", exc)
"""


def run_python(code: str, site: Path | None) -> str:
    env = dict(os.environ)
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-build-isolation", "--no-compile", "--target", str(target),
                    str(DISTRIBUTION)], check=True, timeout=300)
    return target


def test_installed_distribution_adds_its_op_through_the_entry_point(site):
    assert "equal to the loop" in run_python(USE, site)


def test_without_it_the_op_is_refused():
    # The op works because the distribution is installed, not because core has it.
    assert "refused:" in run_python(WITHOUT, None)
