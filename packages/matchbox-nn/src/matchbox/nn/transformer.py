"""Transformer stacks on batches: :func:`run_encoder` and :func:`run_decoder`.

``nn.TransformerEncoderLayer`` and ``nn.TransformerDecoderLayer`` take batches
directly (``batch_first=True``; a ``batch_first=False`` layer takes
``matchbox.nn.time_major(x)``): their parts are ``nn.MultiheadAttention``,
linear layers, ``layer_norm``, dropout and activations, each of which has a
batch handler.

The stacks ``nn.TransformerEncoder`` and ``nn.TransformerDecoder`` (and
``nn.Transformer``, which holds them) cannot: before running their layers
they ask the input for its sequence length (``src.size()``, to recognise a
causal mask), which a batch cannot answer since its examples differ there
(``size()`` raises, naming the dynamic dimension); in eval mode with a
``src_key_padding_mask`` the encoder first tries to build a nested tensor
(``torch._nested_tensor_from_mask_left_aligned``, not implemented for
batches).  Their forward is not a torch function, so Matchbox cannot answer
for it.  These two functions run a stack the way its forward does (the
layers in turn, then the final norm), so per-example code written with them
runs unchanged on a tensor (where they call the module itself) and on a
batch.  The loop's fused fast paths (eval mode without gradients) compute
the same function, up to rounding.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from matchbox.extending import MaskedBatch
from matchbox.nn.time_major import TimeMajorBatch

__all__ = ["run_encoder", "run_decoder"]


def run_encoder(encoder: nn.TransformerEncoder, src: Any, mask: Any = None,
                src_key_padding_mask: Any = None, is_causal: bool | None = None) -> Any:
    """``encoder(src, mask, src_key_padding_mask, is_causal)``, for tensors and batches.

    On a batch (or its time-major view, for ``batch_first=False`` layers),
    ``mask`` is a plain tensor of the padded sizes (each example reads its
    top-left corner) and ``src_key_padding_mask`` a batch of per-example
    ``(1, length)`` masks.
    """
    if not isinstance(src, (MaskedBatch, TimeMajorBatch)):
        return encoder(src, mask=mask, src_key_padding_mask=src_key_padding_mask,
                       is_causal=is_causal)
    is_causal = _causal_hint(mask, is_causal)
    output = src
    for layer in encoder.layers:
        output = layer(output, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                       is_causal=is_causal)
    return output if encoder.norm is None else encoder.norm(output)


def run_decoder(decoder: nn.TransformerDecoder, tgt: Any, memory: Any, tgt_mask: Any = None,
                memory_mask: Any = None, tgt_key_padding_mask: Any = None,
                memory_key_padding_mask: Any = None, tgt_is_causal: bool | None = None,
                memory_is_causal: bool = False) -> Any:
    """``decoder(tgt, memory, ...)``, for tensors and batches (masks as in :func:`run_encoder`)."""
    if not isinstance(tgt, (MaskedBatch, TimeMajorBatch)):
        return decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                       tgt_key_padding_mask=tgt_key_padding_mask,
                       memory_key_padding_mask=memory_key_padding_mask,
                       tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)
    tgt_is_causal = _causal_hint(tgt_mask, tgt_is_causal)
    output = tgt
    for layer in decoder.layers:
        output = layer(output, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                       tgt_key_padding_mask=tgt_key_padding_mask,
                       memory_key_padding_mask=memory_key_padding_mask,
                       tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)
    return output if decoder.norm is None else decoder.norm(output)


def _causal_hint(mask: Any, is_causal: bool | None) -> bool:
    """What the stacks pass their layers: the hint, or whether ``mask`` is causal.

    The stacks compare the mask with a causal one of the sequence length; on a
    batch the mask spans the padded length, and it is causal there exactly
    when every example's top-left corner of it is causal.
    """
    if is_causal is not None or mask is None:
        return bool(is_causal)
    if mask.dtype == torch.bool:
        # PyTorch compares the float form (True = hidden -> -inf).
        mask = torch.zeros(mask.shape, device=mask.device).masked_fill(mask, float("-inf"))
    size = mask.size(-2)
    causal = nn.Transformer.generate_square_subsequent_mask(size, device=mask.device,
                                                            dtype=mask.dtype)
    return mask.shape == causal.shape and bool((mask == causal).all())
