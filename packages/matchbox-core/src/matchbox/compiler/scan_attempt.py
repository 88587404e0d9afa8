"""An attempt to capture a loop as a ``scan`` that leaves the capture as it was if it fails.

:func:`matchbox.compiler.loops.scan_steps` tries a loop's remaining steps as one
``scan``; when torch refuses it (``scan``'s checks of the carries, its tracing of the
body, ...), the loop is unrolled instead, as for a loop whose state the scan cannot hold
(``NotStructured``).  That is safe only if the failed attempt left no trace in the graph
being captured, so :func:`undone_on_failure` puts back, on any exception:

- the per-example check and step-bound flags the capture recorded (``capture.failures``,
  ``capture.overflows``; the body's trace trims them itself, this covers the rest);
- the unbacked symbols the attempt left pending in the shape environment (a later op
  of the capture would otherwise be asked to bind them);
- the nodes the attempt added to the outer graph: the scan's first carries, its stacked
  steps, the scan node and its items, erased (newest first) where nothing uses them.
  The body's own graph is a subgraph of its own tracer, never in the outer graph.  A
  node holding a symbolic size is left (the tracer may have cached it for a size of a
  tensor made before); unused, it is dead code.

The tensors the attempt made are local to it: none of them is used after it fails.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch


@contextlib.contextmanager
def undone_on_failure(capture: Any) -> Iterator[None]:
    """Run the block; if it raises, the capture, its graph and its shape environment are
    put back as they were before it, and the exception goes on."""
    graph = _outer_graph()
    before = set(graph.nodes) if graph is not None else set()
    n_failures, n_overflows = len(capture.failures), len(capture.overflows)
    shape_env = _shape_env()
    pending = getattr(shape_env, "pending_fresh_unbacked_symbols", None)
    pending_before = list(pending) if pending is not None else []
    try:
        yield
    except Exception:
        del capture.failures[n_failures:], capture.overflows[n_overflows:]
        if pending is not None:
            pending[:] = pending_before
        if graph is not None:
            _erase_new_nodes(graph, before)
        raise


def why(error: BaseException) -> str:
    """What ``capture.unrolled`` says of a loop whose scan torch refused."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    # "Expected init and carry to have same metadata but found:": what differs is next.
    text = " ".join(lines[:2] if lines and lines[0].endswith(":") else lines[:1])
    if len(text) > 300:
        text = text[:297] + "..."
    return f"torch could not capture the loop as a scan ({type(error).__name__}: {text})"


def _outer_graph() -> torch.fx.Graph | None:
    from torch.fx.experimental.proxy_tensor import get_proxy_mode

    mode = get_proxy_mode()
    return None if mode is None else mode.tracer.graph


def _shape_env() -> Any:
    from torch._guards import detect_fake_mode

    fake_mode = detect_fake_mode()
    return None if fake_mode is None else fake_mode.shape_env


def _erase_new_nodes(graph: torch.fx.Graph, before: set[torch.fx.Node]) -> None:
    for node in reversed(list(graph.nodes)):
        if (node not in before and not node.users and node.op in ("call_function", "get_attr")
                and not _symbolic(node.meta.get("val"))):
            graph.erase_node(node)


def _symbolic(value: Any) -> bool:
    return isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool))
