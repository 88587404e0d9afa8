"""A shift-reduce TreeLSTM over Python expressions, written for one tree: the classic
dynamic-batching benchmark with no batching code in the model.

What it shows: SPINN-style parsing of ONE binary tree from its transition
sequence. At every step the example either SHIFTs its next leaf onto its stack
or REDUCEs the two top items with a TreeLSTM cell, an ``if`` on the example's
own transition. The stack is a tensor ``(1, depth, 2 * hidden)`` (each item is
a TreeLSTM ``(h, c)``) with a stack pointer and a buffer pointer that are plain
ints for one example: items are read with ``stack[:, top - 1]`` and written with
a one-hot ``torch.where`` over the stack's slots. Under ``@matchbox.batch`` the
same code runs a batch of trees of different shapes and sizes at once: each
example follows its own transitions, both branches run masked, and the
pointers become per-example ints (which core's indexing takes, one index per
example).

The data: expressions from the standard library's source (the right-hand sides
of statements: assigned values, returned values, conditions, calls), parsed
with ``ast``, their syntax trees binarised (a node with children ``c1 .. ck``
becomes ``((c1 c2) c3) ...``) with names, constants, operators and attribute
names as the leaves. The task: predict the expression's root node type
(``Call``, ``Attribute``, ``BinOp``, ``Compare``, ...) from its tree.

    python examples/treelstm.py --steps 1000 --batch-size 64
"""

from __future__ import annotations

import argparse
import ast
import random
import warnings
from collections import Counter

import torch
from torch import nn
from torch.utils.data import DataLoader

import matchbox
import matchbox.functional as F
from matchbox.data import BucketBatchSampler, Collate, MaskedBatchField, corpus

try:
    from examples import _training
except ImportError:  # run as ``python examples/<name>.py``: this folder is on sys.path
    import _training

SHIFT, REDUCE = 0, 1


class TreeLSTM(nn.Module):
    """Classify one binary tree given as leaf ids ``(1, n)`` and transitions ``(1, 2n - 1)``."""

    def __init__(self, vocab: int, classes: int, *, d_embed: int = 64, hidden: int = 64,
                 max_depth: int = 16):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_embed)
        self.leaf = nn.Linear(d_embed, 2 * hidden)            # a leaf's (h, c)
        self.compose = nn.Linear(2 * hidden, 5 * hidden)      # gates i, f_left, f_right, o, g
        self.out = nn.Linear(hidden, classes)
        self.hidden = hidden
        self.max_depth = max_depth
        self.register_buffer("slots", torch.arange(max_depth).unsqueeze(0), persistent=False)

    def reduce(self, left, right):
        """The binary TreeLSTM cell: two children's ``(h, c)`` → the parent's ``(1, 2 * hidden)``."""
        h_left, c_left = left.chunk(2, -1)
        h_right, c_right = right.chunk(2, -1)
        i, f_left, f_right, o, g = self.compose(torch.cat([h_left, h_right], -1)).chunk(5, -1)
        c = (i.sigmoid() * g.tanh() + f_left.sigmoid() * c_left
             + f_right.sigmoid() * c_right)
        return torch.cat([o.sigmoid() * c.tanh(), c], -1)

    def write(self, stack, top, item):
        """``stack`` with ``item`` in slot ``top`` (a one-hot select over the slots)."""
        at = (self.slots == top).unsqueeze(-1)                  # (1, depth, 1)
        return torch.where(at, item.unsqueeze(1), stack)

    @matchbox.batch
    def parse(self, leaves, transitions):
        """Run one example's transitions over its leaves ``(1, n, 2 * hidden)``; return the
        root's ``(h, c)``."""
        stack = leaves.new_zeros(1, self.max_depth, 2 * self.hidden)
        top = 0        # the number of items on the stack
        position = 0   # the next leaf to shift
        for transition in transitions.unbind(1):
            if transition == SHIFT:
                stack = self.write(stack, top, leaves[:, position])
                top = top + 1
                position = position + 1
            else:
                parent = self.reduce(stack[:, top - 2], stack[:, top - 1])
                stack = self.write(stack, top - 2, parent)
                top = top - 1
        return stack[:, 0]   # after the last REDUCE, the whole tree is the only item

    def classify(self, leaves, transitions):
        h, _ = self.parse(leaves, transitions).chunk(2, -1)
        return self.out(h)

    def forward(self, tokens, transitions):
        return self.classify(self.leaf(self.embed(tokens)), transitions)

    def loss(self, tokens, transitions, label):
        return F.cross_entropy(self(tokens, transitions), label)


# ---------------------------------------------------------------------------- trees

# A binary tree is a leaf token (a str) or a pair of trees.
_OPERATORS = (ast.operator, ast.unaryop, ast.cmpop, ast.boolop)
_SYMBOLS = {"Add": "+", "Sub": "-", "Mult": "*", "Div": "/", "FloorDiv": "//", "Mod": "%",
            "Pow": "**", "MatMult": "@", "LShift": "<<", "RShift": ">>", "BitOr": "|",
            "BitAnd": "&", "BitXor": "^", "Invert": "~", "Not": "not", "UAdd": "+",
            "USub": "-", "Eq": "==", "NotEq": "!=", "Lt": "<", "LtE": "<=", "Gt": ">",
            "GtE": ">=", "Is": "is", "IsNot": "is not", "In": "in", "NotIn": "not in",
            "And": "and", "Or": "or"}


def leaf_token(node: ast.AST) -> str | None:
    """The token of a node that is a leaf, or ``None`` if the node has parts."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Constant):
        if isinstance(node.value, str):
            return "<str>"
        if isinstance(node.value, bytes):
            return "<bytes>"
        if isinstance(node.value, (int, float, complex)) and not isinstance(node.value, bool):
            return "<num>"
        return repr(node.value)                  # True, False, None, Ellipsis
    if isinstance(node, _OPERATORS):
        return _SYMBOLS.get(type(node).__name__, type(node).__name__)
    if isinstance(node, ast.JoinedStr):
        return "<fstring>"
    return None


def binarize(node: ast.AST):
    """A syntax tree as a binary tree whose leaves are tokens (left-branching)."""
    token = leaf_token(node)
    if token is not None:
        return token
    parts = [binarize(child) for child in ast.iter_child_nodes(node)
             if not isinstance(child, ast.expr_context)]
    if isinstance(node, ast.Attribute):
        parts.append(node.attr)
    elif isinstance(node, ast.keyword):
        parts.insert(0, f"{node.arg}=" if node.arg else "**")
    if not parts:
        return type(node).__name__               # an empty list, tuple, argument list, ...
    tree = parts[0]
    for part in parts[1:]:
        tree = (tree, part)
    return tree


def leaves_and_transitions(tree) -> tuple[list[str], list[int]]:
    """The leaves of a binary tree, left to right, and its shift-reduce transitions."""
    if isinstance(tree, str):
        return [tree], [SHIFT]
    left_leaves, left_ops = leaves_and_transitions(tree[0])
    right_leaves, right_ops = leaves_and_transitions(tree[1])
    return left_leaves + right_leaves, left_ops + right_ops + [REDUCE]


def stack_depth(transitions: list[int]) -> int:
    """The most items the stack holds while running ``transitions``."""
    top = deepest = 0
    for transition in transitions:
        top += 1 if transition == SHIFT else -1
        deepest = max(deepest, top)
    return deepest


def statement_expressions(source: str):
    """The expressions directly under each statement (values, tests, calls, ...)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)  # invalid escapes in old sources
        tree = ast.parse(source)
    for statement in ast.walk(tree):
        if isinstance(statement, ast.stmt):
            yield from (child for child in ast.iter_child_nodes(statement)
                        if isinstance(child, ast.expr))


def load_trees(max_files: int, *, min_leaves: int = 3, max_leaves: int = 20,
               max_depth: int = 16, classes: int = 8, seed: int = 0,
               dev_fraction: float = 0.1):
    """``{"tokens", "transitions", "label"}`` for the standard library's expressions whose
    root type is among the ``classes`` most common; shuffled, split into train and dev."""
    examples = []
    for path in corpus.stdlib_files(max_files):
        try:
            expressions = list(statement_expressions(path.read_text(encoding="utf-8")))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue  # the few files the running Python cannot parse
        for expression in expressions:
            if sum(1 for _ in ast.walk(expression)) > 4 * max_leaves:
                continue  # far too large (and deep enough to exhaust the recursion)
            tokens, transitions = leaves_and_transitions(binarize(expression))
            if (min_leaves <= len(tokens) <= max_leaves
                    and stack_depth(transitions) <= max_depth):
                examples.append({"tokens": tokens, "transitions": transitions,
                                 "label": type(expression).__name__})
    common = {label for label, _ in Counter(e["label"] for e in examples).most_common(classes)}
    examples = [e for e in examples if e["label"] in common]
    random.Random(seed).shuffle(examples)
    n_dev = max(1, int(len(examples) * dev_fraction))
    return examples[n_dev:], examples[:n_dev]


def make_fields():
    tokens = MaskedBatchField(name="tokens")                  # the leaves, already tokens
    transitions = MaskedBatchField(use_vocab=False, name="transitions")
    label = MaskedBatchField(sequential=False, unk_token=None, pad_token=None, name="label")
    return {"tokens": tokens, "transitions": transitions, "label": label}


def make_batch(examples, fields, device=None):
    """One batch: ``(tokens, transitions, labels)``, ``MaskedBatch`` each."""
    batch = Collate(fields, device=device)(examples)
    return batch["tokens"], batch["transitions"], batch["label"]


def accuracy(model: TreeLSTM, examples, fields, batch_size: int, device) -> float:
    def correct(chunk):
        tokens, transitions, labels = make_batch(chunk, fields, device)
        return int(matchbox.batch_sum(model(tokens, transitions).argmax(-1) == labels))
    return _training.score(model, examples, batch_size, correct)


# ---------------------------------------------------------------------------- training


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = _training.parser(__doc__, steps=1000, batch_size=64, lr=2e-3, log_every=250)
    parser.add_argument("--max-files", type=int, default=200,
                        help="standard-library files to read expressions from")
    parser.add_argument("--max-leaves", type=int, default=20, help="largest tree kept")
    parser.add_argument("--max-depth", type=int, default=16, help="stack slots")
    parser.add_argument("--classes", type=int, default=8, help="most common root types kept")
    parser.add_argument("--d-embed", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=64)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    train, dev = load_trees(args.max_files, max_leaves=args.max_leaves,
                            max_depth=args.max_depth, classes=args.classes, seed=args.seed)
    fields = make_fields()
    fields["tokens"].build_vocab((e["tokens"] for e in train), min_freq=2)
    fields["label"].build_vocab(e["label"] for e in train + dev)
    print(f"{len(train)} training trees, {len(dev)} dev; {len(fields['tokens'].vocab)} leaf "
          f"tokens; classes {fields['label'].vocab.itos}")

    model = TreeLSTM(len(fields["tokens"].vocab), len(fields["label"].vocab),
                     d_embed=args.d_embed, hidden=args.hidden,
                     max_depth=args.max_depth).to(args.device)
    lengths = [len(e["transitions"]) for e in train]
    loader = DataLoader(train, batch_sampler=BucketBatchSampler(lengths, args.batch_size,
                                                                seed=args.seed),
                        collate_fn=Collate(fields, device=args.device))
    losses = _training.train(
        model, _training.epochs(loader),
        lambda batch: model.loss(batch["tokens"], batch["transitions"], batch["label"]),
        steps=args.steps, lr=args.lr, log_every=args.log_every,
        report=lambda: "dev accuracy "
                       f"{accuracy(model, dev, fields, args.batch_size, args.device):.3f}")
    return {"losses": losses}


if __name__ == "__main__":
    main()
