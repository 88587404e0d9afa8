"""Test helpers: compare a function on a batch with the loop over its examples.

The oracle of Matchbox is the per-example loop: ``f`` run on each example alone
must give what ``f`` run on the batch gives, for outputs and for gradients
with respect to the inputs and to module parameters.
"""

from __future__ import annotations

import operator
import random
from collections.abc import Callable, Sequence
from typing import Any

import torch

from matchbox._op_table import batch_types
from matchbox.masked_batch import MaskedBatch

DimSpec = tuple[bool, int]

__all__ = ["mb_rand", "mb_test", "mb_assert", "assert_examples_close"]


def mb_rand(
    batch_size: int,
    *dims: DimSpec,
    dtype: torch.dtype = torch.float64,
    device: Any = None,
    min_size: int = 1,
    padding_value: float = float("nan"),
    generator: random.Random | None = None,
) -> tuple[list[torch.Tensor], MaskedBatch]:
    """Random examples and their batch.

    Each dim is ``(dynamic, size)``: a static dimension has ``size``; a dynamic
    one a random size in ``[min_size, size]`` per example (``min_size=1`` as
    in the original Matchbox; ``min_size=0`` adds empty examples, with several
    dynamic dimensions examples empty in some of them and not in others too).
    An empty ``()`` dim is skipped, as the original did.  Padding holds
    ``padding_value`` (NaN by default), which must never reach a real result.
    """
    rng = generator or random
    dims = tuple(d for d in dims if d != ())
    for i, dim in enumerate(dims):
        if not (isinstance(dim, tuple) and len(dim) == 2 and isinstance(dim[1], int)):
            raise TypeError(f"mb_rand: each dimension is a (dynamic, size) pair, such as "
                            f"(True, 5) or (False, 3); dimension {i} is {dim!r}")
    examples = []
    for _ in range(batch_size):
        shape = [rng.randint(min_size, size) if dynamic else size for dynamic, size in dims]
        examples.append(torch.randn(1, *shape, dtype=dtype, device=device))
    batch = MaskedBatch.fromlist(examples, tuple(d for d, _ in dims), padding_value=padding_value)
    return examples, batch


def mb_test(
    f: Callable[..., Any],
    *specs: Any,
    batch_size: int | None = None,
    dtype: torch.dtype | None = None,
    min_size: int = 1,
    **tolerances: Any,
) -> None:
    """Run ``f`` on random batches built from ``specs`` and on their examples.

    One spec per argument of ``f``:

    - ``(batch_size, (dynamic, size), ...)``: a random batch argument, the
      arguments of :func:`mb_rand` (the original Matchbox form); ``()`` entries
      are skipped, so ``(4, ())`` is a batch of 4 per-example scalars;
    - ``((dynamic, size), ...)``: the same, of ``batch_size`` examples (4 unless
      another spec or the keyword says);
    - a tuple of ints: a random plain tensor of that shape, shared by every
      example (a weight);
    - an int ``k``: the same examples as argument ``k``;
    - anything else: passed unchanged to every call (a module, a flag).

    ``dtype`` defaults to that of ``f``'s parameters (an ``nn.Module``), else
    torch's default dtype (what ``torch.randn`` gives).  Dynamic sizes are drawn
    from ``[min_size, size]``.
    """
    if dtype is None:
        parameter = next(f.parameters(), None) if isinstance(f, torch.nn.Module) else None
        dtype = parameter.dtype if parameter is not None else torch.get_default_dtype()
    size = _spec_batch_size(specs, batch_size)
    example_args: list[list[Any]] = []
    batch_args: list[Any] = []
    for spec in specs:
        if _is_sized_dim_spec(spec) or _is_dim_spec(spec):
            dims = spec[1:] if _is_sized_dim_spec(spec) else spec
            xs, xb = mb_rand(size, *dims, dtype=dtype, min_size=min_size)
        elif isinstance(spec, tuple) and spec and all(type(n) is int for n in spec):
            xb = torch.randn(*spec, dtype=dtype)
            xs = [xb] * size
        elif type(spec) is int:
            if not 0 <= spec < len(batch_args):
                raise ValueError(f"mb_test: argument spec {spec} refers to argument {spec}, "
                                 f"but only {len(batch_args)} come before it")
            xs, xb = example_args[spec], batch_args[spec]
        else:
            xs, xb = [spec] * size, spec
        example_args.append(xs)
        batch_args.append(xb)
    mb_assert(f, example_args, batch_args, size, **tolerances)


def _spec_batch_size(specs: Sequence[Any], batch_size: int | None) -> int:
    """The one batch size of the specs that give one, and the keyword (default 4)."""
    sizes = {spec[0] for spec in specs if _is_sized_dim_spec(spec)}
    if batch_size is not None:
        sizes.add(batch_size)
    if len(sizes) > 1:
        raise ValueError(f"mb_test: the arguments ask for different batch sizes {sorted(sizes)}")
    return sizes.pop() if sizes else 4


def _is_sized_dim_spec(spec: Any) -> bool:
    """``(batch_size, (dynamic, size), ...)``, as :func:`mb_rand` takes it.

    As in the original Matchbox, a tuple of an int and tuples is one (``(4, ())``:
    per-example scalars); a malformed dimension in it is an error, not a value.
    """
    if not (isinstance(spec, tuple) and len(spec) >= 2 and type(spec[0]) is int
            and all(isinstance(d, tuple) for d in spec[1:])):
        return False
    for d in spec[1:]:
        if not _is_dim(d):
            raise ValueError(f"mb_test: argument spec {spec!r}: each dimension after the batch "
                             f"size is (dynamic, size) or (), got {d!r}")
    return True


def _is_dim(d: Any) -> bool:
    return d == () or (isinstance(d, tuple) and len(d) == 2 and d[0] in (True, False)
                       and not isinstance(d[0], str) and type(d[1]) is int and d[1] >= 0)


def _is_dim_spec(spec: Any) -> bool:
    """``((dynamic, size), ...)`` (``()`` entries allowed, as the original wrote them)."""
    return isinstance(spec, tuple) and any(d != () for d in spec) and all(
        d == () or (isinstance(d, tuple) and len(d) == 2 and isinstance(d[0], bool))
        for d in spec
    )


def mb_assert(
    f: Callable[..., Any],
    xs_args: Sequence[Sequence[Any]],
    xb_args: Sequence[Any],
    batch_size: int,
    *,
    params: Sequence[torch.Tensor] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    check_grad: bool = True,
) -> None:
    """Assert that ``f`` on the batch equals ``f`` on each example, values and gradients.

    ``xs_args[i][j]`` is argument ``i`` of example ``j``; ``xb_args[i]`` is
    argument ``i`` of the batched call (a batch built from the same
    examples, or the same plain value).  An output may be a batch or a view of one
    (anything with ``examples()``, such as matchbox-nn's ``TimeMajorBatch``): its
    examples are compared with the loop's.  Gradients are compared with respect to
    every floating-point example tensor and to ``params`` (by default the
    parameters of ``f`` if it is an ``nn.Module``); ``check_grad=False``
    compares values only (for ops without a derivative).

    A batch argument is rebuilt from the examples it holds with NaN padding,
    whatever its own padding: padding must never matter, and NaN shows where it
    does.
    """
    batch_size = operator.index(batch_size)  # a plain int (``xb.size(0)`` works as a size)
    if params is None:
        params = list(f.parameters()) if isinstance(f, torch.nn.Module) else []
    params = [p for p in params if p.requires_grad]
    # Fresh leaves: the loop's examples and the batch built from copies of them.
    # An argument that is not a batch is shared by every example (a weight):
    # one leaf serves the whole loop, one the batch.
    loop_inputs, batch_inputs = [], []
    for xs, xb in zip(xs_args, xb_args):
        if _is_batch(xb):
            loop_inputs.append([_leaf(x, check_grad) for x in xs])
            batch_inputs.append([_leaf(x, check_grad) for x in xs])
        else:
            loop_inputs.append([_leaf(xb, check_grad)] * len(xs))
            batch_inputs.append([_leaf(xb, check_grad)] * len(xs))
    batched = [_rebatch(xb, inputs) if _is_batch(xb) else inputs[0]
               for xb, inputs in zip(xb_args, batch_inputs)]

    loop_outputs = [f(*[inputs[j] for inputs in loop_inputs]) for j in range(batch_size)]
    batch_output = f(*batched)

    loop_flat = [_flatten(y) for y in loop_outputs]
    batch_flat = _flatten(batch_output)
    if any(len(flat) != len(batch_flat) for flat in loop_flat):
        raise AssertionError(
            f"the batch gave {len(batch_flat)} outputs but an example gave "
            f"{[len(flat) for flat in loop_flat]}"
        )
    batch_examples = [_examples_of(y, batch_size) for y in batch_flat]
    weights: list[list[torch.Tensor | None]] = []
    for j in range(batch_size):
        row = []
        for k, y in enumerate(loop_flat[j]):
            assert_examples_close(batch_examples[k][j], y, example=j, output=k,
                                  what="value", rtol=rtol, atol=atol)
            row.append(torch.randn_like(y) if _differentiable(y) else None)
        weights.append(row)
    if not check_grad:
        return

    loop_grads = _gradients(
        sum((_weighted(y, w) for j in range(batch_size)
             for y, w in zip(loop_flat[j], weights[j])), torch.zeros(())),
        _distinct_leaves(loop_inputs, xb_args) + params,
    )
    batch_loss = sum((_weighted(batch_examples[k][j], weights[j][k])
                      for j in range(batch_size) for k in range(len(batch_flat))),
                     torch.zeros(()))
    batch_grads = _gradients(batch_loss, _distinct_leaves(batch_inputs, xb_args) + params)
    names = [f"argument {i} of example {j}" if _is_batch(xb)
             else f"argument {i} (shared by all examples)"
             for i, (xs, xb) in enumerate(zip(loop_inputs, xb_args))
             for j in range(len(xs) if _is_batch(xb) else 1)]
    names += [f"parameter {n}" for n in range(len(params))]
    for name, gl, gb in zip(names, loop_grads, batch_grads):
        if gl is None and gb is None:
            continue
        gl = torch.zeros_like(gb) if gl is None else gl
        gb = torch.zeros_like(gl) if gb is None else gb
        _assert_close(gb, gl, f"gradient of {name}", rtol=rtol, atol=atol)


def _distinct_leaves(inputs: list[list[Any]], xb_args: Sequence[Any]) -> list[Any]:
    return [x for xs, xb in zip(inputs, xb_args)
            for x in (xs if _is_batch(xb) else xs[:1])]


def _leaf(x: Any, requires_grad: bool) -> Any:
    if isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex()):
        return x.detach().clone().requires_grad_(requires_grad)
    return x


def _is_batch(x: Any) -> bool:
    """Whether ``x`` is a batch of any registered batch type (``MaskedBatch``, ``PackedBatch``)."""
    return isinstance(x, batch_types())


def _rebatch(xb: Any, inputs: list[Any]) -> Any:
    """The batch ``xb`` rebuilt from ``inputs`` so that gradients reach them."""
    if not isinstance(xb, MaskedBatch):
        return type(xb).fromlist(inputs, xb.dims)  # another batch type: no padding to fill
    if not (xb.dtype.is_floating_point or xb.dtype.is_complex):
        # No gradient reaches an integer batch (ids, targets): keep it as given, with
        # whatever its padding holds (an id no embedding has, a garbage class index).
        return xb
    rebuilt = MaskedBatch.fromlist(inputs, xb.dims, padding_value=float("nan"))
    if rebuilt.data.shape != xb.data.shape:
        rebuilt = MaskedBatch._make(rebuilt.data, rebuilt.mask, rebuilt.dims)
    return rebuilt


def _flatten(y: Any) -> list[Any]:
    if isinstance(y, (tuple, list)):
        return [leaf for item in y for leaf in _flatten(item)]
    if isinstance(y, dict):
        return [leaf for key in sorted(y) for leaf in _flatten(y[key])]
    if isinstance(y, torch.Tensor) or _is_batch(y):
        return [y]
    return [y]


def _has_examples(y: Any) -> bool:
    """A batch, or a view of one that lays its examples out differently (matchbox-nn's
    ``TimeMajorBatch``: the final states of recurrent modules): it gives ``examples()``."""
    return _is_batch(y) or (not isinstance(y, torch.Tensor)
                            and hasattr(type(y), "__torch_function__")
                            and callable(getattr(y, "examples", None)))


def _examples_of(y: Any, batch_size: int) -> list[Any]:
    if _has_examples(y):
        examples = list(y.examples())
        if len(examples) != batch_size:
            raise AssertionError(f"the batch output has {len(examples)} examples, "
                                 f"expected {batch_size}")
        return examples
    return [y] * batch_size


def _differentiable(y: Any) -> bool:
    return isinstance(y, torch.Tensor) and y.requires_grad and y.is_floating_point()


def _weighted(y: Any, w: torch.Tensor | None) -> torch.Tensor:
    if w is None or not isinstance(y, torch.Tensor) or not y.requires_grad:
        return torch.zeros(())
    return (y.reshape(w.shape) * w).sum().to(torch.float64) if y.numel() else torch.zeros(())


def _gradients(loss: torch.Tensor, leaves: list[Any]) -> list[torch.Tensor | None]:
    tensors = [x for x in leaves if isinstance(x, torch.Tensor) and x.requires_grad]
    if not loss.requires_grad or not tensors:
        return [None for x in leaves]
    grads = iter(torch.autograd.grad(loss, tensors, allow_unused=True))
    return [next(grads) if isinstance(x, torch.Tensor) and x.requires_grad else None
            for x in leaves]


def assert_examples_close(
    batch_value: Any, loop_value: Any, *, example: int, output: int, what: str = "value",
    rtol: float | None = None, atol: float | None = None,
) -> None:
    """Compare one example's batched output with the loop's, naming what differs."""
    if not isinstance(loop_value, torch.Tensor):
        if batch_value != loop_value:
            raise AssertionError(f"example {example}, output {output}: batch gave "
                                 f"{batch_value!r}, loop gave {loop_value!r}")
        return
    if batch_value.shape != loop_value.shape:
        # A batch of per-example scalars holds each as shape (1,); the loop's
        # scalar (a full reduction, a loss) is 0-d.  Any other difference, even
        # a size-one dimension, is a shape the batch got wrong.
        if loop_value.dim() == 0 and batch_value.shape == (1,):
            batch_value = batch_value.reshape(())
        else:
            raise AssertionError(
                f"example {example}, output {output}: batch gave shape "
                f"{tuple(batch_value.shape)}, loop gave {tuple(loop_value.shape)}"
            )
    _assert_close(batch_value, loop_value, f"example {example}, output {output} {what}",
                  rtol=rtol, atol=atol)


def _assert_close(actual: torch.Tensor, expected: torch.Tensor, where: str,
                  rtol: float | None, atol: float | None) -> None:
    if actual.shape != expected.shape:
        raise AssertionError(f"{where}: shape {tuple(actual.shape)} vs {tuple(expected.shape)}")
    if actual.dtype != expected.dtype:
        raise AssertionError(f"{where}: dtype {actual.dtype} vs {expected.dtype}")
    actual, expected = actual.detach(), expected.detach()
    if not actual.is_floating_point() and not actual.is_complex():
        bad = actual != expected
    else:
        default_rtol, default_atol = {torch.float64: (1e-7, 1e-7), torch.float32: (1.3e-6, 1e-5),
                                      torch.float16: (1e-3, 1e-5),
                                      torch.bfloat16: (1.6e-2, 1e-5)}.get(actual.dtype,
                                                                         (1e-5, 1e-8))
        r = default_rtol if rtol is None else rtol
        a = default_atol if atol is None else atol
        close = torch.isclose(actual, expected, rtol=r, atol=a, equal_nan=True)
        bad = ~close
    if bad.any():
        position = tuple(int(i) for i in bad.nonzero()[0])
        raise AssertionError(
            f"{where} differs at position {position}: batch gave "
            f"{actual[position].item()!r}, loop gave {expected[position].item()!r} "
            f"({int(bad.sum())} of {bad.numel()} elements differ)"
        )
