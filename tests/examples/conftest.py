"""Keep the examples' tests quick.

The examples (``examples/<name>.py``, a package at the repository root, as ``benchmarks``
is) are importable because tox.ini's ``pythonpath`` puts the root on ``sys.path``.
"""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """The examples' tests use tiny tensors, where intra-op threads cost far more than they
    save (on a loaded 2-core machine a step took 40x longer with two threads than with one).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
