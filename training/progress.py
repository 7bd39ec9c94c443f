"""The training progress display: a tqdm bar when tqdm is installed, else a status line.

Role: show step, loss, tokens/s, learning rate and DSA phase while training, and write every
update as one JSON object per line to the run's log (the model card reads it).

Invariant: tokens/s is measured over the updates since the previous display, not since the
start, so it reflects the current phase (dense warm-up and sparse training differ in speed).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


class Progress:
    def __init__(self, total_steps: int | None, initial_step: int, log_path: Path, every_s: float = 10.0) -> None:
        self.log_path, self.every_s = log_path, every_s
        self._last_t, self._last_tokens, self._last_print = time.monotonic(), 0, 0.0
        try:
            from tqdm import tqdm
        except ImportError:
            self._bar = None
        else:
            self._bar = tqdm(total=total_steps, initial=initial_step, unit="step", dynamic_ncols=True)
        self._total = total_steps

    def update(self, step: int, tokens: int, metrics: dict) -> None:
        """Record the metrics of optimizer step `step` (1-based), `tokens` trained so far."""
        now = time.monotonic()
        rate = (tokens - self._last_tokens) / max(1e-9, now - self._last_t)
        self._last_t, self._last_tokens = now, tokens
        self._write({"step": step, "tokens": tokens, "tok_per_s": round(rate, 1)} | metrics)
        shown = f"loss {metrics.get('loss', float('nan')):.3f} {rate:,.0f} tok/s lr {metrics.get('lr', 0):.2e} {metrics.get('phase', '')}"
        if self._bar is not None:
            self._bar.update(step - self._bar.n)
            self._bar.set_postfix_str(shown, refresh=False)
        elif now - self._last_print >= self.every_s or step == self._total:
            self._last_print = now
            print(f"step {step}/{self._total or '?'} tokens {tokens:,} {shown}", file=sys.stderr, flush=True)

    def log(self, step: int, metrics: dict) -> None:
        """Record and show metrics that are not a training step's (a held-out evaluation)."""
        if metrics:
            self._write({"step": step} | metrics)
            self.note(f"step {step}: " + ", ".join(f"{k} {v:.4g}" for k, v in metrics.items()))

    def _write(self, record: dict) -> None:
        with self.log_path.open("a") as log:
            log.write(json.dumps(record) + "\n")

    def note(self, message: str) -> None:
        if self._bar is not None:
            self._bar.write(message)
        else:
            print(message, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

    def reset_rate(self, tokens: int) -> None:
        """Start the next tokens/s measurement now (after an evaluation or a checkpoint)."""
        self._last_t, self._last_tokens = time.monotonic(), tokens
