"""``matchbox.extending.any_true``: ``bool(flags.any())`` as eager code reads it on the host
(issue 22: a small CPU mask read as a list, with no op to dispatch), and the checks that
read through it (``fails``)."""

from __future__ import annotations

import pytest
import torch
from op_counts import CountOps

from matchbox._masking import host_reads
from matchbox.extending import any_true, check, deferred_checks, fails


@pytest.mark.parametrize("flags", [
    [], [False], [True], [False, False, True], [False] * 64, [False] * 63 + [True],
    [False] * 65, [False] * 64 + [True],
])
def test_any_true_is_any_of_the_flags(flags):
    tensor = torch.tensor(flags, dtype=torch.bool)
    assert any_true(tensor) is any(flags)


@pytest.mark.parametrize("flags", [[[False, True]], [[False, False]]])
def test_any_true_of_flags_of_two_dims_is_their_any(flags):
    # (a list of lists holds no True: read by any, not as a list)
    assert any_true(torch.tensor(flags)) is bool(torch.tensor(flags).any())


@pytest.mark.parametrize("values", [[0, 2], [0, 0], [0.0, 0.5], [0.0, -0.0]])
def test_any_true_of_numbers_is_whether_one_is_not_zero(values):
    # 2 == True is false in Python: numbers are read by any, not as a list
    assert any_true(torch.tensor(values)) is any(v != 0 for v in values)


def test_a_small_mask_is_read_as_a_list_and_a_large_one_by_any():
    with CountOps() as small:
        assert any_true(torch.zeros(8, dtype=torch.bool)) is False
    assert small.ops["any"] == 0 and small.syncs == 0, small.ops
    with CountOps() as large:
        assert any_true(torch.zeros(65, dtype=torch.bool)) is False
    assert large.ops["any"] == 1, large.ops


def test_a_check_read_at_once_on_the_cpu_runs_no_any():
    failing = torch.tensor([False, True, False])
    with CountOps() as counted:
        assert fails(failing) is True
        assert fails(~failing & failing) is False
    assert counted.ops["any"] == 0, counted.ops
    with pytest.raises(IndexError, match="^example 1 failed$"):
        check(failing, lambda: IndexError("example 1 failed"))
    with host_reads(True), deferred_checks("f"), pytest.raises(IndexError, match="^at once$"):
        # inside a @batch call on the CPU (host reads): raised at once, as before
        check(failing, lambda: IndexError("at once"))
