"""The shift-reduce TreeLSTM (``examples/treelstm.py``): the classic dynamic-batching case.

The model's ``parse`` is written for ONE binary tree (its leaves and its
shift/reduce transitions, an ``if`` on each transition, a stack tensor with a
stack pointer).  Three variants, timed in one process on random binary trees:

- per-example loop: ``parse`` as written, undecorated (``__wrapped__``), on each
  tree alone (plain tensors);
- Matchbox: the same ``parse`` (``@matchbox.batch``) on a batch of trees;
- hand-padded: the same algorithm written by hand for a padded batch (every
  step computes SHIFT and REDUCE for every tree and selects per tree with
  ``torch.where``; pointers are index tensors) — what one writes without
  Matchbox, as SPINN's batched implementation does.

Each is timed forward and forward+backward (the sum of the roots' states).
"""

from __future__ import annotations

import argparse
import random

import torch

from benchmarks._harness import (
    forward_and_backward,
    full_float32,
    machine,
    ratio_cells,
    table,
    undecorated,
    write,
)
from examples.treelstm import REDUCE, SHIFT, TreeLSTM, leaves_and_transitions, stack_depth
from matchbox import MaskedBatch

LIMIT = "hand-padded"
LOOP = "per-example loop"  # _harness.LOOP


def random_tree(leaves: int, rng: random.Random):
    """A random binary tree with ``leaves`` leaves (leaf labels do not matter here)."""
    if leaves == 1:
        return "x"
    left = rng.randint(1, leaves - 1)
    return (random_tree(left, rng), random_tree(leaves - left, rng))


def make_trees(sizes: list[int], hidden: int, device: str, seed: int = 0):
    """Leaf states ``(1, n, 2 * hidden)`` and transitions ``(1, 2n - 1)`` per tree."""
    rng = random.Random(seed)
    trees = []
    for n in sizes:
        _, transitions = leaves_and_transitions(random_tree(max(1, n), rng))
        leaves = torch.randn(1, max(1, n), 2 * hidden, device=device)
        trees.append((leaves, torch.tensor([transitions], device=device)))
    depth = max(stack_depth(t[0].tolist()) for _, t in trees)
    return trees, depth


def hand_padded_parse(model: TreeLSTM, leaves: torch.Tensor, transitions: torch.Tensor,
                      steps: torch.Tensor) -> torch.Tensor:
    """``parse`` for a padded batch, masks and pointers written by hand."""
    batch, count = leaves.size(0), leaves.size(1)
    rows = torch.arange(batch, device=leaves.device)
    stack = leaves.new_zeros(batch, model.max_depth, leaves.size(-1))
    top = torch.zeros(batch, dtype=torch.long, device=leaves.device)
    position = torch.zeros_like(top)
    for t in range(transitions.size(1)):
        active = t < steps
        shift = active & (transitions[:, t] == SHIFT)
        reduce = active & (transitions[:, t] == REDUCE)
        leaf = leaves[rows, position.clamp(max=count - 1)]
        parent = model.reduce(stack[rows, (top - 2).clamp(min=0)],
                              stack[rows, (top - 1).clamp(min=0)])
        item = torch.where(shift.unsqueeze(1), leaf, parent)
        slot = torch.where(shift, top, top - 2)
        write = active.view(-1, 1, 1) & (model.slots == slot.unsqueeze(1)).unsqueeze(-1)
        stack = torch.where(write, item.unsqueeze(1), stack)
        top = top + shift.long() - reduce.long()
        position = position + shift.long()
    return stack[:, 0]


def variants(model: TreeLSTM, trees: list[tuple[torch.Tensor, torch.Tensor]]) -> dict:
    leaves = MaskedBatch.fromlist([leaf for leaf, _ in trees], (True, False))
    transitions = MaskedBatch.fromlist([t for _, t in trees], (True,))
    steps = torch.tensor([t.size(1) for _, t in trees], device=leaves.device)
    parse_one = undecorated(model.parse)
    padded_transitions = torch.where(transitions.mask, transitions.data, SHIFT)
    padded_leaves = torch.where(leaves.mask, leaves.data, 0.0)
    return {
        LOOP: lambda: torch.cat([parse_one(leaf, t) for leaf, t in trees]),
        "Matchbox": lambda: model.parse(leaves, transitions).data,
        LIMIT: lambda: hand_padded_parse(model, padded_leaves, padded_transitions, steps),
    }


def build(sizes: list[int], hidden: int, device: str) -> dict:
    trees, depth = make_trees(sizes, hidden, device)
    torch.manual_seed(0)
    model = TreeLSTM(10, 2, d_embed=8, hidden=hidden, max_depth=depth).to(device)
    return variants(model, trees)


@full_float32()
def check_same(fns: dict) -> None:
    values = {name: fn() for name, fn in fns.items()}
    for name, value in values.items():
        torch.testing.assert_close(value, values[LIMIT], rtol=1e-4, atol=1e-4, msg=name)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--leaves", type=int, nargs=2, default=[3, 30])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    rng = random.Random(0)
    sizes = [rng.randint(*args.leaves) for _ in range(args.batch)]
    fns = build(sizes, args.hidden, args.device)
    check_same(fns)
    forward, both = forward_and_backward(fns, args.repeats)
    rows = [[name, *ratio_cells(name, forward, both, LIMIT)] for name in fns]
    text = "\n".join([
        f"TreeLSTM parse, batch {args.batch}, {args.leaves[0]}-{args.leaves[1]} leaves, "
        f"hidden {args.hidden}; {machine()}",
        "",
        table(["variant", "forward ms", "× hand-padded", "fwd+bwd ms", "× hand-padded"], rows),
    ])
    print(text)
    print(f"wrote {write('treelstm', text)}")
    return text


if __name__ == "__main__":
    main()
