"""What a compiled graph holding a ``scan`` runs under (:func:`scan_graph_settings`).

A graph whose loops stay loops (:mod:`matchbox.compiler.loops`) needs two of
PyTorch's compile settings changed while it compiles: one for its gradients, one
for inductor's caches.  They are set around each call of the compiled graph and
restored after it, never for the rest of the process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from matchbox.compiler.graph import with_settings

#: The name by which inductor's caches allow a higher-order op (``HigherOrderOperator.cacheable``).
_SCAN_OP_NAME = "torch.ops.higher_order.scan"


def scan_graph_settings(compiled: Callable[..., Any], backend: Any) -> Callable[..., Any]:
    """``compiled`` (a graph holding a scan) run with the settings such a graph needs.

    - AOTAutograd's donated buffers off.  With them on, inductor's backward of a scan gave
      weights read by the body wrong gradients (torch 2.13 and 2.14: the backward's
      donated-buffer indices, counted in the outer graph's inputs, were applied to the
      scan body's, so a saved carry was overwritten; pytorch/pytorch#153679, fixed
      upstream by #193960).
    - Under inductor, the graph cached on disk as a graph without a scan is, so that a
      second process compiles it in seconds (issue 21's warm start; without this, 16 s
      for the README RNN).  Inductor's caches refuse every higher-order op not marked
      cacheable, and do not mark ``scan``; their key holds the scan body's code (the
      graph module and its submodules are pickled into it), so marking it is safe for
      the bodies Matchbox captures, which are graphs of plain ops.  The marking is the
      documented opt-in, ``unsafe_marked_cacheable_functions``, keyed on torch's
      version.  The backward pass then compiles with the forward
      (``force_non_lazy_backward_lowering``): compiled later, at the first backward, it
      would run outside these settings, and AOTAutograd saves a graph's cache entry
      only with its backward.

    The settings apply when a graph compiles, at a call (a recompilation included), so
    every call runs under them (:func:`matchbox.compiler.graph.with_settings`); nothing
    changes for the rest of the process.
    """
    from torch._functorch import config as functorch_config

    settings = [(functorch_config, "donated_buffer", False)]
    if backend == "inductor" and _can_mark_cacheable():
        from torch._inductor import config as inductor_config

        marked = {**inductor_config.unsafe_marked_cacheable_functions,
                  _SCAN_OP_NAME: torch.__version__}
        settings += [(functorch_config, "force_non_lazy_backward_lowering", True),
                     (inductor_config, "unsafe_marked_cacheable_functions", marked)]
    return with_settings(compiled, settings)


def _can_mark_cacheable() -> bool:
    """Whether this torch lets a higher-order op be marked cacheable, and compiles a backward
    with its forward when asked (torch 2.13 does; 2.3 has neither)."""
    from torch._functorch import config as functorch_config
    from torch._inductor import config as inductor_config

    return (hasattr(inductor_config, "unsafe_marked_cacheable_functions")
            and hasattr(functorch_config, "force_non_lazy_backward_lowering"))
