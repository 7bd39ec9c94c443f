"""A GPU training window in calls of under 600 s: prepare here, run there, collect here.

Role: the lent GPU machine takes one command at a time (at most 600 s), gets the working tree
plus carried ignored paths (64 MiB in all) and returns at most 8 files of 16 MiB. Three verbs:

- `plan` (here, before a window): choose the data that fits the room the tree leaves. Training
  pack files (`training.gpu_pack`) not yet sent in an earlier window (the ledger, `ledger.json`)
  go into `--carry` as a sub-pack with the frozen held-out files; the warm start (a model
  returned by an earlier window, else the shipped model) is counted against the same room. With
  `--stash`, the shipped model file leaves the tree for the call (moved beside `--carry`,
  `restore` puts it back), so its 33 MB travel once, as the warm start, or not at all.
- `run` (there, once per call): unpack the carried data once per machine into `--state` (an
  ignored directory, kept between calls on a warm machine), train for `--seconds` on the fast
  path (`training.train`'s `--compile`, batched Muon, static-capacity MoE, bf16 top-k,
  statistics every 50 steps), falling back to the old path, resumed from the last checkpoint,
  if the fast one raises; the schedule spans `--budget` seconds over all calls, and a call
  finding a checkpoint resumes it (step, optimizer, data position). Then held-out loss on the
  GPU (before the first step and after the last), the export, and into `--out`: the model in
  pieces of at most `--max-file-bytes` and one `window.tar.xz` (configs, tokenizer, report,
  log): at most 8 files.
- `collect` (here, after a call): unpack the returned files into a model directory that
  `plan --warm` takes for the next window.

Invariants:
- Nothing is downloaded on the GPU machine; the data comes from the carried pack only.
- A call never loses the trained model: the export is written before anything that may fail.
- The same code runs on the CPU with tiny shapes (the tests' dry run), only slower.

Run there: `python -m training.gpu_window run --out $OUT` (see docs/training.md for the device call).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import time
import traceback
from pathlib import Path

from model_runtime.embedded import default_model_path
from training import checkpoint
from training.data import DataError
from training.gpu_pack import join_parts, split_file, unpack
from training.train import Trainer
from training.train import parse_args as train_parse_args

ROOT = Path("runs/window")
ROOM = 64 * 2**20  # what the device tool carries: tree plus carried paths
MARGIN = 2 * 2**20  # untracked files, rounding
RECIPE = ("--optimizer", "muon", "--muon-ns-dtype", "bfloat16", "--indexer-every", "4", "--mtp-stride", "4",
          "--mtp-every", "4")
WARM = ("--lr", "1e-3", "--dense-fraction", "0", "--warmup-steps", "50")
PATHS = {
    "fast": ("--compile", "--muon-impl", "batched", "--moe-capacity", "2", "--indexer-select", "fast",
             "--stats-every", "50"),
    "old": ("--muon-impl", "single", "--moe-capacity", "0", "--indexer-select", "exact", "--stats-every", "1"),
}
MODEL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json")
SMALL_FILES = (*MODEL_FILES, "training.json", "log.jsonl", "report.json")
MAX_RETURNED = 8


# ---- run (on the GPU machine) ------------------------------------------------------------
def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    paths = _unpacked(args.carry / "pack", args.state / "data")
    run_dir = args.state / "run"
    init = _init(args)
    report: dict = {"init": str(init) if init else "scratch", "attempts": [], "device": args.device}
    trainer = None
    for path in ("fast", "old") if args.path == "fast" else ("old",):
        left = args.seconds - (time.monotonic() - started)
        try:
            trainer = Trainer(train_parse_args(_train_flags(args, paths, run_dir, init, path, left)))
            if trainer.state.step == 0:
                report["heldout_before"] = trainer.evaluate()
            trainer.run()
            report["attempts"].append({"path": path, "step": trainer.state.step})
            break
        except checkpoint.CheckpointError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure of a path; the old path is the fallback
            traceback.print_exc()
            report["attempts"].append({"path": path, "error": f"{type(exc).__name__}: {exc}"})
            trainer = None
    if trainer is None:
        _write_report(args.out, report, started)
        return 1
    if not (run_dir / "export" / "model.safetensors").is_file() or trainer.progress() < 1.0:
        trainer.export()  # the held-out loss after the call, on the device
    report["training"] = json.loads((run_dir / "training.json").read_text())
    report["budget_used"] = round(trainer.progress(), 4)
    _return(run_dir, args.out, report, started, args.max_file_bytes)
    return 0


def _unpacked(pack: Path, data: Path) -> dict[str, Path]:
    """The carried pack unpacked into `data`, once per machine (a warm machine keeps it)."""
    stamp = data / "pack.sha256"
    digest = hashlib.sha256((pack / "pack.json").read_bytes()).hexdigest() if (pack / "pack.json").is_file() else None
    if digest is None and not stamp.is_file():
        raise DataError(f"{pack}: no pack.json carried and no data on this machine")
    if digest is not None and (not stamp.is_file() or stamp.read_text() != digest):
        shutil.rmtree(data, ignore_errors=True)
        unpack(pack, data)
        stamp.write_text(digest)
    return {"train": data / "shards" / "train", "heldout": data / "shards" / "heldout", "tokenizer": data / "tokenizer"}


def _init(args: argparse.Namespace) -> Path | None:
    """The weights a new run starts from: the carried warm start, else the shipped model."""
    if args.init == "scratch":
        return None
    if args.init != "carried":
        return Path(args.init)
    warm = args.carry / "warm"
    if (warm / "model.safetensors").is_file():
        return warm
    if (default_model_path() / "model.safetensors").is_file():
        return default_model_path()
    raise DataError(f"no warm start: neither {warm} nor the shipped model is here (use --init scratch)")


def _train_flags(args, paths: dict[str, Path], run_dir: Path, init: Path | None, path: str, seconds: float) -> list[str]:
    flags = [
        "--preset", args.preset, "--train-data", str(paths["train"]), "--heldout-data", str(paths["heldout"]),
        "--tokenizer", str(paths["tokenizer"]), "--run-dir", str(run_dir), "--batch-size", str(args.batch_size),
        "--time-budget", str(args.budget), "--stop-after", str(max(1.0, seconds)), "--device", args.device,
        "--eval-every", str(args.eval_every), "--eval-rows", str(args.eval_rows), "--checkpoint-minutes", "1.5",
        "--threads", str(args.threads), *RECIPE, *PATHS[path], *([] if args.bf16 else ["--no-bf16"]),
    ]
    if not args.compile and "--compile" in flags:
        flags.remove("--compile")
    if init is not None:
        flags += [*WARM, "--init-from", str(init)]
    return flags + args.train_flags


def _return(run_dir: Path, out: Path, report: dict, started: float, max_file_bytes: int) -> None:
    """The export in pieces plus one archive of the small files; at most MAX_RETURNED files."""
    out.mkdir(parents=True, exist_ok=True)
    export = run_dir / "export"
    shutil.copy(export / "model.safetensors", out / "model.safetensors")
    pieces = split_file(out / "model.safetensors", max_file_bytes)
    listing = [p for p in pieces if p.name.endswith(".parts.json")]
    _write_report(out, report, started, extra=[export / n for n in MODEL_FILES] + [run_dir / "training.json",
                                                                               run_dir / "log.jsonl", *listing])
    for path in listing:
        path.unlink()
    returned = sorted(out.iterdir())
    too_big = [p.name for p in returned if p.stat().st_size > 16 * 2**20]
    if len(returned) > MAX_RETURNED or too_big:
        raise DataError(f"{out}: {len(returned)} files (at most {MAX_RETURNED}), over 16 MiB: {too_big}")


def _write_report(out: Path, report: dict, started: float, extra: tuple | list = ()) -> None:
    out.mkdir(parents=True, exist_ok=True)
    report["seconds"] = round(time.monotonic() - started, 1)
    staging = out / "report.json"
    staging.write_text(json.dumps(report, indent=1) + "\n")
    with tarfile.open(out / "window.tar.xz", "w:xz") as tar:
        for path in [staging, *extra]:
            if Path(path).is_file():
                tar.add(path, arcname=Path(path).name)
    staging.unlink()
    print(json.dumps({k: v for k, v in report.items() if k != "training"}, indent=1))


# ---- collect (here) ------------------------------------------------------------------------
def collect(returned: Path, model_dir: Path) -> Path:
    """The returned files as a model directory (checked against the pieces' sha256)."""
    model_dir.mkdir(parents=True, exist_ok=True)
    with tarfile.open(returned / "window.tar.xz") as tar:
        tar.extractall(model_dir, filter="data")
    for piece in [*returned.glob("model.safetensors.part*"), *returned.glob("model.safetensors")]:
        shutil.copy(piece, model_dir / piece.name)
    if (model_dir / "model.safetensors.parts.json").is_file():
        join_parts(model_dir)
    return model_dir


# ---- plan (here) ---------------------------------------------------------------------------
def tracked_bytes(exclude: tuple[Path, ...] = ()) -> int:
    """Bytes of the tracked files present in the working tree, less `exclude`."""
    names = subprocess.run(["git", "ls-files", "-z"], capture_output=True, check=True).stdout.decode().split("\0")
    skip = {p.resolve() for p in exclude}
    return sum(Path(n).stat().st_size for n in names if n and Path(n).is_file() and Path(n).resolve() not in skip)


def plan(pack: Path, carry: Path, ledger: Path, warm: Path | None, stash: bool, room: int = ROOM,
         shipped_dir: Path | None = None) -> dict:
    """Fill `carry` with a sub-pack of unsent training files and the warm start; returns the plan.
    `shipped_dir`: the shipped model's directory (the embedded model's unless a test says)."""
    index = json.loads((pack / "pack.json").read_text())
    sent = set(json.loads(ledger.read_text())["sent"]) if ledger.is_file() else set()
    shipped_dir = shipped_dir or default_model_path()
    shipped = shipped_dir / "model.safetensors"
    tree = tracked_bytes((shipped,) if stash else ())
    warm_files = [warm / n for n in ("model.safetensors", *MODEL_FILES)] if warm else ([shipped] if stash else [])
    fixed = sum((pack / n).stat().st_size for n in ("pack.json", "heldout-src.json.xz", "tokenizer.json", "tokenizer_config.json"))
    fixed += sum((pack / f["name"]).stat().st_size for f in index["heldout"])
    left = room - MARGIN - tree - fixed - sum(p.stat().st_size for p in warm_files if p.is_file())
    chosen = []
    for f in index["train"]:
        size = (pack / f["name"]).stat().st_size
        if f["sha256"] in sent or size > left:
            continue
        chosen.append(f)
        left -= size
    if not chosen:
        raise DataError(f"no unsent training file fits the {left + MARGIN:,} bytes left (sent: {len(sent)})")
    shutil.rmtree(carry, ignore_errors=True)
    (carry / "pack").mkdir(parents=True)
    for name in ("heldout-src.json.xz", "tokenizer.json", "tokenizer_config.json", *(f["name"] for f in index["heldout"] + chosen)):
        shutil.copy(pack / name, carry / "pack" / name)
    sub = index | {"train": chosen, "train_rows": sum(f["rows"] for f in chosen)}
    (carry / "pack" / "pack.json").write_text(json.dumps(sub, indent=1) + "\n")
    if stash:
        _stash(carry).mkdir(parents=True, exist_ok=True)
        shutil.move(shipped, _stash(carry) / "model.safetensors")
    if warm or stash:  # the shipped model, when it is the warm start, travels here instead of in the tree
        source = warm or shipped_dir
        (carry / "warm").mkdir()
        for name in ("model.safetensors", *MODEL_FILES):
            shutil.copy(_stash(carry) / name if name == "model.safetensors" and not warm else source / name, carry / "warm" / name)
    ledger.write_text(json.dumps({"sent": sorted(sent | {f["sha256"] for f in chosen})}, indent=1) + "\n")
    return {"train_files": len(chosen), "train_rows": sub["train_rows"], "tree_bytes": tree,
            "carried_bytes": sum(p.stat().st_size for p in carry.rglob("*") if p.is_file()), "stashed": stash and not warm}


def _stash(carry: Path) -> Path:
    return carry.parent / "stash"  # beside the carried directory, not in it


def restore(carry: Path, shipped_dir: Path | None = None) -> bool:
    """Put a stashed shipped model back into the tree; True when one was moved."""
    stashed, shipped = _stash(carry) / "model.safetensors", (shipped_dir or default_model_path()) / "model.safetensors"
    if shipped.is_file() or not stashed.is_file():
        return False
    shutil.move(stashed, shipped)
    return True


# ---- command line --------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Prepare, run and collect one call of a GPU training window.")
    sub = p.add_subparsers(dest="verb", required=True)
    r = sub.add_parser("run", help="on the GPU machine: train for --seconds, export, fill --out")
    r.add_argument("--carry", type=Path, default=ROOT / "carry")
    r.add_argument("--state", type=Path, default=ROOT / "state", help="kept between calls on a warm machine")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--seconds", type=float, default=420.0, help="training seconds in this call")
    r.add_argument("--budget", type=float, default=420.0, help="training seconds of the schedule over all calls")
    r.add_argument("--init", default="carried", help="carried (warm start or the shipped model), scratch, or a model dir")
    r.add_argument("--path", choices=("fast", "old"), default="fast", help="fast falls back to old if it raises")
    r.add_argument("--preset", default="small")
    r.add_argument("--batch-size", type=int, default=64)
    r.add_argument("--device", default="cuda")
    r.add_argument("--eval-every", type=int, default=500)
    r.add_argument("--eval-rows", type=int, default=256)
    r.add_argument("--threads", type=int, default=0)
    r.add_argument("--no-compile", dest="compile", action="store_false")
    r.add_argument("--no-bf16", dest="bf16", action="store_false")
    r.add_argument("--max-file-bytes", type=int, default=15 * 2**20)
    r.add_argument("--train-flags", nargs=argparse.REMAINDER, default=[], help="further training.train flags, last")
    pl = sub.add_parser("plan", help="here: fill --carry with unsent data and the warm start")
    pl.add_argument("--pack", type=Path, default=Path("data/gpu"))
    pl.add_argument("--carry", type=Path, default=ROOT / "carry")
    pl.add_argument("--ledger", type=Path, default=ROOT / "ledger.json")
    pl.add_argument("--warm", type=Path, help="a model directory returned by an earlier window (collect)")
    pl.add_argument("--stash", action="store_true", help="move the shipped model file out of the tree for the call")
    rs = sub.add_parser("restore", help="here: put a stashed shipped model back")
    rs.add_argument("--carry", type=Path, default=ROOT / "carry")
    c = sub.add_parser("collect", help="here: returned files -> a model directory")
    c.add_argument("returned", type=Path)
    c.add_argument("model_dir", type=Path)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.verb == "run":
            return run(args)
        if args.verb == "plan":
            print(json.dumps(plan(args.pack, args.carry, args.ledger, args.warm, args.stash), indent=1))
        elif args.verb == "restore":
            print("restored" if restore(args.carry) else "nothing to restore")
        else:
            print(collect(args.returned, args.model_dir))
        return 0
    except (DataError, checkpoint.CheckpointError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
