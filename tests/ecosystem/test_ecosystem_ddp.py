"""DistributedDataParallel on two real gloo processes trains Matchbox models correctly.

One spawn of two processes (``ddp_training.run``) trains an ``nn.LSTM`` model and a
``@matchbox.batch`` model with branches, each in DDP's default,
``find_unused_parameters`` and ``static_graph`` modes, three steps each, and then runs
the training script of docs/distributed.md as torchrun would.  Every step's
gradients must be identical on the two ranks and equal those of one process training
on both ranks' examples (the oracle).

Before batches declared their tensors to PyTorch (pytree and dataclass fields),
``static_graph`` let the ranks' gradients drift apart silently and
``find_unused_parameters`` failed with "Expected to mark a variable ready only once".
"""

from __future__ import annotations

import json
import socket
import time

import ddp_training
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="this torch is built without torch.distributed's gloo")

# Spawning two interpreters and importing torch and Matchbox takes most of it.
TIMEOUT_S = 120


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Run both processes once; what they wrote."""
    out = tmp_path_factory.mktemp("ddp")
    context = mp.start_processes(ddp_training.run, nprocs=ddp_training.WORLD, join=False,
                                 start_method="spawn",
                                 args=(str(out / "init"), _free_port(), str(out)))
    deadline = time.monotonic() + TIMEOUT_S
    while not context.join(timeout=5):  # raises, with the child's traceback, if one fails
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail(f"the DDP processes did not finish in {TIMEOUT_S} s (a rank waiting "
                        "for another in a collective?)")
    return out


@pytest.mark.parametrize("mode", list(ddp_training.MODES))
@pytest.mark.parametrize("model", list(ddp_training.MODELS))
def test_ddp_gradients_are_the_same_on_every_rank_and_equal_one_process(trained, model, mode):
    results = json.loads((trained / "gradients.json").read_text())[f"{model}/{mode}"]
    # Every step: bit for bit the same gradients on both ranks ...
    assert results["across_ranks"] == [0.0] * ddp_training.STEPS
    # ... and those of one process on the global batch, up to the order of the sums.
    assert max(results["vs_one_process"]) < 1e-12


def test_the_docs_script_trains_every_rank_in_step(trained):
    ranks = [torch.load(trained / f"docs-rank{r}.pt", weights_only=True)
             for r in range(ddp_training.WORLD)]
    assert ranks[0]["batches"] == ranks[1]["batches"] == 7  # 13 batches, dealt as 7 and 7
    for name, value in ranks[0]["state"].items():
        assert torch.equal(value, ranks[1]["state"][name]), name
