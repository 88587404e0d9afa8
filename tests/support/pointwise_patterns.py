"""The pointwise family against the loop, op by op: shared by every batch type's tests.

How to call an op is found by trying argument patterns on one plain example;
the op then runs on random examples and on their batch (built by the batch
type's test) and ``mb_assert`` compares values and gradients.  Ops that draw
random numbers are checked by the caller's ``check_random`` instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch_features import INPLACE_LDEXP_HAS_DERIVATIVE

from matchbox import _registry
from matchbox.testing import mb_assert

# Ops that PyTorch cannot differentiate: values are compared, not gradients.
NO_DERIVATIVE = {"heaviside", "heaviside_", "acosh_", "asinh_", "atanh_", "floor_divide",
                 "floor_divide_", "__floordiv__", "__rfloordiv__", "__ifloordiv__", "igamma",
                 "igammac", "igamma_", "igammac_", "nextafter", "nextafter_",
                 # aliases (pointwise_aliases.py) of ops above, and torch.special's zeta
                 "arccosh_", "arcsinh_", "arctanh_", "special_gammainc", "special_gammaincc",
                 "special_zeta"}
if not INPLACE_LDEXP_HAS_DERIVATIVE:  # torch 2.3: see torch_features.py
    NO_DERIVATIVE.add("ldexp_")
# Ops that draw random numbers: their values cannot equal the loop's.
RANDOM = {"bernoulli", "bernoulli_", "uniform_", "normal_", "exponential_", "cauchy_",
          "geometric_", "log_normal_", "random_", "rrelu", "rrelu_"}
# Argument patterns: (kinds of the example arguments, extra plain arguments).
PATTERNS = [
    (("float",), ()),
    (("float", "float"), ()),
    (("float", "float", "float"), ()),
    (("unit",), ()),
    (("unit", "unit"), ()),
    (("float",), (0.5,)),
    (("float",), (-0.5, 0.5)),
    (("unit",), (1,)),
    (("int",), ()),
    (("int", "int"), ()),
    (("bool",), ()),
    (("bool", "bool"), ()),
    (("bool", "float", "float"), ()),
    (("float", "bool"), (0.5,)),
    (("float", "int"), ()),
]


def of_kind(kind: str, shapes_from: list[torch.Tensor]) -> list[torch.Tensor]:
    """Random examples of one kind (float, unit interval, int or bool), shaped like the given."""
    xs = [torch.randn_like(x) for x in shapes_from]
    if kind == "unit":
        return [x.sigmoid() for x in xs]
    if kind == "int":
        return [(x * 5).round().to(torch.int64) for x in xs]
    if kind == "bool":
        return [x > 0 for x in xs]
    return xs


def call(func: Any, args: list[Any], extra: tuple[Any, ...]) -> Any:
    name = getattr(func, "__name__", "")
    if "polygamma" in name and _registry.tensor_method_name(func) is None:
        return func(1, *args, *extra)  # torch.polygamma(n, input)
    if "polygamma" in name:
        return getattr(args[0], name)(1, *args[1:], *extra)
    if _registry.tensor_method_name(func) is not None:
        # A Tensor method is called as a method (or operator), as users do.
        return getattr(args[0], name)(*args[1:], *extra)
    return func(*args, *extra)


def find_pattern(func: Any) -> tuple[tuple[str, ...], tuple[Any, ...]] | None:
    """The first argument pattern the op accepts on plain tensors."""
    patterns = PATTERNS
    if func.__name__ in RANDOM:  # probabilities for bernoulli and friends
        patterns = [(("unit",) * len(k), e) for k, e in PATTERNS]
    plain = torch.randn(1, 3, 2, dtype=torch.float64)
    for kinds, extra in patterns:
        try:
            with torch.no_grad():
                result = call(func, [of_kind(k, [plain])[0] for k in kinds], extra)
        except Exception:  # noqa: BLE001 - probing which signature the op takes
            continue
        if isinstance(result, torch.Tensor):
            return kinds, extra
    return None


def is_inplace(func: Any) -> bool:
    name = func.__name__
    return (name.endswith("_") and not name.startswith("__")) or (
        name.startswith("__i") and name not in ("__invert__",))


def check_op_against_loop(func: Any, shapes: list[torch.Tensor],
                          make_batch: Callable[[list[torch.Tensor]], Any],
                          check_random: Callable[[Any, Any], None]) -> None:
    """``func`` on examples shaped like ``shapes`` and on their batch equals the loop."""
    pattern = find_pattern(func)
    assert pattern is not None, f"no argument pattern fits {_registry.op_name(func)}"
    kinds, extra = pattern
    xs_args = [of_kind(kind, shapes) for kind in kinds]
    xb_args = [make_batch(xs) for xs in xs_args]
    inplace = is_inplace(func)

    def f(*xs):
        if inplace:  # write into a copy: the inputs are leaves that require grad
            xs = (xs[0] * 1 if xs[0].is_floating_point() else xs[0].clone(),) + xs[1:]
        return call(func, xs, extra)

    if func.__name__ in RANDOM:
        check_random(f(*xb_args), xb_args[0])
        return
    mb_assert(f, xs_args, xb_args, len(shapes), check_grad=func.__name__ not in NO_DERIVATIVE)
