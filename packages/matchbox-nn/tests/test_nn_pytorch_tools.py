"""PyTorch's generic tools see a time-major view through the batch it holds (as
packages/matchbox-core/tests/test_core_pytorch_tools.py for MaskedBatch)."""

from __future__ import annotations

import dataclasses

import torch
import torch.utils._pytree as pytree
from round_trips import saved
from torch.nn.parallel.distributed import _find_tensors
from torch_features import SAFE_GLOBALS, needs

from matchbox import MaskedBatch
from matchbox.nn import TimeMajorBatch, time_major


def _view():
    xs = [torch.randn(1, n, 2, dtype=torch.float64) for n in (2, 4, 3)]
    return time_major(MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan")))


def _same_view(a, b):
    assert type(a) is TimeMajorBatch
    for x, y in zip(a.examples(), b.examples()):
        assert torch.equal(x, y)


def test_pytree_and_dataclass_fields_reach_the_batch_it_holds():
    view = _view()
    leaves, spec = pytree.tree_flatten(view)
    assert leaves == [view.batch.data, view.batch._mask]
    _same_view(pytree.tree_unflatten(leaves, spec), view)
    assert [f.name for f in dataclasses.fields(view)] == ["batch"]
    assert next(iter(_find_tensors([view]))) is view.batch.data


def test_torch_load_round_trip():
    view = _view()
    _same_view(torch.load(saved(view), weights_only=False), view)


@needs(SAFE_GLOBALS, "has torch.serialization.add_safe_globals (2.4)")
def test_torch_load_weights_only_round_trip():
    view = _view()
    _same_view(torch.load(saved(view), weights_only=True), view)


def test_profiler_labels_name_the_view_and_the_family():
    from torch.profiler import ProfilerActivity, profile

    view = _view()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        view.tanh()
    names = [e.name for e in prof.events() if e.name.startswith("matchbox.")]
    assert names[0] == "matchbox.TimeMajorBatch.time_major"
