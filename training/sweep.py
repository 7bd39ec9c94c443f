"""A recipe sweep at an equal budget: train each variant, evaluate, one table and the curves.

Role: compare training recipes for the embedded model fairly on a shared, loaded machine. Every
variant trains either on the same number of positions (`--tokens`) or for the same process CPU
seconds of training steps (`--cpu-seconds`, the trainer's `--cpu-budget`), never the same wall
time: other people's load changes how many tokens a minute buys, so a wall-clock budget would
reward the variant that happened to run while the machine was quiet. An equal CPU budget lets a
faster step buy more tokens, which is what a recipe's speed options are for; each variant's
tokens, CPU seconds and tokens/s are reported.

Each variant is a set of `training.train` flags (and a shard directory). After training, the
export is scored with `training.evaluate` on the first `--heldout-files` held-out files: exact
match on single-line holes and the loss of plain left-to-right windows (the model card's two
held-out numbers, on a subset), plus the training-mix held-out loss the trainer logs.

Outputs in `--out`: one run directory per variant (resumable: a finished variant is skipped, an
interrupted one resumes), `results.json`, `table.md`, and `curves.csv` (step, tokens, training
loss and held-out loss of every variant).

Run: `python -m training.sweep --tokens 200000 --out runs/sweep --threads 1`, or
`--cpu-seconds 900` instead of `--tokens`. Variants can run as separate concurrent processes on
the same `--out` (`--variants today` and `--variants muon`); a last call naming all of them finds
them trained and scored, and writes the table.
"""

from __future__ import annotations

import argparse
import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from training import evaluate, train
from training.data import DEFAULT_SHARDS


@dataclass(frozen=True)
class Variant:
    name: str
    about: str
    flags: tuple[str, ...] = ()
    train_data: Path = field(default=DEFAULT_SHARDS / "train")


FAST = ("--indexer-every", "4", "--mtp-stride", "4")
MUON_BF16 = (*FAST, "--optimizer", "muon", "--muon-ns-dtype", "bfloat16")
VARIANTS = {v.name: v for v in (
    Variant("today", "today's recipe: AdamW lr 3e-3, mixed FIM, KL every step, full MTP"),
    Variant("fast", "today + KL on every 4th step + MTP head on every 4th position", FAST),
    Variant("lines", "fast + line-level FIM (middles are whole lines)", FAST, DEFAULT_SHARDS / "train-lines"),
    Variant("muon", "fast + Muon for the block matrices", (*FAST, "--optimizer", "muon")),
    Variant("lr6e-3", "fast + peak learning rate 6e-3", (*FAST, "--lr", "6e-3")),
    Variant("muon-lines", "fast + Muon + line-level FIM", (*FAST, "--optimizer", "muon"), DEFAULT_SHARDS / "train-lines"),
    Variant("muon-lines-bf16", "muon-lines with Newton-Schulz in bf16", MUON_BF16, DEFAULT_SHARDS / "train-lines"),
    Variant("muon-lines-bf16-b2", "muon-lines-bf16 with 2 rows per step (twice the optimizer steps)",
            (*MUON_BF16, "--batch-size", "2"), DEFAULT_SHARDS / "train-lines"),
    Variant("muon-lines-bf16-lr6e-3", "muon-lines-bf16 with peak learning rate 6e-3", (*MUON_BF16, "--lr", "6e-3"),
            DEFAULT_SHARDS / "train-lines"),
    Variant("muon-lines-bf16-lr1e-2", "muon-lines-bf16 with peak learning rate 1e-2", (*MUON_BF16, "--lr", "1e-2"),
            DEFAULT_SHARDS / "train-lines"),
    Variant("muon-lines-bf16-lr6e-3-b2", "muon-lines-bf16 with peak learning rate 6e-3 and 2 rows per step",
            (*MUON_BF16, "--lr", "6e-3", "--batch-size", "2"), DEFAULT_SHARDS / "train-lines"),
    Variant("muon-lines-bf16-lr6e-3-min0", "muon-lines-bf16-lr6e-3 with the cosine decaying to zero instead of 10%",
            (*MUON_BF16, "--lr", "6e-3", "--min-lr-ratio", "0"), DEFAULT_SHARDS / "train-lines"),
    Variant("muon-lines-bf16-lr6e-3-wd0", "muon-lines-bf16-lr6e-3 without weight decay",
            (*MUON_BF16, "--lr", "6e-3", "--weight-decay", "0"), DEFAULT_SHARDS / "train-lines"),
    Variant("muon-lines-bf16-lr6e-3-mtp4", "muon-lines-bf16-lr6e-3 with the MTP layer trained on every 4th step",
            (*MUON_BF16, "--lr", "6e-3", "--mtp-every", "4"), DEFAULT_SHARDS / "train-lines"),
)}


def train_flags(variant: Variant, args: argparse.Namespace, run_dir: Path) -> list[str]:
    return [
        "--preset", args.preset, "--train-data", str(variant.train_data), "--heldout-data", str(args.heldout_data),
        "--tokenizer", str(args.tokenizer), "--run-dir", str(run_dir), "--batch-size", str(args.batch_size),
        *budget_flags(args), "--eval-rows", str(args.eval_rows), "--seed", str(args.seed),
        "--threads", str(args.threads), "--checkpoint-minutes", "3", *variant.flags,
    ]


def budget_flags(args: argparse.Namespace) -> list[str]:
    """Tokens: warm-up and evaluations as fractions of the known steps. CPU seconds: the step
    count is not known ahead, so both come from `--warmup-steps` and `--eval-every`."""
    if args.cpu_seconds:
        return ["--total-tokens", "0", "--cpu-budget", str(args.cpu_seconds),
                "--warmup-steps", str(args.warmup_steps), "--eval-every", str(args.eval_every)]
    steps = max(1, args.tokens // (args.batch_size * 1024))
    return ["--total-tokens", str(args.tokens), "--warmup-steps", str(max(1, steps // 10)),
            "--eval-every", str(max(1, steps // args.evals))]


def run_variant(variant: Variant, args: argparse.Namespace) -> dict:
    run_dir = args.out / variant.name
    if not (run_dir / "training.json").is_file():
        status = train.main(train_flags(variant, args, run_dir))
        if status:
            raise SystemExit(f"variant {variant.name}: training exited with {status}")
    result = score(run_dir / "export", args, run_dir / "eval.json")
    summary = json.loads((run_dir / "training.json").read_text())
    speeds = [r["tok_per_s"] for r in _log(run_dir) if "tok_per_s" in r]
    return {"variant": variant.name, "about": variant.about, "tokens": summary["tokens"],
            "wall_time_s": summary["wall_time_s"], "cpu_time_s": summary.get("cpu_time_s"), "median_tok_per_s": sorted(speeds)[len(speeds) // 2] if speeds else None,
            "train_mix_heldout_loss": summary["heldout"].get("heldout_loss")} | result


def score(model_dir: Path, args: argparse.Namespace, out: Path) -> dict:
    """Held-out exact match and plain-window loss of an export (cached in `out`)."""
    if not out.is_file():
        evaluate.main(["--model", str(model_dir), "--tasks", "heldout", "--heldout-files", str(args.heldout_files),
                       "--holes-per-file", "4", "--out", str(out)])
    heldout = json.loads(out.read_text())["heldout"]
    return {"holes": heldout["holes"], "exact_match": heldout["exact_match"],
            "heldout_loss": heldout["loss"]["nats_per_token"], "bits_per_byte": heldout["loss"]["bits_per_byte"]}


def _log(run_dir: Path) -> list[dict]:
    path = run_dir / "log.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def write_curves(names: list[str], out: Path) -> None:
    with (out / "curves.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["variant", "step", "tokens", "cpu_s", "train_loss", "heldout_loss"])
        for name in names:
            seen: dict[int, tuple] = {}
            for r in _log(out / name):
                if "loss" in r:
                    seen[r["step"]] = (r["tokens"], r.get("cpu_s", ""))
                    writer.writerow([name, r["step"], *seen[r["step"]], round(r["loss"], 4), ""])
                elif "heldout_loss" in r:
                    writer.writerow([name, r["step"], *seen.get(r["step"], ("", "")), "", round(r["heldout_loss"], 4)])


def table(results: list[dict], reference: dict | None) -> str:
    base = next((r for r in results if r["variant"] == "today"), None)
    lines = ["| variant | recipe | tokens | CPU s | held-out loss (nats/token) | vs today | bits/byte | held-out exact | "
             "training-mix held-out loss | median tok/s |", "|---|---|---|---|---|---|---|---|---|---|"]
    rows = ([{"variant": "shipped model", "about": "today's embedded model", **reference}] if reference else []) + results
    for r in rows:
        delta = f"{(r['heldout_loss'] / base['heldout_loss'] - 1) * 100:+.1f}%" if base and r.get("tokens") else "-"
        mix = f"{r['train_mix_heldout_loss']:.3f}" if r.get("train_mix_heldout_loss") else "-"
        speed = f"{r['median_tok_per_s']:,.0f}" if r.get("median_tok_per_s") else "-"
        tokens = f"{r['tokens']:,}" if r.get("tokens") else "-"
        cpu = f"{r['cpu_time_s']:,.0f}" if r.get("cpu_time_s") else "-"
        lines.append(f"| {r['variant']} | {r['about']} | {tokens} | {cpu} | {r['heldout_loss']:.3f} | {delta} | {r['bits_per_byte']:.3f} | "
                     f"{r['exact_match']:.1%} ({r['holes']}) | {mix} | {speed} |")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Recipe sweep at an equal token or CPU-time budget.")
    p.add_argument("--variants", default="today,fast,lines,muon,lr6e-3", help=f"comma-separated, from: {', '.join(VARIANTS)}")
    budget = p.add_mutually_exclusive_group(required=True)
    budget.add_argument("--tokens", type=int, help="training positions per variant")
    budget.add_argument("--cpu-seconds", type=float, help="process CPU seconds of training steps per variant")
    p.add_argument("--warmup-steps", type=int, default=2, help="with --cpu-seconds: learning-rate warm-up steps")
    p.add_argument("--eval-every", type=int, default=4, help="with --cpu-seconds: steps between held-out evaluations")
    p.add_argument("--seed", type=int, default=0, help="the same for every variant: weights and batch order")
    p.add_argument("--out", type=Path, default=Path("runs/sweep"))
    p.add_argument("--preset", default="small")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--evals", type=int, default=5, help="held-out evaluations per variant during training")
    p.add_argument("--eval-rows", type=int, default=32)
    p.add_argument("--heldout-files", type=int, default=20, help="held-out files scored at the end")
    p.add_argument("--heldout-data", type=Path, default=DEFAULT_SHARDS / "heldout")
    p.add_argument("--tokenizer", type=Path, default=train.DEFAULT_TOKENIZER)
    p.add_argument("--reference", type=Path, help="also score this model (e.g. the shipped one) on the same files")
    args = p.parse_args(argv)
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown:
        p.error(f"unknown variants: {', '.join(unknown)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)  # the evaluation's too, not only the training's
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for name in args.variants:
        results.append(run_variant(VARIANTS[name], args))
        write_curves(args.variants, args.out)
        (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    reference = score(args.reference, args, args.out / "reference-eval.json") if args.reference else None
    text = table(results, reference)
    (args.out / "table.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
