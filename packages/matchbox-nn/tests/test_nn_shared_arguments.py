"""Arguments that must be the same for every example (``ignore_index``, ``tau``, ``p``,
``padding_idx``, ...) given one value per example (a batch, as ``x.item()`` under
``@batch`` gives) are refused naming the op and the argument; one number for all runs as
before (the loop's oracle)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import matchbox
from matchbox import MaskedBatch
from matchbox.testing import mb_assert

pytest.importorskip("matchbox.control", reason="@matchbox.batch is matchbox-control's (not in "
                    "the nn environment; the all environment runs these tests)")

LENGTHS = (3, 1, 2)


def _inputs(dtype=torch.float64):
    torch.manual_seed(0)
    xs = [torch.randn(1, n, 4, dtype=dtype) for n in LENGTHS]
    ts = [torch.randint(0, 4, (1, n)) for n in LENGTHS]
    return (xs, MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan")),
            ts, MaskedBatch.fromlist(ts, (True,)))


WEIGHT = torch.randn(5, 4, dtype=torch.float64)
# op, argument, call(x, t, v): v is one number for every example, or a batch of them.
CASES = {
    "cross_entropy": ("cross_entropy", "ignore_index",
                      lambda x, t, v: F.cross_entropy(x.transpose(1, 2), t, ignore_index=v)),
    "nll_loss": ("nll_loss", "ignore_index",
                 lambda x, t, v: F.nll_loss(x.transpose(1, 2), t, ignore_index=v)),
    "gumbel_softmax": ("gumbel_softmax", "tau", lambda x, t, v: F.gumbel_softmax(x, tau=v)),
    "dropout": ("dropout", "p", lambda x, t, v: F.dropout(x, v)),
    "dropout keyword": ("dropout", "p", lambda x, t, v: F.dropout(x, p=v, training=False)),
    "normalize": ("normalize", "p", lambda x, t, v: F.normalize(x, p=v, dim=-1)),
    "embedding": ("embedding", "padding_idx",
                  lambda x, t, v: F.embedding(t, WEIGHT, padding_idx=v)),
    "embedding max_norm": ("embedding", "max_norm",
                           lambda x, t, v: F.embedding(t, WEIGHT, max_norm=v)),
}
INTS = {"ignore_index", "padding_idx"}


def _per_example(x, name, op):
    """One value per example: a number for an example ``x``, a batch for a batch."""
    if name in INTS:
        v = (x.sum() > 0).long()  # 0 or 1
    elif op == "dropout":
        v = torch.sigmoid(x.sum()) * 0.5  # a probability
    else:
        v = x.sum().abs() + 1.0
    v = v.detach()
    return v if isinstance(x, MaskedBatch) else v.item()


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_per_example_value_is_refused_naming_the_op_and_argument(case):
    op, name, f = case
    xs, xb, ts, tb = _inputs()
    for x, t in zip(xs, ts):
        f(x, t, _per_example(x, name, op))  # the loop runs it
    with pytest.raises(NotImplementedError, match=(
            rf"torch.nn.functional.{op}: {name} is a batch \(one value per example, such as "
            rf"x.item\(\) under @batch\), but it must be the same for every example: a number "
            rf"or a plain tensor shared by every example \(only the input may be a batch\); a "
            rf"per-example {name} is not supported: run the examples of each value "
            rf"separately, or pass one value for all")):
        f(xb, tb, _per_example(xb, name, op))


@matchbox.batch
def per_example_tau(x):
    tau = x.sum().abs().item() + 1.0
    return F.gumbel_softmax(x, tau=tau)


def test_a_per_example_number_under_batch_is_refused_naming_the_argument():
    _, xb, _, _ = _inputs()
    with pytest.raises(NotImplementedError, match=r"torch.nn.functional.gumbel_softmax: tau "
                                                  r"is a batch \(one value per example"):
        per_example_tau(xb)


@pytest.mark.parametrize("case", [c for k, c in CASES.items() if k not in (
    "gumbel_softmax", "dropout")], ids=[k for k in CASES if k not in ("gumbel_softmax",
                                                                     "dropout")])
def test_one_value_for_all_examples_equals_the_loop(case):
    op, name, f = case
    xs, xb, ts, tb = _inputs()
    value = 1 if name in INTS else 0.25 if op == "dropout" else 1.5
    mb_assert(lambda x, t: f(x, t, value), [xs, ts], [xb, tb], len(LENGTHS))
