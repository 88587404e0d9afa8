"""BucketBatchSampler: every example exactly once, within the limits, seeded, shardable."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from matchbox.data import BucketBatchSampler

lengths_st = st.lists(st.integers(0, 20), max_size=60)


@given(lengths=lengths_st, batch_size=st.none() | st.integers(1, 8),
       max_tokens=st.none() | st.integers(20, 60), shuffle=st.booleans(),
       seed=st.integers(0, 5), pool_size=st.integers(1, 4), replicas=st.integers(1, 3))
def test_every_example_exactly_once_within_the_limits(lengths, batch_size, max_tokens, shuffle,
                                                      seed, pool_size, replicas):
    if batch_size is None and max_tokens is None:
        batch_size = 4
    shards = [BucketBatchSampler(lengths, batch_size, max_tokens=max_tokens, shuffle=shuffle,
                                 seed=seed, pool_size=pool_size, num_replicas=replicas,
                                 rank=rank) for rank in range(replicas)]
    batches = [list(s) for s in shards]
    flat = [i for rank in batches for batch in rank for i in batch]
    assert sorted(flat) == list(range(len(lengths)))
    counts = [len(b) for b in batches]
    assert counts == [len(s) for s in shards]
    assert max(counts) - min(counts) <= 1
    for batch in (b for rank in batches for b in rank):
        assert batch
        if batch_size is not None:
            assert len(batch) <= batch_size
        if max_tokens is not None:
            assert max(max(lengths[i] for i in batch), 1) * len(batch) <= max_tokens


@given(lengths=lengths_st, seed=st.integers(0, 5))
def test_deterministic_for_a_seed_and_epoch(lengths, seed):
    a = BucketBatchSampler(lengths, 4, seed=seed)
    b = BucketBatchSampler(lengths, 4, seed=seed)
    assert list(a) == list(b)
    a.set_epoch(1)
    b.set_epoch(1)
    assert list(a) == list(b)


def test_epochs_and_seeds_change_the_order():
    lengths = list(range(40)) * 2
    sampler = BucketBatchSampler(lengths, 4, seed=0)
    first = list(sampler)
    sampler.set_epoch(1)
    assert list(sampler) != first
    assert list(BucketBatchSampler(lengths, 4, seed=1)) != first


def test_buckets_group_similar_lengths():
    lengths = [i % 10 for i in range(100)]  # ten of each length 0..9
    for batch in BucketBatchSampler(lengths, 10, pool_size=10, seed=0):
        assert len({lengths[i] for i in batch}) == 1


def test_without_shuffle_the_order_is_sorted_within_pools():
    lengths = [3, 1, 2, 0]
    assert list(BucketBatchSampler(lengths, 2, shuffle=False)) == [[3, 1], [2, 0]]


def test_errors():
    with pytest.raises(ValueError, match=r"give batch_size, max_tokens, or both"):
        BucketBatchSampler([1, 2])
    with pytest.raises(ValueError, match=r"example 1 has length 9, more than max_tokens=8; it "
                                         r"fits in no batch"):
        BucketBatchSampler([1, 9], max_tokens=8)
    with pytest.raises(ValueError, match=r"batch_size must be a positive int, got 0"):
        BucketBatchSampler([1], 0)
    with pytest.raises(ValueError, match=r"rank 2 is outside \[0, num_replicas=2\)"):
        BucketBatchSampler([1], 1, num_replicas=2, rank=2)
    with pytest.raises(ValueError, match=r"example 0 has length -1 < 0"):
        BucketBatchSampler([-1], 1)
