"""hstack/column_stack/dstack/vstack/row_stack and atleast_1d/2d/3d on per-example scalars
and plain parts, and their refusals (the registry's cases are in test_shape.py)."""

from __future__ import annotations

import pytest
import torch
from family_cases import LAYOUTS, batch_of, check

STACKS = [
    pytest.param(lambda x: torch.hstack([x, x * 2]), id="hstack"),
    pytest.param(lambda x: torch.dstack((x, x + 1)), id="dstack"),
    pytest.param(lambda x: torch.column_stack([x, x]), id="column_stack"),
    pytest.param(lambda x: torch.atleast_3d(x), id="atleast_3d"),
    pytest.param(lambda x: torch.atleast_2d(x, x)[1], id="atleast_2d-two"),
    pytest.param(lambda x: torch.vstack([x]), id="vstack-one"),
]


@pytest.mark.parametrize("f", STACKS)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_stacks_match_loop(f, layout, dtype):
    # The layouts hold zero- and one-length examples and a batch of one.
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    check(f, examples, batch)


@pytest.mark.parametrize("f", [
    pytest.param(lambda x: torch.column_stack([x, x * 2]), id="column_stack"),
    pytest.param(lambda x: torch.column_stack([x, torch.ones(1, dtype=x.dtype)]),
                 id="column_stack-plain"),
    pytest.param(lambda x: torch.dstack([x, x]), id="dstack"),
    pytest.param(lambda x: torch.atleast_2d(x) + 0, id="atleast_2d"),
    pytest.param(lambda x: torch.atleast_3d(x, x)[0], id="atleast_3d"),
    pytest.param(lambda x: torch.hstack([x.unsqueeze(1), torch.ones(1, 2, dtype=x.dtype)]),
                 id="hstack-plain"),
])
def test_stacks_of_per_example_scalars_match_loop(f, dtype):
    examples, batch = batch_of([(), (), ()], (), dtype)
    check(f, examples, batch)


@pytest.mark.parametrize("f, op", [
    pytest.param(lambda x: torch.vstack([x, x]), "torch.vstack", id="vstack"),
    pytest.param(lambda x: torch.row_stack((x, x)), "torch.row_stack", id="row_stack"),
])
def test_vstack_of_several_parts_is_refused(f, op):
    _, batch = batch_of([(2, 3), (1, 3)], (True, False))
    with pytest.raises(ValueError, match=rf"^{op}: joins its parts along dimension 0, each "
                                         r"example's own batch dimension"):
        f(batch)


def test_hstack_of_per_example_scalars_is_refused():
    # The loop joins 1-D tensors along their dimension 0: (2,), not an example.
    _, batch = batch_of([(), ()], ())
    with pytest.raises(ValueError, match=r"^torch\.hstack: dimension 0 is the batch dimension"):
        torch.hstack([batch, batch])
    with pytest.raises(NotImplementedError, match=r"^torch\.hstack: out= is not supported"):
        torch.hstack([batch, batch], out=torch.empty(0))
