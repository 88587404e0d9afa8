"""``torch.tensordot`` on batches against the per-example loop (values and gradients).

It runs as the ``einsum`` it is: padding holds NaN here, so padding summed into a result,
or a gradient reaching it, shows up as a mismatch."""

from __future__ import annotations

import pytest
import torch
from family_cases import LAYOUTS, batch_of, check


def _plain(*shape):
    """A plain operand (the same for every example, the loop's and the batch's)."""
    return torch.randn(*shape, dtype=torch.float64)


# name -> (f(x, p): p the plain operand, its shape from the examples' static sizes (s1, s2)),
# the layouts it applies to: those whose contracted dimensions are static (a dynamic
# one is summed with a plain tensor spanning the padded size, as in einsum: not the loop's)
STATIC_LAST = ["dynamic-static", "batch-of-one", "all-static"]
CASES = {
    "dims=1": (lambda x, p: torch.tensordot(x, p, dims=1), lambda s1, s2: _plain(s2, 5),
               STATIC_LAST),
    "dims-lists": (lambda x, p: torch.tensordot(x, p, dims=([2], [0])),
                   lambda s1, s2: _plain(s2, 2, 3), STATIC_LAST),
    "negative-dim-to-vector": (lambda x, p: torch.tensordot(x, p, ([-1], [0])),
                               lambda s1, s2: _plain(s2), STATIC_LAST),
    "dims=2": (lambda x, p: torch.tensordot(x, p, dims=2), lambda s1, s2: _plain(s1, s2),
               ["all-static"]),
    "two-pairs-keeping-one": (lambda x, p: torch.tensordot(x, p, dims=([2, 1], [0, 1])),
                              lambda s1, s2: _plain(s2, s1, 4), ["all-static"]),
    "outer-product": (lambda x, p: torch.tensordot(x, p, dims=0), lambda s1, s2: _plain(2),
                      list(LAYOUTS)),
    "scalar-times-batch": (lambda x, p: torch.tensordot(p, x, 0), lambda s1, s2: _plain(()),
                           list(LAYOUTS)),
    "dynamic-dim-kept": (lambda x, p: torch.tensordot(x, p, dims=([1], [0])),
                         lambda s1, s2: _plain(s1, 3), ["static-dynamic", "all-static"]),
}

PARAMS = [pytest.param(name, layout, id=f"{name}-{layout}")
          for name, (_, _, layouts) in CASES.items() for layout in layouts]


@pytest.mark.parametrize("name, layout", PARAMS)
def test_tensordot_matches_loop(name, layout, dtype):
    # The family's layouts hold zero- and one-length examples and a batch of one.
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    f, plain, _ = CASES[name]
    p = plain(*batch.data.shape[1:]).to(dtype)
    check(lambda x: f(x, p), examples, batch)


def test_tensordot_with_the_weight_in_the_graph_matches_loop(dtype):
    weight = torch.randn(4, 2, 3, dtype=dtype, requires_grad=True)
    examples, batch = batch_of([(3, 4), (1, 4), (0, 4)], (True, False), dtype)
    check(lambda x: torch.tensordot(x, weight, dims=([2], [0])), examples, batch,
          params=[weight])


@pytest.mark.parametrize("f, error, message", [
    (lambda x: torch.tensordot(torch.ones(2, 3), x, dims=1), ValueError,
     r"^torch\.tensordot: b is a batch, and the result would hold each example's dimension 0"),
    (lambda x: torch.tensordot(x, x, dims=([2], [2])), ValueError,
     r"^torch\.tensordot: b is a batch"),
    (lambda x: torch.tensordot(x, torch.ones(1, 2), dims=([0], [0])), ValueError,
     r"^torch\.tensordot: dims contracts dimension 0 of a, each example's own batch dimension"),
    (lambda x: torch.tensordot(x, torch.ones(2, 5), dims=(2, 0)), TypeError,
     r"^torch\.tensordot: dims must be an int or two lists of dimensions, got \(2, 0\)"),
    (lambda x: torch.tensordot(x, torch.ones(2), dims=x.size_as_tensor(1)),
     NotImplementedError, r"^torch\.tensordot: dims must be the same for every example, not "
                          r"a batch"),
    (lambda x: torch.tensordot(x, torch.ones(2), dims=-1), RuntimeError,
     r"^torch\.tensordot: tensordot expects dims >= 0, but got dims=-1"),
    (lambda x: torch.tensordot(x, torch.ones(2), dims=4), RuntimeError,
     r"^torch\.tensordot: tensordot expects dims < ndim_a or ndim_b, but got dims=4"),
    (lambda x: torch.tensordot(x, torch.ones(2, 2), dims=([1, 2], [0])), RuntimeError,
     r"^torch\.tensordot: both dimension lists should have same length"),
    (lambda x: torch.tensordot(x, torch.ones(2, 2), dims=([2, 2], [0, 1])), RuntimeError,
     r"^torch\.tensordot: a dimension appears twice in dims"),
    (lambda x: torch.tensordot(x, torch.ones(3, 2), dims=([2], [0])), ValueError,
     r"^torch\.tensordot: index '.' has size 2 in operand 0 and 3 in operand 1"),
    (lambda x: torch.tensordot(x, torch.ones(2), dims=1, out=torch.empty(0)),
     NotImplementedError, r"^torch\.tensordot: out= is not supported for batches"),
])
def test_tensordot_refusals_name_the_op(f, error, message):
    _, batch = batch_of([(3, 2), (1, 2)], (True, False))
    with pytest.raises(error, match=message):
        f(batch)


def test_a_dynamic_dimension_summed_with_a_plain_tensor_needs_the_padded_size():
    # (as in einsum: a plain tensor along a dynamic dimension spans the padded size)
    _, batch = batch_of([(3, 2), (1, 2)], (True, False))
    with pytest.raises(ValueError, match=r"^torch\.tensordot: index '.' is dynamic in the batch "
                                         r"operands; plain operand 1, shared by every example, "
                                         r"has size 2 there, which must be 1 or span the padded "
                                         r"size 3"):
        torch.tensordot(batch, torch.ones(2, 2, dtype=torch.float64), dims=([1], [0]))
