"""Training with DistributedDataParallel on two gloo processes, for test_ecosystem_ddp.py.

A spawned process imports this module (by name: its folder is on the path the
parent passes on) and runs :func:`run`.  Two models, each in DDP's three modes:

- ``Tagger``: an ``nn.LSTM`` over a ``MaskedBatch`` (the packed path), returning
  a ``MaskedBatch`` from ``forward``;
- ``Branchy``: a ``@matchbox.batch`` model whose examples take one of two
  branches, returning a ``MaskedBatch``.  A branch no example of a rank takes
  is skipped there, so its parameters get no gradient on that rank: DDP must
  be told (``find_unused_parameters=True``).  The data of that mode has such a
  step; the others give every rank examples of both branches (their modes
  need every parameter used on every rank).

The oracle: one process training the same model on the global batch (both
ranks' examples), whose gradients DDP's average of the ranks' must equal.
"""

from __future__ import annotations

import json
import os
import re
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import matchbox
from matchbox import MaskedBatch

WORLD = 2
PER_RANK = 2
STEPS = 3
FEATURES = 3
MODES = {
    "default": {},
    "find_unused_parameters": {"find_unused_parameters": True},
    "static_graph": {"static_graph": True},
}


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(FEATURES, 4, batch_first=True)
        self.out = nn.Linear(4, 2)

    def forward(self, x):
        h, _ = self.lstm(x)
        return self.out(h)

    @staticmethod
    def loss(y):
        return y.pow(2).sum(2).sum(1)


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.RNNCell(FEATURES, 4)
        self.up = nn.Linear(4, 2)
        self.down = nn.Linear(4, 2)

    @matchbox.batch
    def forward(self, x):
        h = x.new_zeros(x.size(0), 4)
        for xt in x.unbind(1):
            h = self.cell(xt, h)
        if x.sum() > 0:
            y = self.up(h)
        else:
            y = self.down(h).tanh()
        return y

    @staticmethod
    def loss(y):
        return y.pow(2).sum(1)


MODELS = {"lstm": Tagger, "batch": Branchy}


def global_batches(mode: str) -> list[list[torch.Tensor]]:
    """Each step's examples, rank ``r``'s are ``[PER_RANK * r : PER_RANK * (r + 1)]``.

    An example's sign decides ``Branchy``'s branch.  In every mode but
    ``find_unused_parameters`` each rank gets one example of each sign; there,
    at step 1 rank 0 gets only positive ones and rank 1 only negative ones.
    """
    generator = torch.Generator().manual_seed(7)
    steps = []
    for step in range(STEPS):
        signs = [1, -1] * WORLD
        if mode == "find_unused_parameters" and step == 1:
            signs = [1] * PER_RANK + [-1] * PER_RANK
        lengths = torch.randint(1, 6, (len(signs),), generator=generator).tolist()
        steps.append([sign * torch.rand(1, n, FEATURES, generator=generator, dtype=torch.float64)
                      for sign, n in zip(signs, lengths)])
    return steps


def _model(name: str) -> nn.Module:
    torch.manual_seed(0)
    return MODELS[name]().double()


def _train(model: nn.Module, forward: nn.Module, batches: list[MaskedBatch]) -> torch.Tensor:
    """Train ``STEPS`` steps of SGD; the flat gradients of each step, ``(STEPS, n_params)``."""
    optimizer = torch.optim.SGD(forward.parameters(), lr=0.5)
    grads = []
    for batch in batches:
        loss = matchbox.batch_mean(model.loss(forward(batch)))
        optimizer.zero_grad()
        loss.backward()
        grads.append(torch.cat([torch.zeros(p.numel(), dtype=p.dtype) if p.grad is None
                                else p.grad.flatten() for p in model.parameters()]))
        optimizer.step()
    return torch.stack(grads)


def ddp_gradients(rank: int, name: str, mode: str) -> torch.Tensor:
    """This rank's gradients, training ``name`` under DDP in ``mode`` (a process group runs)."""
    model = _model(name)
    mine = [MaskedBatch.fromlist(step[PER_RANK * rank : PER_RANK * (rank + 1)], (True, False))
            for step in global_batches(mode)]
    return _train(model, DDP(model, **MODES[mode]), mine)


def single_process_gradients(name: str, mode: str) -> torch.Tensor:
    """The oracle: the gradients of one process training on the global batches."""
    model = _model(name)
    batches = [MaskedBatch.fromlist(step, (True, False)) for step in global_batches(mode)]
    return _train(model, model, batches)


def docs_example() -> str:
    """The training script of docs/distributed.md."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "distributed.md").read_text()
    return re.search(r"```python\n(# train\.py\n.*?)```", text, re.S).group(1)


def run(rank: int, init_file: str, port: int, out_dir: str) -> None:
    """The spawned process ``rank``: gradients of every model and mode, then the docs' script."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=WORLD, timeout=timedelta(seconds=60))
    results = {}
    for name in MODELS:
        for mode in MODES:
            grads = ddp_gradients(rank, name, mode)
            gathered = [torch.empty_like(grads) for _ in range(WORLD)]
            dist.all_gather(gathered, grads)
            if rank == 0:
                oracle = single_process_gradients(name, mode)
                results[f"{name}/{mode}"] = {
                    "across_ranks": (gathered[0] - gathered[1]).abs().amax(1).tolist(),
                    "vs_one_process": (gathered[0] - oracle).abs().amax(1).tolist(),
                }
    dist.destroy_process_group()
    if rank == 0:
        Path(out_dir, "gradients.json").write_text(json.dumps(results, indent=1))

    # The script of docs/distributed.md, as torchrun would start it.
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    namespace: dict = {"__name__": "__main__"}
    exec(compile(docs_example(), "docs/distributed.md", "exec"), namespace)  # noqa: S102
    torch.save({"batches": len(namespace["loader"]),
                "state": namespace["model"].module.state_dict()},
               Path(out_dir, f"docs-rank{rank}.pt"))
