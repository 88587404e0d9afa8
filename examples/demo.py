"""Matchbox in two minutes: a language model written for ONE line of code, trained on batches.

The model below reads one line of Python (a list of token ids), runs a
recurrent cell over it with a plain ``for`` loop and returns that line's
loss.  It never mentions a batch, padding or a mask.  ``@matchbox.batch``
rewrites its loop so that the same code runs on a ``MaskedBatch`` of lines
of different lengths, and the demo then:

1. checks, on a sample batch, that the batched loss and every gradient equal
   the per-example loop's (in float64, so only a real difference shows);
2. trains on the standard library's own source code (no download: the
   corpus is the Python you are running), with a progress bar;
3. times one training step four ways in this run — the per-example loop,
   Matchbox, Matchbox under ``matchbox.compile`` (with the seconds its graph
   took to compile), and the same model written by hand for a padded batch
   (the limit Matchbox aims for) — and writes the loss curve (PNG) and the
   table (Markdown) under ``examples/out/``.

With ``--compile`` it also trains the model under ``matchbox.compile`` and says how
much of the training time went into compiling: a padded size runs on a graph compiled
for a longer one when that costs at most twice its work (``reuse``), and runs eagerly
until its eager calls have cost what a compile costs (``warmup="auto"``), so sizes that
come rarely do not compile (``docs/compile.md``); ``--eager-only`` leaves the compiled
row out.

``python3 dev.py demo --help`` lists the options (model, batch size, steps,
device).
"""

from __future__ import annotations

import argparse
import copy
import itertools
import sys
import time
from pathlib import Path

import torch
from torch import nn

import matchbox
import matchbox.functional as F
from matchbox import MaskedBatch
from matchbox.data import BucketBatchSampler, Collate, MaskedBatchField, corpus
from matchbox.testing import mb_assert

OUT = Path(__file__).resolve().parent / "out"
CELLS = {"rnn": nn.RNNCell, "gru": nn.GRUCell, "lstm": nn.LSTMCell}


class CodeLM(nn.Module):
    """Predicts each next token of one line of code; written for one example."""

    def __init__(self, vocab_size: int, size: int, cell: str = "gru"):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, size)
        self.cell = CELLS[cell](size, size)
        self.out = nn.Linear(size, vocab_size)

    @matchbox.batch
    def forward(self, tokens):
        """``tokens``: ``(1, n)`` ids of one line, ``<s> ... </s>``; returns its mean loss."""
        x = self.embed(tokens[:, :-1])
        h = x.batch_zeros(x.size(-1))
        c = h
        states = []
        for xt in x.unbind(1):
            if isinstance(self.cell, nn.LSTMCell):
                h, c = self.cell(xt, (h, c))
            else:
                h = self.cell(xt, h)
            states.append(h)
        logits = self.out(F.stack(states, 1))
        return F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:])


def padded_loss(model: CodeLM, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The same model written by hand for a padded batch: the sum of the lines' losses."""
    x = model.embed(ids[:, :-1])
    steps = lengths - 1
    h = x.new_zeros(x.size(0), x.size(-1))
    c = h
    states = []
    for t in range(x.size(1)):
        active = (t < steps).unsqueeze(1)
        if isinstance(model.cell, nn.LSTMCell):
            h_new, c_new = model.cell(x[:, t], (h, c))
            c = torch.where(active, c_new, c)
        else:
            h_new = model.cell(x[:, t], h)
        h = torch.where(active, h_new, h)
        states.append(h)
    logits = model.out(torch.stack(states, 1))
    losses = nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
    mask = torch.arange(x.size(1), device=ids.device) < steps.unsqueeze(1)
    per_line = (losses * mask).sum(1) / steps.clamp(min=1)
    return per_line.sum()


# ---------------------------------------------------------------------- data


def load_lines(max_lines: int) -> list[list[str]]:
    """Logical lines of the standard library, 3 to 40 tokens long, in a fixed order."""
    lines = corpus.code_lines(max_examples=max_lines * 3)
    lines = [line for line in lines if 3 <= len(line) <= 40]
    return lines[:max_lines]


def make_field(lines: list[list[str]]) -> MaskedBatchField:
    field = MaskedBatchField(init_token="<s>", eos_token="</s>", name="line")
    field.build_vocab(lines, max_size=4000, min_freq=2)
    return field


# ---------------------------------------------------------------------- training


class Progress:
    """A one-line progress bar on stderr: step, loss, examples per second."""

    def __init__(self, total: int, width: int = 30):
        self.total, self.width, self.start = total, width, time.perf_counter()
        self.examples = 0

    def update(self, step: int, loss: float, examples: int) -> None:
        self.examples += examples
        done = int(self.width * step / self.total)
        rate = self.examples / (time.perf_counter() - self.start)
        bar = "#" * done + "." * (self.width - done)
        print(f"\r  [{bar}] step {step}/{self.total}  loss {loss:6.3f}  {rate:7.0f} examples/s",
              end="", file=sys.stderr, flush=True)

    def close(self) -> None:
        print(file=sys.stderr)


def train(model: nn.Module, loader, steps: int, device: str) -> list[float]:
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    progress = Progress(steps)
    curve = []
    batches = itertools.chain.from_iterable(itertools.repeat(loader))
    for step, batch in zip(range(1, steps + 1), batches):
        batch = batch.to(device)
        loss = model(batch)
        optimizer.zero_grad()
        loss.backward()  # the gradient of the sum of the lines' losses, as a loop would give
        optimizer.step()
        mean = float(matchbox.batch_mean(loss.detach()))
        curve.append(mean)
        progress.update(step, mean, batch.batch_size)
    progress.close()
    return curve


# ---------------------------------------------------------------------- checks and timing


def check_against_loop(model: CodeLM, batch: MaskedBatch) -> None:
    """The batched loss and all gradients equal the per-example loop's (float64)."""
    model64 = copy.deepcopy(model).double().cpu()
    batch = batch.cpu()
    mb_assert(model64, [list(batch.examples())], [batch], batch.batch_size)


def time_step(fn, repeats: int) -> float:
    """Median seconds of a training step (forward + backward)."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


COMPILED = "Matchbox, matchbox.compile"


def speed_table(model: CodeLM, batch: MaskedBatch, repeats: int,
                compiled: nn.Module | None = None) -> tuple[list, str]:
    examples = list(batch.examples())
    lengths = batch.size_as_tensor(1).data
    ids = torch.where(batch.mask, batch.data, torch.zeros_like(batch.data))

    def loop():
        model.zero_grad()
        sum(model(x) for x in examples).backward()

    def matchbox_step():
        model.zero_grad()
        model(batch).backward()

    def padded():
        model.zero_grad()
        padded_loss(model, ids, lengths).backward()

    def compiled_step():
        model.zero_grad()
        compiled(batch).backward()

    variants = [("per-example loop", loop), ("Matchbox", matchbox_step),
                ("hand-padded PyTorch", padded)]
    compile_seconds = {}
    if compiled is not None:
        variants.insert(2, (COMPILED, compiled_step))
        start = time.perf_counter()
        compiled_step()  # the first call captures and compiles this batch's graph
        compile_seconds[COMPILED] = time.perf_counter() - start
    seconds = {name: time_step(fn, repeats) for name, fn in variants}
    n = len(examples)
    rows = [(name, n / s, seconds["per-example loop"] / s, s / seconds["hand-padded PyTorch"])
            for name, s in seconds.items()]
    lines = ["| variant | examples/s | × the loop | × hand-padded | compile s |",
             "|---|---|---|---|---|"]
    lines += [f"| {name} | {rate:.0f} | {speedup:.1f} | {cost:.2f} | "
              f"{compile_seconds[name]:.1f} |" if name in compile_seconds else
              f"| {name} | {rate:.0f} | {speedup:.1f} | {cost:.2f} | |"
              for name, rate, speedup, cost in rows]
    return rows, "\n".join(lines)


def write_outputs(curve: list[float], table: str, header: str, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    markdown = out / "demo.md"
    markdown.write_text(f"{header}\n\n{table}\n")
    written.append(markdown)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib is not installed: no loss-curve PNG)")
        return written
    figure, axes = plt.subplots(figsize=(6, 3.5))
    axes.plot(range(1, len(curve) + 1), curve)
    axes.set_xlabel("step")
    axes.set_ylabel("mean loss per line")
    axes.set_title("CodeLM on the standard library, trained with Matchbox")
    figure.tight_layout()
    png = out / "demo-loss.png"
    figure.savefig(png, dpi=120)
    plt.close(figure)
    written.append(png)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(CELLS), default="gru",
                        help="the recurrent cell (default: gru)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=300, help="training steps (default: 300)")
    parser.add_argument("--size", type=int, default=128, help="hidden size (default: 128)")
    parser.add_argument("--lines", type=int, default=20000,
                        help="lines of code to train on (default: 20000)")
    parser.add_argument("--timing-examples", type=int, default=256,
                        help="examples in the timed batch (default: 256)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats per variant")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--compile", action="store_true",
                        help="train under matchbox.compile (rare padded sizes run eagerly)")
    parser.add_argument("--eager-only", action="store_true",
                        help="leave matchbox.compile out of the speed table")
    parser.add_argument("--out", type=Path, default=OUT,
                        help=f"where the PNG and the Markdown table go (default: {OUT})")
    args = parser.parse_args(argv)
    torch.manual_seed(0)

    print(f"matchbox {matchbox.__version__}, torch {torch.__version__}, device {args.device}")
    lines = load_lines(args.lines)
    field = make_field(lines)
    print(f"corpus: {len(lines)} lines of the standard library, vocabulary {len(field.vocab)}")
    loader = torch.utils.data.DataLoader(
        lines, collate_fn=Collate(field),
        batch_sampler=BucketBatchSampler([len(line) for line in lines], args.batch_size))
    model = CodeLM(len(field.vocab), args.size, args.model).to(args.device)

    sample = field.process(lines[:8])
    check_against_loop(model, sample)
    print("check: the batched loss and gradients equal the per-example loop's  [ok]")

    print(f"training a {args.model} language model, batch {args.batch_size}, "
          f"{args.steps} steps{', compiled' if args.compile else ''}:")
    # (rare padded sizes run eagerly rather than compile: docs/compile.md, "warmup")
    compiled = matchbox.compile(model, warmup="auto") if args.compile else None
    start = time.perf_counter()
    curve = train(compiled or model, loader, args.steps, args.device)
    if compiled is not None:
        spent = sum(s.compile_seconds for s in compiled.specializations)
        total = time.perf_counter() - start
        print(f"compiled {len(compiled.specializations)} graphs in {spent:.0f} s: "
              f"{100 * spent / total:.0f}% of the {total:.0f} s of training")
        for spec in compiled.specializations:  # (shorter batches run padded on longer graphs)
            print(f"  {spec.summary}: {spec.calls} calls ({spec.padded_calls} padded to it), "
                  f"{spec.warmup_calls} eager before it, {spec.compile_seconds:.0f} s to compile")
        eager = args.steps - sum(spec.calls for spec in compiled.specializations)
        print(f"  {eager} calls ran eagerly (warming up, or of sizes never compiled)")

    timed = field.process(lines[-args.timing_examples:], device=args.device)
    # The table's compiled row: its own graph, compiled at its first call (no warm-up).
    compiled = None if args.eager_only else matchbox.compile(model)
    _, table = speed_table(model, timed, args.repeats, compiled)
    header = (f"CodeLM ({args.model}, hidden {args.size}), one training step on "
              f"{args.timing_examples} lines of 3–40 tokens, {args.device}; "
              f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print()
    print(header)
    print(table)
    for path in write_outputs(curve, table, header, args.out):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
