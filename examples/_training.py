"""What the examples' training scripts share: their common options and the training loop.

The models and data helpers live in each example; this module only runs them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader

import matchbox


def parser(doc: str, *, steps: int, batch_size: int, lr: float,
           log_every: int) -> argparse.ArgumentParser:
    """An argument parser with the options every example takes; examples add their own."""
    result = argparse.ArgumentParser(description=doc.splitlines()[0])
    result.add_argument("--steps", type=int, default=steps, help="training steps")
    result.add_argument("--batch-size", type=int, default=batch_size)
    result.add_argument("--lr", type=float, default=lr, help="Adam's learning rate")
    result.add_argument("--log-every", type=int, default=log_every,
                        help="steps between progress lines")
    result.add_argument("--seed", type=int, default=0)
    result.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    return result


def epochs(loader: DataLoader) -> Iterator[Any]:
    """The batches of ``loader``, epoch after epoch, its bucketing sampler reshuffled each time."""
    epoch = 0
    while True:
        loader.batch_sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


def recent_mean(values: list[float], count: int) -> float:
    return sum(values[-count:]) / len(values[-count:])


def score(model: torch.nn.Module, examples: list[Any], batch_size: int,
          correct: Callable[[list[Any]], int]) -> float:
    """The fraction of ``examples`` right: ``correct(chunk)`` counts them in each chunk of
    ``batch_size``, with the model in eval mode and no gradients."""
    was_training = model.training
    model.eval()
    total = 0
    with torch.no_grad():
        for start in range(0, len(examples), batch_size):
            total += correct(examples[start:start + batch_size])
    model.train(was_training)
    return total / len(examples)


def train(model: torch.nn.Module, batches: Iterable[Any], loss: Callable[[Any], Any], *,
          steps: int, lr: float, log_every: int,
          report: Callable[[], str] | None = None) -> list[float]:
    """Adam on the batch mean of ``loss(batch)`` (one loss per example) for ``steps`` batches.

    Every ``log_every`` steps (and after the last) prints the mean loss of those steps,
    followed by ``report()`` (a dev-set score, say). Returns every step's loss.
    """
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses: list[float] = []
    for step, batch in zip(range(1, steps + 1), batches):
        value = matchbox.batch_mean(loss(batch))
        optimizer.zero_grad()
        value.backward()
        optimizer.step()
        losses.append(value.item())
        if step % log_every == 0 or step == steps:
            extra = f"  {report()}" if report is not None else ""
            print(f"step {step:5d}  loss {recent_mean(losses, log_every):.4f}{extra}")
    return losses
