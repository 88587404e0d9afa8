"""Matchbox's files on TorchDynamo's skip list (see :func:`hide_from_torch_compile`)."""

from __future__ import annotations


def hide_from_torch_compile(*package_names: str) -> None:
    """Make ``torch.compile`` run Matchbox's code eagerly (a graph break at every batch op).

    TorchDynamo traces Python, and Matchbox's dispatch is Python: traced, it gave
    wrong results (generated methods differ only in the op they close over, and
    a compiled frame of one was reused for another).  Matchbox's own files are
    therefore added to Dynamo's skip list, so ``torch.compile`` of a model that
    uses batches gives the eager result; :func:`compile` is the way to compile them.
    """
    try:
        from torch._dynamo import trace_rules as rules
    except ImportError:  # torch 2.3's name for it
        from torch._dynamo import skipfiles as rules  # type: ignore[no-redef]
    for name in package_names:
        rules.add(name)

