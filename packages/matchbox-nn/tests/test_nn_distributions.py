"""torch.distributions on batches: what runs (examples of static sizes, ``validate_args=False``
for ``log_prob``) equals the loop, and what does not is refused loudly.

``torch._is_all_true`` (the distributions' argument validation: core's, tested in
``test_is_all_true.py``) refuses an argument out of its support for one example only.
Here, not in core: ``Categorical`` needs matchbox-nn's softmax.
"""

from __future__ import annotations

import inspect

import pytest
import torch
from torch.distributions import Categorical, Normal

from matchbox import MaskedBatch
from matchbox.testing import mb_assert

NAN = float("nan")

# The distributions' argument validation calls torch._is_all_true (Matchbox answers it for a
# batch) in recent torch releases; torch 2.3 asks a bool of the check, which a batch refuses (the
# truth value of a MaskedBatch is ambiguous), so batches of distributions need a newer torch.
_VALIDATES_WITH_IS_ALL_TRUE = hasattr(torch, "_is_all_true") and "_is_all_true" in \
    inspect.getsource(torch.distributions.distribution.Distribution.__init__)
pytestmark = pytest.mark.skipif(not _VALIDATES_WITH_IS_ALL_TRUE,
                                reason="this torch's distributions validate with bool(), not "
                                       "torch._is_all_true")


def _static(size, dtype, features=4):
    xs = [torch.randn(1, features, dtype=dtype) for _ in range(size)]
    return xs, MaskedBatch.fromlist(xs, (False,), padding_value=NAN)


@pytest.mark.parametrize("size", [3, 1])
def test_categorical_log_prob_and_entropy_match_loop(size, dtype):
    xs, xb = _static(size, dtype)
    actions = [torch.randint(0, 4, (1,)) for _ in range(size)]
    ab = MaskedBatch.fromlist(actions, ())
    mb_assert(lambda x, a: Categorical(logits=x, validate_args=False).log_prob(a),
              [xs, actions], [xb, ab], size)
    mb_assert(lambda x: Categorical(logits=x).entropy(), [xs], [xb], size)
    mb_assert(lambda x: Categorical(probs=x.softmax(-1)).entropy(), [xs], [xb], size)


@pytest.mark.parametrize("size", [3, 1])
def test_normal_log_prob_and_entropy_match_loop(size, dtype):
    mus, mb = _static(size, dtype)
    ys, yb = _static(size, dtype)
    mb_assert(lambda m, y: Normal(m, m.exp(), validate_args=False).log_prob(y), [mus, ys],
              [mb, yb], size)
    sigma = torch.rand(4, dtype=dtype) + 0.5  # shared by every example
    mb_assert(lambda m, s, y: Normal(m, s, validate_args=False).log_prob(y),
              [mus, [sigma] * size, ys], [mb, sigma, yb], size)
    mb_assert(lambda m: Normal(m, m.exp()).entropy(), [mus], [mb], size)


def test_an_argument_out_of_its_support_for_one_example_is_refused_naming_it():
    mus = MaskedBatch.fromlist([torch.randn(1, 4), torch.randn(1, 4)], (False,))
    scales = MaskedBatch.fromlist([torch.rand(1, 4) + 0.1, -torch.rand(1, 4) - 0.1], (False,))
    with pytest.raises(ValueError, match=r"^torch\._is_all_true: example 1 has a false value"):
        Normal(mus, scales, validate_args=True)  # (set: other tests may turn it off)


def test_what_does_not_run_is_refused():
    _, xb = _static(2, torch.float64)
    # Validation of a value: torch.distributions asks for a torch.Tensor.
    with pytest.raises(ValueError, match="The value argument to log_prob must be a Tensor"):
        Categorical(logits=xb, validate_args=True).log_prob(
            MaskedBatch.fromlist([torch.tensor([1])] * 2, ()))
    # Sampling draws a plain tensor of the batch's shape (not the loop's numbers).
    with pytest.raises(ValueError, match=r"^Tensor\.mul: a plain tensor argument has size 2 in "
                                         r"dimension 0"):
        Normal(xb, xb.exp()).rsample()
    with pytest.raises(NotImplementedError, match=r"^torch\.multinomial is not implemented"):
        Categorical(logits=xb).sample()
    # A dynamic dimension has no one size for the distribution's batch_shape.
    zb = MaskedBatch.fromlist([torch.randn(1, n, 4) for n in (2, 3)], (True, False))
    with pytest.raises(ValueError, match=r"^size\(\): dimensions \[1\] are dynamic"):
        Categorical(logits=zb)
