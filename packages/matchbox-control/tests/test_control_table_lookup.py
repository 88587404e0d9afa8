"""A plain tensor (a CRF's transition scores) indexed by per-example ints inside a
``@batch`` loop: each example reads its own entries, as in the loop (core's lookup,
``packages/matchbox-core/tests/test_table_lookup.py``)."""

from __future__ import annotations

import torch

import matchbox
from matchbox import MaskedBatch
from matchbox.testing import mb_assert


def batch(tags):
    return MaskedBatch.fromlist(tags, (True,), padding_value=10**6)


def test_a_crf_transition_score_under_batch_equals_the_loop():
    torch.manual_seed(0)
    transitions = torch.randn(4, 4, dtype=torch.float64, requires_grad=True)

    @matchbox.batch
    def path_score(tags):
        score = torch.zeros(1, dtype=transitions.dtype)
        for prev, cur in zip(tags.unbind(1), tags[:, 1:].unbind(1)):
            score = score + transitions[prev, cur]
        return score

    tags = [torch.randint(0, 4, (1, n)) for n in (4, 1, 0, 3)]
    mb_assert(path_score, [tags], [batch(tags)], 4, params=[transitions])
