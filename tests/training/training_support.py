"""Helpers for the training tests: the flags of a tiny training run, its log."""

from __future__ import annotations

import json
from pathlib import Path


def train_args(shards: Path, tokenizer_dir: Path, run_dir: Path, *extra: str) -> list[str]:
    """8 steps of the tiny preset at context 128: 2 in the DSA dense warm-up, 6 sparse."""
    return [
        "--preset", "tiny", "--train-data", str(shards / "train"), "--heldout-data", str(shards / "heldout"),
        "--tokenizer", str(tokenizer_dir), "--run-dir", str(run_dir), "--batch-size", "2",
        "--total-tokens", str(8 * 2 * 128), "--warmup-steps", "2", "--dense-fraction", "0.25",
        "--eval-every", "4", "--eval-rows", "4", "--threads", "1", "--bias-update-rate", "0.01", *extra,
    ]


def log_records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
