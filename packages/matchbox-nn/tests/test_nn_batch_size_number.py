"""``x.size(0)`` of a batch beside PyTorch's recurrent modules: the batch size where the
module reads a size (its initial state's check); refused where the code computes with it.

``nn.RNN``/``nn.GRU``/``nn.LSTM`` compare their initial state's size with the batch size
they read from the input (``x.size(0)`` with ``batch_first=True``); that check must still
take a plain ``(layers, 1, hidden)`` state (every example's own) and one built with
``x.size(0)`` as a size, while ``/ x.size(0)`` in the same code raises ``TypeError``
(each example's ``/ 1``, the batch's ``/ B``).
"""

from __future__ import annotations

import pytest
import torch

from matchbox import MaskedBatch
from matchbox.testing import mb_assert

REFUSED = r"x\.size\(0\) of a MaskedBatch .* used as a number .* Use x\.batch_size .* or 1"


@pytest.mark.parametrize("kind", [torch.nn.RNN, torch.nn.GRU, torch.nn.LSTM])
@pytest.mark.parametrize("lengths", [[3], [3, 1, 2]])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_recurrent_module_with_a_shared_state_and_a_state_built_with_x_size_0(kind, lengths, dtype):
    torch.manual_seed(0)
    rnn = kind(4, 5, num_layers=2, batch_first=True).to(dtype)
    h0 = torch.randn(2, 1, 5, dtype=dtype, requires_grad=True)  # a learned start state

    def model(x):
        state = (h0, torch.zeros(2, x.size(0), 5, dtype=dtype)) if kind is torch.nn.LSTM \
            else h0
        out, _ = rnn(x, state)
        return out.sum(1) + out.mean(1)

    examples = [torch.randn(1, n, 4, dtype=dtype) for n in lengths]
    batch = MaskedBatch.fromlist(examples, (True, False))
    mb_assert(model, [examples], [batch], len(examples), params=[h0, *rnn.parameters()])


@pytest.mark.parametrize("kind", [torch.nn.RNN, torch.nn.GRU, torch.nn.LSTM])
def test_a_loss_over_x_size_0_beside_a_recurrent_module_is_refused(kind):
    rnn = kind(4, 5, batch_first=True).double()
    h0 = torch.zeros(1, 1, 5, dtype=torch.float64)
    batch = MaskedBatch.fromlist([torch.randn(1, n, 4, dtype=torch.float64) for n in (3, 1)],
                                 (True, False))
    out, _ = rnn(batch, (h0, h0) if kind is torch.nn.LSTM else h0)
    with pytest.raises(TypeError, match=REFUSED):
        out.sum(1) / batch.size(0)
    with pytest.raises(TypeError, match=REFUSED):
        out.size(0) * out.mean(1)
