"""Shared fixtures and hypothesis settings for every package's tests."""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, settings

settings.register_profile(
    "matchbox",
    max_examples=int(os.environ.get("MATCHBOX_HYPOTHESIS_EXAMPLES", "25")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("matchbox")

DTYPES = [torch.float32, torch.float64]


@pytest.fixture(params=DTYPES, ids=["float32", "float64"])
def dtype(request: pytest.FixtureRequest) -> torch.dtype:
    return request.param


@pytest.fixture(autouse=True)
def _seeded() -> None:
    torch.manual_seed(0)
