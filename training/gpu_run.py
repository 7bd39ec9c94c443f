"""Train the embedded model on a lent GPU for a fixed wall-clock budget, export it, score it.

Role: the one command to run on a GPU machine (see README, "Reproduce the embedded model"):
1. unpack the compact data (`training.gpu_pack`) carried with the working tree;
2. train with `training.train` on CUDA: bf16 autocast, `torch.compile`, the chosen recipe,
   the schedule following the wall-clock budget, checkpoints every few minutes (a rerun of the
   same command resumes);
3. export in GLM-5's checkpoint format and copy it into `--out` (the device tool's `$OUT`) at
   once, so that a failure in what follows loses no trained model;
4. score the export and a reference model (the shipped one by default) on the same held-out
   files: exact match on single-line holes and the loss of plain left-to-right windows
   (`training.evaluate`); a scoring run that raises is recorded in the report, not fatal;
5. write `report.json` (training summary, the evaluations, the loss curve) and `table.md`, and
   cut any file over `--max-file-bytes` (the device tool returns files of up to 16 MiB) into
   pieces that `python -m training.gpu_pack --join DIR` puts together again.

Invariants:
- Nothing is downloaded; the data and the tokenizer come from the pack only.
- The same code runs on the CPU with a tiny budget (the tests' dry run), only slower.
- Exit status 0 only when training, export and every scoring run succeeded.

Run (on the GPU machine): `python -m training.gpu_run --pack data/gpu --out $OUT --minutes 10`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from model_runtime.embedded import default_model_path
from training import evaluate, train
from training.gpu_pack import split_file, unpack

EXPORT_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
# the sweep's winner, `muon-lines-bf16-lr6e-3-mtp4` (docs/training-sweep.md); pack line-level FIM shards for it
RECIPE = ("--optimizer", "muon", "--muon-ns-dtype", "bfloat16", "--indexer-every", "4", "--mtp-stride", "4",
          "--mtp-every", "4")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Train, export and score the embedded model on a GPU in a fixed time.")
    p.add_argument("--pack", type=Path, default=Path("data/gpu"))
    p.add_argument("--out", type=Path, required=True, help="where the export, report.json and table.md go ($OUT)")
    p.add_argument("--work", type=Path, default=Path("/tmp/glm5-gpu-run"), help="unpacked data and the run directory")
    p.add_argument("--minutes", type=float, default=10.0, help="training wall-clock budget")
    p.add_argument("--preset", default="small")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=6e-3)
    p.add_argument("--device", default="cuda")
    p.add_argument("--no-compile", dest="compile", action="store_false")
    p.add_argument("--no-bf16", dest="bf16", action="store_false",
                   help="train in fp32 (a GPU or CPU without bf16 arithmetic, e.g. a V100 or the dry run here)")
    p.add_argument("--recipe", nargs=argparse.REMAINDER, default=list(RECIPE),
                   help="further training.train flags (last on the line), e.g. --recipe --optimizer muon")
    p.add_argument("--heldout-files", type=int, help="score on the first N held-out files (default: all)")
    p.add_argument("--reference", default="shipped",
                   help="model directory scored on the same files for comparison ('shipped': the embedded model; 'none': skip)")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--max-file-bytes", type=int, default=15 * 2**20, help="larger files in --out are cut into pieces")
    return p.parse_args(argv)


def train_flags(args: argparse.Namespace, paths: dict[str, Path], run_dir: Path) -> list[str]:
    return [
        "--preset", args.preset, "--train-data", str(paths["train"]), "--heldout-data", str(paths["heldout"]),
        "--tokenizer", str(paths["tokenizer"]), "--run-dir", str(run_dir), "--batch-size", str(args.batch_size),
        "--time-budget", str(args.minutes * 60), "--lr", str(args.lr), "--device", args.device,
        "--warmup-steps", "100", "--eval-every", "100", "--eval-rows", "64", "--checkpoint-minutes", "3",
        "--threads", str(args.threads), *(["--compile"] if args.compile else []),
        *([] if args.bf16 else ["--no-bf16"]), *args.recipe,
    ]


def score(model: Path, manifest: Path, args: argparse.Namespace, out: Path) -> dict:
    """Held-out exact match and loss of `model`; an evaluation that raises comes back as {"error": ...}."""
    flags = ["--model", str(model), "--tasks", "heldout", "--manifest", str(manifest), "--out", str(out),
             "--batch-size", "64", "--device", args.device]
    if args.heldout_files:
        flags += ["--heldout-files", str(args.heldout_files)]
    try:
        if evaluate.main(flags):
            return {"error": f"training.evaluate exited with an error for {model}"}
        return json.loads(out.read_text())["heldout"]
    except Exception as exc:  # noqa: BLE001 - any failure is reported beside the kept export
        return {"error": f"{type(exc).__name__}: {exc}"}


def table(rows: dict[str, dict], summary: dict) -> str:
    lines = [f"Trained {summary['tokens']:,} positions in {summary['wall_time_s']:.0f} s on {summary['hardware']}.", "",
             "| model | held-out loss (nats/token) | bits/byte | held-out exact match |", "|---|---|---|---|"]
    for name, h in rows.items():
        if "error" in h:
            lines.append(f"| {name} | scoring failed: {h['error']} | | |")
            continue
        lines.append(f"| {name} | {h['loss']['nats_per_token']:.3f} | {h['loss']['bits_per_byte']:.3f} | "
                     f"{h['exact_match']:.1%} ({h['holes']} holes) |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    paths = unpack(args.pack, args.work / "data")
    run_dir = args.work / "run"
    status = train.main(train_flags(args, paths, run_dir))
    if status or not (run_dir / "export" / "model.safetensors").is_file():
        print(f"training stopped before the budget was used (exit {status}); run again to resume", file=sys.stderr)
        return status or 1
    args.out.mkdir(parents=True, exist_ok=True)
    for name in EXPORT_FILES:
        shutil.copy(run_dir / "export" / name, args.out / name)
        split_file(args.out / name, args.max_file_bytes)
    rows = {"trained here": score(run_dir / "export", paths["manifest"], args, args.work / "eval-model.json")}
    if args.reference != "none":
        reference = default_model_path() if args.reference == "shipped" else Path(args.reference)
        rows[f"reference: {args.reference}"] = score(reference, paths["manifest"], args, args.work / "eval-reference.json")
    summary = json.loads((run_dir / "training.json").read_text())
    curve = [r for r in map(json.loads, (run_dir / "log.jsonl").read_text().splitlines()) if "heldout_loss" in r or "loss" in r]
    report = {"training": summary, "heldout": rows, "curve": curve, "total_seconds": round(time.monotonic() - started, 1)}
    (args.out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    (args.out / "table.md").write_text(table(rows, summary))
    for path in (args.out / "report.json", args.out / "table.md"):
        split_file(path, args.max_file_bytes)
    print((args.out / "table.md").read_text())
    return 3 if any("error" in row for row in rows.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
