"""Running a call on a graph compiled for longer padded sizes, rather than compiling its own.

A graph is specialised on the padded sizes of its arguments, so a training run whose
batches vary in length compiles a graph for each bucket.  Padding costs run time;
compiling costs tens of seconds.  So a call with no graph of its own runs on a graph
already compiled for the same batch size and longer padded sizes when that graph's
*work* (examples × padded positions, summed over the batch arguments) is at most
``reuse`` times the call's own (``matchbox.compile(..., reuse=2.0)``): the call's batches
are padded further, as the bucket pads them (padding holds nothing a graph reads).

Only where that is exact: the same structure, batch size, dtypes, devices,
``requires_grad``, grad mode, static sizes and plain tensor arguments; a graph that
changes an argument in place is not reused.  A smaller batch is never run on a graph for
more examples: code may read the batch size (``x.batch_size``, a constant in the graph) or
mix the examples (``batch_mean``), and copies added to fill the graph would change its
result.  ``Specialization.padded_calls`` counts the calls a graph ran for shorter batches.

With ``warmup="auto"`` (or a number of seconds), a call that neither has a graph nor fits
one runs eagerly until the eager calls of its specialisation have cost what compiling
costs (:class:`Warmup`), and only then compiles: a size that comes a few times never
compiles.  This is ski rental: in hindsight, at most twice the cost of the better of
never compiling and compiling at once.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import torch

from matchbox.compiler.structure import Role, Structure, roles
from matchbox.masked_batch import constant_pad

#: What the first compile of a model is expected to cost, before one has been measured.
FIRST_COMPILE_SECONDS = 10.0


class Warmup:
    """Eager calls of each specialisation not yet compiled, and what they cost.

    The cost of an eager call is its time, three times over when it records gradients (a
    backward pass runs after it, outside the call: about twice the forward's).  The
    budget is ``warmup`` seconds, or with ``"auto"`` the mean of the model's compiles so
    far (:data:`FIRST_COMPILE_SECONDS` before the first).
    """

    def __init__(self, warmup: float | str | None):
        self.warmup = warmup
        self.spent: dict[tuple[Any, ...], float] = {}
        self.calls: dict[tuple[Any, ...], int] = {}

    def runs_eagerly(self, key: tuple[Any, ...], graphs: Iterable[Any]) -> bool:
        """Whether the call keyed ``key`` should run eagerly rather than compile now
        (``graphs``: the model's specialisations so far)."""
        if self.warmup is None:
            return False
        if self.warmup == "auto":
            compiles = [s.compile_seconds for s in graphs if s.compiled is not None]
            budget = sum(compiles) / len(compiles) if compiles else FIRST_COMPILE_SECONDS
        else:
            budget = float(self.warmup)
        return self.spent.get(key, 0.0) < budget

    def run(self, key: tuple[Any, ...], call: Any) -> Any:
        """``call()``, timed and counted against ``key``'s budget."""
        start = time.perf_counter()
        result = call()
        seconds = time.perf_counter() - start
        self.spent[key] = self.spent.get(key, 0.0) + seconds * (
            3 if torch.is_grad_enabled() else 1)
        self.calls[key] = self.calls.get(key, 0) + 1
        return result


def check_warmup(warmup: Any) -> None:
    if warmup is None or warmup == "auto" or (
            isinstance(warmup, (int, float)) and not isinstance(warmup, bool) and warmup >= 0):
        return
    raise ValueError(f"matchbox.compile: warmup must be None (compile at a specialisation's "
                     f"first call), 'auto' or a number of seconds of eager calls before "
                     f"compiling, got {warmup!r}")


def check_reuse(reuse: Any) -> None:
    if reuse is None or (isinstance(reuse, (int, float)) and not isinstance(reuse, bool)
                         and reuse >= 1):
        return
    raise ValueError(f"matchbox.compile: reuse must be a number >= 1 (run a call on a graph "
                     f"compiled for longer padded sizes when that costs at most this many times "
                     f"its own work) or None (never), got {reuse!r}")


def larger_graph(graphs: dict[tuple[Any, ...], Any], key: tuple[Any, ...], reuse: float
                 ) -> tuple[tuple[Any, ...], Any] | None:
    """The key and specialisation of the compiled graph with the least work that can run
    the call keyed ``key`` (see the module docstring), or ``None``."""
    structure, params, tensors, *rest = key
    kinds = roles(structure)
    own = work(kinds, tensors)
    best = None
    for other, spec in graphs.items():
        if (spec.eager_reason is not None or spec.compiled is None or spec.mutated or spec.aliased
                or other[0] != structure or other[1] != params or list(other[3:]) != rest):
            continue
        if not _holds(kinds, tensors, other[2]):
            continue
        cost = work(kinds, other[2])
        if cost <= reuse * own and (best is None or cost < best[0]):
            best = (cost, other, spec)
    return None if best is None else best[1:]


def work(kinds: list[Role], tensors: tuple[Any, ...]) -> int:
    """Examples × padded positions, summed over the batches (``tensors``: their keys)."""
    total = 0
    for (role, dims), (shape, *_) in zip(kinds, tensors):
        if role == "data":
            size = shape[0]
            for d, s in zip(dims, shape[1:]):
                if d:
                    size *= s
            total += size
    return max(total, 1)


def _holds(kinds: list[Role], mine: tuple[Any, ...], theirs: tuple[Any, ...]) -> bool:
    """Whether the graph's tensors (``theirs``: their keys) hold the call's: the same but
    for longer padded sizes of dynamic dimensions."""
    for (role, dims), (shape, *meta), (other, *other_meta) in zip(kinds, mine, theirs):
        if meta != other_meta or len(shape) != len(other) or shape[0] != other[0]:
            return False
        flags = dims if role in ("data", "mask") else (False,) * (len(shape) - 1)
        for d, s, t in zip(flags, shape[1:], other[1:]):
            if (d and s > t) or (not d and s != t):
                return False
    return True


def padded(structure: Structure, tensors: list[torch.Tensor], graph: tuple[Any, ...]
           ) -> list[torch.Tensor]:
    """The call's tensors padded to the graph's sizes (``graph``: their keys)."""
    out = []
    for (role, _), t, (shape, *_) in zip(roles(structure), tensors, graph):
        pads: list[int] = []
        for j in range(t.dim() - 1, 0, -1):
            pads += [0, shape[j] - t.size(j)]
        if role != "plain" and any(pads):
            t = constant_pad(t, pads, False if t.dtype == torch.bool else 0)
        out.append(t)
    return out
