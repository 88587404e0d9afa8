"""What the matchbox-nn user trial (``test_examples_trial_nn.py``) found in embeddings:
``nn.Embedding(max_norm=...)`` renormalised row 0, in place, for the examples that did
not run the lookup (under a per-example condition, and for padding in
``matchbox.compile``'s capture), and ``nn.EmbeddingBag(max_norm=...)`` the rows of those
examples' own ids; the loop renormalises neither."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import matchbox
from matchbox import MaskedBatch


def embedding_case():
    torch.manual_seed(13)
    embedding = nn.Embedding(8, 3, max_norm=1.0).double()
    with torch.no_grad():
        embedding.weight.mul_(5)  # every row longer than max_norm
    tokens = [torch.tensor([[1, 2]]), torch.tensor([[5, 6, 7]]), torch.tensor([[3]])]
    return embedding, tokens, MaskedBatch.fromlist(tokens, (True,), padding_value=4)


def test_embedding_max_norm_under_a_condition_renormalises_the_running_examples_rows():
    # Example 1 does not run the lookup: its ids, zeroed by rows(), made PyTorch's max_norm
    # renormalise row 0, which no example references.
    embedding, tokens, batch = embedding_case()
    loop_embedding = copy.deepcopy(embedding)
    flags = [torch.tensor([1]), torch.tensor([0]), torch.tensor([1])]

    @matchbox.batch
    def looked_up(tokens, flag, embedding):
        out = torch.zeros(1, dtype=torch.float64)
        if flag > 0:
            out = embedding(tokens).sum(1).sum(1)
        return out

    loop = [looked_up(t, f, loop_embedding) for t, f in zip(tokens, flags)]
    out = looked_up(batch, MaskedBatch.fromlist(flags, ()), embedding)
    torch.testing.assert_close(embedding.weight, loop_embedding.weight)
    for got, expected in zip(out.examples(), loop):
        torch.testing.assert_close(got, expected)


@pytest.mark.compiled_loops  # not run by tox's `oldest` (tox.ini)
def test_compiled_embedding_max_norm_runs_eagerly_saying_why():
    # In a captured graph rows() zeroes the padding ids: row 0 was renormalised, silently.
    embedding, tokens, batch = embedding_case()
    loop_embedding = copy.deepcopy(embedding)
    for t in tokens:
        loop_embedding(t)
    compiled = matchbox.compile(embedding, backend="aot_eager")
    with pytest.warns(UserWarning, match=r"runs batch\(B=3, <=8\) eagerly, as it cannot be "
                                         r"captured as one graph: NotCapturable: torch\.nn\."
                                         r"functional\.embedding with max_norm"):
        compiled(batch)
    torch.testing.assert_close(embedding.weight, loop_embedding.weight)


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "equal-lengths"])
def test_embedding_bag_max_norm_under_a_condition_renormalises_the_running_examples_rows(
        padded):
    # Example 1 does not run the lookup: its rows (5, 6, 7) were renormalised in place.
    torch.manual_seed(14)
    bag = nn.EmbeddingBag(8, 3, max_norm=1.0, mode="sum").double()
    with torch.no_grad():
        bag.weight.mul_(5)
    loop_bag = copy.deepcopy(bag)
    tokens = [torch.tensor([[1, 2, 0]]), torch.tensor([[5, 6, 7]]), torch.tensor([[3, 3, 2]])]
    if padded:
        tokens[0], tokens[2] = tokens[0][:, :2], tokens[2][:, :1]
    flags = [torch.tensor([1]), torch.tensor([0]), torch.tensor([1])]

    @matchbox.batch
    def pooled(tokens, flag, bag):
        out = torch.zeros(1, 3, dtype=torch.float64)
        if flag > 0:
            out = bag(tokens)
        return out

    loop = [pooled(t, f, loop_bag) for t, f in zip(tokens, flags)]
    out = pooled(MaskedBatch.fromlist(tokens, (True,), padding_value=4),
                 MaskedBatch.fromlist(flags, ()), bag)
    torch.testing.assert_close(bag.weight, loop_bag.weight)
    for got, expected in zip(out.examples(), loop):
        torch.testing.assert_close(got, expected)
