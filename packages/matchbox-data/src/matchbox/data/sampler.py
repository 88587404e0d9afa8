"""``BucketBatchSampler``: batches of examples of similar length, for ``DataLoader``.

What torchtext's ``BucketIterator`` did, as a ``batch_sampler``: examples are
shuffled, cut into pools of ``pool_size`` batches' worth, sorted by length
within each pool (so a batch holds similar lengths and little padding), cut
into batches, and the batches shuffled. Each epoch (``set_epoch``) reshuffles
deterministically from ``seed``; every example is in exactly one batch per
epoch, none dropped or repeated (sharded over ranks, see below, a few may be).

A batch holds at most ``batch_size`` examples, or at most ``max_tokens``
padded tokens (the longest length in it times its size), or both limits.

Sharding for distributed training (``num_replicas > 1``, one sampler per rank,
as ``DistributedSampler``): every rank computes the same batches of the epoch
(the same ``seed`` and ``set_epoch`` on every rank) and takes every
``num_replicas``-th one, starting at its ``rank``.  Whole batches are dealt, so
each still holds similar lengths.  Every rank gets the same number of batches
per epoch -- a DDP loop runs one all-reduce per batch, and a rank that has
run out would leave the others waiting -- so when the batches do not divide
evenly:

- ``drop_last=False`` (the default) repeats batches from the start of the
  epoch's order until they do: a few examples are seen twice this epoch;
- ``drop_last=True`` leaves out the last ones: a few examples are not seen this
  epoch (other ones each epoch, when shuffling).

With one replica nothing is repeated or left out.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

from torch.utils.data import Sampler


class BucketBatchSampler(Sampler[list[int]]):
    """Yield lists of dataset indices, grouped by length (see the module docstring)."""

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int | None = None,
        *,
        max_tokens: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        pool_size: int = 100,
        num_replicas: int = 1,
        rank: int = 0,
        drop_last: bool = False,
    ):
        if batch_size is None and max_tokens is None:
            raise ValueError("BucketBatchSampler: give batch_size, max_tokens, or both")
        for name, value in (("batch_size", batch_size), ("max_tokens", max_tokens),
                            ("pool_size", pool_size), ("num_replicas", num_replicas)):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"BucketBatchSampler: {name} must be a positive int, got {value!r}")
        if not 0 <= rank < num_replicas:
            raise ValueError(
                f"BucketBatchSampler: rank {rank} is outside [0, num_replicas={num_replicas})"
            )
        self.lengths = [int(n) for n in lengths]
        for index, length in enumerate(self.lengths):
            if length < 0:
                raise ValueError(f"BucketBatchSampler: example {index} has length {length} < 0")
            if max_tokens is not None and length > max_tokens:
                raise ValueError(
                    f"BucketBatchSampler: example {index} has length {length}, more than "
                    f"max_tokens={max_tokens}; it fits in no batch (raise max_tokens)"
                )
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self.shuffle = shuffle
        self.seed = seed
        self.pool_size = pool_size
        self.num_replicas = num_replicas
        self.rank = rank
        self.drop_last = drop_last
        self.epoch = 0
        self._plan: tuple[int, list[list[int]]] | None = None

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose order ``__iter__`` gives (as ``DistributedSampler``)."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self._all_batches()[self.rank :: self.num_replicas])

    def __len__(self) -> int:
        """The number of batches of this rank per epoch, the same on every rank."""
        return len(self._all_batches()) // self.num_replicas

    # ------------------------------------------------------------------ the plan

    def _all_batches(self) -> list[list[int]]:
        """Every rank's batches for this epoch, the same on every rank (computed once),
        as many as a multiple of ``num_replicas``."""
        if self._plan is None or self._plan[0] != self.epoch:
            self._plan = (self.epoch, self._even(self._plan_epoch()))
        return self._plan[1]

    def _even(self, batches: list[list[int]]) -> list[list[int]]:
        """``batches`` cut or repeated (``drop_last``) to a multiple of ``num_replicas``."""
        uneven = len(batches) % self.num_replicas
        if not uneven:
            return batches
        if self.drop_last:
            return batches[: len(batches) - uneven]
        missing = self.num_replicas - uneven
        # Fewer batches than replicas: the epoch's order is repeated as often as needed.
        return batches + (batches * missing)[:missing]

    def _plan_epoch(self) -> list[list[int]]:
        rng = random.Random(f"{self.seed}/{self.epoch}")
        order = list(range(len(self.lengths)))
        if self.shuffle:
            rng.shuffle(order)
        # The pool's extent in examples: pool_size batches' worth.
        per_batch = self.batch_size or max(1, self.max_tokens // max(1, self._mean_length()))
        pool = per_batch * self.pool_size
        batches: list[list[int]] = []
        for start in range(0, len(order), pool):
            # A stable sort keeps the shuffled order among equal lengths.
            bucket = sorted(order[start : start + pool], key=self.lengths.__getitem__)
            batches += self._cut(bucket)
        if self.shuffle:
            rng.shuffle(batches)
        return batches

    def _mean_length(self) -> int:
        return sum(self.lengths) // len(self.lengths) if self.lengths else 1

    def _cut(self, sorted_indices: list[int]) -> list[list[int]]:
        """Cut length-sorted indices into batches within both limits."""
        batches: list[list[int]] = []
        current: list[int] = []
        longest = 0
        for index in sorted_indices:
            length = max(self.lengths[index], longest)
            full = self.batch_size is not None and len(current) == self.batch_size
            # A zero-length example still takes a row: count at least one token each.
            too_many = self.max_tokens is not None and max(length, 1) * (len(current) + 1) > self.max_tokens
            if current and (full or too_many):
                batches.append(current)
                current, length = [], self.lengths[index]
            current.append(index)
            longest = length
        if current:
            batches.append(current)
        return batches
