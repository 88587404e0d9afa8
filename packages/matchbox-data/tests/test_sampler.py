"""BucketBatchSampler: every example exactly once, within the limits, seeded, shardable."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from matchbox.data import BucketBatchSampler

lengths_st = st.lists(st.integers(0, 20), max_size=60)


@given(lengths=lengths_st, batch_size=st.none() | st.integers(1, 8),
       max_tokens=st.none() | st.integers(20, 60), shuffle=st.booleans(),
       seed=st.integers(0, 5), pool_size=st.integers(1, 4))
def test_every_example_exactly_once_within_the_limits(lengths, batch_size, max_tokens, shuffle,
                                                      seed, pool_size):
    if batch_size is None and max_tokens is None:
        batch_size = 4
    sampler = BucketBatchSampler(lengths, batch_size, max_tokens=max_tokens, shuffle=shuffle,
                                 seed=seed, pool_size=pool_size)
    batches = list(sampler)
    assert len(batches) == len(sampler)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    for batch in batches:
        assert batch
        if batch_size is not None:
            assert len(batch) <= batch_size
        if max_tokens is not None:
            assert max(max(lengths[i] for i in batch), 1) * len(batch) <= max_tokens


def _shards(lengths, replicas, epoch=0, **options):
    """Every rank's batches of an epoch, each rank's sampler built as that rank would."""
    shards = []
    for rank in range(replicas):
        sampler = BucketBatchSampler(lengths, num_replicas=replicas, rank=rank, **options)
        sampler.set_epoch(epoch)
        shards.append((sampler, list(sampler)))
    return shards


@given(lengths=lengths_st, batch_size=st.integers(1, 8), replicas=st.integers(1, 4),
       seed=st.integers(0, 5), epoch=st.integers(0, 3))
def test_sharded_ranks_get_equal_batch_counts_repeating_a_few_batches(lengths, batch_size,
                                                                      replicas, seed, epoch):
    unsharded = BucketBatchSampler(lengths, batch_size, seed=seed)
    unsharded.set_epoch(epoch)
    epoch_batches = list(unsharded)
    shards = _shards(lengths, replicas, epoch, batch_size=batch_size, seed=seed)
    counts = {len(batches) for _, batches in shards} | {len(s) for s, _ in shards}
    assert len(counts) == 1  # every rank the same number, as its len() says
    count = counts.pop()
    assert count == -(-len(epoch_batches) // replicas)  # rounded up: nothing left out
    # Dealt round-robin from the epoch's batches, repeated from its start to fill.
    dealt = [shards[k % replicas][1][k // replicas] for k in range(count * replicas)]
    assert dealt == (epoch_batches * replicas)[:count * replicas]
    seen = [i for _, batches in shards for batch in batches for i in batch]
    assert set(seen) == set(range(len(lengths)))


@given(lengths=lengths_st, batch_size=st.integers(1, 8), replicas=st.integers(1, 4),
       seed=st.integers(0, 5))
def test_sharded_with_drop_last_leaves_out_the_last_batches_only(lengths, batch_size, replicas,
                                                                 seed):
    epoch_batches = list(BucketBatchSampler(lengths, batch_size, seed=seed))
    shards = _shards(lengths, replicas, batch_size=batch_size, seed=seed, drop_last=True)
    count = len(epoch_batches) // replicas  # rounded down
    assert [len(batches) for _, batches in shards] == [count] * replicas
    assert [len(s) for s, _ in shards] == [count] * replicas
    dealt = [shards[k % replicas][1][k // replicas] for k in range(count * replicas)]
    assert dealt == epoch_batches[:count * replicas]
    seen = [i for _, batches in shards for batch in batches for i in batch]
    assert len(seen) == len(set(seen))  # nothing repeated


def test_sharding_follows_set_epoch_on_every_rank():
    lengths = list(range(30))
    first = [batches for _, batches in _shards(lengths, 2, epoch=0, batch_size=4)]
    again = [batches for _, batches in _shards(lengths, 2, epoch=0, batch_size=4)]
    second = [batches for _, batches in _shards(lengths, 2, epoch=1, batch_size=4)]
    assert first == again
    assert first != second
    for shards in (first, second):
        assert len(shards[0]) == len(shards[1]) == 4  # 8 batches of 30 examples, dealt evenly


def test_fewer_batches_than_ranks():
    # One batch for three ranks: each gets it (drop_last=False), or none gets one.
    shards = _shards([2, 3], 3, batch_size=4)
    assert [batches for _, batches in shards] == [[[0, 1]]] * 3
    assert [batches for _, batches in _shards([2, 3], 3, batch_size=4, drop_last=True)] == [
        [], [], []]


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
