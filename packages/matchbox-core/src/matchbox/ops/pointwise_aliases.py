"""Pointwise ops PyTorch spells twice: an alias's ATen op carries no tag of its own, so
the pointwise family's rule (``pointwise.py``: an op tagged ``pointwise``) reads the tags
of the op it stands for (``torch.absolute`` is ``torch.abs``).  Each alias, its ATen
name first; ``torch.special``'s functions are found by their ATen names
(``special_i1``), the aliases among them by this table too."""

from __future__ import annotations

POINTWISE_ALIASES = {
    "absolute": "abs", "arccos": "acos", "arccosh": "acosh", "arcsin": "asin",
    "arcsinh": "asinh", "arctan": "atan", "arctan2": "atan2", "arctanh": "atanh",
    "divide": "div", "multiply": "mul", "subtract": "sub", "negative": "neg", "fix": "trunc",
    "greater": "gt", "greater_equal": "ge", "less": "lt", "less_equal": "le",
    "not_equal": "ne",
    "special_expit": "sigmoid", "special_psi": "digamma", "special_digamma": "digamma",
    "special_gammaln": "lgamma", "special_gammainc": "igamma", "special_gammaincc": "igammac",
    "special_xlogy": "xlogy", "special_exp2": "exp2", "special_logit": "logit",
    "special_round": "round", "special_sinc": "sinc", "special_log1p": "log1p",
    "special_expm1": "expm1", "special_erf": "erf", "special_erfc": "erfc",
    "special_erfinv": "erfinv", "special_i0": "i0", "special_polygamma": "polygamma",
}
