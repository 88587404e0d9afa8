"""What a compiled graph holding a ``scan`` runs under (:func:`scan_graph_settings`).

A graph whose loops stay loops (:mod:`matchbox.compiler.loops`) needs some of
PyTorch's compile settings changed while it compiles: one for its gradients, one for
what its forward saves, two for inductor's caches, and on the CPU one for the speed of
its steps.  They are set around each call of the
compiled graph and restored after it, never for the rest of the process.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

from matchbox.compiler import scan_partition, slice_copies
from matchbox.compiler.graph import with_settings

#: The name by which inductor's caches allow a higher-order op (``HigherOrderOperator.cacheable``).
_SCAN_OP_NAME = "torch.ops.higher_order.scan"
#: Added to that op's cache key where :mod:`matchbox.compiler.scan_partition` changes what a
#: scan's forward saves (a graph cached before saved a weight's copy every step).
_PARTITION_KEY = "+matchbox-scan-invariants-1"
#: Added where :mod:`matchbox.compiler.slice_copies` fuses a body's slices (a graph cached
#: before called ATen for each of them every step; AOTAutograd's cache key holds no
#: decomposition: its entry would be taken for a graph compiled with the other table).
_SLICE_KEY = "+matchbox-slice-copies-1"

log = logging.getLogger("matchbox.compile")


def scan_graph_settings(compiled: Callable[..., Any], backend: Any,
                        inputs: list[torch.Tensor] = ()) -> Callable[..., Any]:
    """``compiled`` (a graph holding a scan) run with the settings such a graph needs.

    - AOTAutograd's donated buffers off.  With them on, inductor's backward of a scan gave
      weights read by the body wrong gradients (torch 2.13 and 2.14: the backward's
      donated-buffer indices, counted in the outer graph's inputs, were applied to the
      scan body's, so a saved carry was overwritten; pytorch/pytorch#153679, fixed
      upstream by #193960).
    - A view's copy of the body's inputs (``W.t()``'s in an RNN cell) recomputed in the
      scan's backward, not saved (:mod:`matchbox.compiler.scan_partition`): saved, it was a
      copy of the weight for every step.
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
    - On the CPU (every input there), under inductor, the graph's wrapper in C++
      (``cpp_wrapper``): inductor lowers a scan to a loop in the wrapper that calls the
      body's kernels each step, and in the Python wrapper each step cost about 1,000 Python
      bytecodes (forward and backward, the README RNN), so a training step grew with its
      length (25,900 at 16 steps, 73,900 at 64); in C++ it is 10,800 at any length.
      ``options={"cpp_wrapper": False}`` keeps the Python wrapper (``torch.compile``'s
      options are applied inside these settings), as does a graph whose C++ wrapper
      fails to build (:func:`_python_wrapper_if_cpp_fails`).  The wrapper is built apart
      from the kernels (``cpp_wrapper_build_separate``: the wrapper at ``-O1``, the
      kernels at ``-O3``, then linked): built as one file at ``-O3``, the TreeLSTM's two
      wrappers took 17.4 s of CPU time to compile, apart 9.0 s.

    The settings apply when a graph compiles, at a call (a recompilation included), so
    every call runs under them (:func:`matchbox.compiler.graph.with_settings`); nothing
    changes for the rest of the process.
    """
    from torch._functorch import config as functorch_config

    recompute = scan_partition.settings()
    settings = [(functorch_config, "donated_buffer", False), *recompute]
    slices = backend == "inductor" and slice_copies.available()  # (compile_graph's backend)
    if backend == "inductor" and _can_mark_cacheable():
        from torch._inductor import config as inductor_config

        # The key names the partition's change too: a graph cached without it is not taken.
        key = (torch.__version__ + (_PARTITION_KEY if recompute else "")
               + (_SLICE_KEY if slices else ""))
        marked = {**inductor_config.unsafe_marked_cacheable_functions, _SCAN_OP_NAME: key}
        settings += [(functorch_config, "force_non_lazy_backward_lowering", True),
                     (inductor_config, "unsafe_marked_cacheable_functions", marked)]
    if backend == "inductor" and inputs and all(t.device.type == "cpu" for t in inputs):
        from torch._inductor import config as inductor_config

        in_cpp = [(inductor_config, "cpp_wrapper", True)]
        if hasattr(inductor_config, "cpp_wrapper_build_separate"):
            in_cpp.append((inductor_config, "cpp_wrapper_build_separate", True))
        return _python_wrapper_if_cpp_fails(with_settings(compiled, [*settings, *in_cpp]),
                                            with_settings(compiled, settings))
    return with_settings(compiled, settings)


def _python_wrapper_if_cpp_fails(in_cpp: Callable[..., Any], in_python: Callable[..., Any]
                                 ) -> Callable[..., Any]:
    """``in_cpp``, and from the first call whose C++ wrapper fails to build on, ``in_python``
    (the same graph; it compiles again).

    Torch 2.13's C++ wrapper cannot call an op without a C shim (``aten.split_copy``, from
    ``nn.LSTM``'s gates in a scan) inside a loop's body: the build fails, and without this
    the graph would lose its scans (unrolled) for a setting that only made it faster."""
    current = [in_cpp]

    def run(*inputs: torch.Tensor) -> Any:
        try:
            return current[0](*inputs)
        except Exception as error:
            if current[0] is in_python or not _cpp_build_failed(error):
                raise
            log.info("matchbox.compile: a graph's C++ wrapper failed to build; it runs in the "
                     "Python wrapper (%s)", str(error).strip().splitlines()[0][:200])
            current[0] = in_python
            return in_python(*inputs)

    return run


def _cpp_build_failed(error: BaseException | None) -> bool:
    """Whether ``error`` (or one it wraps) is inductor's failed C++ build."""
    while error is not None:
        if type(error).__name__ == "CppCompileError":
            return True
        error = error.__cause__ or getattr(error, "inner_exception", None)
    return False


def _can_mark_cacheable() -> bool:
    """Whether this torch lets a higher-order op be marked cacheable, and compiles a backward
    with its forward when asked (torch 2.13 does; 2.3 has neither)."""
    from torch._functorch import config as functorch_config
    from torch._inductor import config as inductor_config

    return (hasattr(inductor_config, "unsafe_marked_cacheable_functions")
            and hasattr(functorch_config, "force_non_lazy_backward_lowering"))
