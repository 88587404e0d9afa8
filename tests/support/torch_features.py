"""What the installed torch can do, where the supported releases (torch>=2.3) differ.

Each flag is found by trying the capability on tiny tensors, never by comparing version
strings.  A test whose per-example loop needs a capability the installed torch lacks is
skipped on exactly that flag (``needs``); where Matchbox then raises its own error, the
test pinning that error runs only where the flag is false (``lacks``), so every
environment of the tox matrix (the oldest torch included) runs one of the two.
"""

from __future__ import annotations

import functools
import inspect
import re
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
import torch.utils._pytree


def _works(call: Callable[[], Any]) -> bool:
    try:
        call()
    except RuntimeError:
        return False
    return True


def _attention_of_a_row_without_keys() -> bool:
    hidden = torch.zeros(1, 1, dtype=torch.bool)
    for dtype in (torch.float32, torch.float64):
        q = torch.ones(1, 1, 2, dtype=dtype)
        if F.scaled_dot_product_attention(q, q, q, attn_mask=hidden).isnan().any():
            return False
    return True


class _TensorLike:
    """A class that handles every torch function itself, as a batch does."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return "handled"


def _number_arguments_reach_torch_function() -> bool:
    like = _TensorLike()
    try:
        return all(call() == "handled" for call in (
            lambda: torch.full((1,), like), lambda: torch.zeros(like),
            lambda: F.one_hot(torch.zeros(1, dtype=torch.long), like)))
    except TypeError:
        return False


# Tensor.ldexp_ on a tensor that requires grad: torch 2.3 writes it through
# mul(out=...), which autograd refuses (pytorch/pytorch#68966).
INPLACE_LDEXP_HAS_DERIVATIVE = _works(
    lambda: (torch.ones(1, requires_grad=True) * 1).ldexp_(torch.ones(1)))
# A query row that sees no key gets zeros from F.scaled_dot_product_attention (and so
# from nn.MultiheadAttention with need_weights=False), not NaN as before torch 2.5.
ATTENTION_ROW_WITHOUT_KEYS_GIVES_ZEROS = _attention_of_a_row_without_keys()
# F.pad of a tensor that is empty in a dimension it does not pad: torch 2.3 refuses it
# ("resulted in a negative output size").
PAD_TAKES_EMPTY_DIMENSIONS = _works(lambda: F.pad(torch.zeros(1, 1, 0), [0, 0, 1, 0]))
# F.linear of a (1, length, features) input with a weight vector (features,) and a bias:
# torch 2.3 refuses it ("mat2 must be a matrix", from addmm), though it takes a weight
# vector without a bias.  (Every release so far refuses it for a rank-2 input.)
LINEAR_TAKES_A_WEIGHT_VECTOR_WITH_BIAS = _works(
    lambda: F.linear(torch.zeros(1, 1, 2), torch.zeros(2), torch.zeros(())))
# torch.channel_shuffle has a derivative (torch 2.3: "derivative for channel_shuffle is
# not implemented").
CHANNEL_SHUFFLE_HAS_DERIVATIVE = _works(lambda: torch.channel_shuffle(
    torch.ones(1, 2, 1, requires_grad=True), 2).sum().backward())
# torch.aminmax has a derivative (torch 2.3: "derivative for aten::aminmax is not
# implemented"; Matchbox's batched aminmax, made of amin and amax, has one there too).
AMINMAX_HAS_DERIVATIVE = _works(lambda: torch.aminmax(
    torch.ones(2, requires_grad=True)).max.backward())
# torch.take_along_dim reads a negative index from the end of dim; torch 2.3 raises
# "index -1 is out of bounds" for it, as gather does (and so does Matchbox there).
TAKE_ALONG_DIM_TAKES_NEGATIVE_INDICES = _works(
    lambda: torch.take_along_dim(torch.zeros(1, 1), torch.tensor([[-1]]), 1))
# A tensor-like given where torch takes a number (torch.full's fill_value, a size of
# torch.zeros, F.one_hot's num_classes) reaches its __torch_function__, so a batch there
# reaches Matchbox; torch 2.3's argument parser raises its own TypeError first ("must be
# Number, not MaskedBatch").
NUMBER_ARGUMENTS_REACH_TORCH_FUNCTION = _number_arguments_reach_torch_function()
# torch.load(weights_only=True) can be told to trust more classes (a batch type):
# torch.serialization.add_safe_globals, new in torch 2.4.
SAFE_GLOBALS = hasattr(torch.serialization, "add_safe_globals")
# Pytree nodes registered with key paths (flatten_with_keys_fn), which torch.export names
# its inputs by.
PYTREE_KEY_PATHS = "flatten_with_keys_fn" in inspect.signature(
    torch.utils._pytree.register_pytree_node).parameters
# torch.bmm(..., out_dtype=), which newer releases take: older ones raise their own
# TypeError before a batch reaches Matchbox.
BMM_TAKES_OUT_DTYPE = any(
    "out_dtype" in str(schema) for schema in torch._C._jit_get_schemas_for_operator("aten::bmm"))


# Two torch.compile behaviours, probed by compiling: functions, called only by the tests
# that need them (a compilation takes a second).  Both concern code that writes into an
# out= tensor of another size (torch resizes it), as the original Transformer example
# does (torch.arange(0, D, 2, out=x.new(D))).


@functools.cache
def compile_refuses_an_out_tensor_of_another_size() -> bool:
    """torch.compile(fullgraph=True) refuses such a write ("Shape mismatch with out=
    tensor variant"); torch 2.3's Dynamo compiles it."""
    def write(x: torch.Tensor) -> torch.Tensor:
        return torch.arange(0.0, 6.0, 2.0, out=x.new_empty(6))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's own, about resizing the out= tensor
        try:
            torch.compile(write, backend="eager", fullgraph=True, dynamic=False)(torch.zeros(1))
        except RuntimeError:  # torch._dynamo.exc.Unsupported
            return True
    return False


@functools.cache
def aot_eager_resizes_an_out_input() -> bool:
    """torch.compile(backend="aot_eager") of a graph whose input is such an out= tensor
    gives the result; torch 2.3's AOTAutograd fails copying the resized input back ("The
    size of tensor a (6) must match the size of tensor b (3)")."""
    def write(out: torch.Tensor) -> torch.Tensor:
        return torch.arange(0.0, 6.0, 2.0, out=out)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.compile(write, backend="aot_eager")(torch.zeros(6))
        except RuntimeError:
            return False
    return True


def needs(flag: bool, what: str) -> pytest.MarkDecorator:
    """Skip unless the installed torch can do ``what`` (the loop needs it)."""
    return pytest.mark.skipif(not flag, reason=f"the loop needs a torch that {what}; "
                              f"torch {torch.__version__} does not")


def batch_needs(flag: bool, what: str) -> pytest.MarkDecorator:
    """Skip unless the installed torch can do ``what`` (the batched call needs it: the
    loop does not, and Matchbox cannot do it for that torch)."""
    return pytest.mark.skipif(not flag, reason=f"the batch needs a torch that {what}; "
                              f"torch {torch.__version__} does not")


def lacks(flag: bool, what: str) -> pytest.MarkDecorator:
    """Run only where the installed torch cannot do ``what`` (tests of the error given
    there: Matchbox's, or torch's own where torch refuses the call before Matchbox sees it)."""
    return pytest.mark.skipif(flag, reason=f"torch {torch.__version__} {what}; the error "
                              "given on a torch that cannot is tested on such a torch (tox -e "
                              "oldest)")


def pinned_or_torchs_error(batch: Any) -> Any:
    """``batch.pin_memory()`` where this machine can pin memory (an accelerator);
    elsewhere, check that the batch gives torch's own error, as a tensor does, and
    return ``None``."""
    assert not batch.is_pinned()
    if torch.cuda.is_available():
        pinned = batch.pin_memory()
        assert pinned.is_pinned() and torch.equal(pinned.data, batch.data)
        return pinned
    with pytest.raises(RuntimeError) as plain:
        torch.ones(1).pin_memory()
    with pytest.raises(RuntimeError, match=re.escape(str(plain.value))):
        batch.pin_memory()
    return None
