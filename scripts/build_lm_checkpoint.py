"""Build the small pretrained byte-level Llama that bayesflow ships in
``bayesflow/data/files/lm/checkpoint/`` (``model.path: package:lm/checkpoint``).

A Llama built from a config (vocabulary 256: the ids are UTF-8 bytes; nothing
downloaded) is trained from a fixed seed with torch's AdamW on random windows of the IMDB
training reviews the package ships (``imdb_train_subset.csv.gz``, column ``text``,
joined by blank lines into one byte stream) and nothing else: every document of
``lm/corpus/`` and the science text the OOD workflow fine-tunes on are new to it. The
script then measures the held-out loss in nats per byte (on the shipped IMDB *test*
reviews and on each ``lm/corpus`` document), saves the model with ``save_pretrained``
(``model.safetensors``, ``config.json``) and a Hugging Face tokenizer whose ids are the
bytes (:func:`bayesflow.llm.tokenizer.save_byte_tokenizer`), and writes what it measured
to ``build.json`` in the folder.

    OMP_NUM_THREADS=1 PYTHONPATH=. python scripts/build_lm_checkpoint.py            # the shipped one
    PYTHONPATH=. python scripts/build_lm_checkpoint.py --steps 20 --out /tmp/ckpt  # a quick try
    PYTHONPATH=. python scripts/build_lm_checkpoint.py --measure  # re-measure a saved folder

Deterministic on one machine for a given thread count (fixed seed, deterministic
algorithms); other CPUs can differ in the last bits of the weights.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bayesflow.llm.text import byte_encode, read_csv_column, read_text_files
from bayesflow.llm.tokenizer import save_byte_tokenizer

ROOT = Path(__file__).resolve().parents[1]
FILES = ROOT / "bayesflow" / "data" / "files"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=FILES / "lm" / "checkpoint")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--intermediate", type=int, default=384)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--length", type=int, default=256, help="bytes per training window")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--log-every", type=int, default=25)
    parser.add_argument("--measure", action="store_true",
                        help="only re-measure the held-out losses of the saved folder into build.json")
    args = parser.parse_args()
    if args.measure:
        record = json.loads((args.out / "build.json").read_text(encoding="utf-8"))
        record["held_out_nats_per_byte"] = measure(load_model(args.out), record["settings"]["length"])
        write_record(args.out, record)
        return

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    stream = torch.from_numpy(byte_encode("\n\n".join(read_csv_column(FILES / "imdb_train_subset.csv.gz", "text"))))
    model = build_model(args)
    parameters = sum(p.numel() for p in model.parameters())
    print(f"{parameters:,} parameters; {stream.numel():,} training bytes", flush=True)

    started = time.perf_counter()
    final = train(model, stream, args)
    seconds = time.perf_counter() - started

    model.eval()
    held_out = measure(model, args.length)
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(args.out))
    save_byte_tokenizer(args.out)
    record = {
        "parameters": parameters, "training_seconds": round(seconds, 1),
        "final_training_loss_nats_per_byte": round(final, 4),
        "held_out_nats_per_byte": held_out,
        "uniform_nats_per_byte": round(math.log(256), 4),
        "machine": f"{cpu_name()}, {args.threads} torch thread(s), torch {torch.__version__}",
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "measure")},
        "training_data": "bayesflow/data/files/imdb_train_subset.csv.gz (column text), nothing else",
    }
    write_record(args.out, record)
    (args.out / "model.safetensors").chmod(0o644)
    size = (args.out / "model.safetensors").stat().st_size
    print(f"saved {args.out} (model.safetensors {size:,} bytes) in {seconds:.0f} s", flush=True)


def cpu_name() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def write_record(folder: Path, record: dict) -> None:
    (folder / "build.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def load_model(folder: Path) -> Any:
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(folder), local_files_only=True, attn_implementation="eager")
    return model.eval()


def measure(model: torch.nn.Module, length: int) -> dict[str, float]:
    """Held-out nats per byte: 200 shipped IMDB test reviews, and every shipped ``lm``
    text document (``corpus/`` and ``science/``), none of which the model trained on."""
    held_out = {"imdb_test_subset (first 200 reviews)": nats_per_byte(
        model, read_csv_column(FILES / "imdb_test_subset.csv.gz", "text")[:200], length)}
    for path in sorted((FILES / "lm").glob("*/*.txt")):
        if path.parent.name != "statements":
            held_out[f"lm/{path.parent.name}/{path.name}"] = nats_per_byte(model, read_text_files([path]), length)
    for name, value in held_out.items():
        print(f"held-out {name}: {value:.4f} nats/byte", flush=True)
    return {name: round(value, 4) for name, value in held_out.items()}


def build_model(args: argparse.Namespace) -> Any:
    """A float32 Llama from a config: bytes in, no special tokens, eager attention."""
    import transformers

    config = transformers.LlamaConfig(  # type: ignore[call-arg]
        vocab_size=256, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.heads,
        max_position_embeddings=args.context, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        tie_word_embeddings=False, attn_implementation="eager",
    )
    return transformers.LlamaForCausalLM(config)


def train(model: torch.nn.Module, stream: torch.Tensor, args: argparse.Namespace) -> float:
    """AdamW on random windows of the byte stream (linear warmup, cosine decay to 10%);
    returns the mean loss of the last 50 steps (nats per byte)."""
    generator = torch.Generator().manual_seed(args.seed)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    other = [p for n, p in model.named_parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay}, {"params": other, "weight_decay": 0.0}],
        lr=args.lr, betas=(0.9, 0.95),
    )

    def rate(step: int) -> float:
        if step < args.warmup:
            return (step + 1) / args.warmup
        progress = (step - args.warmup) / max(1, args.steps - args.warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
    model.train()
    recent: list[float] = []
    started = time.perf_counter()
    for step in range(args.steps):
        starts = torch.randint(0, stream.numel() - args.length, (args.batch,), generator=generator)
        batch = torch.stack([stream[s : s + args.length] for s in starts.tolist()]).long()
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        recent = [*recent[-49:], loss.item()]
        if step % args.log_every == 0 or step == args.steps - 1:
            elapsed = time.perf_counter() - started
            print(f"step {step:5d}  loss {np.mean(recent):.4f}  {elapsed:7.1f} s", flush=True)
    return float(np.mean(recent))


@torch.no_grad()
def nats_per_byte(model: torch.nn.Module, documents: list[str], length: int) -> float:
    """Mean next-byte loss over each document's non-overlapping windows (every byte but
    the first of a window is predicted; a short document is one shorter window)."""
    total, count = 0.0, 0
    for document in documents:
        ids = torch.from_numpy(byte_encode(document))
        for start in range(0, max(1, ids.numel() - 1), length):
            window = ids[start : start + length].long()[None]
            if window.shape[1] < 2:
                continue
            logits = model(input_ids=window).logits[0, :-1].float()
            total += float(torch.nn.functional.cross_entropy(logits, window[0, 1:], reduction="sum"))
            count += window.shape[1] - 1
    return total / count


if __name__ == "__main__":
    main()
