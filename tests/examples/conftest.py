"""Make the repository's ``examples`` package importable and keep the examples' tests quick.

``pytest tests`` (tox's ``all`` environment) does not put the repository root on
``sys.path``, so the examples (``examples/<name>.py``, a package at the root, as
``benchmarks`` is) are found through it here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """The examples' tests use tiny tensors, where intra-op threads cost far more than they
    save (on a loaded 2-core machine a step took 40x longer with two threads than with one).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
