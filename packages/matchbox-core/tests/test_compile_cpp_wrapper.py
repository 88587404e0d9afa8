"""A CPU graph holding a scan is built with inductor's C++ wrapper (its loop costs no Python
a step), and compiles again in the Python wrapper when that build fails
(``matchbox.compiler.scan_settings``).  The graphs themselves are checked against eager
and the loop in the compiled tests (``tests/examples/test_examples_compiled.py``: an
``nn.LSTM`` whose C++ wrapper fails keeps its two scans)."""

import pytest
import torch

# Settings of graphs holding a scan, which torch 2.3 (tox's `oldest`) has not: loops unroll
# there, and AOTAutograd has no donated buffers to turn off.
pytestmark = pytest.mark.compiled_loops
pytest.importorskip("torch._inductor.config")
from torch._inductor import config as inductor_config  # noqa: E402

from matchbox.compiler.scan_settings import scan_graph_settings  # noqa: E402


class CppCompileError(Exception):
    """Named as inductor's failed C++ build is (the check reads the class's name)."""


def recording(fail_in_cpp: bool = False):
    seen = []

    def compiled(*inputs):
        seen.append(inductor_config.cpp_wrapper)
        if fail_in_cpp and inductor_config.cpp_wrapper:
            raise RuntimeError("backend='inductor' raised:") from CppCompileError("no shim")
        return len(inputs)

    return compiled, seen


def test_a_cpu_graph_compiles_with_the_cpp_wrapper_and_restores_the_setting():
    before = inductor_config.cpp_wrapper
    compiled, seen = recording()
    run = scan_graph_settings(compiled, "inductor", [torch.zeros(2)])
    assert run(torch.zeros(2)) == 1
    assert seen == [True]
    assert inductor_config.cpp_wrapper == before


@pytest.mark.skipif(not hasattr(inductor_config, "cpp_wrapper_build_separate"),
                    reason="this torch builds the wrapper and its kernels as one file")
def test_the_cpp_wrapper_is_built_apart_from_its_kernels():
    # The wrapper at -O1, the kernels at -O3: the TreeLSTM's wrappers built in 9.0 s of
    # CPU time, not 17.4 s (one file at -O3).
    before = inductor_config.cpp_wrapper_build_separate
    seen = []

    def compiled(*inputs):
        seen.append((inductor_config.cpp_wrapper, inductor_config.cpp_wrapper_build_separate))
        return len(inputs)

    assert scan_graph_settings(compiled, "inductor", [torch.zeros(2)])(torch.zeros(2)) == 1
    assert seen == [(True, True)]
    assert inductor_config.cpp_wrapper_build_separate == before


@pytest.mark.parametrize("backend", ["aot_eager", "eager"])
def test_other_backends_keep_their_wrapper(backend):
    compiled, seen = recording()
    scan_graph_settings(compiled, backend, [torch.zeros(2)])(torch.zeros(2))
    assert seen == [inductor_config.cpp_wrapper]


def test_a_failed_cpp_build_compiles_again_in_python_once():
    compiled, seen = recording(fail_in_cpp=True)
    run = scan_graph_settings(compiled, "inductor", [torch.zeros(2)])
    assert run(torch.zeros(2)) == 1
    assert run(torch.zeros(2), torch.zeros(2)) == 2
    assert seen == [True, False, False]  # the C++ build is not tried again


def test_other_errors_are_not_retried():
    def compiled(*inputs):
        raise ValueError("a check in the graph failed")

    run = scan_graph_settings(compiled, "inductor", [torch.zeros(2)])
    with pytest.raises(ValueError, match="a check in the graph failed"):
        run(torch.zeros(2))
