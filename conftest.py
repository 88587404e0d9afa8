"""Shared fixtures and hypothesis settings for every test in the repository.

Each distribution's tests live in packages/<dist>/tests/; the tests that need all five
(docs, examples, ecosystem) and the helpers several distributions share live in tests/.
This file sits at the repository root so that pytest loads it for both.
"""

from __future__ import annotations

import os
import random

import pytest
import torch
from hypothesis import HealthCheck, settings

# Derandomized: every run draws the same examples, so a run of the matrix is
# reproducible (with torch seeded per test below, the values too).  A float32
# comparison of a parameter gradient summed in another order can land just past
# torch's float32 tolerance on a rare draw; a fresh draw each run made that a
# flaky failure rather than one seen, and kept, when the examples change.
settings.register_profile(
    "matchbox",
    max_examples=int(os.environ.get("MATCHBOX_HYPOTHESIS_EXAMPLES", "25")),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("matchbox")

DTYPES = [torch.float32, torch.float64]


@pytest.fixture(params=DTYPES, ids=["float32", "float64"])
def dtype(request: pytest.FixtureRequest) -> torch.dtype:
    return request.param


@pytest.fixture(autouse=True)
def _seeded() -> None:
    # Both generators: mb_rand draws lengths with `random`, values with torch, so a
    # test sees the same examples whatever ran before it.
    random.seed(0)
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _host_reads():
    """``MATCHBOX_HOST_READS=0`` runs the tests as eager code runs on an accelerator, where no
    mask is read on the host to skip work (``matchbox._masking.host_reads``): tox's
    ``control`` environment runs so, ``all`` the CPU's way (the default, by device).
    ``=1`` reads on every device."""
    value = os.environ.get("MATCHBOX_HOST_READS")
    if value is None:
        yield
        return
    from matchbox._masking import host_reads

    with host_reads(value == "1"):
        yield


# --- tox's `all` environment: what the distributions' own environments do not run ------

#: A test module that skips unless a sibling distribution is installed says so with
#: ``pytest.importorskip("matchbox.<sibling>", ...)``: its own environment skips it.
_NEEDS_A_SIBLING = ('importorskip("matchbox.', "importorskip('matchbox.")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cross-distribution", action="store_true",
        help="of the distributions' own tests (packages/*/tests), collect only those their "
             "own tox environment does not run as here: the modules that need a sibling "
             "distribution (pytest.importorskip('matchbox.<sibling>')), and matchbox-control's, "
             "which its environment runs as on an accelerator (MATCHBOX_HOST_READS=0), but "
             "for its tests marked compiled_loops, whose graphs read no mask on the host "
             "either way")


def pytest_ignore_collect(collection_path, config: pytest.Config) -> bool | None:
    if not config.getoption("cross_distribution") or collection_path.suffix != ".py":
        return None
    parts = collection_path.parts
    if "packages" not in parts or "tests" not in parts or "matchbox-control" in parts:
        return None
    if not collection_path.name.startswith("test_"):
        return None
    source = collection_path.read_text(encoding="utf-8")
    return None if any(marker in source for marker in _NEEDS_A_SIBLING) else True


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With --cross-distribution, matchbox-control's tests marked compiled_loops are not run
    again: a captured graph reads no mask on the host whichever way eager code runs, and
    control's own environment runs them (they took a third of `all`'s time)."""
    if not config.getoption("cross_distribution"):
        return
    again = [item for item in items if "matchbox-control" in item.path.parts
             and item.get_closest_marker("compiled_loops") is not None]
    if again:
        config.hook.pytest_deselected(items=again)
        items[:] = [item for item in items if item not in again]
