"""A transformer encoder layer over a batch of sequences of different lengths.

The same ``nn.TransformerEncoderLayer`` (d_model 256, 4 heads, feed-forward 1024,
``batch_first=True``, dropout 0, training mode) runs, in one process:

- Matchbox: the layer called on a ``MaskedBatch`` (the key padding mask is
  derived from the batch);
- hand-padded: the layer on the padded tensor with ``src_key_padding_mask``, the
  limit Matchbox aims for (target: within 1.10x);
- ``torch.nested`` jagged: the layer's own computation (its parameters, post-norm,
  relu) written out on a jagged nested tensor, since the module takes nested
  tensors only on its inference fast path: no padding is stored or computed;
- the per-example loop (the oracle, and what users write without batching).

Each is timed forward and forward+backward (ratios to hand-padded).  A second
table times inference (eval mode, no gradients), where PyTorch's fused fast path
(``torch._transformer_encoder_layer_fwd``, nested inside) serves the hand-padded
call and a plain tensor example; Matchbox runs the slow path there (an argument
has ``__torch_function__``).
"""

from __future__ import annotations

import argparse
import random

import torch
import torch.nn.functional as F

from benchmarks._harness import (
    forward_and_backward,
    full_float32,
    interleaved_medians,
    machine,
    median_seconds,
    table,
    write,
)
from matchbox import MaskedBatch

BASELINE = "hand-padded + key padding mask"
LOOP = "per-example loop"


def jagged_layer(layer: torch.nn.TransformerEncoderLayer, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)`` (post-norm, relu, no dropout) on a jagged nested tensor."""
    attn = layer.self_attn
    heads = attn.num_heads
    qkv = F.linear(x, attn.in_proj_weight, attn.in_proj_bias)
    # Nested sdpa wants each of q, k, v contiguous before the head transpose.
    q, k, v = (t.contiguous().unflatten(-1, [heads, -1]).transpose(1, 2)
               for t in qkv.chunk(3, dim=-1))
    a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).flatten(-2)
    x = layer.norm1(x + attn.out_proj(a))
    return layer.norm2(x + layer.linear2(F.relu(layer.linear1(x))))


def variants(layer: torch.nn.TransformerEncoderLayer, examples: list[torch.Tensor]) -> dict:
    """Each variant returns the outputs in a form its own loss can sum over real rows."""
    xb = MaskedBatch.fromlist(examples, (True, False))
    padded = xb.data
    key_padding_mask = ~xb.mask[:, :, 0]  # True = padding, as PyTorch wants it
    real = xb.mask.to(padded.dtype)
    nested = torch.nested.nested_tensor([e[0] for e in examples], layout=torch.jagged)

    return {
        "Matchbox": lambda: layer(xb).data * real,
        BASELINE: lambda: layer(padded, src_key_padding_mask=key_padding_mask) * real,
        "torch.nested (jagged)": lambda: jagged_layer(layer, nested).values(),
        LOOP: lambda: torch.cat([layer(x)[0] for x in examples]),
    }


@full_float32()
def check_same(layer: torch.nn.TransformerEncoderLayer, examples: list[torch.Tensor]) -> None:
    """Every variant computes the loop's outputs on the real rows."""
    xb = MaskedBatch.fromlist(examples, (True, False))
    loop = [layer(x) for x in examples]
    padded = layer(xb.data, src_key_padding_mask=~xb.mask[:, :, 0])
    nested = jagged_layer(layer, torch.nested.nested_tensor([e[0] for e in examples],
                                                            layout=torch.jagged))
    for j, (y, z, n) in enumerate(zip(layer(xb).examples(), loop, nested.unbind())):
        torch.testing.assert_close(y, z, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(padded[j: j + 1, : z.size(1)], z, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(n.unsqueeze(0), z, rtol=1e-4, atol=1e-4)


def timed(fns: dict, repeats: int) -> tuple[dict, dict]:
    """Forward and forward+backward medians (``_harness.forward_and_backward``)."""
    return forward_and_backward(fns, repeats)


def inference(layer: torch.nn.TransformerEncoderLayer, examples: list[torch.Tensor],
              repeats: int) -> dict:
    layer.eval()
    fns = variants(layer, examples)
    with torch.no_grad():
        batched = {k: v for k, v in fns.items() if k != LOOP}
        times = interleaved_medians(batched, repeats)
        times[LOOP] = median_seconds(fns[LOOP], max(1, repeats // 3))
    layer.train()
    return times


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--lengths", type=int, nargs=2, default=[5, 60])
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads (default: torch's); 1 is steadier on a shared machine")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rng = random.Random(0)
    lengths = [rng.randint(*args.lengths) for _ in range(args.batch)]
    examples = [torch.randn(1, n, args.d_model, device=args.device) for n in lengths]
    layer = torch.nn.TransformerEncoderLayer(args.d_model, args.heads, 4 * args.d_model,
                                             dropout=0.0, batch_first=True).to(args.device)
    check_same(layer, examples)
    forward, both = timed(variants(layer, examples), args.repeats)
    infer = inference(layer, examples, args.repeats)
    rows = [[name, f"{forward[name] * 1e3:.2f}", f"{forward[name] / forward[BASELINE]:.3f}",
             f"{both[name] * 1e3:.2f}", f"{both[name] / both[BASELINE]:.3f}",
             f"{infer[name] * 1e3:.2f}", f"{infer[name] / infer[BASELINE]:.3f}"]
            for name in forward]
    real, padded = sum(lengths), len(lengths) * max(lengths)
    text = (f"### nn.TransformerEncoderLayer: batch {args.batch}, d_model {args.d_model}, "
            f"{args.heads} heads, lengths {args.lengths[0]}-{args.lengths[1]} ({real} real rows "
            f"of {padded} padded), {args.device}\n\n{machine()}\n\n"
            + table(["variant", "train fwd ms", f"x {BASELINE}", "train fwd+bwd ms",
                     f"x {BASELINE}", "eval no-grad fwd ms", f"x {BASELINE}"], rows))
    print(text)
    print(f"\nwritten to {write('nn_transformer', text)}")
    return text


if __name__ == "__main__":
    main()
