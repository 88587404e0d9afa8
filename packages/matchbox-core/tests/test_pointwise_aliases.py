"""PyTorch's second spellings of pointwise ops (``torch.absolute`` for ``torch.abs``,
``torch.special.expit`` for ``torch.sigmoid``, ...) and ``torch.special``'s pointwise
functions run on batches by the pointwise rule, equal to the loop (values and gradients,
NaN padding, empty and one-long examples, a batch of one).  They raised
``NotImplementedError``: an alias's ATen op carries no ``pointwise`` tag of its own."""

from __future__ import annotations

import pytest
import torch
from family_cases import LAYOUTS, batch_of, check
from hypothesis import given
from strategies import example_lists

from matchbox import _registry
from matchbox.ops.pointwise_aliases import POINTWISE_ALIASES

S = torch.special
# name -> f(x) on values in (0.1, 0.9) (inside every op's domain)
CASES = {
    "torch.absolute": lambda x: torch.absolute(x - 0.5),
    "Tensor.absolute_": lambda x: (x - 0.5).absolute_(),
    "torch.arccos": torch.arccos, "Tensor.arccos": lambda x: x.arccos(),
    "torch.arccosh": lambda x: torch.arccosh(x + 1),
    "torch.arcsin": torch.arcsin, "torch.arcsinh": torch.arcsinh,
    "torch.arctan": torch.arctan, "torch.arctanh": torch.arctanh,
    "torch.arctan2": lambda x: torch.arctan2(x, x.flip(-1)),
    "Tensor.arctan2_": lambda x: (x * 1).arctan2_(torch.tensor(0.5, dtype=x.dtype)),
    "torch.divide": lambda x: torch.divide(x, x + 1),
    "Tensor.divide": lambda x: x.divide(2, rounding_mode="floor"),
    "torch.multiply": lambda x: torch.multiply(x, 3), "Tensor.multiply_": lambda x: (x + 0).multiply_(x),
    "torch.subtract": lambda x: torch.subtract(x, x.exp(), alpha=2),
    "torch.negative": torch.negative, "torch.fix": lambda x: torch.fix(x * 4),
    "torch.greater": lambda x: torch.greater(x, 0.5), "torch.greater_equal": lambda x: x.greater_equal(0.5),
    "torch.less": lambda x: torch.less(x, x.flip(-1)), "torch.less_equal": lambda x: x.less_equal(0.5),
    "torch.not_equal": lambda x: torch.not_equal(x, 0.5),
    "torch.special.expit": S.expit, "torch.special.psi": S.psi, "torch.special.digamma": S.digamma,
    # (torch has no derivative of igamma and igammac in their first argument)
    "torch.special.gammaln": S.gammaln,
    "torch.special.gammainc": lambda x: S.gammainc(torch.tensor(1.5, dtype=x.dtype), x + 1),
    "torch.special.gammaincc": lambda x: S.gammaincc(torch.tensor(0.5, dtype=x.dtype), x),
    "torch.special.xlogy": lambda x: S.xlogy(x, x + 1), "torch.special.exp2": S.exp2,
    "torch.special.logit": lambda x: S.logit(x, eps=1e-6), "torch.special.round": S.round,
    "torch.special.sinc": S.sinc, "torch.special.log1p": S.log1p, "torch.special.expm1": S.expm1,
    "torch.special.erf": S.erf, "torch.special.erfc": S.erfc, "torch.special.erfinv": S.erfinv,
    "torch.special.i0": S.i0, "torch.special.polygamma": lambda x: S.polygamma(1, x),
    # torch.special's own pointwise ops (tagged under their ATen names, special_*)
    "torch.special.i1": S.i1, "torch.special.i1e": S.i1e, "torch.special.erfcx": S.erfcx,
    "torch.special.entr": S.entr, "torch.special.log_ndtr": S.log_ndtr,
    "torch.special.ndtri": S.ndtri, "torch.special.xlog1py": lambda x: S.xlog1py(x, x),
    "torch.special.zeta": lambda x: S.zeta(x + 1.5, x + 1),
    "torch.special.bessel_j0": S.bessel_j0,
}
NO_DERIVATIVE = {"torch.special.zeta"}  # (torch has none: values only)
# The ops torch.special has under its own ATen name, tagged pointwise by the installed torch
# (a release that does not tag one leaves it refused, as before).
_TAGGED = {name for name in CASES
           if any(e.name == name for e in _registry.entries())}


def _values(shape):
    return torch.rand(1, *shape, dtype=torch.float64) * 0.8 + 0.1


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_alias_matches_loop(name, layout, dtype):
    if name not in _TAGGED:
        pytest.skip(f"torch {torch.__version__} does not tag {name}'s ATen op pointwise")
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype, values=_values)
    check(CASES[name], examples, batch, check_grad=name not in NO_DERIVATIVE)


def test_every_alias_of_the_table_is_registered_with_its_canonical_op():
    # (each alias reaches the rule the op it stands for reaches: the pointwise family)
    families = {e.name: e.family for e in _registry.entries()}
    for alias, canonical in POINTWISE_ALIASES.items():
        name = (f"torch.special.{alias[len('special_'):]}" if alias.startswith("special_")
                else f"torch.{alias}")
        assert families.get(name) == "pointwise", name
        assert families.get(name) == families.get(f"torch.{canonical}"), (name, canonical)


@given(example_lists(dims=(True, False), min_length=0))
def test_aliases_of_hypothesis_shapes_match_loop(case):
    examples, batch = case
    check(lambda x: torch.multiply(torch.absolute(x), torch.special.expit(x)).subtract(x),
          examples, batch)
