"""Shared helpers of the matchbox-control tests: batches of per-example scalars and
the one-line oracles (in the spirit of JAX's batched ``while_loop`` test), and the
``while`` models that the eager and the compiled tests both run."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

import matchbox
from matchbox import MaskedBatch
from matchbox.testing import mb_assert


def scalars(values: Sequence[float], dtype: torch.dtype = torch.float64
            ) -> tuple[list[torch.Tensor], MaskedBatch]:
    """Per-example scalars (each example a tensor of shape ``(1,)``) and their batch."""
    examples = [torch.tensor([v], dtype=dtype) for v in values]
    return examples, MaskedBatch.fromlist(examples, ())


def per_example(result: Any) -> list[Any]:
    """The per-example values of a batch of scalars, as Python numbers."""
    if isinstance(result, MaskedBatch):
        return [e.item() for e in result.examples()]
    return [result.item() if isinstance(result, torch.Tensor) else result]


def assert_oracle(f: Callable[[Any], Any], values: Sequence[float], expected: Sequence[float],
                  dtype: torch.dtype = torch.float64) -> None:
    """``f`` on the batch of ``values`` gives ``expected``, which is also the loop's answer."""
    examples, batch = scalars(values, dtype)
    loop = [per_example(f(x))[0] for x in examples]
    assert loop == list(expected), f"the loop itself gives {loop}"
    assert per_example(f(batch)) == list(expected)


def assert_batch_equals_loop(f: Callable[..., Any], *args: tuple[list[Any], Any],
                             **kwargs: Any) -> None:
    """``mb_assert`` with ``(examples, batch)`` pairs: values and gradients equal the loop."""
    xs_args = [a[0] for a in args]
    xb_args = [a[1] for a in args]
    mb_assert(f, xs_args, xb_args, len(xs_args[0]), **kwargs)


def sequences(lengths: Sequence[int], size: int = 3, dtype: torch.dtype = torch.float64
              ) -> tuple[list[torch.Tensor], MaskedBatch]:
    """Random sequences ``(1, length, size)`` and their batch (padding is NaN)."""
    examples = [torch.randn(1, n, size, dtype=dtype) for n in lengths]
    return examples, MaskedBatch.fromlist(examples, (True, False), padding_value=float("nan"))


def assert_shared_weight_model_equals_loop(f: Callable[..., Any], lengths: Sequence[int],
                                           dtype: torch.dtype = torch.float64) -> None:
    """``f(x, w)`` on ``sequences(lengths)``, with one random ``(3, 3)`` weight ``w`` that
    every example shares, equals the loop (values and gradients)."""
    w = torch.randn(3, 3, dtype=dtype)
    assert_batch_equals_loop(f, sequences(lengths, dtype=dtype), ([w] * len(lengths), w))


# JAX's batched while_loop test: `while x < 3: x += 2` over [0, 1, 2, 3] gives [4, 3, 4, 3].
@matchbox.batch
def jax_oracle(x):
    while x < 3:
        x += 2
    return x


@matchbox.batch
def doubling(x):
    n = 0
    while x.abs() < 10:
        x = x * 2 + 0.5
        n = n + 1
    return x, n


def compiled_for_batches(f: Callable[..., Any], **settings: Any) -> Callable[..., Any]:
    """``f`` under ``matchbox.compile`` (``aot_eager``: PyTorch's kernels, the backward
    derived as inductor's is) for batch arguments; the loop's calls (plain tensors) run
    ``f`` itself.  ``run.compiled`` is the compiled function."""
    compiled = matchbox.compile(f, backend="aot_eager", **settings)

    def run(*args: Any) -> Any:
        if any(isinstance(a, MaskedBatch) for a in args):
            return compiled(*args)
        return f(*args)

    run.compiled = compiled
    return run


def scans_expected() -> int:
    """The scans a loop captured as one gives: none where torch has no ``scan`` (2.3)."""
    from matchbox.compiler import loops

    return 1 if loops.available() else 0

