"""addmm, addmv and baddbmm on batches against the per-example loop (values and
gradients): ``beta * input + alpha * product``.  Padding holds NaN, so padding summed into
a product, or reaching a gradient, shows up as a mismatch."""

from __future__ import annotations

import pytest
import torch
from family_cases import batch_of, check

ROWS = ((False,), [(4,), (4,), (4,)])  # examples (1, 4): one-row matrices
SEQUENCES = ((True, False), [(3, 4), (1, 4), (0, 4), (5, 4)])  # (1, n, 4)


def _plain(*shape, dtype):
    return torch.randn(*shape, dtype=torch.float64).to(dtype)


@pytest.mark.parametrize("case", [
    pytest.param(lambda x, p: torch.addmm(p(2), x, p(4, 2)), id="addmm"),
    pytest.param(lambda x, p: torch.addmm(p(1, 2), x, p(4, 2), beta=0.5, alpha=2), id="addmm-ab"),
    pytest.param(lambda x, p: p(2).addmm(x, p(4, 2), beta=0), id="addmm-beta-0"),
    pytest.param(lambda x, p: torch.addmm(x[:, :2], x, p(4, 2)), id="addmm-batch-input"),
    pytest.param(lambda x, p: torch.addmv(p(1), x, p(4)), id="addmv"),
    pytest.param(lambda x, p: x.sum(1).addmv(x, p(4), alpha=3, beta=2), id="addmv-batch-input"),
])
def test_add_products_of_one_row_examples_match_loop(case, dtype):
    dims, shapes = ROWS
    examples, batch = batch_of(shapes, dims, dtype)
    plain = {}  # one plain operand per shape, the same for the loop and the batch

    def p(*shape):
        return plain.setdefault(shape, _plain(*shape, dtype=dtype))

    check(lambda x: case(x, p), examples, batch)


@pytest.mark.parametrize("case", [
    pytest.param(lambda x, p: torch.baddbmm(p(1, 1, 2), x, p(1, 4, 2)), id="plain-input"),
    pytest.param(lambda x, p: x.sum(2, keepdim=True).baddbmm(x, x.transpose(1, 2), alpha=0.1),
                 id="batch-input-dynamic-square"),
    pytest.param(lambda x, p: torch.baddbmm(x @ x.transpose(1, 2), x, x.transpose(1, 2),
                                            beta=0.5), id="beta"),
    pytest.param(lambda x, p: torch.baddbmm(p(1, 1, 2) * torch.nan, x, p(1, 4, 2), beta=0),
                 id="beta-0-ignores-nan"),
])
def test_baddbmm_of_sequences_matches_loop(case, dtype):
    # zero- and one-length examples: the products of empty matrices are real, as in the loop
    dims, shapes = SEQUENCES
    examples, batch = batch_of(shapes, dims, dtype)
    plain = {}

    def p(*shape):
        return plain.setdefault(shape, _plain(*shape, dtype=dtype))

    check(lambda x: case(x, p), examples, batch)


def test_add_products_refuse_wrong_ranks_and_growing_inputs_naming_the_op():
    _, rows = batch_of(ROWS[1], ROWS[0])
    _, sequences = batch_of(SEQUENCES[1], SEQUENCES[0])
    with pytest.raises(RuntimeError, match=r"^torch\.addmm: each example of mat1 must have 2 "
                                           r"dimensions, got 3"):
        torch.addmm(torch.zeros(2), sequences, torch.ones(4, 2, dtype=torch.float64))
    with pytest.raises(RuntimeError, match=r"^Tensor\.baddbmm: batch2 must have 3 dimensions, "
                                           r"got 2"):
        torch.zeros(1).baddbmm(sequences, torch.ones(4, 2, dtype=torch.float64))
    with pytest.raises(RuntimeError, match=r"^torch\.addmv: input \(each example's shape "
                                           r"\(1, 3\)\) does not broadcast to the product's "
                                           r"\(1,\)"):
        torch.addmv(torch.zeros(1, 3, dtype=torch.float64), rows,
                    torch.ones(4, dtype=torch.float64))
    with pytest.raises(RuntimeError, match=r"^torch\.addmm: input \(each example's shape "
                                           r"\(1, 3\)\) does not broadcast to the product's "
                                           r"\(1, 1\)"):
        torch.addmm(torch.zeros(1, 3, dtype=torch.float64), rows,
                    torch.ones(4, 1, dtype=torch.float64))
    with pytest.raises(NotImplementedError, match=r"^torch\.addmm: out= is not supported"):
        torch.addmm(torch.zeros(2), rows, torch.ones(4, 2, dtype=torch.float64),
                    out=torch.empty(0))


ADDMM_TAKES_OUT_DTYPE = any("out_dtype" in str(schema) for schema in
                            torch._C._jit_get_schemas_for_operator("aten::addmm"))


@pytest.mark.skipif(not ADDMM_TAKES_OUT_DTYPE,
                    reason=f"torch {torch.__version__}'s addmm has no out_dtype= (its own "
                           "TypeError comes first)")
def test_add_products_refuse_out_dtype_naming_the_op():
    _, rows = batch_of(ROWS[1], ROWS[0])
    _, sequences = batch_of(SEQUENCES[1], SEQUENCES[0])
    weight = torch.ones(4, 2, dtype=torch.float64)
    with pytest.raises(NotImplementedError, match=r"^torch\.addmm: out_dtype= is not "
                                                  r"supported for batches"):
        torch.addmm(torch.zeros(2), rows, weight, out_dtype=torch.float32)
    with pytest.raises(NotImplementedError, match=r"^torch\.baddbmm: out_dtype= is not "
                                                  r"supported for batches"):
        torch.baddbmm(torch.zeros(1), sequences, weight.unsqueeze(0), out_dtype=torch.float32)
