"""Train the embedded model: GLM-5's architecture (`model_runtime.model.Transformer`) on the packed shards.

Role: the training loop. AdamW with gradient clipping, linear warm-up then cosine decay, bf16
autocast (CPU or CUDA, whichever is present), the DSA two-phase plan (`training.schedule`),
auxiliary-loss-free MoE bias balancing (`training.balance`), the MTP loss, periodic held-out
loss, checkpoints every few minutes with exact resume, and at the end an export in GLM-5's
checkpoint format through `model_runtime.loader.save_checkpoint` plus the tokenizer files.

Budget: `--total-tokens` fixes the schedule in steps (reproducible; a resumed run is identical
to an uninterrupted one). `--time-budget` alone makes the schedule follow wall-clock progress
instead, and `--cpu-budget` the process CPU seconds spent in training steps (fair between runs
that share a loaded machine, where wall time is not); with several, whichever runs out first
ends the run. Both clocks are summed over resumed runs and stored in the checkpoint; held-out
evaluations and checkpoint writes are not counted.

Invariants:
- Inputs are `row[:-1]`, targets `row[1:]`, loss mask `mask[1:]` (the shards' rows are one
  token longer than the context).
- The run directory holds `checkpoint.pt`, `log.jsonl` and, when done, `export/`.
- SIGINT/SIGTERM save a checkpoint before exiting; running the same command again resumes.

Run: `python -m training.train --preset small --total-tokens 25000000 --run-dir runs/small`.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import shutil
import signal
import sys
import time
from pathlib import Path

import torch

from model_runtime.loader import save_checkpoint
from model_runtime.model import MLA, MoE, Transformer, init_weights
from model_runtime.tokenizer import GlmTokenizer
from training import checkpoint
from training.balance import BiasBalancer
from training.muon import IMPLS, MuonAdamW, muon_groups
from training.data import DEFAULT_SHARDS
from training.presets import PRESETS, model_config, parameter_counts
from training.progress import Progress
from training.schedule import LrSchedule, Phase, dsa_phase
from training.stats import StepStats
from training.stream import BatchStream, PackedDataset
from training.tokenizer import DEFAULT_OUT as DEFAULT_TOKENIZER

# Process CPU seconds (every thread of this process), module-level so a test can drive it.
cpu_clock = time.process_time
RESUME_KEYS = ("model", "batch_size", "grad_accum", "seed", "data", "total_steps", "optimizer", "muon_ns", "init_from")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Train the embedded GLM-5-architecture code model.")
    p.add_argument("--preset", choices=sorted(PRESETS), default="small")
    p.add_argument("--train-data", type=Path, default=DEFAULT_SHARDS / "train")
    p.add_argument("--heldout-data", type=Path, default=DEFAULT_SHARDS / "heldout")
    p.add_argument("--tokenizer", type=Path, default=DEFAULT_TOKENIZER)
    p.add_argument("--run-dir", type=Path, default=Path("runs/default"))
    p.add_argument("--batch-size", type=int, default=8, help="rows per micro-batch")
    p.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step")
    p.add_argument("--total-tokens", type=int, default=0, help="training positions in the schedule (0: use --time-budget or --cpu-budget)")
    p.add_argument("--time-budget", type=float, default=0.0, help="seconds of training")
    p.add_argument("--cpu-budget", type=float, default=0.0,
                   help="process CPU seconds of training steps (all threads); fair on a shared machine")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--min-lr-ratio", type=float, default=0.1)
    p.add_argument("--warmup-steps", type=int, default=100)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--dense-fraction", type=float, default=0.1, help="share of training in the DSA dense warm-up")
    p.add_argument("--mtp-weight", type=float, default=0.3)
    p.add_argument("--indexer-weight", type=float, default=1.0)
    p.add_argument("--indexer-every", type=int, default=1,
                   help="train the DSA indexer (KL) on every N-th step only; its path costs ~2x a step on CPU")
    p.add_argument("--mtp-stride", type=int, default=1, help="score the MTP head on every N-th position only")
    p.add_argument("--mtp-every", type=int, default=1,
                   help="train the MTP layer on every N-th step only (its block and head cost ~1/3 of a step on CPU)")
    p.add_argument("--optimizer", choices=("adamw", "muon"), default="adamw",
                   help="muon: Muon for the block matrices, AdamW for the rest (training.muon)")
    p.add_argument("--muon-ns-dtype", choices=("float32", "bfloat16"), default="float32",
                   help="dtype of Muon's Newton-Schulz iterations (bfloat16 halves their cost on a CPU with AMX)")
    p.add_argument("--muon-impl", choices=("auto", *IMPLS), default="auto",
                   help="batched: foreach updates, one stacked Newton-Schulz per shape (fewer GPU launches); "
                        "single: matrix by matrix (faster on a CPU); auto: batched on CUDA, else single")
    p.add_argument("--moe-capacity", type=float, default=0.0,
                   help="give each expert this factor times its fair share of rows (static shapes, no host sync; "
                        "pairs over it are dropped); 0: dispatch by the routed counts")
    p.add_argument("--indexer-select", choices=("exact", "fast"), default="exact",
                   help="training's DSA top-k: exact (fp32 scores, the inference tie rule) or fast (bf16 scores, plain top-k)")
    p.add_argument("--stats-every", type=int, default=1,
                   help="read the loss and balance statistics (a host sync) every N steps, logging their means")
    p.add_argument("--compile", action="store_true", help="torch.compile the training forward and Muon's Newton-Schulz")
    p.add_argument("--init-from", type=Path, help="start from this exported checkpoint's weights (same preset and tokenizer)")
    p.add_argument("--bias-update-rate", type=float, default=1e-3, help="MoE routing-bias step per update")
    p.add_argument("--init-std", type=float, default=0.02)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--no-bf16", dest="bf16", action="store_false", help="train in fp32")
    p.add_argument("--eval-every", type=int, default=200, help="optimizer steps between held-out evaluations")
    p.add_argument("--eval-rows", type=int, default=64, help="held-out rows per evaluation")
    p.add_argument("--checkpoint-minutes", type=float, default=10.0)
    p.add_argument("--max-steps", type=int, default=0, help="stop (with a checkpoint) after this many steps in this process")
    p.add_argument("--stop-after", type=float, default=0.0,
                   help="stop (with a checkpoint) after this many wall seconds of training steps in this process")
    args = p.parse_args(argv)
    if args.total_tokens <= 0 and args.time_budget <= 0 and args.cpu_budget <= 0:
        p.error("give --total-tokens, --time-budget or --cpu-budget")
    if min(args.indexer_every, args.mtp_stride, args.mtp_every, args.stats_every) < 1:
        p.error("--indexer-every, --mtp-stride, --mtp-every and --stats-every must be >= 1")
    if args.moe_capacity < 0:
        p.error("--moe-capacity must be >= 0")
    return args


class Trainer:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        if args.threads:
            torch.set_num_threads(args.threads)
        self.device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                                   ("cpu" if args.device == "auto" else args.device))
        self.train_data = PackedDataset(args.train_data)
        self.heldout = PackedDataset(args.heldout_data) if (args.heldout_data / "index.json").is_file() else None
        self.context = self.train_data.seq_len - 1
        tok = GlmTokenizer.from_dir(args.tokenizer)
        self.cfg = model_config(args.preset, tok.vocab_size, tok.special.require("endoftext"), self.context)
        torch.manual_seed(args.seed)
        self.model = Transformer(self.cfg)
        init_weights(self.model, args.init_std)
        if args.init_from is not None:
            _load_init(self.model, self.cfg, args.init_from)
        self.model.to(self.device).train()
        for module in self.model.modules():
            if isinstance(module, MoE):
                module.capacity_factor = args.moe_capacity or None
            elif isinstance(module, MLA):
                module.fast_select = args.indexer_select == "fast"
        self.forward_train = torch.compile(self.model.forward_train) if args.compile else self.model.forward_train
        self.optimizer = _optimizer(self.model, args)
        self.balancer = BiasBalancer(self.model, args.bias_update_rate)
        self.stats = StepStats()
        self.tokens_per_step = args.batch_size * args.grad_accum * self.context
        total_steps = math.ceil(args.total_tokens / self.tokens_per_step) if args.total_tokens else 0
        self.run_config = {
            "model": self.cfg.to_dict(), "preset": args.preset, "batch_size": args.batch_size,
            "grad_accum": args.grad_accum, "seed": args.seed, "total_steps": total_steps, "optimizer": args.optimizer,
            # None for fp32, so checkpoints written before the option resume
            "muon_ns": args.muon_ns_dtype if args.optimizer == "muon" and args.muon_ns_dtype != "float32" else None,
            "init_from": str(args.init_from) if args.init_from else None,
            "data": self.train_data.index["tokenizer_sha256"] + f":{len(self.train_data)}",
        }
        self.ckpt_path = args.run_dir / "checkpoint.pt"
        self.state = checkpoint.TrainState(total_steps=total_steps)
        if self.ckpt_path.is_file():
            self.state = checkpoint.load(self.ckpt_path, self.model, self.optimizer, self.run_config, RESUME_KEYS)
        self.stream = BatchStream(self.train_data, args.batch_size, args.seed, self.state.stream)
        self.schedule = LrSchedule(args.lr, args.warmup_steps, args.min_lr_ratio)
        self._stop = False

    # ---- schedule ---------------------------------------------------------------------
    def progress(self) -> float:
        """Fraction of the budget used: by steps, by wall time or by CPU time, the largest."""
        by_steps = self.state.step / self.state.total_steps if self.state.total_steps else 0.0
        by_time = self.state.elapsed_s / self.args.time_budget if self.args.time_budget else 0.0
        by_cpu = self.state.cpu_s / self.args.cpu_budget if self.args.cpu_budget else 0.0
        return max(by_steps, by_time, by_cpu)

    def phase(self) -> Phase:
        return dsa_phase(self.progress(), self.args.dense_fraction)

    # ---- one optimizer step -----------------------------------------------------------
    def step(self) -> dict:
        args, phase = self.args, self.phase()
        train_indexer = phase.train_indexer and self.state.step % args.indexer_every == 0
        mtp_weight = args.mtp_weight if self.state.step % args.mtp_every == 0 else 0.0
        lr = self.schedule.at(self.state.step, self.progress())
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        read = (self.state.step + 1) % args.stats_every == 0
        targets = positions = 0
        done: list[tuple] = []
        for _ in range(args.grad_accum):
            tokens, mask = self.stream.next()
            ids, loss_mask = self._to_device(tokens), self._to_device(mask[:, 1:])
            inputs = (ids[:, :-1], ids[:, 1:], loss_mask)
            options = {"sparse": phase.sparse, "train_indexer": train_indexer, "mtp_weight": mtp_weight,
                       "indexer_weight": args.indexer_weight, "mtp_stride": args.mtp_stride}
            out = self._forward_backward(inputs, options, done)
            done.append(inputs)
            self.balancer.observe()
            targets += int(mask[:, 1:].sum())  # on the host: no wait for the device
            positions += mask[:, 1:].size
            for key in ("loss", "lm_loss", "mtp_loss", "indexer_kl"):
                value = getattr(out, key)
                if value is not None:
                    self.stats.add(key, value.detach() / args.grad_accum)
        self.stats.add("grad_norm", torch.nn.utils.clip_grad_norm_(self.model.parameters(), args.grad_clip))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.stats.end_step()
        balance = self.balancer.step(read)
        self.state.step += 1
        self.state.tokens += positions
        self.state.target_tokens += targets
        self.state.stream = self.stream.state()
        return (self.stats.read() | balance if read else {}) | {"lr": lr, "phase": phase.name}

    def _to_device(self, array) -> torch.Tensor:
        """A host batch on the training device; to a GPU from pinned memory, without waiting."""
        tensor = torch.from_numpy(array)
        if self.device.type != "cuda":
            return tensor
        return tensor.pin_memory().to(self.device, non_blocking=True)

    def _forward_backward(self, inputs: tuple, options: dict, done: list[tuple]):
        """One micro-batch's forward and backward; a compiler that raises leaves training eager.

        A failure may leave part of a backward's gradients behind, so the gradients are cleared
        and the step's earlier micro-batches (`done`) are replayed eagerly before this one: the
        step's gradient is the same as an eager step's. Each forward sets (not adds to) the
        routing loads, so the balancer still sees this micro-batch's loads once."""
        try:
            return self._micro_batch(self.forward_train, inputs, options)
        except Exception as exc:  # noqa: BLE001 - any compiler failure; eager is always correct
            if self.forward_train is self.model.forward_train:
                raise
            print(f"torch.compile failed ({type(exc).__name__}: {exc}); training eager from step {self.state.step}",
                  file=sys.stderr)
            self.forward_train = self.model.forward_train
            self.optimizer.zero_grad(set_to_none=True)
            for earlier in done:
                self._micro_batch(self.forward_train, earlier, options)
            return self._micro_batch(self.forward_train, inputs, options)

    def _micro_batch(self, forward, inputs: tuple, options: dict):
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.args.bf16):
            out = forward(*inputs, **options)
        (out.loss / self.args.grad_accum).backward()
        return out

    @torch.no_grad()
    def evaluate(self) -> dict:
        """Held-out LM loss (nats/token) on the first `eval_rows` rows, in the current phase."""
        if self.heldout is None:
            return {}
        self.model.eval()
        rows = min(self.args.eval_rows, len(self.heldout))
        nats, count = 0.0, 0
        for start in range(0, rows, self.args.batch_size):
            tokens, mask = self.heldout.rows(list(range(start, min(rows, start + self.args.batch_size))))
            ids = torch.from_numpy(tokens).to(self.device)
            loss_mask = torch.from_numpy(mask[:, 1:]).to(self.device)
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.args.bf16):
                out = self.model.forward_train(ids[:, :-1], ids[:, 1:], loss_mask, sparse=self.phase().sparse,
                                               train_indexer=False, mtp_weight=0.0)
            n = int(loss_mask.sum())
            nats += float(out.lm_loss) * n
            count += n
        self.model.train()
        self.state.last_eval = {"heldout_loss": nats / max(1, count), "heldout_tokens": count}
        return self.state.last_eval

    # ---- the loop -----------------------------------------------------------------------
    def save(self) -> None:
        checkpoint.save(self.ckpt_path, self.model, self.optimizer, self.state, self.run_config)

    def run(self) -> int:
        """Train until the budget is used (then export), a stop signal, or --max-steps."""
        self.args.run_dir.mkdir(parents=True, exist_ok=True)
        previous = {sig: signal.signal(sig, self._request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            self._loop()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if self.progress() < 1.0:
            print(f"stopped at step {self.state.step}; run the same command to resume", file=sys.stderr)
            return 130 if self._stop else 0
        self.export()
        return 0

    def _loop(self) -> None:
        args = self.args
        progress = Progress(self.state.total_steps or None, self.state.step, args.run_dir / "log.jsonl")
        progress.note(f"{args.preset}: {parameter_counts(self.cfg)} params, context {self.context}, "
                      f"{self.tokens_per_step} tokens/step, device {self.device}, resumed at step {self.state.step}")
        last_save, steps_here, here_s = time.monotonic(), 0, 0.0
        while self.progress() < 1.0 and not self._stop:
            started, cpu_started = time.monotonic(), cpu_clock()
            metrics = self.step()
            self.state.elapsed_s += time.monotonic() - started
            here_s += time.monotonic() - started
            self.state.cpu_s += cpu_clock() - cpu_started
            steps_here += 1
            if "loss" in metrics:
                progress.update(self.state.step, self.state.tokens, metrics | {"cpu_s": round(self.state.cpu_s, 2)})
            if args.eval_every and self.state.step % args.eval_every == 0:
                progress.log(self.state.step, self.evaluate())
                progress.reset_rate(self.state.tokens)
            if time.monotonic() - last_save >= args.checkpoint_minutes * 60:
                self.save()
                last_save = time.monotonic()
            if (args.max_steps and steps_here >= args.max_steps) or (args.stop_after and here_s >= args.stop_after):
                break
        pending = self.stats.read() | self.balancer.read()
        if pending:  # the steps since the last read (--stats-every)
            progress.update(self.state.step, self.state.tokens, pending | {"cpu_s": round(self.state.cpu_s, 2)})
        self.save()
        progress.close()

    def export(self) -> Path:
        """The trained model in GLM-5's checkpoint format, with tokenizer and a training summary."""
        out = save_checkpoint(self.model, self.cfg, self.args.run_dir / "export")
        for name in TOKENIZER_FILES:
            shutil.copy(self.args.tokenizer / name, out / name)
        final = self.evaluate()
        summary = {
            "preset": self.args.preset, "parameters": parameter_counts(self.cfg),
            "steps": self.state.step, "tokens": self.state.tokens, "target_tokens": self.state.target_tokens,
            "wall_time_s": round(self.state.elapsed_s, 1), "cpu_time_s": round(self.state.cpu_s, 1),
            "context": self.context, "heldout": final, "hardware": _hardware(self.device), "args": {k: str(v) for k, v in vars(self.args).items()},
            "data": self.train_data.index["stats"], "sample_config": self.train_data.index["sample_config"],
        }
        (self.args.run_dir / "training.json").write_text(json.dumps(summary, indent=2) + "\n")
        return out

    def _request_stop(self, signum: int, frame: object) -> None:
        self._stop = True


def _hardware(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}"
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").is_file() else platform.processor()
    return f"{cpu}, {torch.get_num_threads()} threads, torch {torch.__version__}"


def _optimizer(model: torch.nn.Module, args: argparse.Namespace) -> torch.optim.Optimizer:
    if args.optimizer == "muon":
        device = next(model.parameters()).device.type
        impl = args.muon_impl if args.muon_impl != "auto" else ("batched" if device == "cuda" else "single")
        return MuonAdamW(muon_groups(model, args.weight_decay), lr=args.lr, ns_dtype=args.muon_ns_dtype,
                         impl=impl, compile=args.compile)
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    rest = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), eps=1e-8)


def _load_init(model: Transformer, cfg, path: Path) -> None:
    """Copy an exported checkpoint's weights (and routing biases) into `model`."""
    from model_runtime.loader import load_weights

    source, source_cfg = load_weights(path)
    if source_cfg.to_dict() != cfg.to_dict():
        differ = sorted(k for k, v in cfg.to_dict().items() if source_cfg.to_dict().get(k) != v)
        raise checkpoint.CheckpointError(f"{path}: its config differs from this run's in {', '.join(differ)}")
    model.load_state_dict(source.state_dict())


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return Trainer(args).run()
    except checkpoint.CheckpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
