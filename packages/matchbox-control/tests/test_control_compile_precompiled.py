"""``MATCHBOX_PRECOMPILE=1``: a graph holding a loop (a ``scan``) is saved whole at its first
compile and loaded by a second process, which then traces nothing with TorchDynamo
(``matchbox/compiler/precompiled.py``).  Two real processes share one cache folder; each
checks its compiled values and gradients against eager Matchbox, with NaN padding.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

# matchbox.compile over loops: not run by tox's `oldest` (tox.ini, marker compiled_loops).
pytestmark = pytest.mark.compiled_loops

_PROCESS = r'''
import json, torch, matchbox
from torch._dynamo.utils import counters
from matchbox import MaskedBatch
from matchbox.compiler import precompiled

@matchbox.batch
def rnn(x, w):
    h = x.new_zeros(x.size(0), x.size(-1))
    for xt in x.unbind(1):
        h = (xt @ w + h).tanh()
    return h

torch.manual_seed(0)
w = torch.randn(4, 4, dtype=torch.float64, requires_grad=True)
x = MaskedBatch.fromlist([torch.randn(1, n, 4, dtype=torch.float64) for n in (5, 0, 1, 3)],
                         (True, False), padding_value=float("nan"))
compiled = matchbox.compile(rnn, fallback="raise")

def step(f):
    w.grad = None
    h = f(x, w)
    matchbox.batch_sum(h.sum(-1)).backward()
    return h.data.nan_to_num(7.0), w.grad.clone()

(h, grad), (h_eager, grad_eager) = step(compiled), step(rnn)
print(json.dumps({
    "loaded": len(precompiled.LOADED),
    "traced": counters["stats"]["unique_graphs"],
    "scans": compiled.specializations[0].scans,
    "value": (h - h_eager).abs().max().item(),
    "grad": (grad - grad_eager).abs().max().item(),
}))
'''


def _run(folder) -> dict:  # noqa: ANN001
    script = folder / "process.py"  # (@batch reads its function's source from a file)
    script.write_text(_PROCESS)
    env = {**os.environ, "MATCHBOX_PRECOMPILE": "1", "TORCHINDUCTOR_CACHE_DIR": str(folder),
           "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not hasattr(torch.compiler, "load_compiled_function"),
                    reason="torch before 2.10 has no ahead-of-time precompile (the setting "
                           "then compiles as without it)")
def test_a_second_process_loads_the_saved_graph_and_traces_nothing(tmp_path):
    first = _run(tmp_path)
    second = _run(tmp_path)
    assert os.listdir(tmp_path / "matchbox-precompiled")  # saved by the first process
    assert first["loaded"] == 0 and first["traced"] >= 1 and first["scans"] == 1
    assert second["loaded"] == 1 and second["traced"] == 0 and second["scans"] == 1
    for run in (first, second):
        assert run["value"] < 1e-10 and run["grad"] < 1e-10
