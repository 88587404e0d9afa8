"""examples/treelstm.py: the shift-reduce TreeLSTM, written per tree, equals the loop."""

from __future__ import annotations

import ast
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from examples import treelstm as example
from matchbox import MaskedBatch
from matchbox.testing import mb_assert

NAN = float("nan")
HIDDEN, VOCAB, CLASSES = 4, 20, 3


def model(dtype, max_depth=8):
    torch.manual_seed(0)
    return example.TreeLSTM(VOCAB, CLASSES, d_embed=5, hidden=HIDDEN,
                            max_depth=max_depth).to(dtype)


def random_tree(leaves, rng):
    if len(leaves) == 1:
        return leaves[0]
    split = rng.randint(1, len(leaves) - 1)
    return (random_tree(leaves[:split], rng), random_tree(leaves[split:], rng))


def left_branching(leaves):
    tree = leaves[0]
    for leaf in leaves[1:]:
        tree = (tree, leaf)
    return tree


def right_branching(leaves):
    return leaves[0] if len(leaves) == 1 else (leaves[0], right_branching(leaves[1:]))


def transitions_of(trees):
    ts = [torch.tensor([example.leaves_and_transitions(t)[1]]) for t in trees]
    return ts, MaskedBatch.fromlist(ts, (True,))


def trees_of_sizes(sizes, seed=0):
    rng = random.Random(seed)
    # The first two have the same size and opposite shapes: at the third step one example
    # SHIFTs while the other REDUCEs.
    return [left_branching([str(i) for i in range(4)]), right_branching([str(i) for i in range(4)])] + [
        random_tree([str(i) for i in range(n)], rng) for n in sizes]


@pytest.mark.parametrize("sizes", [[1, 6, 2, 5], [], [7]], ids=["ragged", "two-shapes", "big"])
def test_parse_on_nan_padded_leaves_equals_the_loop(sizes, dtype):
    m = model(dtype)
    trees = trees_of_sizes(sizes)
    ts, tb = transitions_of(trees)
    leaves = [torch.randn(1, len(example.leaves_and_transitions(t)[0]), 2 * HIDDEN, dtype=dtype)
              for t in trees]
    lb = MaskedBatch.fromlist(leaves, (True, False), padding_value=NAN)
    mb_assert(m.parse, [leaves, ts], [lb, tb], len(trees), params=list(m.parameters()))


def test_one_leaf_tree_alone_in_a_batch(dtype):
    m = model(dtype)
    leaves = [torch.randn(1, 1, 2 * HIDDEN, dtype=dtype)]
    ts, tb = transitions_of(["x"])
    mb_assert(m.parse, [leaves, ts], [MaskedBatch.fromlist(leaves, (True, False)), tb], 1,
              params=list(m.parameters()))


def test_loss_on_token_ids_equals_the_loop(dtype):
    m = model(dtype)
    trees = trees_of_sizes([3, 1, 5])
    ts, tb = transitions_of(trees)
    tokens = [torch.randint(0, VOCAB, (1, len(example.leaves_and_transitions(t)[0])))
              for t in trees]
    labels = [torch.randint(0, CLASSES, (1,)) for _ in trees]
    mb_assert(m.loss, [tokens, ts, labels],
              [MaskedBatch.fromlist(tokens, (True,), padding_value=10**6), tb,
               MaskedBatch.fromlist(labels, ())], len(trees), params=list(m.parameters()))


def test_the_stack_holds_the_tree_the_cell_composes():
    # The parse of ((a b) c) is reduce(reduce(a, b), c), written out by hand.
    m = model(torch.float64)
    a, b, c = (torch.randn(1, 2 * HIDDEN, dtype=torch.float64) for _ in range(3))
    root = m.parse(torch.stack([a, b, c], 1), torch.tensor([example.leaves_and_transitions(
        (("a", "b"), "c"))[1]]))
    torch.testing.assert_close(root, m.reduce(m.reduce(a, b), c))


def test_binarize_an_expression():
    expression = ast.parse("a.b(c, d=1) + x[2]", mode="eval").body
    tree = example.binarize(expression)
    assert tree == ((((("a", "b"), "c"), ("d=", "<num>")), "+"), ("x", "<num>"))
    tokens, transitions = example.leaves_and_transitions(tree)
    assert tokens == ["a", "b", "c", "d=", "<num>", "+", "x", "<num>"]
    assert transitions.count(example.SHIFT) == len(tokens)
    assert transitions.count(example.REDUCE) == len(tokens) - 1
    assert example.stack_depth(transitions) == 3


def test_load_trees_gives_valid_examples():
    train, dev = example.load_trees(5, max_leaves=10, max_depth=4, classes=3)
    assert train and dev
    assert len({e["label"] for e in train + dev}) <= 3
    for e in train + dev:
        assert 3 <= len(e["tokens"]) <= 10
        assert len(e["transitions"]) == 2 * len(e["tokens"]) - 1
        assert example.stack_depth(e["transitions"]) <= 4


def test_main_trains_briefly():
    result = example.main(["--steps", "2", "--batch-size", "8", "--max-files", "5",
                           "--d-embed", "8", "--hidden", "8", "--log-every", "2",
                           "--device", "cpu"])
    assert len(result["losses"]) == 2
    assert all(torch.isfinite(torch.tensor(result["losses"])))


@settings(max_examples=10)
@given(sizes=st.lists(st.integers(1, 7), min_size=1, max_size=5), seed=st.integers(0, 100))
def test_parse_on_drawn_trees_equals_the_loop(sizes, seed):
    m = model(torch.float64)
    rng = random.Random(seed)
    trees = [random_tree([str(i) for i in range(n)], rng) for n in sizes]
    ts, tb = transitions_of(trees)
    leaves = [torch.randn(1, n, 2 * HIDDEN, dtype=torch.float64) for n in sizes]
    lb = MaskedBatch.fromlist(leaves, (True, False), padding_value=NAN)
    mb_assert(m.parse, [leaves, ts], [lb, tb], len(trees), params=list(m.parameters()))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_loss_equals_the_loop_on_cuda():
    m = model(torch.float64).cuda()
    trees = trees_of_sizes([3, 1, 5])
    ts = [t.cuda() for t in transitions_of(trees)[0]]
    tokens = [torch.randint(0, VOCAB, (1, len(example.leaves_and_transitions(t)[0])),
                            device="cuda") for t in trees]
    labels = [torch.randint(0, CLASSES, (1,), device="cuda") for _ in trees]
    mb_assert(m.loss, [tokens, ts, labels],
              [MaskedBatch.fromlist(tokens, (True,)), MaskedBatch.fromlist(ts, (True,)),
               MaskedBatch.fromlist(labels, ())], len(trees), params=list(m.parameters()))
